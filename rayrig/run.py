"""Run pyinfra the way ``rayrig deploy`` and ``rayrig check`` do: from the repository root, without prompting.

Two inventory mistakes that pyinfra lets pass are errors here: an inventory file that does
not exist (pyinfra would take its name for a host name), and an inventory that yields no
host (pyinfra runs zero hosts and exits 0). The second is known from the run itself: the
deploy file marks a file named by ``RAN_FILE_ENV`` once it runs on a host, so no inventory
is loaded twice (an EC2 inventory asks AWS each time it loads).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from deploy.contract.paths import repo_root
from deploy.run.validate import RAN_FILE_ENV

DEPLOY_FILE = "deploy/cluster.py"
CHECKS_FILE = "deploy/check.py"
EXIT_USAGE = 2  # the inventory file does not exist
EXIT_NO_HOSTS = 1  # the inventory (with --limit/--exclude) yields no host: nothing ran


class InventoryFileError(Exception):
    """The inventory names no file, or yields no host; ``status`` is the exit status to end with."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


def pyinfra_command(inventory: str | Path, deploy_file: str = DEPLOY_FILE, extra: Sequence[str] = ()) -> list[str]:
    """The pyinfra command line that runs ``deploy_file`` on ``inventory`` without prompting."""
    return [sys.executable, "-m", "pyinfra", str(inventory), deploy_file, "-y", *extra]


def names_a_file(inventory: str | Path) -> bool:
    """Whether ``inventory`` is meant as a file (a ``.py`` name or a path), not as pyinfra's
    host names (``gpu-01,gpu-02``), connectors (``@local``) or module names."""
    text = str(inventory)
    return text.endswith(".py") or os.sep in text


def check_inventory_file(inventory: str | Path) -> None:
    """``InventoryFileError`` (exit 2) when ``inventory`` names a file that does not exist."""
    if names_a_file(inventory) and not Path(inventory).is_file():
        raise InventoryFileError(
            f"{inventory}: no such inventory file (expected a pyinfra inventory such as inventories/prod.py)",
            EXIT_USAGE,
        )


def run_pyinfra(inventory: str | Path, deploy_file: str = DEPLOY_FILE, extra: Sequence[str] = (),
                env: dict[str, str] | None = None) -> int:  # fmt: skip
    """Run pyinfra from the repository root (deploy files import ``deploy.*`` from there); return its exit status.

    ``InventoryFileError`` when the inventory file does not exist (before pyinfra starts), or when
    pyinfra ran no host at all (an empty inventory, or a --limit that matches no host).
    """
    check_inventory_file(inventory)
    inventory = Path(inventory).resolve() if Path(inventory).exists() else inventory
    command = pyinfra_command(inventory, deploy_file, extra)
    with tempfile.TemporaryDirectory(prefix="rayrig-run-") as scratch:
        ran = Path(scratch) / "ran"
        status = subprocess.call(command, cwd=repo_root(), env={**os.environ, **(env or {}), RAN_FILE_ENV: str(ran)})
        if status == 0 and not ran.exists() and "--help" not in extra:
            limited = any(arg.startswith(("--limit", "--exclude")) for arg in extra)
            raise InventoryFileError(
                f"{inventory}: the inventory yields no host"
                + (" that --limit/--exclude selects" if limited else "")
                + ", so pyinfra ran nothing (expected at least a head: see inventories/prod.py)",
                EXIT_NO_HOSTS,
            )
    return status


def deploy_rotation(inventory: str, pyinfra_args: Sequence[str], rotation_env: str, *, kept: str,
                    undo: Callable[[], None], end: Callable[[], None], failure: Callable[[int], str],
                    done: str) -> int:  # fmt: skip
    """Run the deploy of a rotation (a new token, a new CA) with ``rotation_env`` set; return the exit status.

    A ``--dry`` run ``undo``es the rotation, so the local ``kept`` (token, CA) is as it was; a failed deploy
    prints ``failure(status)`` (where the cluster stands) and returns 1; a finished one ``end``s the rotation
    and prints ``done``.
    """
    status = run_pyinfra(inventory, extra=pyinfra_args, env={rotation_env: "1"})
    if status == 0 and "--dry" in pyinfra_args:
        undo()
        print(f"==> Dry run: no node was changed, and the local {kept} is as it was before.")
        return 0
    if status != 0:
        print(failure(status), file=sys.stderr)
        return 1
    end()
    print(done)
    return 0
