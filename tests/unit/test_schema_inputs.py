"""Inventory values that would reach a shell, Ray or NFS wrongly: each is refused with a
message naming the host, the key, the value and what is expected."""

from __future__ import annotations

from typing import Any

import pytest

from cloud.ec2 import spec_schema
from deploy.contract import schema, settings
from deploy.contract.schema import InventoryError, Problem, check_inventory, validate_cluster
from tests.unit.test_schema import head, only, worker


def problems_of(**data: Any) -> list[Problem]:
    return validate_cluster([head(**data)])


def patterns(node: Any, where: str = "") -> list[tuple[str, str]]:
    """Every ``pattern`` in a JSON Schema, with where it sits."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                found.append((where, value))
            else:
                found += patterns(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += patterns(value, f"{where}/{index}")
    return found


@pytest.mark.parametrize("name, tree", [("deploy", schema.SCHEMA), ("spec", spec_schema.SCHEMA)])
def test_every_pattern_is_anchored_at_the_very_end(name, tree):
    found = patterns(tree)
    assert len(found) > 10
    # Python's $ also matches before a trailing newline: "ray-node\n" would pass.
    assert [where for where, pattern in found if pattern.endswith("$") or not pattern.endswith(r"\Z")] == []


@pytest.mark.parametrize(
    "key, value",
    [
        ("ray_container_name", "ray-node\n"),
        ("ray_version", "2.60.0\n"),
        ("ray_cluster_name", "cluster\n"),
        ("ray_node_ip", "ray-node\n"),
        ("ray_image", "rayproject/ray:2.60.0\n"),
    ],
)
def test_a_trailing_newline_is_refused(key, value):
    p = only(problems_of(**{key: value}))
    assert (p.host, p.key, p.value) == ("head-1", key, value)


# --- Addresses ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "10.0.0.1%x/1);touch /tmp/P;(true",
        "10.0.0.1%eth0",
        "fe80::1%eth0;id",
        "$(touch /tmp/P)",
        "node 1",
        "-oProxyCommand=x",
        "node_1.lab",
        "",
    ],
)
def test_ray_node_ip_must_be_an_address(value):
    p = only(validate_cluster([(h[0], h[1], value) for h in [head(ray_node_ip=value)]]))
    assert (p.host, p.key, p.value) == ("head-1", "ray_node_ip", value)
    assert p.expected == "null or an address the other nodes can reach: an IP address or a host name"


@pytest.mark.parametrize("value", ["10.0.0.7", "fe80::1%eth0", "2001:db8::7", "gpu-01.lab.example", "node1"])
def test_ray_node_ip_accepts_addresses_and_host_names(value):
    assert problems_of(ray_node_ip=value) == []


def test_parse_address_takes_a_zone_on_ipv6_only():
    assert settings.parse_address("fe80::1%eth0") is not None
    assert settings.parse_address("fe80::1%3") is not None
    assert settings.parse_address("10.0.0.1%eth0") is None
    assert settings.parse_address("10.0.0.1%x/1);touch /tmp/P;(true") is None
    assert settings.parse_address("fe80::1%x;y") is None
    assert settings.parse_address("fe80::1%") is None


@pytest.mark.parametrize("value", ["10.0.0.1%x/1);touch /tmp/P;(true", "$(touch /tmp/P)", "filer;id", "-x", "a b"])
def test_nfs_mount_server_must_be_an_address_or_an_inventory_host(value):
    mounts = [{"server": value, "export": "/srv/shared", "path": "/mnt/shared"}]
    found = problems_of(storage_nfs_mounts=mounts)
    assert [(p.host, p.key, p.value) for p in found] == [("head-1", "storage_nfs_mounts[0]['server']", value)]


def test_nfs_mount_server_may_name_an_inventory_host():
    mounts = [{"server": "@fake/head-1", "export": "/srv/shared", "path": "/mnt/shared"}]
    hosts = [
        ("@fake/head-1", {"ray_role": "head", "ray_node_ip": "10.0.0.1", "storage_nfs_mounts": mounts}, "10.0.0.1")
    ]
    assert validate_cluster(hosts) == []
    hosts[0][1]["storage_nfs_mounts"] = [{**mounts[0], "server": "@fake/other"}]
    assert only(validate_cluster(hosts)).key == "storage_nfs_mounts[0]['server']"


@pytest.mark.parametrize("value", ["127.0.0.1", "0.0.0.0", "::", "dash.lab.example"])
def test_dashboard_host_accepts_addresses(value):
    assert problems_of(ray_dashboard_host=value) == []


@pytest.mark.parametrize("value", ["127.0.0.1;id", "-x", "127.0.0.1%lo"])
def test_dashboard_host_refuses_anything_else(value):
    assert only(problems_of(ray_dashboard_host=value)).key == "ray_dashboard_host"


def test_the_address_a_host_is_dialled_at_must_be_an_address():
    found = validate_cluster([("head-1", {"ray_role": "head"}, "head 1;id")])
    assert [(p.host, p.key, p.value) for p in found] == [("head-1", "ray_node_ip", "head 1;id")]


@pytest.mark.parametrize(
    "key, value",
    [
        ("docker_repo_url", "https://x.example/$(touch /tmp/P)"),
        ("docker_repo_url", "https://x.example/a b"),
        ("nvidia_cuda_repo_url", "https://x.example/`id`"),
        ("docker_registry_mirrors", ["https://m.example/;id"]),
        ("base_extra_packages", ["-oDPkg::Pre-Invoke::=touch /tmp/P"]),
        ("base_extra_packages", ["htop;id"]),
        ("docker_insecure_registries", ["10.0.0.5:5000\n"]),
        ("firewall_admin_cidrs", ["10.0.0.0/8;id"]),
        ("storage_nfs_exports", [{"path": "/srv/../etc"}]),
        ("storage_nfs_exports", [{"path": "/srv/$(id)"}]),
        ("checks_report_dir", "reports\nx"),
        ("storage_s3_mounts", [{"bucket": "datasets", "path": "/mnt/datasets", "region": "-x"}]),
        ("storage_s3_mounts", [{"bucket": "datasets", "path": "/mnt/datasets", "prefix": "a/../b"}]),
        ("storage_s3_credentials", {"access_key_id": "AKIA:X", "secret_access_key": "s"}),
        ("docker_registry_auth", {"registry": "r.example", "username": "me", "password": "pw\nx"}),
    ],
)
def test_values_a_shell_or_a_tool_would_read_as_syntax_are_refused(key, value):
    assert only(problems_of(storage_nfs_server="head-1", **{key: value})).key.startswith(key)


@pytest.mark.parametrize(
    "key, value",
    [
        ("docker_repo_url", "https://download.docker.com/linux"),
        ("docker_repo_url", "http://[fd00::5]:8080/docker-ce"),
        ("docker_registry_mirrors", ["https://mirror.lab.example:5000"]),
        ("base_extra_packages", ["htop", "nvme-cli", "libstdc++6", "python3.11", "vim=2:8.2*"]),
        ("docker_insecure_registries", ["10.0.0.5:5000", "10.0.0.0/8", "[fd00::5]:5000"]),
    ],
)
def test_ordinary_values_still_pass(key, value):
    assert problems_of(**{key: value}) == []


# --- What Ray 2.60 refuses -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value",
    [
        ("ray_num_cpus", 16.0),
        ("ray_num_gpus", 8.0),
        ("ray_num_cpus", 1.5),
        ("ray_object_store_bytes", 1e9),
        ("ray_object_store_bytes", 50 * 2**20),
        ("ray_shm_size", "0"),
        ("ray_shm_size", "0g"),
        ("ray_image", "-v/:/host"),
        ("ray_image", "--privileged"),
        ("ray_ulimit_nofile", 65536.0),
    ],
)
def test_values_ray_or_docker_would_refuse(key, value):
    p = only(problems_of(**{key: value}))
    assert (p.host, p.key, p.value) == ("head-1", key, value)


@pytest.mark.parametrize("amount", [0.5, 1.5, 2.0, -1, 10**15])
def test_custom_resources_are_whole_numbers(amount):
    p = only(problems_of(ray_resources={"nvme": amount}))
    assert (p.key, p.value) == ("ray_resources['nvme']", amount)
    assert "whole number" in p.expected


def test_custom_resources_in_range_pass():
    assert problems_of(ray_resources={"nvme": 1, "fast_disk.v2": 4, "off": 0}) == []


@pytest.mark.parametrize("name", ["CPU", "GPU", "memory", "object_store_memory"])
def test_ray_s_own_resource_names_are_refused(name):
    p = only(problems_of(ray_resources={name: 4}))
    assert (p.key, p.value) == (f"ray_resources[{name!r}]", 4)
    assert "Ray sets CPU, GPU, memory and object_store_memory itself" in p.expected


@pytest.mark.parametrize(
    "ports, key",
    [
        ({"worker_min": 11000, "worker_max": 11000}, "ray_ports"),
        ({"worker_min": 1000, "worker_max": 1999}, "ray_ports['worker_min']"),
        ({"client_server": 1001}, "ray_ports['client_server']"),
        ({"runtime_env_agent": 80}, "ray_ports['runtime_env_agent']"),
    ],
)
def test_ports_ray_refuses(ports, key):
    p = only(problems_of(ray_ports=ports))
    assert p.key == key


# --- NFS exports and open ports -------------------------------------------------------------------


def serving(**data: Any) -> list[Problem]:
    return problems_of(storage_nfs_server="head-1", **data)


@pytest.mark.parametrize("path", ["/etc", "/usr/local/share", "/var", "/var/lib/docker", "/boot", "/root", "/home"])
def test_exporting_a_system_folder_needs_allow_unsafe(path):
    p = only(serving(storage_nfs_exports=[{"path": path}]))
    assert (p.host, p.key, p.value) == ("head-1", "storage_nfs_exports[0]['path']", path)
    assert '"allow_unsafe": true' in p.expected
    assert serving(storage_nfs_exports=[{"path": path, "allow_unsafe": True}]) == []


@pytest.mark.parametrize("options", ["rw,no_root_squash", "insecure", "rw,sync,insecure,no_root_squash"])
def test_exports_that_give_clients_root_need_allow_unsafe(options):
    p = only(serving(storage_nfs_exports=[{"path": "/srv/shared", "options": options}]))
    assert (p.key, p.value) == ("storage_nfs_exports[0]['options']", options)
    assert "act as root" in p.expected
    assert serving(storage_nfs_exports=[{"path": "/srv/shared", "options": options, "allow_unsafe": True}]) == []


def test_ordinary_exports_pass():
    assert serving(storage_nfs_exports=[{"path": "/srv/shared", "options": "rw,sync,root_squash"}]) == []


def test_exports_without_a_server_are_an_error():
    p = only(problems_of(storage_nfs_exports=[{"path": "/srv/shared"}]))
    assert (p.host, p.key) == ("head-1", "storage_nfs_exports")
    assert "storage_nfs_server" in p.expected


@pytest.mark.parametrize(
    "port, what",
    [(6379, "gcs"), ("8000-8300", "dashboard"), (10002, "the worker range"), ("9500-10005", "the worker range")],
)
def test_extra_open_ports_must_miss_ray_s_ports(port, what):
    p = only(problems_of(firewall_extra_tcp_ports=[80, port]))
    assert (p.host, p.key, p.value) == ("head-1", "firewall_extra_tcp_ports[1]", port)
    assert what in p.expected and "would open Ray to the world" in p.expected


def test_extra_open_ports_apart_from_ray_pass():
    assert problems_of(firewall_extra_tcp_ports=[80, 443, "30000-30100"]) == []


def test_a_refused_value_stops_the_deploy_before_any_operation():
    with pytest.raises(InventoryError) as error:
        check_inventory(FakeInventory([("head-1", {"ray_role": "head", "ray_node_ip": "10.0.0.1%x;id"})]))
    assert "host head-1: ray_node_ip = '10.0.0.1%x;id': expected" in str(error.value)
    assert str(error.value).endswith("Nothing was changed on any host.")


class FakeHost:
    def __init__(self, name: str, data: dict[str, Any]):
        self.name = name
        self.data = type("Data", (), {"dict": lambda _self: data})()


class FakeInventory(list):
    def __init__(self, hosts: list[tuple[str, dict[str, Any]]]):
        super().__init__(FakeHost(name, data) for name, data in hosts)


def test_worker_data_is_checked_too():
    p = only(validate_cluster([head(), worker(1, ray_num_cpus=2.5)]))
    assert (p.host, p.key) == ("worker-1", "ray_num_cpus")


@pytest.mark.parametrize(
    "key",
    ["ssh_password", "aws_access_key_id", "aws_secret_access_key", "api_token", "client_secret", "db_passwd"],
)
def test_values_of_secret_looking_keys_are_masked(key):
    assert schema.redact(key, "hunter2") == "***"
    assert "hunter2" not in str(Problem("h", key, "hunter2", "something else"))


def test_values_of_plain_keys_are_shown():
    assert schema.redact("ray_image", "rayproject/ray:2.60.0") == "rayproject/ray:2.60.0"
    assert schema.redact("docker_registry_auth", {"registry": "r", "username": "u", "password": "p"}) == {
        "registry": "r",
        "username": "u",
        "password": "***",
    }
