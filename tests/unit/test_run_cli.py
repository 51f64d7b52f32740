"""The thin CLI wrappers: the pyinfra command line and the wiring of every command."""

from __future__ import annotations

import sys

import pytest

from deploy.contract.paths import repo_root
from rayrig import run
from rayrig.cli import build_parser, main


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


def test_a_missing_inventory_file_is_a_usage_error_before_pyinfra_starts(capsys, monkeypatch):
    monkeypatch.setattr(run.subprocess, "call", lambda *a, **k: pytest.fail("pyinfra must not start"))
    for command in ("deploy", "check"):
        assert main([command, "inventories/no-such-lab.py"]) == 2
        err = capsys.readouterr().err
        assert f"rayrig {command}: inventories/no-such-lab.py: no such inventory file" in err
        assert "Traceback" not in err


def test_host_names_and_connectors_go_to_pyinfra_as_they_are():
    for inventory in ("@local", "gpu-01.lab.example,gpu-02.lab.example", "gpu-01"):
        run.check_inventory_file(inventory)  # not a file: pyinfra reads them as hosts


@pytest.mark.slow
def test_an_inventory_that_yields_no_host_is_an_error_naming_it(tmp_path, capsys):
    empty = tmp_path / "empty.py"
    empty.write_text("heads = []\nworkers = []\n")
    assert main(["deploy", str(empty)]) == 1
    err = capsys.readouterr().err
    assert f"rayrig deploy: {empty}: the inventory yields no host" in err
    assert main(["check", str(empty)]) == 1
    assert "the inventory yields no host" in capsys.readouterr().err


@pytest.mark.slow
def test_a_limit_that_selects_no_host_is_the_same_error(capsys):
    assert main(["deploy", "tests/plan/fake_inventory.py", "--limit", "no-such-host"]) == 1
    assert "the inventory yields no host that --limit/--exclude selects" in capsys.readouterr().err
