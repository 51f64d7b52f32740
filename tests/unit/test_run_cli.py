"""The thin CLI wrappers: the pyinfra command line and the demo's report line."""

from __future__ import annotations

import json
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
                 ["deploy", "inv.py", "--dry"], ["demo", "--hosts", "2"]):  # fmt: skip
        assert callable(parser.parse_args(argv).func), argv


def test_latest_checks_reports_the_newest_verdict_and_its_plot(tmp_path):
    for stamp, status in (("20261130-000001", "FAIL"), ("20261130-000002", "PASS")):
        (tmp_path / f"checks-lab-{stamp}.json").write_text(json.dumps({"verdict": {"status": status}}))
    (tmp_path / "checks-lab-20261130-000002-busbw.png").write_bytes(b"png")
    (tmp_path / "checks-other-20261130-000003.json").write_text(json.dumps({"verdict": {"status": "FAIL"}}))
    line = run.latest_checks("lab", tmp_path)
    assert line.startswith("==> checks: PASS; report ")
    assert "checks-lab-20261130-000002.json" in line
    assert "checks-lab-20261130-000002-busbw.png" in line
    assert "no report yet" in run.latest_checks("absent", tmp_path)


def test_the_check_command_runs_a_pyinfra_file_that_exists():
    assert (repo_root() / run.CHECKS_FILE).is_file()
    assert run.pyinfra_command("inventories/lab.py", run.CHECKS_FILE)[4] == "deploy/check.py"
