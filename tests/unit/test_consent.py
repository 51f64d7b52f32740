"""The settings that weaken a cluster need consent, and some are refused outright: each refusal names the
key, the value and what the deploy expects instead (deploy/contract/consent.py through the schema)."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.contract.schema import validate_host


def problems(data: dict[str, Any]) -> list[tuple[str, Any, str]]:
    return [(p.key, p.value, p.expected) for p in validate_host("head-1", {"ray_role": "head", **data})]


def exporting(*exports: dict[str, Any]) -> dict[str, Any]:
    """The data of an NFS server exporting ``exports``."""
    return {"storage_nfs_server": "10.0.0.1", "storage_nfs_exports": list(exports)}


def test_no_authentication_needs_its_consent():
    [(key, value, expected)] = problems({"ray_auth": "none"})
    assert (key, value) == ("ray_auth", "none")
    assert expected.startswith('"token", or ray_auth_allow_none = True to run Ray without authentication')
    assert problems({"ray_auth": "none", "ray_auth_allow_none": True}) == []
    assert problems({"ray_auth_allow_none": True}) == []  # consent alone changes nothing


@pytest.mark.parametrize("dashboard", ["0.0.0.0", "10.0.0.1", "::"])
def test_no_authentication_with_a_dashboard_off_loopback_is_refused_even_with_consent(dashboard):
    [(key, value, expected)] = problems(
        {"ray_auth": "none", "ray_auth_allow_none": True, "ray_dashboard_host": dashboard}
    )
    assert (key, value) == ("ray_auth", "none")
    assert expected.startswith(f'"token" while ray_dashboard_host = {dashboard!r} is off loopback')
    assert "Jobs API" in expected
    assert problems({"ray_dashboard_host": dashboard}) == []  # with the token, the dashboard may listen there


@pytest.mark.parametrize("options", ["rw,anonuid=0", "rw,sync,anongid=0", "rw,sec=none", "ro,sec=krb5:none"])
def test_nfs_export_options_that_make_clients_root_or_anonymous_need_allow_unsafe(options):
    export = {"path": "/srv/shared", "options": options}
    [(key, value, expected)] = problems(exporting(export))
    assert (key, value) == ("storage_nfs_exports[0]['options']", options)
    assert 'or "allow_unsafe": true on this export' in expected
    assert options.split(",")[-1] in expected
    assert problems(exporting({**export, "allow_unsafe": True})) == []


def test_nfs_export_options_that_squash_to_a_user_pass():
    assert problems(exporting({"path": "/srv/shared", "options": "rw,anonuid=1000,sec=sys"})) == []


@pytest.mark.parametrize(
    ("data", "port", "named"),
    [
        ({}, 2049, "NFS = 2049"),
        ({}, 111, "rpcbind = 111"),
        ({}, "100-200", "rpcbind = 111"),
        ({}, 9090, "monitoring_prometheus_port = 9090"),
        ({}, 3000, "monitoring_grafana_port = 3000"),
        ({"image_mirror": "head"}, 5000, "image_mirror_port = 5000"),
    ],
)
def test_extra_ports_may_not_open_rayrigs_own_services_to_any_source(data, port, named):
    [(key, value, expected)] = problems({**data, "firewall_extra_tcp_ports": [443, port]})
    assert (key, value) == ("firewall_extra_tcp_ports[1]", port)
    assert expected.startswith("ports apart from ") and named in expected


@pytest.mark.parametrize(
    "data",
    [
        {"firewall_extra_tcp_ports": [5000]},  # the mirror is off
        {"firewall_extra_tcp_ports": [3000], "monitoring_grafana": False},
        {"firewall_extra_tcp_ports": [9090, 3000], "monitoring_enabled": False},
        {"firewall_extra_tcp_ports": [80, 443, "8000-8080"]},
    ],
)
def test_extra_ports_of_services_that_do_not_run_pass(data):
    assert problems(data) == []


def test_a_registry_mirror_over_plain_http_needs_its_registry_among_the_insecure_ones():
    [(key, value, expected)] = problems({"docker_registry_mirrors": ["https://m.lab", "http://10.0.0.5:5000"]})
    assert (key, value) == ("docker_registry_mirrors[1]", "http://10.0.0.5:5000")
    assert expected.startswith("an https URL, or '10.0.0.5:5000' in docker_insecure_registries as well")
    consented = {"docker_registry_mirrors": ["http://10.0.0.5:5000"], "docker_insecure_registries": ["10.0.0.5:5000"]}
    assert problems(consented) == []
