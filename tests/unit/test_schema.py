"""Inventory validation: what passes, and what each mistake is reported as."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pyinfra.api import Inventory

from deploy.contract import schema, settings
from deploy.contract.schema import InventoryError, Problem, check_inventory, validate_cluster, validate_host
from tests.hostile_corpus import HOSTILE

Host = tuple[str, dict[str, Any], str]
EXPECTED_PACKAGES = "a list of package names (letters, digits, + . _ : = ~ * -; never starting with -)"


def head(**data: Any) -> Host:
    return ("head-1", {"ray_role": "head", "ray_node_ip": "10.0.0.1", **data}, "10.0.0.1")


def worker(n: int = 1, **data: Any) -> Host:
    return (f"worker-{n}", {"ray_node_ip": f"10.0.0.{n + 1}", **data}, f"10.0.0.{n + 1}")


def lab_cluster() -> list[Host]:
    """What inventories/lab.py gives for the local lab: CPU-only hosts, a registry over HTTP."""
    common = {
        "ssh_user": "root",
        "ssh_port": 22,
        "ray_image": "172.28.0.2:5000/rayrig/ray-cpu:2.60.0",
        "ray_num_gpus": 0,
        "ray_shm_size": "2g",
        "ray_ulimit_nofile": 16384,
        "docker_insecure_registries": ["172.28.0.2:5000"],
        "docker_source": "distro",
    }
    return [
        ("rayrig-lab-1", {**common, "ray_role": "head", "ray_node_ip": "172.28.0.11"}, "172.28.0.11"),
        ("rayrig-lab-2", {**common, "ray_node_ip": "172.28.0.12", "ray_num_cpus": 2}, "172.28.0.12"),
        ("rayrig-lab-3", {**common, "ray_node_ip": "172.28.0.13", "ray_num_cpus": 2}, "172.28.0.13"),
    ]


def prod_cluster() -> list[Host]:
    """Like inventories/prod.py: a GPU lab with a private registry and a login."""
    common = {
        "ssh_user": "ubuntu",
        "ssh_key": "~/.ssh/id_ed25519",
        "_sudo": True,
        "ray_image": "registry.lab.example:5000/ml/ray-torch:2.60.0-cu128",
        "docker_registry_mirrors": ["https://mirror.lab.example"],
        "docker_registry_auth": {"registry": "registry.lab.example:5000", "username": "ray", "password": "s3cret"},
        "docker_source": "docker",
        "docker_log_opts": {"max-size": "50m"},
        "ray_image_pull": "always",
        "ray_ports": {"metrics_export": 9200},  # partial: the other ports keep their defaults
    }
    return [
        ("gpu-head.lab.example", {**common, "ray_role": "head", "ray_node_ip": "192.0.2.10", "ray_num_gpus": 0},
         "192.0.2.10"),
        ("gpu-01.lab.example", {**common, "ray_node_ip": "192.0.2.11", "ray_num_gpus": 8,
                                "ray_object_store_bytes": 200 * 2**30}, "192.0.2.11"),
        ("gpu-02.lab.example", {**common, "ray_node_ip": "192.0.2.12", "ray_num_gpus": 8}, "192.0.2.12"),
        ("gpu-03.lab.example", {**common, "ray_node_ip": "192.0.2.13", "ray_num_gpus": 4,
                                "ray_resources": {"nvme": 1, "fast_disk.v2": 2}}, "192.0.2.13"),
    ]  # fmt: skip


# --- Valid inventories ----------------------------------------------------------------------------


def test_lab_like_inventory_is_valid():
    assert validate_cluster(lab_cluster()) == []


def test_prod_like_inventory_is_valid():
    assert validate_cluster(prod_cluster()) == []


def test_ports_set_on_one_host_only_must_match_the_others():
    hosts = [
        (n, {k: v for k, v in d.items() if k != "ray_ports" or n == "gpu-02.lab.example"}, a)
        for n, d, a in prod_cluster()
    ]
    p = only(validate_cluster(hosts))
    assert (p.key, p.expected) == ("ray_ports", "the same value on every host of the cluster")
    assert "gpu-02.lab.example: {" in p.value and "'metrics_export': 9200" in p.value


def test_single_head_cluster_with_defaults_only_is_valid():
    assert validate_cluster([("solo", {"ray_role": "head"}, "127.0.0.1")]) == []


def test_defaults_themselves_validate():
    assert validate_host("h", settings.defaults()) == []
    assert schema._VALIDATOR.is_valid(settings.defaults())


def test_every_default_has_a_schema_entry_and_every_schema_entry_a_default():
    defaults = set(settings.defaults())
    properties = set(schema.PROPERTIES)
    assert defaults - properties == set(), "keys in group_data/all.py that the schema does not know"
    assert properties - defaults == set(), "schema keys without a default in group_data/all.py"


def test_every_schema_entry_says_what_it_expects():
    assert [k for k, v in schema.PROPERTIES.items() if not v.get("x-expected")] == []


def test_non_rayrig_keys_are_left_alone():
    hosts = [head(ssh_user="ubuntu", _sudo=True, fake_responses={}, my_team="ml")]
    assert validate_cluster(hosts) == []


# --- Invalid inventories: one mistake each ------------------------------------------------------------


def only(problems: list[Problem]) -> Problem:
    assert len(problems) == 1, [str(p) for p in problems]
    return problems[0]


def test_two_heads():
    p = only(validate_cluster([head(), ("head-2", {"ray_role": "head"}, "10.0.0.2"), worker(2)]))
    assert (p.host, p.key, p.value) == ("head-1, head-2", "ray_role", "head")
    assert p.expected == 'exactly one head; the others must be "worker"'


def test_no_head():
    p = only(validate_cluster([worker(1), worker(2)]))
    assert (p.host, p.key, p.value) == ("worker-1, worker-2", "ray_role", "worker")
    assert p.expected == 'exactly one host with ray_role = "head"'


def test_duplicate_addresses():
    p = only(validate_cluster([head(), ("worker-1", {}, "10.0.0.1"), worker(2)]))
    assert (p.host, p.key, p.value) == ("head-1, worker-1", "ray_node_ip", "10.0.0.1")
    assert p.expected == "a different address for every host"


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.1.1", "localhost", "::1", "@fake/head-1"])
def test_head_address_the_workers_cannot_reach(address):
    p = only(validate_cluster([("head-1", {"ray_role": "head"}, address), worker(1)]))
    assert (p.host, p.key, p.value) == ("head-1", "ray_node_ip", address)
    assert "an address the workers can reach" in p.expected


@pytest.mark.parametrize("value", [-1, "all", 1.5, "8", True, None])
def test_bad_gpu_count(value):
    p = only(validate_cluster([head(ray_num_gpus=value)]))
    assert (p.host, p.key, p.value) == ("head-1", "ray_num_gpus", value)
    assert p.expected == 'a non-negative integer or "auto"'


@pytest.mark.parametrize("value", [2.5, "16", -4, "all"])
def test_bad_cpu_count(value):
    p = only(validate_cluster([head(), worker(1, ray_num_cpus=value)]))
    assert (p.host, p.key, p.value) == ("worker-1", "ray_num_cpus", value)
    assert p.expected == 'a non-negative integer or "auto"'


def test_misspelled_key_gets_a_suggestion():
    p = only(validate_cluster([head(), worker(1, ray_num_gpu=2)]))
    assert (p.host, p.key, p.value) == ("worker-1", "ray_num_gpu", 2)
    assert p.expected == "a known rayrig key (did you mean 'ray_num_gpus'?)"


def test_unknown_key_without_a_close_match():
    p = only(validate_cluster([head(docker_flux_capacitor=True)]))
    assert (p.key, p.expected) == ("docker_flux_capacitor", "a known rayrig key")


@pytest.mark.parametrize("port", [0, 70000, "6379"])
def test_port_out_of_range(port):
    p = only(validate_cluster([head(ray_ports={"gcs": port})]))
    assert (p.host, p.key, p.value) == ("head-1", "ray_ports['gcs']", port)
    assert p.expected == "a port number 1-65535"


def test_port_clash():
    p = only(validate_cluster([head(ray_ports={"dashboard": 6379})]))
    assert (p.key, p.value) == ("ray_ports['dashboard']", 6379)
    assert p.expected == "a port not already used by 'gcs'"


def test_port_inside_the_worker_range():
    p = only(validate_cluster([head(ray_ports={"metrics_export": 10500})]))
    assert (p.key, p.value) == ("ray_ports['metrics_export']", 10500)
    assert p.expected == "a port outside the worker range 10002-10999"


def test_worker_range_upside_down():
    p = only(validate_cluster([head(ray_ports={"worker_min": 12000, "worker_max": 11000})]))
    assert (p.key, p.value) == ("ray_ports", {"worker_min": 12000, "worker_max": 11000})
    assert p.expected == "worker_min below worker_max (Ray's rule)"


def test_unknown_port_name():
    p = only(validate_cluster([head(ray_ports={"gcs_port": 7000})]))
    assert p.key == "ray_ports"
    assert "known port names only" in p.expected
    assert "'gcs_port'" in p.expected
    assert "gcs, client_server, dashboard" in p.expected


def test_ray_version_differs_across_hosts():
    p = only(validate_cluster([head(), worker(1), worker(2, ray_version="2.59.0")]))
    assert p.key == "ray_version"
    assert "head-1, worker-1: '2.60.0'" in p.value
    assert "worker-2: '2.59.0'" in p.value
    assert p.expected == "the same value on every host of the cluster"


def test_ray_image_differs_across_hosts():
    p = only(validate_cluster([head(), worker(1, ray_image="rayproject/ray:2.60.0-py311-cpu")]))
    assert p.key == "ray_image"
    assert "worker-1: 'rayproject/ray:2.60.0-py311-cpu'" in p.value


@pytest.mark.parametrize("value", ["16 GB", "16gb", "", 16, "lots", "0", "00g", "16g\n"])
def test_bad_shm_size(value):
    p = only(validate_cluster([head(ray_shm_size=value)]))
    assert (p.key, p.value) == ("ray_shm_size", value)
    assert p.expected == '"auto" or a size above 0 such as "16g"'


def test_bad_image_pull_policy():
    p = only(validate_cluster([head(ray_image_pull="sometimes")]))
    assert (p.key, p.value) == ("ray_image_pull", "sometimes")
    assert p.expected == '"missing" or "always"'


@pytest.mark.parametrize(
    "auth",
    [
        {"registry": "r.example:5000", "username": "ray"},  # no password
        {"registry": "r.example:5000", "user": "ray", "password": "pw-SECRET"},  # wrong key
        {"registry": "", "username": "ray", "password": "pw-SECRET"},
        ["r.example:5000", "ray", "pw-SECRET"],
    ],
    ids=["missing-password", "wrong-key", "empty-registry", "list"],
)
def test_bad_registry_auth_shape(auth):
    p = only(validate_cluster([head(docker_registry_auth=auth)]))
    assert p.key == "docker_registry_auth"
    assert p.expected == "null or {registry (host[:port]), username (without ':'), password}, each one line"
    assert "pw-SECRET" not in str(p)


@pytest.mark.parametrize(
    "key,auth",
    [
        ("docker_registry_auth", {"registry": "r.example:5000", "username": "ray", "pasword": "pw-SECRET"}),
        ("docker_registry_auth", "ray:pw-SECRET"),
        ("docker_registry_auht", {"registry": "r.example:5000", "username": "ray", "password": "pw-SECRET"}),
    ],
    ids=["misspelled-password", "string", "misspelled-key"],
)
def test_secrets_never_appear_in_problems(key, auth):
    problems = validate_cluster([head(**{key: auth})])
    assert problems
    with pytest.raises(InventoryError) as error:
        raise InventoryError(problems)
    assert "pw-SECRET" not in str(error.value)
    assert "r.example:5000" in str(error.value) or key == "docker_registry_auth"


@pytest.mark.parametrize(
    "key,value,expected",
    [
        ("ray_role", "master", '"head" or "worker"'),
        (
            "ray_resources",
            {"nvme": -1},
            "a mapping of resource name to a whole number of at least 0 (Ray refuses fractions)",
        ),
        (
            "ray_resources",
            {"bad name": 1},
            "a mapping of resource name to a whole number of at least 0 (Ray refuses fractions)",
        ),
        ("ray_object_store_bytes", 1024, "null or a number of bytes of at least 75 MiB (Ray's minimum)"),
        ("ray_version", "2.60", 'a Ray version such as "2.60.0"'),
        ("ray_image", "ray project/ray", "an image reference (registry/name:tag or @sha256:digest)"),
        ("ray_ulimit_nofile", 100, "null (the image's default) or an integer of at least 1024"),
        ("docker_source", "snap", '"distro" or "docker"'),
        ("docker_registry_mirrors", ["mirror.lab"], "a list of http(s) URLs"),
        (
            "docker_insecure_registries",
            "10.0.0.5:5000",
            'a list of registries (host:port) or networks, e.g. ["10.0.0.5:5000"]',
        ),
        ("docker_log_opts", {"max-file": 3}, "a mapping of json-file log options to strings"),
        ("base_extra_packages", ["htop", ""], EXPECTED_PACKAGES),
        ("base_wait_timeout_s", -1, "a non-negative number of seconds"),
        ("checks_timeout_s", 10, "a number of seconds of at least 30"),
        ("checks_peer_timeout_factor", 1, "a number of at least 1.5 (times the peers' median)"),
        ("checks_peer_timeout_factor", "3", "a number of at least 1.5 (times the peers' median)"),
        ("checks_peer_timeout_factor", True, "a number of at least 1.5 (times the peers' median)"),
        ("checks_node_timeout_s", 5, "a number of seconds of at least 10"),
        ("checks_node_timeout_s", 30.5, "a number of seconds of at least 10"),
    ],
)
def test_more_bad_values(key, value, expected):
    problems = validate_cluster([head(**{key: value})])
    assert [(p.host, p.key.split("[")[0], p.expected) for p in problems] == [("head-1", key, expected)]


def test_every_problem_is_reported_at_once():
    problems = validate_cluster([head(ray_num_gpus=-1), worker(1, ray_num_gpu=2), worker(2, ray_image_pull="x")])
    assert {(p.host, p.key) for p in problems} == {
        ("head-1", "ray_num_gpus"),
        ("worker-1", "ray_num_gpu"),
        ("worker-2", "ray_image_pull"),
    }


def test_problem_reads_host_key_value_expected():
    p = Problem("gpu-01", "ray_num_gpus", -1, 'a non-negative integer or "auto"')
    assert str(p) == 'host gpu-01: ray_num_gpus = -1: expected a non-negative integer or "auto"'


def test_validation_does_not_modify_the_data():
    hosts = prod_cluster()
    before = copy.deepcopy(hosts)
    validate_cluster(hosts)
    assert hosts == before


# --- check_inventory on a pyinfra inventory ---------------------------------------------------------


def test_check_inventory_uses_node_addresses_and_raises_with_every_problem():
    inventory = Inventory(
        (
            [
                ("@fake/head", {"ray_role": "head", "ray_node_ip": "10.0.0.1"}),
                ("@fake/w1", {"ray_node_ip": "10.0.0.1"}),
                ("@fake/w2", {"ray_node_ip": "10.0.0.3", "ray_num_gpus": -2}),
            ],
            {},
        )
    )
    with pytest.raises(InventoryError) as error:
        check_inventory(inventory)
    message = str(error.value)
    assert message.startswith("invalid inventory data (1 problem):")
    assert "host @fake/w2: ray_num_gpus = -2" in message
    assert "Nothing was changed on any host." in message
    # Cross-host rules wait for every host's own data to be valid; fix it and the duplicate shows.
    inventory = Inventory(
        (
            [
                ("@fake/head", {"ray_role": "head", "ray_node_ip": "10.0.0.1"}),
                ("@fake/w1", {"ray_node_ip": "10.0.0.1"}),
            ],
            {},
        )
    )
    with pytest.raises(InventoryError, match=r"host @fake/head, @fake/w1: ray_node_ip = '10.0.0.1'"):
        check_inventory(inventory)


def test_check_inventory_passes_a_good_inventory():
    inventory = Inventory(
        (
            [
                ("@fake/head", {"ray_role": "head", "ray_node_ip": "10.0.0.1"}),
                ("@fake/w1", {"ray_node_ip": "10.0.0.2"}),
            ],
            {},
        )
    )
    check_inventory(inventory)


# --- Security and storage -------------------------------------------------------------------------

NFS_MOUNT = {"server": "10.0.0.1", "export": "/srv/shared", "path": "/mnt/shared"}
S3_MOUNT = {"bucket": "datasets", "path": "/mnt/datasets"}
S3_KEYS = {"access_key_id": "AKIDEXAMPLE", "secret_access_key": "s3-SECRET-value"}


def test_security_and_storage_settings_in_use_are_valid():
    data = {
        "firewall_admin_cidrs": ["203.0.113.0/24", "2001:db8::/32", "198.51.100.7"],
        "firewall_extra_tcp_ports": [8000, "9000-9010"],
        "storage_nfs_server": "head-1",
        "storage_nfs_exports": [
            {"path": "/srv/shared"},
            {"path": "/srv/ckpt", "options": "rw,sync,no_root_squash", "allow_unsafe": True},
        ],
        "storage_nfs_mounts": [NFS_MOUNT, {**NFS_MOUNT, "server": "head-1", "path": "/mnt/my-ckpt"}],
        "storage_s3_mounts": [
            {**S3_MOUNT, "read_only": True, "endpoint_url": "http://10.0.0.9:9000", "path_style": True},
            {"bucket": "ckpt.team-a", "path": "/data/ckpt", "prefix": "runs/", "driver": "mountpoint-s3"},
        ],
        "storage_s3_credentials": S3_KEYS,
        "ray_auth": "none",
        "ray_auth_allow_none": True,
    }
    assert validate_cluster([head(**data), worker(1, **data)]) == []


@pytest.mark.parametrize(
    "key,value,label,expected",
    [
        ("ray_auth", "tokens", "ray_auth", '"token" or "none"'),
        ("ray_env", {"RAY_AUTH_MODE": "disabled"}, "ray_env['RAY_AUTH_MODE']", "no RAY_AUTH_* variable"),
        ("firewall_admin_cidrs", ["10.0.0.0/33"], "firewall_admin_cidrs[0]", "an address or network"),
        ("firewall_admin_cidrs", "10.0.0.0/8", "firewall_admin_cidrs", "a list of addresses or networks"),
        ("firewall_extra_tcp_ports", [70000], "firewall_extra_tcp_ports", "a list of ports 1-65535"),
        ("firewall_extra_tcp_ports", ["9010-9000"], "firewall_extra_tcp_ports[0]", "a range first-last"),
        ("storage_nfs_server", "nas-1", "storage_nfs_server", "the name of a host of this inventory"),
        ("storage_nfs_mounts", [{**NFS_MOUNT, "path": "mnt/shared"}], "storage_nfs_mounts", "a list of {"),
        ("storage_nfs_mounts", [{"export": "/srv", "path": "/mnt/x"}], "storage_nfs_mounts", "a list of {"),
        ("storage_nfs_mounts", [{**NFS_MOUNT, "path": "/etc/shared"}], "storage_nfs_mounts[0]['path']",
         "a mount point outside the system's folders"),
        ("storage_nfs_mounts", [NFS_MOUNT, {**NFS_MOUNT, "path": "/mnt/shared/sub"}],
         "storage_nfs_mounts[1]['path']", "a mount point apart from /mnt/shared"),
        ("storage_s3_mounts", [{**S3_MOUNT, "bucket": "Bad_Bucket"}], "storage_s3_mounts", "a list of {"),
        ("storage_s3_mounts", [{**S3_MOUNT, "path": "/mnt/a b"}], "storage_s3_mounts", "a list of {"),
        ("storage_s3_mounts", [{**S3_MOUNT, "endpoint_url": "http://10.0.0.9:9000"}],
         "storage_s3_mounts[0]['endpoint_url']", "storage_s3_credentials set too"),
        ("storage_s3_credentials", {"access_key_id": "AKID"}, "storage_s3_credentials", "null (the EC2"),
        ("storage_shared_dir", "/mnt/elsewhere", "storage_shared_dir", "a writable shared mount point"),
        ("storage_shared_dir", "mnt/shared", "storage_shared_dir", "null or a shared mount point"),
    ],
)  # fmt: skip
def test_bad_security_and_storage_values(key, value, label, expected):
    problems = validate_cluster([head(**{key: value})])
    assert len(problems) == 1, problems
    assert problems[0].key.startswith(label) and problems[0].expected.startswith(expected), problems[0]


def test_the_shared_dir_is_on_a_writable_mount():
    read_only = {"bucket": "datasets", "path": "/mnt/datasets", "read_only": True}
    assert validate_cluster([head(storage_nfs_mounts=[NFS_MOUNT], storage_shared_dir="/mnt/shared/results")]) == []
    p = only(validate_cluster([head(storage_s3_mounts=[read_only], storage_shared_dir="/mnt/datasets/out")]))
    assert (p.key, p.value) == ("storage_shared_dir", "/mnt/datasets/out")
    p = only(validate_cluster([head(storage_nfs_mounts=[NFS_MOUNT], storage_shared_dir="/mnt/sharedx")]))
    assert p.expected == "a writable shared mount point, or a folder under one"


def test_an_nfs_server_role_needs_exports():
    p = only(validate_cluster([head(storage_nfs_server="head-1")]))
    assert (p.key, p.expected) == ("storage_nfs_exports", "at least one export for storage_nfs_server")


def test_nfs_and_s3_mounts_may_not_share_a_mount_point():
    problems = validate_cluster(
        [
            head(
                storage_nfs_mounts=[NFS_MOUNT],
                storage_s3_mounts=[{**S3_MOUNT, "path": "/mnt/shared"}],
                storage_s3_credentials=S3_KEYS,
            )
        ]
    )
    assert [p.key for p in problems] == ["storage_s3_mounts[0]['path']"]


def test_s3_secrets_never_appear_in_problems():
    problems = validate_cluster([head(storage_s3_credentials={**S3_KEYS, "extra": 1})])
    assert problems
    assert "s3-SECRET-value" not in str(InventoryError(problems))


def test_auth_and_the_nfs_server_are_the_same_on_every_host():
    problems = validate_cluster([head(ray_auth="none", ray_auth_allow_none=True), worker(1, ray_auth_allow_none=True)])
    assert [(p.key, p.expected) for p in problems] == [("ray_auth", "the same value on every host of the cluster")]


@pytest.mark.parametrize("value", ["10.0.0.1;reboot", "$(id)", "192.168.1.0/24\n", "-1.2.3.4", "fd00::1%eth0", ""])
def test_member_cidrs_take_addresses_and_networks_only(value):
    assert validate_host("h", {"firewall_member_cidrs": ["192.168.100.0/24", "fd00:1b::/64", "10.1.2.3"]}) == []
    [problem] = validate_host("h", {"firewall_member_cidrs": ["192.168.100.0/24", value]})
    assert problem.key == "firewall_member_cidrs[1]"
    assert 'expected a list of IP addresses or networks such as "192.168.100.0/24"' in str(problem)


@pytest.mark.parametrize("value", ["sometimes", "Quick", "", True, None])
def test_checks_mode_takes_auto_full_or_quick(value):
    problems = validate_cluster([head(checks_mode=value)])
    assert [(p.host, p.key, p.expected) for p in problems] == [("head-1", "checks_mode", '"auto", "full" or "quick"')]


def test_checks_mode_is_the_same_on_every_host():
    p = only(validate_cluster([head(checks_mode="quick"), worker(1)]))
    assert (p.key, p.expected) == ("checks_mode", "the same value on every host of the cluster")
    assert "head-1: 'quick'" in p.value and "worker-1: 'auto'" in p.value


@pytest.mark.parametrize("key,value", [("checks_peer_timeout_factor", 1.5), ("checks_peer_timeout_factor", 4),
                                       ("checks_node_timeout_s", 10), ("checks_timeout_s", 30)])  # fmt: skip
def test_the_checks_bounds_take_their_smallest_sensible_values(key, value):
    assert validate_cluster([head(**{key: value})]) == []


@pytest.mark.parametrize("key", ["checks_timeout_s", "checks_peer_timeout_factor", "checks_node_timeout_s"])
def test_hostile_strings_in_the_checks_bounds_are_refused_naming_the_key(key):
    for value in HOSTILE:
        problems = validate_cluster([head(**{key: value})])
        assert [(p.host, p.key) for p in problems] == [("head-1", key)], value  # before any operation


@pytest.mark.parametrize("value", HOSTILE, ids=[repr(v) for v in HOSTILE])
def test_a_hostile_host_name_is_refused_naming_it_and_nothing_else(value):
    problems = validate_cluster([head(), (value, {"ray_role": "worker"}, "10.0.0.2")])
    assert [(p.host, p.key, p.value) for p in problems] == [(repr(value), "the host's name", value)]
    assert "expected an IP address, a host name" in str(problems[0])


@pytest.mark.parametrize("name", ["gpu-01.lab.example", "10.0.0.7", "fd00::7", "@fake/worker-3", "@local"])
def test_host_names_addresses_and_connector_names_pass(name):
    assert validate_cluster([head(), (name, {"ray_role": "worker"}, "10.0.0.2")]) == []
