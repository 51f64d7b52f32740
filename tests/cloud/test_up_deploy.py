"""``rayrig cloud up SPEC --deploy`` against moto: it stops cleanly at the SSH wait (moto's instances
have no sshd), and past it runs the deploy as ``rayrig deploy`` does, naming the step that failed
and keeping the cluster. The deploy itself on real hosts is the lab's to prove."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cloud.ec2 import bring_up
from deploy.contract.paths import repo_root
from rayrig.commands import cloud as cloud_cmd
from tests.cloud.conftest import base_spec, raw_client, run_cli

pytestmark = pytest.mark.cloud


class Deploys:
    """Stands in for ``run_pyinfra``: records each deploy; ``status`` is what it returns, ``report`` what it
    does meanwhile (write a checks report)."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.status = 0
        self.report: Callable[[], None] | None = None

    def __call__(self, inventory: Any, deploy_file: str = "", extra: Any = (), env: Any = None) -> int:
        self.runs.append({"inventory": str(inventory), "deploy_file": deploy_file, "env": env})
        if self.report:
            self.report()
        return self.status


@pytest.fixture
def deploys(monkeypatch: pytest.MonkeyPatch) -> Deploys:
    fake = Deploys()
    monkeypatch.setattr(cloud_cmd, "run_pyinfra", fake)
    return fake


@pytest.fixture
def ssh_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every host answers SSH at once (moto's instances have no sshd)."""
    monkeypatch.setattr(bring_up, "wait_for_ssh", lambda hosts, probe, timeout_s, **_: [])


def instances(aws: str) -> list[dict[str, Any]]:
    flt = [
        {"Name": "tag:rayrig:cluster", "Values": ["sprint42"]},
        {"Name": "instance-state-name", "Values": ["running"]},
    ]
    return [i for r in raw_client("ec2", aws).describe_instances(Filters=flt)["Reservations"] for i in r["Instances"]]


def test_up_deploy_stops_cleanly_at_the_ssh_wait_naming_the_hosts(
    write_spec: Callable[..., Path],
    aws: str,
    deploys: Deploys,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    path = write_spec()
    # The real SSH probe: moto's instances have addresses but nothing answers there.
    assert run_cli("cloud", "up", str(path), "--yes", "--deploy", "--timeout", "1") == 1

    captured = capsys.readouterr()
    err = captured.err
    assert "Traceback" not in err + captured.out
    hosts = [i["PublicIpAddress"] for i in instances(aws)]
    assert len(hosts) == 3
    assert "rayrig cloud up --deploy: stopped before the deploy: SSH did not answer within 1s on" in err
    assert all(h in err for h in hosts)
    assert "check that admin_cidrs in" in err
    assert f"Retry: 'rayrig cloud up {path} --deploy' (it creates nothing more)" in err
    assert "'RAYRIG_CLUSTER=sprint42 rayrig deploy inventories/ec2.py'" in err
    assert "tear down: 'rayrig cloud down sprint42'" in err
    assert deploys.runs == []
    assert (tmp_path / "state" / "ec2" / "sprint42.json").is_file()


def test_up_deploy_runs_the_deploy_on_the_cluster_and_prints_the_next_commands(
    write_spec: Callable[..., Path],
    ssh_answers: None,
    deploys: Deploys,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_cli("cloud", "up", str(write_spec()), "--yes", "--deploy") == 0

    assert deploys.runs == [
        {
            "inventory": str(repo_root() / "inventories" / "ec2.py"),
            "deploy_file": "deploy/cluster.py",
            "env": {"RAYRIG_CLUSTER": "sprint42", "RAYRIG_REGION": "us-east-1"},
        }
    ]
    out = capsys.readouterr().out
    assert "==> cluster sprint42 is deployed. Next:" in out
    for line in (
        "RAYRIG_CLUSTER=sprint42 rayrig status inventories/ec2.py",
        "RAYRIG_CLUSTER=sprint42 rayrig submit inventories/ec2.py --working-dir . -- python your_job.py",
        "RAYRIG_CLUSTER=sprint42 rayrig dashboard inventories/ec2.py",
        "tear down:  rayrig cloud down sprint42",
    ):
        assert line in out


def test_a_failed_deploy_names_the_step_and_keeps_the_cluster(
    write_spec: Callable[..., Path],
    aws: str,
    ssh_answers: None,
    deploys: Deploys,
    capsys: pytest.CaptureFixture[str],
    keys: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    deploys.status = 1
    path = write_spec()

    assert run_cli("cloud", "up", str(path), "--yes", "--deploy") == 1

    err = capsys.readouterr().err
    assert "rayrig cloud up --deploy: the deploy failed (pyinfra exit status 1;" in err
    assert "The cluster stays up." in err and "tear down: 'rayrig cloud down sprint42'" in err
    assert len(instances(aws)) == 3

    # The checks ran and failed: their report names the step.
    reports = tmp_path / "reports"
    data = base_spec(keys[0])
    data["host_data"]["checks_report_dir"] = str(reports)

    def write_report() -> None:
        reports.mkdir(exist_ok=True)
        (reports / "checks-sprint42-20260101T000000.json").write_text(json.dumps({"verdict": {"status": "FAIL"}}))

    deploys.report = write_report
    assert run_cli("cloud", "up", str(write_spec(data)), "--yes", "--deploy") == 1
    err = capsys.readouterr().err
    assert f"the checks failed (verdict FAIL, report {reports}/checks-sprint42-20260101T000000.json)" in err
    assert len(instances(aws)) == 3


def test_deploy_and_no_wait_ssh_contradict_each_other(
    write_spec: Callable[..., Path], deploys: Deploys, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("cloud", "up", str(write_spec()), "--yes", "--deploy", "--no-wait-ssh") == 2
    assert "--deploy and --no-wait-ssh: the deploy needs SSH" in capsys.readouterr().err
    assert deploys.runs == []
