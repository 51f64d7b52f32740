"""The Ray image step's helpers: the registry login file, the pull command, when to pull."""

from __future__ import annotations

import base64
import json

import pytest

from deploy import ray_image


def test_registry_config():
    config = json.loads(ray_image.registry_config({"registry": "r.lab:5000", "username": "ray", "password": "p:w"}))
    assert config == {"auths": {"r.lab:5000": {"auth": base64.b64encode(b"ray:p:w").decode()}}}


def test_pull_command():
    assert ray_image.pull_command("rayproject/ray:2.60.0", False) == "docker pull --quiet rayproject/ray:2.60.0"
    assert (
        ray_image.pull_command("r.lab:5000/ml/ray@sha256:" + "a" * 64, True)
        == f"docker --config {ray_image.DOCKER_CONFIG_DIR} pull --quiet r.lab:5000/ml/ray@sha256:{'a' * 64}"
    )
    assert ray_image.pull_command("weird;rm -rf /", False) == "docker pull --quiet 'weird;rm -rf /'"


@pytest.mark.parametrize(
    "policy,image_id,expected",
    [("missing", None, True), ("missing", "sha256:ab", False), ("always", "sha256:ab", True), ("always", None, True)],
)
def test_needs_pull(policy, image_id, expected):
    assert ray_image.needs_pull({"ray_image_pull": policy}, image_id) is expected
