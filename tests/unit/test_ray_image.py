"""The Ray image step's helpers: the registry login file, the pull command, when to pull."""

from __future__ import annotations

import base64
import json

import pytest

from deploy.host import ray_image


def test_registry_config():
    config = json.loads(ray_image.registry_config({"registry": "r.lab:5000", "username": "ray", "password": "p:w"}))
    assert config == {"auths": {"r.lab:5000": {"auth": base64.b64encode(b"ray:p:w").decode()}}}


def test_start_pull_command_passes_every_value_as_an_argument():
    command = ray_image.start_pull_command(
        "reg.example/ray:1;touch /tmp/P", "10.0.0.1:5000/ray:rayrig-1", 600, with_auth=True,
        copy_to="ray:rayrig-1", src_tls_verify=False, writer="127.0.0.1:5000",
    )  # fmt: skip
    assert "'reg.example/ray:1;touch /tmp/P'" in command
    assert command.endswith(
        "/var/lib/rayrig/image-pull 600 'reg.example/ray:1;touch /tmp/P' 10.0.0.1:5000/ray:rayrig-1 "
        "/etc/rayrig/docker 'reg.example/ray:1;touch /tmp/P' ray:rayrig-1 false "
        "/etc/rayrig/docker/config.json tag 127.0.0.1:5000 /etc/docker/registry/rayrig-copy.yml"
    )
    assert "--unit rayrig-image-pull" in command and "RuntimeMaxSec=660" in command
    warm = ray_image.start_pull_command("r/ray:1", "10.0.0.1:5000/r/ray:rayrig-1", 600, with_auth=False, warm=True)
    assert warm.endswith(" warm '' ''")  # a worker of the mirror: the tag ahead only, no copy


@pytest.mark.parametrize(
    "policy,image_id,expected",
    [("missing", None, True), ("missing", "sha256:ab", False), ("always", "sha256:ab", True), ("always", None, True)],
)
def test_needs_pull(policy, image_id, expected):
    assert ray_image.needs_pull({"ray_image_pull": policy}, image_id) is expected
