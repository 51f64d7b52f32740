"""The thin CLI wrappers: the pyinfra command line and the wiring of every command."""

from __future__ import annotations

import sys

from deploy.paths import repo_root
from rayrig import run
from rayrig.cli import build_parser


def test_pyinfra_command_runs_the_deploy_without_prompting():
    assert run.pyinfra_command("inventories/lab.py", extra=["--limit", "h1"]) == [
        sys.executable, "-m", "pyinfra", "inventories/lab.py", "deploy/cluster.py", "-y", "--limit", "h1",
    ]  # fmt: skip


def test_every_command_area_is_wired():
    parser = build_parser()
    for argv in (["lab", "status"], ["image", "wheelhouse", "/tmp/w"], ["cloud", "ls"], ["check", "inv.py"],
                 ["deploy", "inv.py", "--dry"], ["demo", "--hosts", "2"],
                 ["token", "rotate", "inv.py", "-v"]):  # fmt: skip
        assert callable(parser.parse_args(argv).func), argv


def test_the_check_command_runs_a_pyinfra_file_that_exists():
    assert (repo_root() / run.CHECKS_FILE).is_file()
    assert run.pyinfra_command("inventories/lab.py", run.CHECKS_FILE)[4] == "deploy/check.py"
