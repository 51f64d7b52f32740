"""The head's image mirror: how an image's reference maps into it, and the registry's configuration."""

from __future__ import annotations

import pytest

from deploy.host import image_mirror
from deploy.host.ray_image import pull_seconds


@pytest.mark.parametrize(
    ("image", "registry", "path"),
    [
        ("rayproject/ray:2.60.0-py311-gpu", "docker.io", "rayproject/ray"),
        ("ubuntu", "docker.io", "library/ubuntu"),
        ("ubuntu:24.04", "docker.io", "library/ubuntu"),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io", "nvidia/pytorch"),
        ("10.0.0.5:5000/ml/ray-torch:2.60.0-cu128", "10.0.0.5:5000", "ml/ray-torch"),
        ("localhost/ray:1", "localhost", "ray"),
        ("registry.lab.example/team/ray@sha256:" + "ab" * 32, "registry.lab.example", "team/ray"),
        ("10.0.0.5:5000/ray", "10.0.0.5:5000", "ray"),  # a port is not a tag
    ],
)
def test_references_are_read_the_way_docker_reads_them(image, registry, path):
    assert image_mirror.split_reference(image) == (registry, path)


def test_the_mirror_reference_keeps_the_path_and_takes_the_runs_tag():
    ref = image_mirror.mirror_reference("nvcr.io/nvidia/pytorch@sha256:" + "ab" * 32, "10.0.0.1:5000", "rayrig-1-a")
    assert ref == "10.0.0.1:5000/nvidia/pytorch:rayrig-1-a"


def test_the_registry_listens_on_the_port_and_keeps_its_storage():
    text = image_mirror.registry_config(5050)
    assert "addr: :5050\n" in text
    assert f"rootdirectory: {image_mirror.STORAGE}\n" in text
    assert "proxy" not in text  # a copy, not a pull-through proxy: see the module's docstring


def test_the_pulls_own_seconds_come_from_its_waits_last_line():
    assert pull_seconds(["result 0 81.2"]) == 81.2
    assert pull_seconds(["noise", "result 0 3.0"]) == 3.0
    assert pull_seconds(["result 1 2.0"]) is None  # a failed pull is not counted
    assert pull_seconds(["copied 0 4.0"]) is None
    assert pull_seconds([]) is None
