"""The ray-node unit leaves a container that Docker restarted alone (``docker restart`` on the head)."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from deploy.ray import ray_node


def exec_stop(unit: str) -> list[list[str]]:
    """The ExecStop command lines as systemd runs them: "-" (ignore failure) dropped, "$$" a literal "$"."""
    lines = [line.split("=", 1)[1].lstrip("-") for line in unit.splitlines() if line.startswith("ExecStop=")]
    return [shlex.split(line.replace("$$", "$")) for line in lines]


@pytest.fixture
def fake_docker(tmp_path):
    """A ``docker`` on PATH that records its arguments."""
    calls = tmp_path / "calls"
    docker = tmp_path / "docker"
    docker.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    docker.chmod(0o755)
    return calls, {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}


def run_stop(unit: str, env: dict[str, str]) -> None:
    for command in exec_stop(unit):
        assert subprocess.run(command, env=env, capture_output=True, timeout=30).returncode == 0


def test_systemctl_stop_stops_ray_then_the_container(fake_docker):
    calls, env = fake_docker
    run_stop(ray_node.unit_text("ray-node"), {**env, "MAINPID": "4242"})  # docker start --attach still runs
    assert calls.read_text().splitlines() == ["exec ray-node ray stop --grace-period 20", "stop --time 30 ray-node"]


def test_a_container_that_stopped_without_the_unit_is_not_stopped_again(fake_docker):
    calls, env = fake_docker
    env.pop("MAINPID", None)  # systemd sets no MAINPID once the main process has exited
    run_stop(ray_node.unit_text("ray-node"), env)
    assert not calls.exists(), calls.read_text()
