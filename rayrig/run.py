"""Run pyinfra the way ``rayrig deploy`` and ``rayrig check`` do: from the repository root, without prompting."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from deploy.paths import repo_root

DEPLOY_FILE = "deploy/cluster.py"
CHECKS_FILE = "deploy/check.py"


def pyinfra_command(inventory: str | Path, deploy_file: str = DEPLOY_FILE, extra: Sequence[str] = ()) -> list[str]:
    """The pyinfra command line that runs ``deploy_file`` on ``inventory`` without prompting."""
    return [sys.executable, "-m", "pyinfra", str(inventory), deploy_file, "-y", *extra]


def run_pyinfra(inventory: str | Path, deploy_file: str = DEPLOY_FILE, extra: Sequence[str] = (),
                env: dict[str, str] | None = None) -> int:  # fmt: skip
    """Run pyinfra from the repository root (deploy files import ``deploy.*`` from there); return its exit status."""
    inventory = Path(inventory).resolve() if Path(inventory).exists() else inventory
    command = pyinfra_command(inventory, deploy_file, extra)
    return subprocess.call(command, cwd=repo_root(), env={**os.environ, **(env or {})})
