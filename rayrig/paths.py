"""Where rayrig keeps its files: the repository, the state directory, a lab's directory."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """Return the root of the rayrig checkout (the folder that holds ``rayrig/``)."""
    return Path(__file__).resolve().parent.parent


def state_dir() -> Path:
    """Return rayrig's state directory: ``$RAYRIG_STATE_DIR``, else ``<repo>/.rayrig``.

    It holds the labs' keys and state and cached build inputs (wheelhouses).
    It is not created here.
    """
    override = os.environ.get("RAYRIG_STATE_DIR")
    if override:
        return Path(override).expanduser().resolve()
    return repo_root() / ".rayrig"


def lab_dir(name: str) -> Path:
    """Return the directory of the local lab ``name`` (its key, known_hosts and state.json)."""
    if not name or "/" in name or name in {".", ".."}:
        raise ValueError(f"invalid lab name {name!r}: expected a plain name like 'rayrig-lab'")
    return state_dir() / "labs" / name
