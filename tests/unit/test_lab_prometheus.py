"""The lab's Prometheus: Debian's package in an image the lab builds and pushes, named by the lab's inventory."""

from __future__ import annotations

import io
import re
import tarfile

from cloud import lab
from cloud.lab import build as lab_build
from cloud.lab import registry, state
from deploy.contract.schema import validate_cluster
from deploy.contract.settings import merge
from deploy.monitoring import config as monitoring_config
from images.build import _write_context


def _lab(tmp_path):
    return lab.make_state("lab-x", "10.213.0.0/24", 3, tmp_path / "id_ed25519", tmp_path / "known_hosts")


def test_the_build_context_installs_debians_prometheus_on_the_lab_host_image(monkeypatch):
    calls = []
    monkeypatch.setattr(lab_build, "docker_build", lambda tag, files, log, **kw: calls.append((tag, files, kw)) or "id")
    lab_build.build_prometheus(print)
    [(tag, files, kwargs)] = calls
    assert tag == "rayrig/lab-prometheus:bookworm"
    assert kwargs["build_args"] == {"BASE": state.BASE_IMAGE} and kwargs["base_image"] == state.BASE_IMAGE
    stream = io.BytesIO()
    _write_context(stream, files, [])  # the context as docker build receives it
    with tarfile.open(fileobj=io.BytesIO(stream.getvalue())) as tar:
        dockerfile = tar.extractfile("Dockerfile").read().decode()
    lines = [line for line in dockerfile.splitlines() if not line.startswith("#")]
    assert lines[:2] == ["ARG BASE", "FROM ${BASE}"]
    assert re.search(r"apt-get install -y --no-install-recommends prometheus\b", dockerfile)
    # As the official image runs: prometheus is the entrypoint, as nobody (the deploy owns its data folder so).
    assert 'ENTRYPOINT ["/usr/bin/prometheus"]' in lines
    assert f"USER {monitoring_config.PROMETHEUS_UID}:{monitoring_config.PROMETHEUS_UID}" in lines


def test_the_lab_builds_prometheus_and_pushes_it_with_the_ray_image(monkeypatch):
    pushed = []
    monkeypatch.setattr(
        registry, "_push_once", lambda local, tag, repo, version, log: pushed.append((tag, repo, version)) or "sha256:x"
    )
    monkeypatch.setattr(registry, "_save_registry_seed", lambda *args: None)
    registry.ensure_pushed({"registry_local": "127.0.0.1:5999", "name": "lab-x"}, "2.60.0", print)
    assert pushed == [
        ("rayrig/lab-prometheus:bookworm", "rayrig/lab-prometheus", "bookworm"),
        ("rayrig/lab-ray:2.60.0", "rayrig/lab-ray", "2.60.0"),
    ]


def test_the_lab_inventory_runs_its_own_prometheus_without_grafana_or_dcgm(tmp_path):
    groups = lab.inventory_groups(_lab(tmp_path))
    hosts = [(name, data, data["ray_node_ip"]) for name, data in groups["heads"] + groups["workers"]]
    for _name, data, _address in hosts:
        assert data["monitoring_prometheus_image"] == "10.213.0.2:5000/rayrig/lab-prometheus:bookworm"
        assert data["monitoring_grafana"] is False and data["monitoring_gpu_exporter"] == "none"
        assert merge(data)["monitoring_enabled"] is True  # on by default, as everywhere
    assert validate_cluster(hosts) == []
