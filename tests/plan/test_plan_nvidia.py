"""The NVIDIA layer's plans on every supported OS: a GPU host with a driver, the same host
converged, a GPU host without a driver (stop by default, install when the data says so),
NVSwitch systems, a CPU host (nothing NVIDIA at all), and GPU counts that do not match.

The reference cluster (``fakehosts.reference_cluster``) has a CPU head, a GPU worker with
8 H100s and a CPU worker; the GPU worker's state is varied through ``options``.
"""

from __future__ import annotations

import json
import shlex
from collections import defaultdict

import pytest
from pyinfra.connectors.fake import FakeConnector

from deploy.host.nvidia import NvidiaDriverMissing
from deploy.ray.ray_node import GpuCountError
from tests.plan.fakes.fake_repo_keys import KeyFetch, key_fetch
from tests.plan.fakes.fakehosts import (
    CPU_WORKER,
    GPU_WORKER,
    HEAD,
    NVIDIA_DAEMON_JSON,
    OSES,
    reference_cluster,
    with_data,
)
from tests.plan.harness import HostRun, Run, run_deploy

IMAGE = "rayproject/ray:2.60.0-py311-gpu"
TOOLKIT = "https://nvidia.github.io/libnvidia-container"
CUDA = "https://developer.download.nvidia.com/compute/cuda/repos"
PINNED = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]
APT_INSTALL = (
    'DEBIAN_FRONTEND=noninteractive apt-get -y -o Dpkg::Options::="--force-confdef" '
    '-o Dpkg::Options::="--force-confold" install --no-install-recommends --allow-downgrades'
)
APT = "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends"
APT_TOOLKIT = [
    "apt-get update",
    APT_INSTALL + " " + " ".join(f"{p}=1.17.8-1" for p in PINNED),
]
DNF_TOOLKIT = ["dnf install -y " + " ".join(f"{p}-1.17.8-1" for p in PINNED)]
DNF_TOOLKIT_REPO = (
    "[nvidia-container-toolkit]\n"
    "name=nvidia-container-toolkit\n"
    f"baseurl={TOOLKIT}/stable/rpm/$basearch\n"
    "repo_gpgcheck=1\n"
    "gpgcheck=0\n"
    "enabled=1\n"
    "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-rayrig-nvidia-container-toolkit\n"
    "sslverify=1\n"
    "sslcacert=/etc/pki/tls/certs/ca-bundle.crt\n"
)
UBUNTU_DRIVER = [
    "apt-get update",
    f"{APT} ubuntu-drivers-common",
    "ubuntu-drivers install --gpgpu nvidia:550-server",
    f"{APT} nvidia-utils-550-server",
]
#: Per OS: package family, the CUDA repository (None: the distribution ships driver and Fabric
#: Manager), the driver install commands, and the Fabric Manager install command for driver 550.54.15.
EXPECT = {
    "ubuntu22": {
        "family": "apt",
        "cuda": None,
        "driver": UBUNTU_DRIVER,
        "fabricmanager": f"{APT_INSTALL} 'nvidia-fabricmanager-550=550.54.15-*'",
    },
    "ubuntu24": {
        "family": "apt",
        "cuda": None,
        "driver": UBUNTU_DRIVER,
        "fabricmanager": f"{APT_INSTALL} 'nvidia-fabricmanager-550=550.54.15-*'",
    },
    "debian12": {
        "family": "apt",
        "cuda": ("/etc/apt/sources.list.d/cuda-debian12-x86_64.list", "debian12", "3bf863cc.pub"),
        "driver": ["apt-get update", f"{APT} linux-headers-$(uname -r)", f"{APT} cuda-drivers-550"],
        "fabricmanager": f"{APT_INSTALL} 'nvidia-fabricmanager-550=550.54.15-*'",
    },
    "rocky9": {
        "family": "dnf",
        "cuda": ("/etc/yum.repos.d/cuda-rhel9.repo", "rhel9", "D42D0685.pub"),
        "driver": [
            "crb enable",
            "dnf install -y kernel-devel-matched kernel-headers",
            "dnf module install -y nvidia-driver:550-dkms",
        ],
        "fabricmanager": "dnf install -y nvidia-fabric-manager-550.54.15",
    },
    "al2023": {
        "family": "dnf",
        "cuda": ("/etc/yum.repos.d/cuda-amzn2023.repo", "amzn2023", "D42D0685.pub"),
        "driver": [
            "dnf install -y dkms kernel-devel-$(uname -r) kernel-headers-$(uname -r) kernel-modules-extra-$(uname -r)",
            "dnf module install -y nvidia-driver:550-dkms",
        ],
        "fabricmanager": "dnf install -y nvidia-fabric-manager-550.54.15",
    },
}
SMOKE_8 = (
    f"out=$(docker run --rm --pull=never --gpus=all --entrypoint=nvidia-smi {IMAGE} -L 2>&1) "
    '|| { echo "$out" >&2; exit 1; }; '
    "n=$(printf '%s\\n' \"$out\" | grep -c '^GPU '); "
    f'[ "$n" -eq 8 ] || {{ echo \'a {IMAGE} container sees\' "$n" \'GPUs, expected 8:\' "$out" >&2; exit 1; }}'
)


def gpu_cluster(os_name: str, state: str = "fresh", data: dict | None = None, **gpu_options):
    """The reference cluster, the GPU worker's fake state changed by ``gpu_options``; its
    daemon.json holds no NVIDIA runtime unless the state says so."""
    options = {"daemon_json": {}, **gpu_options}
    return reference_cluster(os_name, state, data=data or {}, options={GPU_WORKER: options})


def nvidia_ops(host: HostRun) -> list[str]:
    """Names of the host's planned NVIDIA operations, without the "NVIDIA | " prefix."""
    return [op.name.split(" | ", 1)[1] for op in host.changes if op.name.startswith("NVIDIA | ")]


def mentions_nvidia(host: HostRun) -> list[str]:
    """Every op name, command and upload of the host's plan that mentions NVIDIA in any way."""
    texts = [op.name for op in host.ops] + host.commands + host.raw_commands
    texts += [f"{path}: {content}" for path, content in host.uploads.items()]
    return [t for t in texts if "nvidia" in str(t).lower()]


@pytest.fixture
def sent(monkeypatch):
    """Every command the fake hosts receive, facts included: host name -> commands."""
    sent: dict[str, list[str]] = defaultdict(list)
    original = FakeConnector.run_shell_command

    def recording(self, command, *args, **kwargs):
        sent[self.host.name].append(command if isinstance(command, str) else command.get_masked_value())
        return original(self, command, *args, **kwargs)

    monkeypatch.setattr(FakeConnector, "run_shell_command", recording)
    return sent


@pytest.fixture
def instant_reboot(monkeypatch):
    """server.reboot waits for real (delay, then polling); the fake host is back at once."""
    monkeypatch.setattr("pyinfra.operations.server.sleep", lambda _seconds: None)


# --- A GPU host with a driver ----------------------------------------------------------------------


@pytest.fixture(scope="module", params=OSES)
def with_driver(request) -> tuple[str, Run]:
    return request.param, run_deploy(gpu_cluster(request.param))


def test_gpu_host_gets_the_pinned_toolkit_from_nvidias_signed_repository(with_driver):
    os_name, run = with_driver
    host = run[GPU_WORKER]
    install = host.op("Install the NVIDIA Container Toolkit 1.17.8").commands
    fetch = key_fetch(host.op("Download the NVIDIA Container Toolkit repository key").commands)
    assert (fetch.url, fetch.fingerprints) == (f"{TOOLKIT}/gpgkey", ("C95B321B61E88C1809C4F759DDCAE044F796ECB0",))
    if EXPECT[os_name]["family"] == "apt":
        assert fetch.dest == "/etc/apt/keyrings/nvidia-container-toolkit-keyring.asc" and not fetch.rpm_import
        assert host.op("Add the NVIDIA Container Toolkit apt repository").uploads == {
            "/etc/apt/sources.list.d/nvidia-container-toolkit.list": (
                "deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit-keyring.asc] "
                f"{TOOLKIT}/stable/deb/$(ARCH) /\n"
            )
        }
        assert install == APT_TOOLKIT
        repo_op = "Add the NVIDIA Container Toolkit apt repository"
    else:
        assert fetch.dest == "/etc/pki/rpm-gpg/RPM-GPG-KEY-rayrig-nvidia-container-toolkit" and fetch.rpm_import
        assert host.op("Add the NVIDIA Container Toolkit dnf repository").uploads == {
            "/etc/yum.repos.d/nvidia-container-toolkit.repo": DNF_TOOLKIT_REPO
        }
        assert install == DNF_TOOLKIT
        assert not any("apt" in c for c in host.commands)
        repo_op = "Add the NVIDIA Container Toolkit dnf repository"
    names = nvidia_ops(host)
    key_op = "Download the NVIDIA Container Toolkit repository key and check its fingerprint"
    assert names.index(key_op) < names.index(repo_op) < names.index("Install the NVIDIA Container Toolkit 1.17.8")


def test_gpu_host_registers_the_runtime_and_restarts_docker_after_it(with_driver):
    _os, run = with_driver
    host = run[GPU_WORKER]
    assert host.op("Register the NVIDIA runtime with Docker").commands == [
        "nvidia-ctk runtime configure --runtime=docker"
    ]
    # A real restart even though Docker was not running when the plan was made.
    assert host.op("Restart Docker for the NVIDIA runtime").commands == ["systemctl restart docker.service"]
    assert host.op("Enable and start nvidia-persistenced").commands == [
        "systemctl start nvidia-persistenced.service",
        "systemctl enable nvidia-persistenced.service",
    ]
    names = nvidia_ops(host)
    assert (
        names.index("Install the NVIDIA Container Toolkit 1.17.8")
        < names.index("Register the NVIDIA runtime with Docker")
        < names.index("Restart Docker for the NVIDIA runtime")
        < names.index(f"Check that a {IMAGE} container sees 8 GPUs")
    )


def test_gpu_host_checks_the_image_sees_its_gpus_before_ray_starts(with_driver):
    _os, run = with_driver
    host = run[GPU_WORKER]
    smoke = host.op(f"Check that a {IMAGE} container sees 8 GPUs")
    assert smoke.commands == [SMOKE_8]
    assert host.op(r"Pull ").step < smoke.step < host.op("Start the Ray worker container").step
    create = host.docker_create()
    assert "--gpus=all" in create
    assert "--num-gpus=8" in create


def test_gpu_host_with_a_driver_gets_no_driver_step_and_no_cuda_repository(with_driver):
    _os, run = with_driver
    host = run[GPU_WORKER]
    assert not host.has_op("driver|CUDA|fabricmanager|[Rr]eboot")
    assert not any("cuda" in path for path in host.uploads)


def test_cpu_hosts_get_nothing_nvidia(with_driver):
    _os, run = with_driver
    for name in (HEAD, CPU_WORKER):
        assert mentions_nvidia(run[name]) == []
        assert "--gpus=all" not in run[name].docker_create()


def test_daemon_json_is_read_once_for_docker_and_nvidia(sent):
    run_deploy(gpu_cluster("ubuntu22"))
    reads = [c for c in sent[GPU_WORKER] if c.startswith("if [ -f /etc/docker/daemon.json ]")]
    assert len(reads) == 1


# --- The same host, already configured ----------------------------------------------------------------


@pytest.mark.parametrize("os_name", OSES)
def test_converged_gpu_host_plans_nothing(os_name):
    run = run_deploy(gpu_cluster(os_name, "converged"))
    assert run.changed_hosts == {}
    # It did look: the NVIDIA operations ran as no-ops on the GPU host.
    assert run[GPU_WORKER].has_op("NVIDIA | Enable and start nvidia-persistenced")


@pytest.mark.parametrize("os_name", OSES)
def test_converged_nvswitch_host_with_installed_driver_plans_nothing(os_name):
    data = {"nvidia_driver": "install", "nvidia_allow_reboot": True}
    run = run_deploy(gpu_cluster(os_name, "converged", data=data, nvswitches=4))
    assert run.changed_hosts == {}
    assert run[GPU_WORKER].has_op("NVIDIA | Enable and start nvidia-fabricmanager")


def test_runtime_written_by_another_tool_is_not_configured_again():
    """The reference GPU worker's daemon.json already holds the NVIDIA runtime (and default-runtime)."""
    run = run_deploy(reference_cluster("ubuntu24"))
    host = run[GPU_WORKER]
    assert not host.has_op("Register the NVIDIA runtime|Restart Docker for the NVIDIA runtime")
    written = json.loads(host.uploads["/etc/docker/daemon.json"])
    assert written["runtimes"] == NVIDIA_DAEMON_JSON["runtimes"]
    assert host.has_op("Check that a .* container sees 8 GPUs")  # the toolkit was installed


def test_new_toolkit_version_on_a_converged_host_changes_only_the_toolkit():
    hosts = with_data(gpu_cluster("rocky9", "converged"), GPU_WORKER, nvidia_toolkit_version="1.18.0")
    run = run_deploy(hosts)
    assert run.changed_hosts == {
        GPU_WORKER: [
            "NVIDIA | Install the NVIDIA Container Toolkit 1.18.0",
            f"NVIDIA | Check that a {IMAGE} container sees 8 GPUs",
        ]
    }
    assert run[GPU_WORKER].op("Install the NVIDIA Container Toolkit").commands == [
        "dnf install -y " + " ".join(f"{p}-1.18.0-1" for p in PINNED)
    ]


def test_missing_runtime_on_a_converged_host_is_registered_and_docker_restarted():
    run = run_deploy(gpu_cluster("debian12", "converged", nvidia_runtime=False))
    assert run.changed_hosts == {
        GPU_WORKER: [
            "NVIDIA | Register the NVIDIA runtime with Docker",
            "NVIDIA | Restart Docker for the NVIDIA runtime",
            f"NVIDIA | Check that a {IMAGE} container sees 8 GPUs",
        ]
    }


# --- A GPU host without a driver --------------------------------------------------------------------


@pytest.mark.parametrize("os_name", OSES)
def test_gpu_host_without_a_driver_stops_the_deploy_by_default(os_name, sent):
    with pytest.raises(NvidiaDriverMissing) as error:
        run_deploy(gpu_cluster(os_name, driver=False))
    message = str(error.value)
    assert f"host {GPU_WORKER}: 8 NVIDIA GPU(s) on the PCI bus but no working driver" in message
    assert 'nvidia_driver = "install"' in message
    assert "Nothing was changed on any host." in message
    # Facts were read, no operation ran anywhere.
    commands = [c for host_commands in sent.values() for c in host_commands]
    assert any("PCI_GPUS=" in c for c in commands)
    assert not any(c.startswith(("apt-get", "dnf ", "docker create", "docker pull", "systemctl ")) for c in commands)


@pytest.mark.parametrize("os_name", OSES)
def test_install_without_reboot_installs_the_driver_and_stops_the_host_asking_for_a_reboot(os_name):
    run = run_deploy(gpu_cluster(os_name, data={"nvidia_driver": "install"}, driver=False))
    host = run[GPU_WORKER]
    expect = EXPECT[os_name]
    names = nvidia_ops(host)
    assert host.op("Install the NVIDIA 550 driver").commands == expect["driver"]
    stop = host.op("Stop here: a reboot is needed to load the NVIDIA driver").commands
    assert len(stop) == 1 and stop[0].endswith(" >&2; exit 1")
    assert f"{GPU_WORKER}: the NVIDIA driver is installed but not loaded" in stop[0]
    assert "nvidia_allow_reboot = true" in stop[0]
    assert names[-1] == "Stop here: a reboot is needed to load the NVIDIA driver"
    assert names.index("Install the NVIDIA 550 driver") < len(names) - 1
    assert not host.has_op("Reboot|Toolkit|persistenced")  # the host stops before anything else NVIDIA
    if expect["cuda"]:
        repo = host.op("Add the CUDA (apt|dnf) repository")
        assert names.index(repo.name.split(" | ")[1]) < names.index("Install the NVIDIA 550 driver")
    else:
        assert not host.has_op("CUDA")
    # The other hosts are not held up.
    assert run[CPU_WORKER].has_op("Start the Ray worker container")


@pytest.mark.parametrize("os_name", OSES)
def test_install_with_reboot_reboots_waits_and_carries_on(os_name, instant_reboot):
    data = {"nvidia_driver": "install", "nvidia_allow_reboot": True}
    run = run_deploy(gpu_cluster(os_name, data=data, driver=False))
    host = run[GPU_WORKER]
    reboot = host.op("Reboot to load the NVIDIA driver").commands
    assert "( sleep 1 && reboot ) </dev/null >/dev/null 2>&1 &" in reboot
    assert any("wait_and_reconnect" in c for c in reboot)  # and waits for the host to answer again
    assert host.op("Check that the NVIDIA driver is loaded").commands[0].startswith("nvidia-smi -L >/dev/null || ")
    names = nvidia_ops(host)
    assert names[: names.index("Check that the NVIDIA driver is loaded") + 1][-3:] == [
        "Install the NVIDIA 550 driver",
        "Reboot to load the NVIDIA driver",
        "Check that the NVIDIA driver is loaded",
    ]
    assert names[-1] == f"Check that a {IMAGE} container sees 8 GPUs"
    assert "Install the NVIDIA Container Toolkit 1.17.8" in names
    assert not host.has_op("Stop here")
    assert "--gpus=all" in host.docker_create()


@pytest.mark.parametrize("os_name", OSES)
def test_driver_installed_but_not_loaded_is_not_installed_again(os_name):
    """A re-run before the reboot: the driver's packages are there, nvidia-smi still fails."""
    run = run_deploy(gpu_cluster(os_name, data={"nvidia_driver": "install"}, driver=False, driver_packages=True))
    names = nvidia_ops(run[GPU_WORKER])
    assert "Install the NVIDIA 550 driver" not in names
    assert names[-1] == "Stop here: a reboot is needed to load the NVIDIA driver"


@pytest.mark.parametrize("os_name", ["debian12", "rocky9", "al2023"])
def test_cuda_repository_for_the_driver_comes_from_data(os_name):
    mirror = "https://mirror.lab.example/cuda/repos/"
    data = {"nvidia_driver": "install", "nvidia_cuda_repo_url": mirror}
    host = run_deploy(gpu_cluster(os_name, data=data, driver=False))[GPU_WORKER]
    path, directory, key = EXPECT[os_name]["cuda"]
    base = f"https://mirror.lab.example/cuda/repos/{directory}/x86_64"
    fetch = key_fetch(host.op("Download the CUDA repository key").commands)
    assert fetch.url == f"{base}/{key}"
    if EXPECT[os_name]["family"] == "apt":
        assert host.uploads[path] == f"deb [signed-by=/etc/apt/keyrings/cuda-archive-keyring.asc] {base}/ /\n"
        assert fetch == KeyFetch(
            f"{base}/{key}",
            "/etc/apt/keyrings/cuda-archive-keyring.asc",
            False,
            ("EB693B3035CD5710E231E123A4B469963BF863CC",),
        )
    else:
        section = f"cuda-{directory}-x86_64"
        local = "/etc/pki/rpm-gpg/RPM-GPG-KEY-rayrig-cuda-rpm"
        assert host.uploads[path] == (
            f"[{section}]\nname={section}\nbaseurl={base}\nenabled=1\ngpgcheck=1\ngpgkey=file://{local}\n"
        )
        assert fetch == KeyFetch(f"{base}/{key}", local, True, ("610C7B14E068A878070DA4E99CD0A493D42D0685",))
    assert not any("developer.download.nvidia.com" in c for c in host.commands + list(host.uploads.values()))


# --- NVSwitch systems -----------------------------------------------------------------------------------


@pytest.mark.parametrize("os_name", OSES)
def test_nvswitch_host_gets_fabricmanager_at_the_drivers_version(os_name):
    host = run_deploy(gpu_cluster(os_name, nvswitches=4))[GPU_WORKER]
    expect = EXPECT[os_name]
    install = host.op("Install nvidia-fabricmanager 550.54.15").commands
    assert install[-1] == expect["fabricmanager"]
    assert host.op("Enable and start nvidia-fabricmanager").commands == [
        "systemctl start nvidia-fabricmanager.service",
        "systemctl enable nvidia-fabricmanager.service",
    ]
    names = nvidia_ops(host)
    assert names.index("Install nvidia-fabricmanager 550.54.15") < names.index("Enable and start nvidia-fabricmanager")
    if expect["cuda"]:  # from the CUDA repository, added first
        assert names.index(host.op("Add the CUDA").name.split(" | ")[1]) < names.index(
            "Install nvidia-fabricmanager 550.54.15"
        )
    else:  # from the distribution
        assert not host.has_op("CUDA")
    assert not host.has_op("Install the NVIDIA 550 driver")


def test_host_without_nvswitch_gets_no_fabricmanager():
    host = run_deploy(gpu_cluster("rocky9", "converged", nvswitches=0))[GPU_WORKER]
    assert not host.has_op("fabricmanager")


# --- CPU hosts --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("os_name", OSES)
@pytest.mark.parametrize("state", ["fresh", "converged"])
def test_cpu_only_cluster_has_no_nvidia_anywhere(os_name, state):
    """Not an op, a command, a file or a package: even with NVIDIA settings in the data."""
    data = {
        "ray_num_gpus": "auto",
        "nvidia_driver": "install",
        "nvidia_allow_reboot": True,
        "nvidia_toolkit_version": "1.18.0",
    }
    run = run_deploy(reference_cluster(os_name, state, data=data, gpus={}, options={}))
    for name, host in run.hosts.items():
        assert mentions_nvidia(host) == [], name
        if state == "fresh":
            assert not any(a.startswith("--gpus") for a in host.docker_create())
            assert "--num-gpus=0" in host.docker_create()


# --- GPU counts ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("os_name", OSES)
def test_declared_gpus_that_differ_stop_before_any_change(os_name, sent):
    hosts = with_data(gpu_cluster(os_name), GPU_WORKER, ray_num_gpus=4)
    with pytest.raises(GpuCountError, match=rf"host {GPU_WORKER}: ray_num_gpus = 4: expected 8, the number of NVIDIA"):
        run_deploy(hosts)
    commands = [c for host_commands in sent.values() for c in host_commands]
    assert not any(c.startswith(("apt-get", "dnf ", "nvidia-ctk", "docker ", "systemctl ")) for c in commands)


def test_declared_gpus_without_a_driver_are_checked_against_the_pci_bus():
    hosts = with_data(gpu_cluster("al2023", driver=False), GPU_WORKER, ray_num_gpus=2, nvidia_driver="install")
    with pytest.raises(GpuCountError, match=r"ray_num_gpus = 2: expected 8"):
        run_deploy(hosts)


def test_device_list_gives_the_container_those_gpus_and_ray_their_count():
    hosts = with_data(gpu_cluster("ubuntu22"), GPU_WORKER, ray_num_gpus="auto", nvidia_visible_devices=[2, 5])
    host = run_deploy(hosts)[GPU_WORKER]
    create = host.docker_create()
    assert '--gpus="device=2,5"' in create
    assert "--gpus=all" not in create
    assert "--num-gpus=2" in create
    smoke = shlex.split(host.op("Check that a .* container sees 2 GPUs").commands[0].split("$(", 1)[1])
    assert '--gpus="device=2,5"' in smoke


def test_device_list_naming_a_gpu_the_host_lacks_stops_the_deploy():
    hosts = with_data(gpu_cluster("debian12"), GPU_WORKER, ray_num_gpus="auto", nvidia_visible_devices=[7, 8])
    with pytest.raises(GpuCountError, match=r"nvidia_visible_devices = \[7, 8\]: expected GPU indices below 8"):
        run_deploy(hosts)


def test_declared_count_must_match_the_device_list():
    hosts = with_data(gpu_cluster("rocky9"), GPU_WORKER, ray_num_gpus=8, nvidia_visible_devices=[0, 1])
    with pytest.raises(GpuCountError, match=r"ray_num_gpus = 8: expected 2, the number of GPUs in nvidia_visible"):
        run_deploy(hosts)


# --- Mirrors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("os_name", ["ubuntu24", "al2023"])
def test_toolkit_repository_url_comes_from_data(os_name):
    mirror = "https://mirror.lab.example/libnvidia-container"
    host = run_deploy(gpu_cluster(os_name, data={"nvidia_toolkit_repo_url": mirror + "/"}))[GPU_WORKER]
    texts = host.commands + [str(v) for v in host.uploads.values()]
    assert any(f"{mirror}/stable/" in t for t in texts)
    assert not any("nvidia.github.io" in t for t in texts)
