"""The pure helpers of the NVIDIA layer: OS data, repository files, package pins, the
daemon.json runtime check, the GPU count and device list, the smoke and reboot commands
(run for real in a shell, against a stub docker), and the data schema."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from deploy.contract import schema, settings
from deploy.host import nvidia, platform
from deploy.ray import ray_node
from deploy.run.facts import HostInfo
from deploy.run.templating import render
from tests.plan.fakes.fakehosts import OS_RELEASE, OSES

H100_DRIVER = {"pci_count": 8, "driver": {"count": 8, "models": ["H100"] * 8, "driver_version": "550.54.15"}}


def plat(os_name: str) -> platform.Platform:
    return platform.detect(HostInfo().process(OS_RELEASE[os_name]), "gpu-01")


# --- OS data --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "os_name,directory",
    [("ubuntu22", "ubuntu2204"), ("ubuntu24", "ubuntu2404"), ("debian12", "debian12"), ("rocky9", "rhel9"),
     ("al2023", "amzn2023")],
)  # fmt: skip
def test_every_supported_os_has_nvidia_data(os_name, directory):
    p = plat(os_name)
    assert nvidia.cuda_dir(p) == directory
    assert nvidia.nvidia_os(p).cuda_dir == directory


def test_rhel_rebuilds_share_the_rhel9_repository():
    for os_id in ("rhel", "almalinux", "rocky"):
        p = platform.Platform(os_id, "9.4", "", "dnf", (), (), "centos")
        assert nvidia.cuda_dir(p) == "rhel9"


def test_gpu_host_on_an_os_without_nvidia_data_is_an_error_naming_the_host():
    debian13 = platform.Platform("debian", "13", "trixie", "apt", (), ("docker.io",), "debian")
    with pytest.raises(nvidia.UnsupportedNvidiaPlatform) as error:
        nvidia.nvidia_os(debian13, "gpu-07")
    assert str(error.value).startswith("host gpu-07: NVIDIA GPUs on debian 13, which rayrig has no NVIDIA plan for")
    assert "Ubuntu 22.04/24.04, Debian 12" in str(error.value)


def test_only_ubuntu_takes_driver_and_fabricmanager_from_the_distribution():
    for name, nos in nvidia.NVIDIA_OS.items():
        from_distro = name.startswith("ubuntu")
        assert nos.driver_from_cuda is not from_distro, name
        assert nos.fabricmanager_from_cuda is not from_distro, name


def test_driver_commands_fill_in_the_branch():
    assert nvidia.driver_commands(nvidia.NVIDIA_OS["ubuntu2404"], "570")[2:] == [
        "ubuntu-drivers install --gpgpu nvidia:570-server",
        "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nvidia-utils-570-server",
    ]
    assert (
        nvidia.driver_commands(nvidia.NVIDIA_OS["rhel9"], "570")[-1] == "dnf module install -y nvidia-driver:570-dkms"
    )
    for nos in nvidia.NVIDIA_OS.values():
        assert not any("{branch}" in c for c in nvidia.driver_commands(nos, "550"))


# --- The toolkit -----------------------------------------------------------------------------------


def test_toolkit_pins_every_package_at_one_version():
    assert nvidia.toolkit_specs("apt", "1.17.8") == [
        "nvidia-container-toolkit=1.17.8-1",
        "nvidia-container-toolkit-base=1.17.8-1",
        "libnvidia-container-tools=1.17.8-1",
        "libnvidia-container1=1.17.8-1",
    ]
    assert nvidia.toolkit_specs("dnf", "1.18.0") == [
        "nvidia-container-toolkit-1.18.0-1",
        "nvidia-container-toolkit-base-1.18.0-1",
        "libnvidia-container-tools-1.18.0-1",
        "libnvidia-container1-1.18.0-1",
    ]


def test_toolkit_is_current_only_when_every_package_has_the_pinned_version():
    installed = {name: {"1.17.8-1"} for name in nvidia.TOOLKIT_PACKAGES}
    assert nvidia.toolkit_current(installed, "1.17.8")
    assert not nvidia.toolkit_current(installed, "1.18.0")
    assert not nvidia.toolkit_current({**installed, "libnvidia-container1": {"1.16.2-1"}}, "1.17.8")
    assert not nvidia.toolkit_current({k: v for k, v in installed.items() if k != "libnvidia-container1"}, "1.17.8")
    assert not nvidia.toolkit_current({}, "1.17.8")


def test_toolkit_repositories_follow_the_url_from_data():
    mirror = "http://mirror.lab/libnvidia-container/"
    assert nvidia.toolkit_apt_source(mirror) == (
        "deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit-keyring.asc] "
        "http://mirror.lab/libnvidia-container/stable/deb/$(ARCH) /\n"
    )
    local = "file:///etc/pki/rpm-gpg/RPM-GPG-KEY-rayrig-nvidia-container-toolkit"
    repo = render(nvidia.TOOLKIT_DNF_TEMPLATE, gpgkey=local, **nvidia.toolkit_dnf_values(mirror))
    assert "baseurl=http://mirror.lab/libnvidia-container/stable/rpm/$basearch\n" in repo
    assert f"gpgkey={local}\n" in repo  # the checked copy: dnf fetches no key itself
    assert "repo_gpgcheck=1\n" in repo and "enabled=1\n" in repo


# --- The CUDA repository ---------------------------------------------------------------------------


def test_cuda_repository_per_os_and_architecture():
    url = "https://developer.download.nvidia.com/compute/cuda/repos"
    ubuntu = nvidia.NVIDIA_OS["ubuntu2204"]
    assert nvidia.cuda_apt_source(url, ubuntu, "x86_64") == (
        f"deb [signed-by=/etc/apt/keyrings/cuda-archive-keyring.asc] {url}/ubuntu2204/x86_64/ /\n"
    )
    assert nvidia.cuda_apt_list(ubuntu, "aarch64") == "/etc/apt/sources.list.d/cuda-ubuntu2204-sbsa.list"
    rhel = nvidia.NVIDIA_OS["rhel9"]
    local = "file:///etc/pki/rpm-gpg/RPM-GPG-KEY-rayrig-cuda-rpm"
    assert render(nvidia.CUDA_DNF_TEMPLATE, gpgkey=local, **nvidia.cuda_dnf_values(url + "/", rhel, "x86_64")) == (
        "[cuda-rhel9-x86_64]\n"
        "name=cuda-rhel9-x86_64\n"
        f"baseurl={url}/rhel9/x86_64\n"
        "enabled=1\n"
        "gpgcheck=1\n"
        f"gpgkey={local}\n"
    )
    assert nvidia.cuda_dnf_repo_path(nvidia.NVIDIA_OS["amzn2023"]) == "/etc/yum.repos.d/cuda-amzn2023.repo"


# --- Fabric Manager ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "directory,family,version,expected",
    [
        ("ubuntu2204", "apt", "550.54.15", ("nvidia-fabricmanager-550", "nvidia-fabricmanager-550=550.54.15-*")),
        ("debian12", "apt", "550.54.15", ("nvidia-fabricmanager-550", "nvidia-fabricmanager-550=550.54.15-*")),
        ("debian12", "apt", None, ("nvidia-fabricmanager-550", "nvidia-fabricmanager-550")),
        ("rhel9", "dnf", "550.54.15", ("nvidia-fabric-manager", "nvidia-fabric-manager-550.54.15")),
        ("amzn2023", "dnf", None, ("nvidia-fabric-manager", "nvidia-fabric-manager-550.*")),
    ],
)
def test_fabricmanager_follows_the_driver(directory, family, version, expected):
    assert nvidia.fabricmanager_package(nvidia.NVIDIA_OS[directory], family, "550", version) == expected


def test_fabricmanager_is_current_only_at_the_drivers_version():
    installed = {"nvidia-fabric-manager": {"550.54.15-1"}}
    assert nvidia.fabricmanager_current(installed, "nvidia-fabric-manager", "550.54.15", "550")
    assert not nvidia.fabricmanager_current(installed, "nvidia-fabric-manager", "550.90.07", "550")
    assert not nvidia.fabricmanager_current(installed, "nvidia-fabric-manager", "550.54.1", "550")
    assert nvidia.fabricmanager_current(installed, "nvidia-fabric-manager", None, "550")
    assert not nvidia.fabricmanager_current(installed, "nvidia-fabric-manager", None, "570")
    assert not nvidia.fabricmanager_current({}, "nvidia-fabric-manager", "550.54.15", "550")


# --- daemon.json ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "daemon,expected",
    [
        ({}, False),
        ({"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}, True),
        ({"runtimes": {"nvidia": {}}, "default-runtime": "nvidia"}, True),
        ({"runtimes": {"runc": {}}}, False),
        ({"default-runtime": "nvidia"}, False),
        ({"runtimes": ["nvidia"]}, False),
    ],
)
def test_nvidia_runtime_in_daemon_json(daemon, expected):
    assert nvidia.has_nvidia_runtime(daemon) is expected


# --- GPU counts and the device list ------------------------------------------------------------------


def test_gpus_option():
    assert ray_node.gpus_option("all") == "--gpus=all"
    assert ray_node.gpus_option([0]) == '--gpus="device=0"'
    assert ray_node.gpus_option([3, 1]) == '--gpus="device=3,1"'


def test_device_list_sets_the_count():
    assert ray_node.resolve_num_gpus("auto", H100_DRIVER, "gpu-01", [0, 1, 2]) == 3
    assert ray_node.resolve_num_gpus(3, H100_DRIVER, "gpu-01", [5, 6, 7]) == 3
    assert ray_node.resolve_num_gpus("auto", H100_DRIVER, "gpu-01") == 8
    assert ray_node.resolve_num_gpus("auto", {"pci_count": 0, "driver": None}, "cpu-01") == 0


def test_device_list_errors_name_the_host_and_the_key():
    with pytest.raises(ray_node.GpuCountError) as error:
        ray_node.resolve_num_gpus("auto", H100_DRIVER, "gpu-01", [0, 8])
    assert str(error.value) == (
        "host gpu-01: nvidia_visible_devices = [0, 8]: expected GPU indices below 8, "
        "the number of NVIDIA GPUs the host has"
    )
    with pytest.raises(ray_node.GpuCountError) as error:
        ray_node.resolve_num_gpus(8, H100_DRIVER, "gpu-01", [0, 1])
    assert str(error.value) == (
        "host gpu-01: ray_num_gpus = 8: expected 2, the number of GPUs in nvidia_visible_devices [0, 1] "
        '(set it to 2 or "auto")'
    )


def test_device_list_reaches_docker_only_on_gpu_hosts():
    s = settings.merge({"ray_role": "worker", "nvidia_visible_devices": [0, 1]})
    gpu = ray_node.docker_run_args(s, "worker", ["ray", "start"], 2, "1g", None)
    cpu = ray_node.docker_run_args(s, "worker", ["ray", "start"], 0, "1g", None)
    assert '--gpus="device=0,1"' in gpu
    assert not any(a.startswith("--gpus") for a in cpu)


# --- Commands, run in a shell ----------------------------------------------------------------------------


@pytest.fixture
def stub_docker(tmp_path: Path):
    """A ``docker`` on PATH that prints ``$STUB_GPUS`` lines of ``nvidia-smi -L`` and records its arguments."""
    stub = tmp_path / "docker"
    stub.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > {tmp_path}/args\n'
        'i=0; while [ "$i" -lt "${STUB_GPUS:-0}" ]; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)"; '
        "i=$((i+1)); done\n"
        'exit "${STUB_RC:-0}"\n'
    )
    stub.chmod(0o755)

    def run(command: str, **env: str) -> subprocess.CompletedProcess:
        environment = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", **env}
        return subprocess.run(["sh", "-c", command], env=environment, capture_output=True, text=True, timeout=30)

    run.args = lambda: (tmp_path / "args").read_text().splitlines()  # type: ignore[attr-defined]
    return run


def test_smoke_passes_when_the_container_sees_the_declared_gpus(stub_docker):
    command = nvidia.smoke_command("reg.lab:5000/ml/ray:2.60.0", '--gpus="device=0,1"', 2)
    result = stub_docker(command, STUB_GPUS="2")
    assert result.returncode == 0, result.stderr
    assert stub_docker.args() == [
        "run", "--rm", "--pull=never", '--gpus="device=0,1"', "--entrypoint=nvidia-smi", "reg.lab:5000/ml/ray:2.60.0",
        "-L",
    ]  # fmt: skip


def test_smoke_fails_with_the_count_it_saw(stub_docker):
    result = stub_docker(nvidia.smoke_command("img:1", "--gpus=all", 8), STUB_GPUS="7")
    assert result.returncode == 1
    assert result.stderr.startswith("a img:1 container sees 7 GPUs, expected 8: GPU 0: NVIDIA H100")


def test_smoke_fails_when_the_container_does_not_start(stub_docker):
    result = stub_docker(nvidia.smoke_command("img:1", "--gpus=all", 8), STUB_GPUS="0", STUB_RC="125")
    assert result.returncode == 1


def test_reboot_needed_stops_with_the_reason():
    result = subprocess.run(
        ["sh", "-c", nvidia.reboot_needed_command("gpu-01'; touch /tmp/x; '")], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert result.stderr.startswith("gpu-01'; touch /tmp/x; ': the NVIDIA driver is installed but not loaded.")
    assert "nvidia_allow_reboot = true" in result.stderr


def test_driver_missing_message():
    message = nvidia.driver_missing_message("gpu-01", 4)
    assert message.startswith("host gpu-01: 4 NVIDIA GPU(s) on the PCI bus but no working driver")
    assert 'set nvidia_driver = "install"' in message


# --- Data ----------------------------------------------------------------------------------------------


def test_nvidia_defaults_are_safe():
    d = settings.defaults()
    assert d["nvidia_driver"] == "preinstalled"
    assert d["nvidia_allow_reboot"] is False
    assert d["nvidia_visible_devices"] == "all"
    assert schema.validate_host("h", {k: v for k, v in d.items() if k.startswith("nvidia_")}) == []


@pytest.mark.parametrize(
    "key,value,expected",
    [
        ("nvidia_driver", "latest", '"preinstalled" or "install"'),
        ("nvidia_driver_branch", 550, 'a driver branch such as "550"'),
        ("nvidia_driver_branch", "550.54", 'a driver branch such as "550"'),
        ("nvidia_allow_reboot", "yes", "true or false"),
        ("nvidia_reboot_timeout_s", 5, "a number of seconds of at least 60"),
        ("nvidia_toolkit_version", "latest", 'a toolkit version such as "1.17.8"'),
        ("nvidia_toolkit_repo_url", "nvidia.github.io/libnvidia-container", "an http(s) URL"),
        ("nvidia_cuda_repo_url", "ftp://mirror/cuda", "an http(s) URL"),
        ("nvidia_visible_devices", "0,1", '"all" or a list of distinct GPU indices, e.g. [0, 1]'),
        ("nvidia_visible_devices", [0, 0], '"all" or a list of distinct GPU indices, e.g. [0, 1]'),
        ("nvidia_visible_devices", [-1], '"all" or a list of distinct GPU indices, e.g. [0, 1]'),
        ("nvidia_visible_devices", [], '"all" or a list of distinct GPU indices, e.g. [0, 1]'),
    ],
)
def test_bad_nvidia_values_are_named(key, value, expected):
    problems = schema.validate_host("gpu-01", {key: value})
    assert [(p.host, p.key, p.value, p.expected) for p in problems] == [("gpu-01", key, value, expected)]


def test_every_os_of_the_plan_tests_has_nvidia_data():
    assert {nvidia.cuda_dir(plat(o)) for o in OSES} == set(nvidia.NVIDIA_OS)
