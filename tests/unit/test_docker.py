"""The Docker step's pure helpers: daemon.json merged over what others wrote, and the
engine's packages per OS and ``docker_source``."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest
from pyinfra.context import ctx_host

from deploy.contract import settings
from deploy.host import platform
from deploy.host.docker import (
    REPO_PACKAGES,
    DaemonConfigError,
    DockerDaemon,
    engine_packages,
    merge_daemon_config,
    parse_daemon_config,
    runs_older_config,
)
from deploy.run.facts import HostInfo
from tests.plan.fakes.fakehosts import OS_RELEASE

# --- daemon.json ------------------------------------------------------------------------------------

NVIDIA = {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}, "default-runtime": "nvidia"}


def docker_settings(**changes):
    return {**settings.defaults(), **changes}


def test_merge_keeps_keys_other_tools_wrote():
    merged = merge_daemon_config(NVIDIA, docker_settings(docker_insecure_registries=["10.0.0.5:5000"]))
    assert merged["runtimes"] == NVIDIA["runtimes"]
    assert merged["default-runtime"] == "nvidia"
    assert merged["insecure-registries"] == ["10.0.0.5:5000"]
    assert merged["log-driver"] == "json-file"
    assert merged["log-opts"] == {"max-size": "100m", "max-file": "3"}


def test_merge_unions_lists_without_duplicates():
    current = {"insecure-registries": ["a:5000", "b:5000"], "registry-mirrors": ["https://m1"]}
    merged = merge_daemon_config(
        current,
        docker_settings(docker_insecure_registries=["b:5000", "c:5000"], docker_registry_mirrors=["https://m1"]),
    )
    assert merged["insecure-registries"] == ["a:5000", "b:5000", "c:5000"]
    assert merged["registry-mirrors"] == ["https://m1"]


def test_merge_is_idempotent_and_does_not_touch_its_input():
    current = copy.deepcopy(NVIDIA)
    s = docker_settings(docker_insecure_registries=["r:5000"], docker_registry_mirrors=["https://m"])
    once = merge_daemon_config(current, s)
    assert current == NVIDIA
    assert merge_daemon_config(once, s) == once


def test_merge_keeps_other_log_opts_and_lets_daemon_options_win():
    current = {"log-opts": {"labels": "team", "max-size": "10m"}, "live-restore": False}
    merged = merge_daemon_config(current, docker_settings(docker_daemon_options={"live-restore": True}))
    assert merged["log-opts"] == {"labels": "team", "max-size": "100m", "max-file": "3"}
    assert merged["live-restore"] is True


def test_merge_with_nothing_to_add_leaves_the_file_as_is():
    s = docker_settings(docker_log_opts={}, docker_insecure_registries=[], docker_registry_mirrors=[])
    assert merge_daemon_config(NVIDIA, s) == NVIDIA
    assert merge_daemon_config({}, s) == {}


@pytest.fixture
def on_host():
    with ctx_host.use(SimpleNamespace(name="gpu-01.lab.example")):
        yield


@pytest.mark.parametrize("text", [None, "", "  \n"])
def test_parse_absent_or_blank_daemon_json(text, on_host):
    assert parse_daemon_config(text) == {}


def test_parse_daemon_json(on_host):
    assert parse_daemon_config(json.dumps(NVIDIA, indent=2)) == NVIDIA


@pytest.mark.parametrize(
    "text,reason",
    [('{"runtimes": ', "is not valid JSON"), ('["not", "an", "object"]', "is not a JSON object"), ("42", "object")],
)
def test_parse_daemon_json_errors_name_the_file_and_host(text, reason, on_host):
    with pytest.raises(DaemonConfigError) as error:
        parse_daemon_config(text)
    assert "/etc/docker/daemon.json on gpu-01.lab.example" in str(error.value)
    assert reason in str(error.value)
    assert "fix or remove it" in str(error.value)


# --- The engine's packages ------------------------------------------------------------------------


def plat(os_name: str) -> platform.Platform:
    return platform.detect(HostInfo().process(OS_RELEASE[os_name]))


@pytest.mark.parametrize(
    "os_name,source,packages,from_repo",
    [
        ("ubuntu22", "distro", ("docker.io",), False),
        ("ubuntu22", "docker", REPO_PACKAGES, True),
        ("debian12", "distro", ("docker.io",), False),
        ("debian12", "docker", REPO_PACKAGES, True),
        ("rocky9", "distro", REPO_PACKAGES, True),  # RHEL 9 ships podman, not Docker
        ("rocky9", "docker", REPO_PACKAGES, True),
        ("al2023", "distro", ("docker",), False),
        ("al2023", "docker", ("docker",), False),  # no Docker CE repository for Amazon Linux
    ],
)
def test_engine_packages(os_name, source, packages, from_repo):
    assert engine_packages(plat(os_name), source) == (packages, from_repo)


def test_repo_packages_are_dockers_own():
    assert REPO_PACKAGES == ("docker-ce", "docker-ce-cli", "containerd.io", "docker-buildx-plugin")


# --- The running daemon against daemon.json ----------------------------------------------------------


def daemon_fact(written: str | None, main_pid: int = 4242) -> dict:
    """The fact on a host up 5000 s whose dockerd started 1000 s after boot (at 1733001000.25)."""
    output = [
        f"MainPID={main_pid}",
        "ExecMainStartTimestampMonotonic=1000250000",
        "RAYRIG_UPTIME=5000.00",
        "RAYRIG_NOW=1733005000.000000000",
        *([f"RAYRIG_CONFIG_WRITTEN={written}"] if written else []),
    ]
    return DockerDaemon().process(output)


def test_docker_daemon_fact_puts_start_and_write_on_one_clock():
    fact = daemon_fact("1733001000.100000000")
    assert fact["started"] == pytest.approx(1733001000.25)
    assert fact["config_written"] == pytest.approx(1733001000.1)
    assert not runs_older_config(fact)  # written, then the restart read it, 0.15 s later


def test_daemon_json_written_after_the_daemon_started_asks_for_a_restart():
    assert runs_older_config(daemon_fact("1733001000.400000000"))


def test_no_daemon_or_no_daemon_json_asks_for_no_restart():
    assert not runs_older_config(daemon_fact("1733004000.0", main_pid=0))  # not running: the start reads it
    assert not runs_older_config(daemon_fact(None))
    assert DockerDaemon().process([]) == {"started": None, "config_written": None}
    assert "/etc/docker/daemon.json" in DockerDaemon().command()
