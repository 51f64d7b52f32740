"""Workload secrets of the ray-node container: ``ray_env_secret`` in a 0600 env file.

``ray_env`` values travel on ``docker create``'s command line (``--env``), where
pyinfra prints them and ``ps`` shows them. ``ray_env_secret`` values go into
``ENV_FILE`` instead (0600, in a 0700 folder, written without a diff), which
``docker create --env-file`` reads: they never reach a command line, pyinfra's
output or a log. The container carries a digest of the file, keyed by the cluster's
digest key (``deploy.host.secret_files``) so that the label, which ``docker create``'s
command line and ``-vvv`` show, lets no one test a guess of a value; a changed value
replaces the container. Whoever may run ``docker inspect`` (root, the docker group)
still sees the container's environment: they could read the file anyway.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from pyinfra.api.exceptions import PyinfraError

ENV_DIR = "/etc/rayrig/env"
ENV_FILE = f"{ENV_DIR}/ray-node.env"
DIGEST_LABEL = "rayrig.env-secret-digest"  # says when a value changed, nothing about it


class EnvSecretError(PyinfraError):
    """``ray_env_secret`` clashes with another setting."""


def env_file_text(values: Mapping[str, str]) -> str:
    """The env file docker reads (``NAME=value`` lines, taken literally: no quoting).

    >>> env_file_text({"B": "x y", "A": "it's"})
    "A=it's\\nB=x y\\n"
    """
    return "".join(f"{name}={values[name]}\n" for name in sorted(values))


def env_digest(values: Mapping[str, str], key: str) -> str:
    """A digest of the secret environment that says whether it changed, and nothing to test a guess
    against without the cluster's digest ``key`` (HMAC-SHA256, shortened)."""
    return hmac.new(key.encode(), env_file_text(values).encode(), hashlib.sha256).hexdigest()[:16]


def check_env_secret(settings: Mapping[str, Any], host_name: str) -> None:
    """Stop when a ``ray_env_secret`` name is also in ``ray_env`` or is one rayrig sets (the values are never shown)."""
    names = sorted(settings["ray_env_secret"])
    for name in names:
        if name in settings["ray_env"]:
            raise EnvSecretError(
                f"host {host_name}: ray_env_secret[{name!r}]: {name} is in ray_env too; "
                "expected each variable in one of them"
            )
        if name.startswith("RAY_AUTH_"):
            raise EnvSecretError(
                f"host {host_name}: ray_env_secret[{name!r}]: expected no RAY_AUTH_* variable (set ray_auth instead)"
            )


def run_args(settings: Mapping[str, Any], digest: str | None) -> list[str]:
    """``docker create`` arguments that give the container the secret environment (none without one),
    labelled with its :func:`env_digest` ``digest``."""
    if not settings["ray_env_secret"]:
        return []
    return [f"--env-file={ENV_FILE}", *([f"--label={DIGEST_LABEL}={digest}"] if digest else [])]
