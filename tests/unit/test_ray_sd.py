"""The copier of Ray's service-discovery file (deploy/monitoring/ray-sd-copy.sh), run for real: Prometheus
gets a copy of that one file, kept current by renames, and never another file of the host."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from deploy.monitoring import ray_sd

NAME = "prom_metrics_service_discovery.json"
TARGETS = [{"labels": {"job": "ray"}, "targets": ["10.0.0.1:8080", "10.0.0.2:8080"]}]


@pytest.fixture
def copier(tmp_path):
    """Start the copier on a Ray folder and a destination of the test's; stop it at the end."""
    ray, dest = tmp_path / "ray" / "tmp", tmp_path / "ray-sd"
    ray.mkdir(parents=True)
    dest.mkdir()
    started: list[subprocess.Popen] = []

    def start() -> tuple[Path, Path]:
        started.append(subprocess.Popen(["bash", ray_sd.SCRIPT_SOURCE, str(ray), str(dest)]))
        return ray, dest

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=10)


def wait_for(path: Path, text: str, seconds: float = 12) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text() == text:
            return text
        time.sleep(0.1)
    return path.read_text() if path.exists() else "(missing)"


def test_before_ray_writes_it_prometheus_reads_an_empty_list(copier):
    _ray, dest = copier()
    assert wait_for(dest / "ray.json", "[]\n") == "[]\n"
    assert stat.S_IMODE((dest / "ray.json").stat().st_mode) == 0o644


def test_the_file_a_container_path_link_names_is_copied_and_follows_its_renames(copier):
    ray, dest = copier()
    session = ray / "session_2026-12-03_22-00-00_000000_1"
    session.mkdir()
    (session / NAME).write_text(json.dumps(TARGETS))
    os.symlink(f"/tmp/ray/{session.name}/{NAME}", ray / NAME)  # as ray-node sees its folder
    assert wait_for(dest / "ray.json", json.dumps(TARGETS)) == json.dumps(TARGETS)
    newer = [{"labels": {"job": "ray"}, "targets": ["10.0.0.1:8080"]}]
    (session / "tmp_new").write_text(json.dumps(newer))
    os.replace(session / "tmp_new", session / NAME)  # Ray's rename
    assert wait_for(dest / "ray.json", json.dumps(newer)) == json.dumps(newer)
    assert sorted(p.name for p in dest.iterdir()) == ["ray.json"]


@pytest.mark.parametrize("how", ["absolute link outside", "relative link outside", "another name", "too large"])
def test_nothing_but_that_file_of_rays_folder_reaches_prometheus(copier, tmp_path, how):
    secret = tmp_path / "host-secret"
    secret.write_text("root:$6$hash\n")
    ray, dest = copier()
    if how == "absolute link outside":
        os.symlink(str(secret), ray / NAME)
    elif how == "relative link outside":
        os.symlink(f"../../{secret.name}", ray / NAME)
    elif how == "another name":
        (ray / "token").write_text("secret token\n")
        os.symlink("token", ray / NAME)
    else:
        (ray / NAME).write_text("[" + " " * (1 << 20) + "]")
    time.sleep(6.5)  # more than one round of the copier
    assert (dest / "ray.json").read_text() == "[]\n"
