"""Growing and shrinking a running lab (``rayrig lab up --hosts N`` again): the hosts it keeps are left alone.

The Docker engine is a fake that keeps the lab's containers and volumes and logs every change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cloud import lab
from cloud.lab import hosts


class FakeEngine:
    """The lab's containers (name -> running) and volumes, and the changes made to them."""

    def __init__(self, containers: list[str]):
        self.containers = dict.fromkeys(containers, True)
        self.volumes = {f"{c}-docker" for c in containers}
        self.changes: list[str] = []

    def docker(self, *args: str, check: bool = True, input_text: str | None = None) -> Any:
        if args[:3] == ("rm", "--force", "--volumes"):
            self.containers.pop(args[3])
            self.changes.append(f"rm {args[3]}")
        elif args[:2] == ("volume", "rm"):
            self.volumes.discard(args[2])
            self.changes.append(f"volume rm {args[2]}")
        return type("Done", (), {"returncode": 0, "stdout": "", "stderr": ""})()

    def inspect(self, kind: str, ref: str) -> dict | None:
        if kind == "container" and ref in self.containers:
            return {"Image": "sha256:base", "State": {"Running": self.containers[ref]}}
        return {"Id": "sha256:base"} if kind == "image" else None

    def ensure_running(self, container: str, create: list[str], log: Any) -> None:
        if container not in self.containers:
            self.containers[container] = True
            self.changes.append(f"create {container}")

    def ensure_volume(self, volume: str, name: str) -> None:
        if volume not in self.volumes:
            self.volumes.add(volume)
            self.changes.append(f"volume create {volume}")


@pytest.fixture
def engine(monkeypatch):
    fake = FakeEngine([f"lab-x-host-{k}" for k in (1, 2, 3)])
    monkeypatch.setattr(hosts, "docker", fake.docker)
    monkeypatch.setattr(hosts, "inspect", fake.inspect)
    monkeypatch.setattr(hosts, "labelled", lambda kind, name: sorted(fake.containers))
    monkeypatch.setattr(hosts, "ensure_running", fake.ensure_running)
    monkeypatch.setattr(hosts, "ensure_volume", fake.ensure_volume)
    monkeypatch.setattr(hosts, "privileged_works", lambda image: True)
    monkeypatch.setattr(hosts, "cgroup_version", lambda: "2")
    monkeypatch.setattr(hosts, "_install_authorized_key", lambda container, key: None)
    monkeypatch.setattr(hosts, "ssh_answers", lambda address, timeout: True)
    monkeypatch.setattr(hosts, "_host_keys", lambda container: [f"ssh-ed25519 KEY-{container}"])
    monkeypatch.setattr(hosts, "ssh_check", lambda *args, **kwargs: "")
    return fake


def _up(tmp_path: Path, count: int) -> dict:
    key = tmp_path / "id_ed25519"
    key.with_suffix(".pub").write_text("ssh-ed25519 AAAA lab\n")
    state = lab.make_state("lab-x", "10.213.0.0/24", count, key, tmp_path / "known_hosts")
    hosts.ensure_hosts(state, key, lambda line: None)
    return state


def test_a_running_lab_grows_by_the_new_hosts_only(tmp_path, engine):
    state = _up(tmp_path, 5)
    assert engine.changes == [
        "volume create lab-x-host-4-docker",
        "create lab-x-host-4",
        "volume create lab-x-host-5-docker",
        "create lab-x-host-5",
    ]
    assert [h["address"] for h in state["hosts"]][3:] == ["10.213.0.13", "10.213.0.14"]
    pinned = (tmp_path / "known_hosts").read_text()
    assert "10.213.0.14 ssh-ed25519 KEY-lab-x-host-5" in pinned and "10.213.0.10 ssh-ed25519" in pinned


def test_a_running_lab_shrinks_by_the_extra_hosts_only(tmp_path, engine):
    _up(tmp_path, 5)
    engine.changes.clear()
    state = _up(tmp_path, 3)
    assert engine.changes == [
        "rm lab-x-host-4",
        "volume rm lab-x-host-4-docker",
        "rm lab-x-host-5",
        "volume rm lab-x-host-5-docker",
    ]
    assert sorted(engine.containers) == [h["container"] for h in state["hosts"]]
    assert "10.213.0.13" not in (tmp_path / "known_hosts").read_text()
