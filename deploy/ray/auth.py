"""Ray token authentication: one token per cluster, never printed.

With ``ray_auth = "token"`` (the default) every Ray node and every client must
present the cluster's token: GCS, raylets, the client server and the
dashboard's API refuse anything else. Ray reads it from a file
(``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN_PATH``, Ray 2.52 and newer).

- The operator's copy is kept 0600 in the state directory:
  ``.rayrig/clusters/<ray_cluster_name>/ray_auth_token`` (or ``ray_auth_token_file``).
  The first deploy generates it; a deploy from a machine without it fetches the
  cluster's from the head (``deploy/ray/cluster_token.py``); only ``rayrig token
  rotate`` makes a new one for a running cluster (:func:`begin_rotation`).
- Each node gets it 0600 at ``NODE_TOKEN_PATH``, owned by the user the
  ray-node container runs as, and ray-node mounts it read-only. Only the
  path is in the container's configuration; the value never reaches a
  command line, ``docker inspect``, pyinfra's output or a log.
- A client inside the head's container (the checks, ``ray status``,
  ``ray job submit``) is already authenticated: the container's environment
  names the token file.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.contract.paths import state_dir

NODE_TOKEN_DIR = "/etc/rayrig/ray"
NODE_TOKEN_PATH = f"{NODE_TOKEN_DIR}/auth_token"
#: The ray-node container's label that holds the :func:`digest` of the token it runs with.
TOKEN_LABEL = "rayrig.auth-token-digest"


class TokenError(Exception):
    """The operator's token file is unusable."""


def token_path(settings: dict[str, Any]) -> Path:
    """Where the operator's copy of the cluster's token lives."""
    if settings["ray_auth_token_file"]:
        return Path(settings["ray_auth_token_file"]).expanduser()
    return state_dir() / "clusters" / settings["ray_cluster_name"] / "ray_auth_token"


def ensure_token(settings: dict[str, Any]) -> Path:
    """The cluster's token file, generated (0600, in a 0700 folder) if there is none yet.

    An existing file is used as it is (it is what the nodes have); one that others
    can read is made 0600, and an empty one is an error.
    """
    path = token_path(settings)
    if not path.exists():
        store_token(path, new_token())
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    if not read_token(path):
        raise TokenError(f"{path}: the Ray token file is empty; delete it to have a new token generated")
    return path


def new_token() -> str:
    """A new random token (256 bits, hex)."""
    return secrets.token_hex(32)


def store_token(path: Path, token: str) -> bool:
    """Write ``token`` to ``path``, 0600 (its folder made 0700), unless the file exists; whether it wrote.

    The file appears whole or not at all: the token goes to a private temporary file
    beside it, which is then linked in place (a file made meanwhile by another deploy wins).
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(token.strip() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.link(temp, path)
    except FileExistsError:
        return False
    finally:
        temp.unlink(missing_ok=True)
    return True


def read_token(path: Path) -> str:
    """The token in ``path``, without surrounding whitespace."""
    return path.read_text().strip()


def digest(token: str) -> str:
    """A digest of ``token`` that says whether it changed and nothing about its value."""
    return hashlib.sha256(b"rayrig-token\0" + token.strip().encode()).hexdigest()[:16]


def token_digest(path: Path) -> str:
    """The :func:`digest` of the token in ``path``."""
    return digest(read_token(path))


def container_env(settings: dict[str, Any]) -> dict[str, str]:
    """What the ray-node container's environment needs for token authentication."""
    if settings["ray_auth"] != "token":
        return {"RAY_AUTH_MODE": "disabled"}
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": NODE_TOKEN_PATH}


@dataclass(frozen=True)
class Rotation:
    """A new token for a running cluster, on its way to every node.

    ``token`` holds the new token, ``backup`` the one the cluster ran before (None when there
    was no local copy), ``resumed`` says the new token was made by a rotation cut short.
    """

    token: Path
    backup: Path | None
    resumed: bool


def backup_path(path: Path) -> Path:
    """Where a rotation keeps the previous token until every node runs the new one.

    >>> backup_path(Path("/s/clusters/c/ray_auth_token"))
    PosixPath('/s/clusters/c/ray_auth_token.previous')
    """
    return path.with_name(path.name + ".previous")


def begin_rotation(settings: dict[str, Any]) -> Rotation:
    """Make the cluster's next token: the local copy moves to its backup (0600), a new one takes its place.

    A backup left by a rotation cut short is kept: its new token, when still there, is the
    one to finish with (``resumed``), so that nodes already on it need no second restart.
    """
    path = token_path(settings)
    backup = backup_path(path)
    if backup.exists():
        backup.chmod(0o600)
        if path.exists():
            ensure_token(settings)
            return Rotation(path, backup, resumed=True)
    elif path.exists():
        ensure_token(settings)  # 0600, not empty
        os.replace(path, backup)
    else:
        backup = None
    store_token(path, new_token())
    return Rotation(path, backup, resumed=False)


def end_rotation(rotation: Rotation) -> None:
    """Every node runs the new token: drop the previous one."""
    if rotation.backup:
        rotation.backup.unlink(missing_ok=True)


def undo_rotation(rotation: Rotation) -> None:
    """Put the previous token back (a dry run): as if the rotation had not begun.

    A resumed rotation is left as it was, still to finish.
    """
    if rotation.resumed:
        return
    if rotation.backup:
        os.replace(rotation.backup, rotation.token)
    else:
        rotation.token.unlink(missing_ok=True)
