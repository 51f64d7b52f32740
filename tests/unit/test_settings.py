"""A host's settings: defaults merged with the inventory's data, node addresses, rayrig's keys."""

from __future__ import annotations

from types import SimpleNamespace

from deploy.contract import settings


def test_merge_partial_ray_ports_keeps_the_other_defaults():
    merged = settings.merge({"ray_ports": {"gcs": 7000}})
    assert merged["ray_ports"]["gcs"] == 7000
    assert merged["ray_ports"]["dashboard"] == 8265
    assert set(merged["ray_ports"]) == set(settings.defaults()["ray_ports"])


def test_merge_keeps_only_rayrig_keys_and_replaces_whole_values():
    merged = settings.merge({"ssh_user": "ubuntu", "ray_num_gpu": 2, "docker_log_opts": {"max-size": "1g"}})
    assert "ssh_user" not in merged and "ray_num_gpu" not in merged
    assert merged["docker_log_opts"] == {"max-size": "1g"}  # not a partial dict: replaced
    assert set(merged) == set(settings.defaults())


def test_merge_and_defaults_hand_out_copies():
    data = {"ray_resources": {"nvme": 1}}
    merged = settings.merge(data)
    merged["ray_resources"]["nvme"] = 5
    merged["ray_ports"]["gcs"] = 1
    assert data == {"ray_resources": {"nvme": 1}}
    assert settings.defaults()["ray_ports"]["gcs"] == 6379
    assert settings.merge({})["ray_ports"]["gcs"] == 6379


def test_node_address_prefers_ray_node_ip_then_ssh_hostname_then_name():
    def fake_host(name, **data):
        return SimpleNamespace(name=name, data=SimpleNamespace(dict=lambda: data))

    assert settings.node_address(fake_host("h", ray_node_ip="10.0.0.1", ssh_hostname="h.lab")) == "10.0.0.1"
    assert settings.node_address(fake_host("h", ssh_hostname="h.lab")) == "h.lab"
    assert settings.node_address(fake_host("h")) == "h"


def test_is_rayrig_key():
    assert settings.is_rayrig_key("ray_num_gpu")
    assert settings.is_rayrig_key("storage_nfs_server")
    assert not settings.is_rayrig_key("ssh_user")
    assert not settings.is_rayrig_key("fake_responses")
