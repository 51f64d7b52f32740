"""Ray TLS data keys: what passes, and what each mistake is reported as."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.contract.schema import validate_cluster, validate_host


def messages(data: dict[str, Any]) -> list[str]:
    return [str(p) for p in validate_host("head-1", {"ray_role": "head", **data})]


def test_the_defaults_and_tls_on_pass():
    assert messages({}) == []
    assert messages({"ray_tls": "on"}) == []


def test_tls_on_without_token_authentication_is_allowed():
    assert messages({"ray_tls": "on", "ray_auth": "none", "ray_auth_allow_none": True}) == []


@pytest.mark.parametrize("value", ["yes", True, "ON", None])
def test_ray_tls_is_off_or_on(value):
    assert messages({"ray_tls": value}) == [f'host head-1: ray_tls = {value!r}: expected "off" or "on"']


def test_the_validity_must_exceed_the_renewal_window():
    assert messages({"ray_tls_renew_days": 30, "ray_tls_validity_days": 30}) == [
        "host head-1: ray_tls_validity_days = 30: expected more days than ray_tls_renew_days = 30 "
        "(else every deploy would reissue every certificate)"
    ]
    assert messages({"ray_tls_renew_days": 30, "ray_tls_validity_days": 31}) == []


def test_a_certificate_cannot_outlive_its_ca():
    assert messages({"ray_tls_validity_days": 800, "ray_tls_ca_validity_days": 800}) == [
        "host head-1: ray_tls_ca_validity_days = 800: expected more days than ray_tls_validity_days = 800 "
        "(a certificate cannot outlive its CA)"
    ]


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("ray_tls_renew_days", 0, "a number of days of at least 1"),
        ("ray_tls_renew_days", "30", "a number of days of at least 1"),
        ("ray_tls_validity_days", 1, "a number of days from 2 to 3650"),
        ("ray_tls_validity_days", 30.0, "a number of days from 2 to 3650"),
        ("ray_tls_ca_validity_days", 1, "a number of days from 2 to 36500"),
    ],
)
def test_day_counts_are_whole_numbers_in_range(key, value, expected):
    (message,) = messages({key: value})
    assert message.startswith(f"host head-1: {key} = {value!r}: expected {expected}")


@pytest.mark.parametrize("name", ["RAY_USE_TLS", "RAY_TLS_SERVER_CERT", "RAY_TLS_CA_CERT"])
def test_ray_env_cannot_set_rays_tls_variables(name):
    assert messages({"ray_env": {name: "1"}}) == [
        f"host head-1: ray_env[{name!r}] = '1': expected no {name}: set ray_tls instead"
    ]


def test_ray_tls_is_the_same_on_every_host():
    hosts = [
        ("head-1", {"ray_role": "head", "ray_node_ip": "10.0.0.1", "ray_tls": "on"}, "10.0.0.1"),
        ("worker-1", {"ray_node_ip": "10.0.0.2"}, "10.0.0.2"),
    ]
    assert [str(p) for p in validate_cluster(hosts)] == [
        "host head-1: ray_tls = \"head-1: 'on'; worker-1: 'off'\": expected the same value on every host of the cluster"
    ]
