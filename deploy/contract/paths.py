"""Where rayrig keeps its files on the operator's machine: the checkout and the state directory."""

from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path:
    """Return the root of the rayrig checkout (the folder that holds ``deploy/``)."""
    return Path(__file__).resolve().parents[2]


def state_dir() -> Path:
    """Return rayrig's state directory: ``$RAYRIG_STATE_DIR``, else ``<repo>/.rayrig``.

    It holds the clusters' tokens, the labs' keys and state, EC2 cluster state and
    cached build inputs (wheelhouses). It is not created here.
    """
    override = os.environ.get("RAYRIG_STATE_DIR")
    if override:
        return Path(override).expanduser().resolve()
    return repo_root() / ".rayrig"
