"""The plan on fresh hosts of every supported OS: packages, repositories, daemon.json,
and the ray-node container of the head, a GPU worker and a CPU worker."""

from __future__ import annotations

import json
import shlex

import pytest

from deploy.contract.schema import validate_host
from deploy.host.ray_image import start_pull_command
from tests.plan.fakes.fake_repo_keys import KeyFetch, key_fetch
from tests.plan.fakes.fakehosts import (
    CPU_WORKER,
    GPU_WORKER,
    HEAD,
    LAB_REGISTRY,
    NVIDIA_DAEMON_JSON,
    OSES,
    reference_cluster,
)
from tests.plan.harness import HostRun, run_deploy

IMAGE = "rayproject/ray:2.60.0-py311-gpu"
#: Docker CE from Docker's repository: the engine and its CLI at docker_ce_version's default.
DNF_DOCKER_CE = ["docker-ce-28.5.2", "docker-ce-cli-28.5.2", "containerd.io", "docker-buildx-plugin"]
APT_DOCKER_CE = ["docker-ce=5:28.5.2-*", "docker-ce-cli=5:28.5.2-*", "containerd.io", "docker-buildx-plugin"]
EXPECT = {
    "ubuntu22": {"family": "apt", "base": ["ca-certificates", "curl", "gnupg"], "engine": ["docker.io"]},
    "ubuntu24": {"family": "apt", "base": ["ca-certificates", "curl", "gnupg"], "engine": ["docker.io"]},
    "debian12": {"family": "apt", "base": ["ca-certificates", "curl", "gnupg"], "engine": ["docker.io"]},
    "rocky9": {"family": "dnf", "base": ["ca-certificates", "curl", "gnupg2"], "engine": DNF_DOCKER_CE},
    "al2023": {"family": "dnf", "base": ["ca-certificates", "curl-minimal", "gnupg2-minimal"], "engine": ["docker"]},
}
#: ray start flag of every ray_ports entry (the head listens on all; workers dial gcs in --address).
PORT_FLAGS = {
    "gcs": "--port",
    "client_server": "--ray-client-server-port",
    "dashboard": "--dashboard-port",
    "dashboard_agent_grpc": "--dashboard-agent-grpc-port",
    "dashboard_agent_http": "--dashboard-agent-listen-port",
    "node_manager": "--node-manager-port",
    "object_manager": "--object-manager-port",
    "runtime_env_agent": "--runtime-env-agent-port",
    "metrics_export": "--metrics-export-port",
    "worker_min": "--min-worker-port",
    "worker_max": "--max-worker-port",
}
HEAD_ONLY_PORTS = ("gcs", "client_server", "dashboard")
DEFAULT_PORTS = {
    "gcs": 6379, "client_server": 10001, "dashboard": 8265, "dashboard_agent_grpc": 8266,
    "dashboard_agent_http": 52365, "node_manager": 6380, "object_manager": 6381, "runtime_env_agent": 6382,
    "metrics_export": 6383, "worker_min": 10002, "worker_max": 10999,
}  # fmt: skip


@pytest.fixture(scope="module", params=OSES)
def fresh(request):
    return request.param, run_deploy(reference_cluster(request.param))


def split_container(host: HostRun, image: str = IMAGE) -> tuple[list[str], list[str]]:
    """(docker options, ray start command) of the host's ray-node container."""
    args = host.docker_create()
    at = args.index(image)
    return args[:at], args[at + 1 :]


def flags(args: list[str], name: str) -> list[str]:
    """Values of ``--name=value`` arguments."""
    return [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]


def installed(host: HostRun, op_name: str) -> list[str]:
    """The package names an operation installs (apt-get/dnf install arguments)."""
    packages: list[str] = []
    for command in host.op(op_name).commands:
        words = shlex.split(command)
        if "install" in words and words[0] in ("dnf", "yum", "DEBIAN_FRONTEND=noninteractive"):
            packages += [w for w in words[words.index("install") + 1 :] if not w.startswith("-")]
    return packages


def test_head_runs_ray_start_head_with_every_port_pinned(fresh):
    _os, run = fresh
    docker, ray = split_container(run[HEAD])
    assert ray[:3] == ["ray", "start", "--block"]
    assert "--head" in ray
    assert not flags(ray, "--address")
    for name, flag in PORT_FLAGS.items():
        assert flags(ray, flag) == [str(DEFAULT_PORTS[name])], flag
    assert flags(ray, "--dashboard-host") == ["127.0.0.1"]
    assert flags(ray, "--node-ip-address") == ["10.0.0.1"]
    assert flags(ray, "--num-gpus") == ["0"]
    assert flags(ray, "--num-cpus") == ["8"]  # declared on the head
    assert "--gpus=all" not in docker
    assert "--network=host" in docker
    assert flags(docker, "--name") == ["ray-node"]
    assert any(a.startswith("--label=rayrig.config-hash=") for a in docker)


def test_workers_join_the_head_with_their_declared_resources(fresh):
    _os, run = fresh
    gpu_docker, gpu_ray = split_container(run[GPU_WORKER])
    cpu_docker, cpu_ray = split_container(run[CPU_WORKER])
    for ray in (gpu_ray, cpu_ray):
        assert "--head" not in ray
        assert flags(ray, "--address") == ["10.0.0.1:6379"]
        for name, flag in PORT_FLAGS.items():
            expected = [] if name in HEAD_ONLY_PORTS else [str(DEFAULT_PORTS[name])]
            assert flags(ray, flag) == expected, flag
        assert not flags(ray, "--dashboard-host")
    assert flags(gpu_ray, "--num-gpus") == ["8"]
    assert flags(gpu_ray, "--num-cpus") == ["96"]
    assert not flags(gpu_ray, "--resources")
    assert flags(cpu_ray, "--num-gpus") == ["0"]
    assert not flags(cpu_ray, "--num-cpus")  # "auto": Ray counts them
    assert [json.loads(v) for v in flags(cpu_ray, "--resources")] == [{"nvme": 1}]
    assert flags(gpu_ray, "--node-ip-address") == ["10.0.0.2"]
    assert flags(cpu_ray, "--node-ip-address") == ["10.0.0.3"]
    assert "--gpus=all" in gpu_docker
    assert "--gpus=all" not in cpu_docker


def test_workers_wait_for_the_head_before_starting(fresh):
    _os, run = fresh
    for name in (GPU_WORKER, CPU_WORKER):
        names = [op.name for op in run[name].changes]
        wait = names.index("Ray node | Wait for the Ray head to answer")
        start = names.index(f"Ray node | Start the Ray worker container, batch 1 of 1: {GPU_WORKER}, {CPU_WORKER}")
        assert wait < start
        assert shlex.split(run[name].op("Wait for the Ray head to answer").commands[0])[-2:] == ["10.0.0.1", "6379"]
    assert not run[HEAD].has_op("Wait for the Ray head to answer")


def test_the_head_starts_before_any_worker(fresh):
    _os, run = fresh
    head_start = run[HEAD].op("Start the Ray head container").step
    head_listening = run[HEAD].op("Wait for the Ray head to listen").step
    for name in (GPU_WORKER, CPU_WORKER):
        assert head_start < run[name].op("Wait for the Ray head to answer").step
        assert head_listening < run[name].op("Start the Ray worker container").step


def test_every_host_gets_its_container_through_the_replacement_step(fresh):
    _os, run = fresh
    for name in (HEAD, GPU_WORKER, CPU_WORKER):
        commands = run[name].op(r"Start the Ray (head|worker) container").commands
        assert commands[0] == "systemctl daemon-reload"
        assert commands[-1].startswith("bash -c ")
        words = run[name].replacement()
        assert words[3:8] == ["replace-ray-node", "ray-node", "ray-node-previous", name, "120"]
        assert words[8:10] == ["docker", "create"]


def test_base_and_engine_packages_per_os(fresh):
    os_name, run = fresh
    expect = EXPECT[os_name]
    for name in (HEAD, GPU_WORKER, CPU_WORKER):
        host = run[name]
        if os_name == "rocky9":  # Docker's repository: its own step, after the repository is added
            assert installed(host, "Install base packages") == [*expect["base"], "nftables"]
            assert installed(host, "Install the Docker engine") == expect["engine"]
            assert all("dnf" in c for c in host.op("Install the Docker engine").commands)
        else:  # the distribution's engine and nftables come in the base packages' transaction
            assert installed(host, "Install base packages") == [*expect["base"], *expect["engine"], "nftables"]
            assert not host.has_op("Install the Docker engine")


def test_apt_waits_for_the_package_lock_on_apt_hosts_only(fresh):
    os_name, run = fresh
    host = run[HEAD]
    if EXPECT[os_name]["family"] == "apt":
        lock = host.op("Make apt wait for the package lock")
        assert lock.uploads == {"/etc/apt/apt.conf.d/90rayrig-lock-timeout": 'DPkg::Lock::Timeout "600";\n'}
        names = [op.name for op in host.ops]
        install = next(i for i, n in enumerate(names) if n.startswith("Base | Install base packages"))
        assert names.index(lock.name) < install
    else:
        assert not host.has_op("apt")
        assert not any("apt-get" in c for c in host.commands)


def test_docker_repository_only_where_the_distro_ships_no_docker(fresh):
    os_name, run = fresh
    host = run[HEAD]
    if os_name == "rocky9":
        repo = host.op("Add Docker's dnf repository").uploads["/etc/yum.repos.d/docker-ce.repo"]
        assert "baseurl=https://download.docker.com/linux/centos/$releasever/$basearch/stable\n" in repo
        assert "gpgcheck=1\n" in repo
        assert "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-rayrig-docker-rpm\n" in repo
        fetch = key_fetch(host.op("Download Docker's repository key").commands)
        assert fetch == KeyFetch(
            "https://download.docker.com/linux/centos/gpg",
            "/etc/pki/rpm-gpg/RPM-GPG-KEY-rayrig-docker-rpm",
            True,
            ("060A61C51B558A7F742B77AAC52FEB6B621E9F35",),
        )
        names = [op.name for op in host.ops]
        key, repo_op = (
            "Docker | Download Docker's repository key and check its fingerprint",
            "Docker | Add Docker's dnf repository",
        )
        assert names.index(key) < names.index(repo_op) < names.index("Docker | Install the Docker engine")
    else:
        assert not host.has_op("Docker's .* repository")
        assert not any(p.startswith(("/etc/yum.repos.d", "/etc/apt/sources.list.d")) for p in host.uploads)


def test_daemon_json_keeps_what_another_tool_wrote(fresh):
    _os, run = fresh
    written = json.loads(run[GPU_WORKER].op("Merge rayrig's keys into daemon.json").uploads["/etc/docker/daemon.json"])
    assert written["runtimes"] == NVIDIA_DAEMON_JSON["runtimes"]
    assert written["default-runtime"] == "nvidia"
    assert written["insecure-registries"] == [LAB_REGISTRY]
    assert written["log-driver"] == "json-file"
    assert written["log-opts"] == {"max-size": "100m", "max-file": "3"}
    # A host without a daemon.json gets rayrig's keys only.
    fresh_file = json.loads(run[CPU_WORKER].uploads["/etc/docker/daemon.json"])
    assert fresh_file == {
        "insecure-registries": [LAB_REGISTRY],
        "log-driver": "json-file",
        "log-opts": {"max-size": "100m", "max-file": "3"},
    }
    assert "chmod 644 /etc/docker/daemon.json" in run[CPU_WORKER].commands


def test_docker_is_enabled_and_the_image_pulled(fresh):
    _os, run = fresh
    for name in (HEAD, GPU_WORKER, CPU_WORKER):
        host = run[name]
        assert host.op("Enable and start Docker").commands == [
            "systemctl start docker.service",
            "systemctl enable docker.service",
        ]
        assert host.op(r"Pull ").commands == [start_pull_command(IMAGE, IMAGE, 3600, with_auth=False)]
        assert host.op("Wait for the pull of").commands[0].startswith("bash -c ")
        assert (
            host.op("Install the ray-node systemd unit")
            .uploads["/etc/systemd/system/ray-node.service"]
            .startswith("[Unit]")
        )


@pytest.mark.parametrize("os_name", ["ubuntu22", "ubuntu24", "debian12"])
def test_docker_source_docker_adds_the_signed_apt_repository(os_name):
    run = run_deploy(reference_cluster(os_name, data={"docker_source": "docker"}))
    host = run[CPU_WORKER]
    codename = {"ubuntu22": "jammy", "ubuntu24": "noble", "debian12": "bookworm"}[os_name]
    path = "ubuntu" if os_name.startswith("ubuntu") else "debian"
    fetch = key_fetch(host.op("Download Docker's repository key").commands)
    assert fetch == KeyFetch(
        f"https://download.docker.com/linux/{path}/gpg",
        "/etc/apt/keyrings/docker.asc",
        False,
        ("9DC858229FC7DD38854AE2D88D81803C0EBFCD88",),
    )
    assert host.op("Add Docker's apt repository").uploads == {
        "/etc/apt/sources.list.d/docker.list": (
            f"deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.asc] https://download.docker.com/linux/{path} "
            f"{codename} stable\n"
        )
    }
    assert installed(host, "Install the Docker engine") == APT_DOCKER_CE
    names = [op.name for op in host.changes]
    key = "Docker | Download Docker's repository key and check its fingerprint"
    assert names.index(key) < names.index("Docker | Add Docker's apt repository")
    assert names.index("Docker | Add Docker's apt repository") < names.index("Docker | Install the Docker engine")
    # The index is refreshed after the repository is added, in the install operation itself.
    assert host.op("Install the Docker engine").commands[0] == "apt-get update"


def test_docker_source_docker_keeps_amazon_linux_on_its_own_engine():
    host = run_deploy(reference_cluster("al2023", data={"docker_source": "docker"}))[HEAD]
    assert installed(host, "Install base packages")[-2:] == ["docker", "nftables"]
    assert not host.has_op("repository")


def test_custom_ports_reach_every_flag():
    ports = {
        "gcs": 7379, "client_server": 11001, "dashboard": 9265, "dashboard_agent_grpc": 9266,
        "dashboard_agent_http": 53365, "node_manager": 7380, "object_manager": 7381, "runtime_env_agent": 7382,
        "metrics_export": 7383, "worker_min": 20000, "worker_max": 20999,
    }  # fmt: skip
    run = run_deploy(reference_cluster("ubuntu22", data={"ray_ports": ports}))
    _docker, head = split_container(run[HEAD])
    _docker, worker = split_container(run[CPU_WORKER])
    for name, flag in PORT_FLAGS.items():
        assert flags(head, flag) == [str(ports[name])], flag
        if name not in HEAD_ONLY_PORTS:
            assert flags(worker, flag) == [str(ports[name])], flag
    assert flags(worker, "--address") == ["10.0.0.1:7379"]
    assert shlex.split(run[CPU_WORKER].op("Wait for the Ray head to answer").commands[0])[-2:] == ["10.0.0.1", "7379"]


def test_gpu_count_auto_takes_the_detected_gpus():
    hosts = [(n, {k: v for k, v in d.items() if k != "ray_num_gpus"}) for n, d in reference_cluster("ubuntu22")]
    docker, ray = split_container(run_deploy(hosts)[GPU_WORKER])
    assert flags(ray, "--num-gpus") == ["8"]
    assert "--gpus=all" in docker


def test_shm_and_open_files_follow_the_host():
    run = run_deploy(reference_cluster("debian12", options={HEAD: {"mem_kb": 64 * 2**20, "nofile_hard": 20000}}))
    docker, _ray = split_container(run[HEAD])
    assert flags(docker, "--shm-size") == [f"{int(64 * 2**30 * 0.3) // 2**20}m"]
    assert flags(docker, "--ulimit") == ["nofile=20000:20000"]
    docker, _ray = split_container(run[CPU_WORKER])
    assert flags(docker, "--ulimit") == ["nofile=65536:65536"]


@pytest.mark.parametrize("os_name", ["ubuntu22", "rocky9"])
def test_a_new_docker_ce_version_moves_the_engine_and_its_cli_to_it(os_name):
    # A converged cluster at the default version, and the data asking for another one.
    hosts = reference_cluster(os_name, "converged", data={"docker_source": "docker"})
    for _name, data in hosts:
        data["docker_ce_version"] = "27.5.1"
    host = run_deploy(hosts)[CPU_WORKER]
    if os_name == "rocky9":
        assert installed(host, "Install the Docker engine") == ["docker-ce-27.5.1", "docker-ce-cli-27.5.1"]
    else:
        assert installed(host, "Install the Docker engine") == ["docker-ce=5:27.5.1-*", "docker-ce-cli=5:27.5.1-*"]
        assert "--allow-downgrades" in host.op("Install the Docker engine").commands[-1]
    assert not host.has_op(r"Download Docker's repository key")  # the key in place is the pinned one


def test_docker_ce_version_must_be_a_version():
    problems = validate_host("gpu-01", {"docker_ce_version": "28.5"})
    assert [str(p) for p in problems] == [
        "host gpu-01: docker_ce_version = '28.5': expected a Docker CE version such as \"28.5.2\""
    ]
