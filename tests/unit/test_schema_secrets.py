"""The data keys of secrets in transit and of what is installed verified: ray_env_secret and the
Mountpoint pin. Bad values are refused naming host and key, and a secret value is never shown."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.contract.schema import validate_host


def problems(**data: Any) -> list[tuple[str, Any, str]]:
    return [(p.key, p.value, p.expected) for p in validate_host("gpu-01", data)]


def test_the_defaults_and_good_values_are_accepted():
    assert problems(ray_env_secret={"WANDB_API_KEY": "it's $(not) `run`; && \\ anything"}) == []
    assert problems(storage_mountpoint_sha256={"x86_64.deb": "0" * 64, "arm64.rpm": "f" * 64}) == []
    assert problems(storage_mountpoint_url="http://mirror.lab:8080/mp/{version}/mount-s3-{arch}.{ext}") == []


@pytest.mark.parametrize("value", ["line one\nline two", "ends with a newline\n", "a\rb", "nul\x00"])
def test_a_secret_value_on_more_than_one_line_is_refused_without_being_shown(value):
    [(key, shown, expected)] = problems(ray_env_secret={"WANDB_API_KEY": value})
    assert key.startswith("ray_env_secret")
    assert value not in str(shown)
    assert "one-line strings" in expected


@pytest.mark.parametrize("name", ["1ABC", "A-B", "A B", "A\n", "$(x)"])
def test_a_secret_variable_name_must_be_a_plain_name(name):
    [(key, _value, _expected)] = problems(ray_env_secret={name: "x"})
    assert key.startswith("ray_env_secret")


@pytest.mark.parametrize(
    "data,key",
    [
        ({"storage_mountpoint_version": "latest"}, "storage_mountpoint_version"),
        ({"storage_mountpoint_version": "1.24.0\n"}, "storage_mountpoint_version"),
        ({"storage_mountpoint_url": "ftp://mirror/mount-s3.deb"}, "storage_mountpoint_url"),
        ({"storage_mountpoint_url": "https://mirror/x'; reboot; '.deb"}, "storage_mountpoint_url"),
        ({"storage_mountpoint_url": "https://mirror/x.deb\n"}, "storage_mountpoint_url"),
        ({"storage_mountpoint_sha256": {"x86_64.deb": "ABC"}}, "storage_mountpoint_sha256"),
        ({"storage_mountpoint_sha256": {"x86_64.deb": "0" * 64 + "\n"}}, "storage_mountpoint_sha256"),
        ({"storage_mountpoint_sha256": {"amd64.deb": "0" * 64}}, "storage_mountpoint_sha256"),
    ],
)
def test_a_bad_mountpoint_pin_is_refused_naming_the_key(data, key):
    [(found, _value, _expected)] = problems(**data)
    assert found.startswith(key)
