"""Ray token authentication: one token per cluster, never printed.

With ``ray_auth = "token"`` (the default) every Ray node and every client must
present the cluster's token: GCS, raylets, the client server and the
dashboard's API refuse anything else. Ray reads it from a file
(``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN_PATH``, Ray 2.52 and newer).

- The operator's copy is generated once, on the first deploy, and kept 0600 in
  the state directory: ``.rayrig/clusters/<ray_cluster_name>/ray_auth_token``
  (or ``ray_auth_token_file``). Keep it: a new token restarts every node.
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
from pathlib import Path
from typing import Any

from deploy.paths import state_dir

NODE_TOKEN_DIR = "/etc/rayrig/ray"
NODE_TOKEN_PATH = f"{NODE_TOKEN_DIR}/auth_token"


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
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # made meanwhile by another deploy: use it
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32) + "\n")
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    if not read_token(path):
        raise TokenError(f"{path}: the Ray token file is empty; delete it to have a new token generated")
    return path


def read_token(path: Path) -> str:
    """The token in ``path``, without surrounding whitespace."""
    return path.read_text().strip()


def token_digest(path: Path) -> str:
    """A digest of the token that says whether it changed and nothing about its value."""
    return hashlib.sha256(b"rayrig-token\0" + read_token(path).encode()).hexdigest()[:16]


def container_env(settings: dict[str, Any]) -> dict[str, str]:
    """What the ray-node container's environment needs for token authentication."""
    if settings["ray_auth"] != "token":
        return {"RAY_AUTH_MODE": "disabled"}
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": NODE_TOKEN_PATH}
