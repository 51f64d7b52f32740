"""The pure helpers behind the deploy steps: config merging, package choice, OS
detection, the ray-node command line and its hash, and the facts' parsers."""

from __future__ import annotations

import base64
import copy
import json
import shlex
from types import SimpleNamespace

import pytest
from pyinfra.context import ctx_host

from deploy import image, platform, ray_node, settings
from deploy.docker import REPO_PACKAGES, DaemonConfigError, engine_packages, merge_daemon_config, parse_daemon_config
from deploy.facts import DockerContainer, DockerImageId, FileText, HostInfo, NvidiaGpus
from tests.plan.fakehosts import H100, OS_RELEASE

# --- daemon.json ------------------------------------------------------------------------------------

NVIDIA = {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}, "default-runtime": "nvidia"}


def docker_settings(**changes):
    return {**settings.defaults(), **changes}


def test_merge_keeps_keys_other_tools_wrote():
    merged = merge_daemon_config(NVIDIA, docker_settings(docker_insecure_registries=["10.0.0.5:5000"]))
    assert merged["runtimes"] == NVIDIA["runtimes"]
    assert merged["default-runtime"] == "nvidia"
    assert merged["insecure-registries"] == ["10.0.0.5:5000"]
    assert merged["log-driver"] == "json-file"
    assert merged["log-opts"] == {"max-size": "100m", "max-file": "3"}


def test_merge_unions_lists_without_duplicates():
    current = {"insecure-registries": ["a:5000", "b:5000"], "registry-mirrors": ["https://m1"]}
    merged = merge_daemon_config(
        current,
        docker_settings(docker_insecure_registries=["b:5000", "c:5000"], docker_registry_mirrors=["https://m1"]),
    )
    assert merged["insecure-registries"] == ["a:5000", "b:5000", "c:5000"]
    assert merged["registry-mirrors"] == ["https://m1"]


def test_merge_is_idempotent_and_does_not_touch_its_input():
    current = copy.deepcopy(NVIDIA)
    s = docker_settings(docker_insecure_registries=["r:5000"], docker_registry_mirrors=["https://m"])
    once = merge_daemon_config(current, s)
    assert current == NVIDIA
    assert merge_daemon_config(once, s) == once


def test_merge_keeps_other_log_opts_and_lets_daemon_options_win():
    current = {"log-opts": {"labels": "team", "max-size": "10m"}, "live-restore": False}
    merged = merge_daemon_config(current, docker_settings(docker_daemon_options={"live-restore": True}))
    assert merged["log-opts"] == {"labels": "team", "max-size": "100m", "max-file": "3"}
    assert merged["live-restore"] is True


def test_merge_with_nothing_to_add_leaves_the_file_as_is():
    s = docker_settings(docker_log_opts={}, docker_insecure_registries=[], docker_registry_mirrors=[])
    assert merge_daemon_config(NVIDIA, s) == NVIDIA
    assert merge_daemon_config({}, s) == {}


@pytest.fixture
def on_host():
    with ctx_host.use(SimpleNamespace(name="gpu-01.lab.example")):
        yield


@pytest.mark.parametrize("text", [None, "", "  \n"])
def test_parse_absent_or_blank_daemon_json(text, on_host):
    assert parse_daemon_config(text) == {}


def test_parse_daemon_json(on_host):
    assert parse_daemon_config(json.dumps(NVIDIA, indent=2)) == NVIDIA


@pytest.mark.parametrize(
    "text,reason",
    [('{"runtimes": ', "is not valid JSON"), ('["not", "an", "object"]', "is not a JSON object"), ("42", "object")],
)
def test_parse_daemon_json_errors_name_the_file_and_host(text, reason, on_host):
    with pytest.raises(DaemonConfigError) as error:
        parse_daemon_config(text)
    assert "/etc/docker/daemon.json on gpu-01.lab.example" in str(error.value)
    assert reason in str(error.value)
    assert "fix or remove it" in str(error.value)


# --- Platforms ------------------------------------------------------------------------------------


def host_info(os_name: str, **extra: str) -> dict:
    lines = [*OS_RELEASE[os_name], "RAYRIG_ARCH=x86_64", "RAYRIG_MEM_KB=16384000", "RAYRIG_NOFILE_HARD=1048576"]
    return HostInfo().process(lines + [f"{k}={v}" for k, v in extra.items()])


@pytest.mark.parametrize(
    "os_name,family,codename,base,repo_path",
    [
        ("ubuntu22", "apt", "jammy", ("ca-certificates", "curl", "gnupg"), "ubuntu"),
        ("ubuntu24", "apt", "noble", ("ca-certificates", "curl", "gnupg"), "ubuntu"),
        ("debian12", "apt", "bookworm", ("ca-certificates", "curl", "gnupg"), "debian"),
        ("rocky9", "dnf", "", ("ca-certificates", "curl", "gnupg2"), "centos"),
        ("al2023", "dnf", "", ("ca-certificates", "curl-minimal", "gnupg2-minimal"), ""),
    ],
)
def test_detect_each_supported_os(os_name, family, codename, base, repo_path):
    plat = platform.detect(host_info(os_name), "h1")
    assert (plat.family, plat.codename, plat.base_packages, plat.docker_repo_path) == (
        family,
        codename,
        base,
        repo_path,
    )


@pytest.mark.parametrize(
    "info,found",
    [
        (host_info("centos7"), "'centos 7'"),
        ({"id": "ubuntu", "version_id": "20.04"}, "'ubuntu 20.04'"),
        ({"id": "amzn", "version_id": "2"}, "'amzn 2'"),
        ({}, "'unknown'"),
    ],
)
def test_detect_unsupported_os_names_the_host(info, found):
    with pytest.raises(platform.UnsupportedPlatform) as error:
        platform.detect(info, "old-box.lab.example")
    assert str(error.value).startswith(f"host old-box.lab.example: unsupported OS {found}")
    assert platform.SUPPORTED in str(error.value)


@pytest.mark.parametrize(
    "os_name,source,packages,from_repo",
    [
        ("ubuntu22", "distro", ("docker.io",), False),
        ("ubuntu22", "docker", REPO_PACKAGES, True),
        ("debian12", "distro", ("docker.io",), False),
        ("debian12", "docker", REPO_PACKAGES, True),
        ("rocky9", "distro", REPO_PACKAGES, True),  # RHEL 9 ships podman, not Docker
        ("rocky9", "docker", REPO_PACKAGES, True),
        ("al2023", "distro", ("docker",), False),
        ("al2023", "docker", ("docker",), False),  # no Docker CE repository for Amazon Linux
    ],
)
def test_engine_packages(os_name, source, packages, from_repo):
    assert engine_packages(platform.detect(host_info(os_name)), source) == (packages, from_repo)


def test_repo_packages_are_dockers_own():
    assert REPO_PACKAGES == ("docker-ce", "docker-ce-cli", "containerd.io", "docker-buildx-plugin")


# --- Facts' parsers ---------------------------------------------------------------------------------


def test_host_info_reads_memory_arch_and_limits():
    info = host_info("ubuntu22")
    assert info["arch"] == "x86_64"
    assert info["mem_bytes"] == 16384000 * 1024
    assert info["nofile_hard"] == 1048576
    unlimited = HostInfo().process([*OS_RELEASE["rocky9"], "RAYRIG_NOFILE_HARD=unlimited", "RAYRIG_MEM_KB="])
    assert unlimited["nofile_hard"] is None and unlimited["mem_bytes"] is None
    assert unlimited["id"] == "rocky" and unlimited["version_id"] == "9.4"


def test_nvidia_gpus_with_a_driver():
    gpus = NvidiaGpus().process(["PCI_GPUS=8", *[f"GPU={H100}"] * 8])
    assert gpus["pci_count"] == 8
    assert gpus["driver"]["count"] == 8
    assert gpus["driver"]["models"] == ["NVIDIA H100 80GB HBM3"] * 8
    assert gpus["driver"]["driver_version"] == "550.54.15"
    assert gpus["driver"]["memory_mib"] == [81559] * 8


@pytest.mark.parametrize(
    "lines", [["PCI_GPUS=4"], ["PCI_GPUS=4", "SMI_FAILED"], ["PCI_GPUS=4", f"GPU={H100}", "SMI_FAILED"]]
)
def test_nvidia_gpus_without_a_working_driver(lines):
    assert NvidiaGpus().process(lines) == {"pci_count": 4, "driver": None}


def test_docker_facts():
    assert DockerImageId().process(["sha256:" + "a" * 64]) == "sha256:" + "a" * 64
    assert DockerImageId().process([]) is None
    assert DockerContainer().process([]) is None
    container = DockerContainer().process(
        [json.dumps({"Id": "abc", "State": {"Running": True}, "Config": {"Image": "img", "Labels": {"a": "b"}}})]
    )
    assert container == {"id": "abc", "running": True, "restarting": False, "image": "img", "labels": {"a": "b"}}
    assert FileText().process(["ABSENT"]) is None
    assert FileText().process(["EXISTS", "{", "}"]) == "{\n}"


# --- The ray-node container -------------------------------------------------------------------------


def ray_settings(**changes):
    return settings.merge({"ray_role": "worker", **changes})


def build(s=None, role="worker", node_ip="10.0.0.2", head="10.0.0.1", gpus=0, shm="16g", nofile=65536):
    s = s or ray_settings()
    start = ray_node.ray_start_args(s, role, node_ip, head, gpus)
    return ray_node.docker_run_args(s, role, start, gpus, shm, nofile)


def test_head_start_args():
    args = ray_node.ray_start_args(ray_settings(ray_num_cpus=8), "head", "10.0.0.1", "10.0.0.1", 0)
    assert args[:3] == ["ray", "start", "--block"]
    for flag in (
        "--head",
        "--port=6379",
        "--ray-client-server-port=10001",
        "--dashboard-host=127.0.0.1",
        "--dashboard-port=8265",
        "--num-gpus=0",
        "--num-cpus=8",
        "--node-ip-address=10.0.0.1",
        "--min-worker-port=10002",
        "--max-worker-port=10999",
    ):
        assert flag in args
    assert not [a for a in args if a.startswith("--address")]


def test_worker_start_args():
    s = ray_settings(ray_resources={"nvme": 1, "a100": 0.5}, ray_object_store_bytes=10 * 2**30)
    args = ray_node.ray_start_args(s, "worker", "10.0.0.2", "10.0.0.1", 8)
    assert "--address=10.0.0.1:6379" in args
    assert "--head" not in args
    assert "--num-gpus=8" in args
    assert '--resources={"a100":0.5,"nvme":1}' in args
    assert f"--object-store-memory={10 * 2**30}" in args
    assert not [a for a in args if a.startswith(("--num-cpus", "--dashboard-host", "--port="))]


def test_docker_args_pass_gpus_only_when_there_are_some():
    assert "--gpus=all" in build(gpus=8)
    assert "--gpus=all" not in build(gpus=0)
    args = build()
    assert args[:2] == ["docker", "create"]
    assert "--network=host" in args and "--shm-size=16g" in args and "--ulimit=nofile=65536:65536" in args
    assert not [a for a in build(nofile=None) if a.startswith("--ulimit")]


def test_config_hash_is_stable():
    a = build(ray_settings(ray_resources={"x": 1, "y": 2}))
    b = build(ray_settings(ray_resources={"y": 2, "x": 1}))
    assert ray_node.config_hash(a) == ray_node.config_hash(b) == ray_node.config_hash(list(a))
    assert len(ray_node.config_hash(a)) == 16
    int(ray_node.config_hash(a), 16)


@pytest.mark.parametrize(
    "change",
    [
        {"ray_num_cpus": 4},
        {"ray_resources": {"nvme": 1}},
        {"ray_object_store_bytes": 2**30},
        {"ray_image": "rayproject/ray:2.60.0-py311-cpu"},
        {"ray_container_name": "ray-node-2"},
        {"ray_dashboard_host": "0.0.0.0"},
        *(
            {"ray_ports": {name: 40000}}
            for name in (
                "gcs",
                "node_manager",
                "object_manager",
                "runtime_env_agent",
                "dashboard_agent_grpc",
                "dashboard_agent_http",
                "metrics_export",
                "worker_min",
                "worker_max",
            )
        ),
    ],
    ids=lambda c: next(iter(c)) + (f"-{next(iter(c['ray_ports']))}" if "ray_ports" in c else ""),
)
def test_config_hash_changes_with_any_setting(change):
    base = build(ray_settings(), role="head" if "ray_dashboard_host" in change else "worker")
    changed = build(ray_settings(**change), role="head" if "ray_dashboard_host" in change else "worker")
    assert ray_node.config_hash(changed) != ray_node.config_hash(base)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"role": "head"},
        {"node_ip": "10.0.0.9"},
        {"head": "10.0.0.99"},
        {"gpus": 8},
        {"shm": "8g"},
        {"nofile": 20000},
        {"nofile": None},
    ],
)
def test_config_hash_changes_with_any_input(kwargs):
    assert ray_node.config_hash(build(**kwargs)) != ray_node.config_hash(build())


@pytest.mark.parametrize("name", ["client_server", "dashboard"])
def test_head_only_ports_change_the_heads_hash(name):
    base = build(ray_settings(), role="head")
    changed = build(ray_settings(ray_ports={name: 40000}), role="head")
    assert ray_node.config_hash(changed) != ray_node.config_hash(base)


def test_hash_label_goes_before_the_image_and_matches_the_hash():
    args = build()
    labelled = ray_node.with_hash_label(args)
    label = f"--label={ray_node.HASH_LABEL}={ray_node.config_hash(args)}"
    assert labelled == args[:2] + [label] + args[2:]
    assert labelled.index(label) < labelled.index(settings.defaults()["ray_image"])


def test_is_current():
    args = build()
    labels = {ray_node.HASH_LABEL: ray_node.config_hash(args)}
    alive = {"running": True, "restarting": False, "labels": labels}
    assert ray_node.is_current(alive, args)
    assert ray_node.is_current({**alive, "running": False, "restarting": True}, args)
    assert not ray_node.is_current({**alive, "running": False}, args)
    assert not ray_node.is_current({**alive, "labels": {ray_node.HASH_LABEL: "0" * 16}}, args)
    assert not ray_node.is_current({**alive, "labels": {}}, args)
    assert not ray_node.is_current(None, args)


@pytest.mark.parametrize(
    "setting,mem,expected",
    [
        ("16g", 2**40, "16g"),
        ("auto", 64 * 2**30, f"{int(64 * 2**30 * 0.3) // 2**20}m"),
        ("auto", None, "2g"),
        ("auto", 2**20, "64m"),
    ],
)
def test_shm_size(setting, mem, expected):
    assert ray_node.shm_size(setting, mem) == expected


@pytest.mark.parametrize(
    "setting,hard,expected",
    [(65536, 20000, 20000), (65536, None, 65536), (None, 20000, None), (1024, 1048576, 1024), (65536, 65536, 65536)],
)
def test_nofile_limit(setting, hard, expected):
    assert ray_node.nofile_limit(setting, hard) == expected


def gpus_fact(pci: int, driver: int | None) -> dict:
    return {"pci_count": pci, "driver": None if driver is None else {"count": driver}}


@pytest.mark.parametrize(
    "declared,fact,expected",
    [
        ("auto", gpus_fact(8, 8), 8),
        ("auto", gpus_fact(8, None), 8),
        ("auto", gpus_fact(0, None), 0),
        (8, gpus_fact(8, 8), 8),
        (0, gpus_fact(0, None), 0),
        ("auto", gpus_fact(8, 7), 7),
    ],
)
def test_resolve_num_gpus(declared, fact, expected):
    assert ray_node.resolve_num_gpus(declared, fact, "h") == expected


@pytest.mark.parametrize(
    "declared,fact,detected", [(4, gpus_fact(8, 8), 8), (2, gpus_fact(0, None), 0), (0, gpus_fact(8, 8), 8)]
)
def test_resolve_num_gpus_mismatch_names_the_host(declared, fact, detected):
    with pytest.raises(ray_node.GpuCountError) as error:
        ray_node.resolve_num_gpus(declared, fact, "gpu-07")
    assert str(error.value).startswith(f"host gpu-07: ray_num_gpus = {declared}: expected {detected}")


def test_wait_for_port_command():
    command = ray_node.wait_for_port_command("10.0.0.1", 6379, 120)
    words = shlex.split(command)
    assert words[:4] == ["timeout", "120", "bash", "-c"]
    assert "/dev/tcp/10.0.0.1/6379" in words[4]


def test_unit_supervises_the_named_container():
    unit = ray_node.unit_text("ray-node")
    assert "ExecStart=/usr/bin/env docker start --attach ray-node\n" in unit
    assert "Restart=always\n" in unit
    assert "Requires=docker.service\n" in unit


# --- Settings -------------------------------------------------------------------------------------


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


# --- Image ----------------------------------------------------------------------------------------


def test_registry_config():
    config = json.loads(image.registry_config({"registry": "r.lab:5000", "username": "ray", "password": "p:w"}))
    assert config == {"auths": {"r.lab:5000": {"auth": base64.b64encode(b"ray:p:w").decode()}}}


def test_pull_command():
    assert image.pull_command("rayproject/ray:2.60.0", False) == "docker pull --quiet rayproject/ray:2.60.0"
    assert (
        image.pull_command("r.lab:5000/ml/ray@sha256:" + "a" * 64, True)
        == f"docker --config {image.DOCKER_CONFIG_DIR} pull --quiet r.lab:5000/ml/ray@sha256:{'a' * 64}"
    )
    assert image.pull_command("weird;rm -rf /", False) == "docker pull --quiet 'weird;rm -rf /'"


@pytest.mark.parametrize(
    "policy,image_id,expected",
    [("missing", None, True), ("missing", "sha256:ab", False), ("always", "sha256:ab", True), ("always", None, True)],
)
def test_needs_pull(policy, image_id, expected):
    assert image.needs_pull({"ray_image_pull": policy}, image_id) is expected
