"""NVIDIA: GPU hosts ready to run GPU containers; CPU hosts left alone.

On a host with NVIDIA GPUs on its PCI bus (fact ``NvidiaDevices``), ensures:

- a working driver. ``nvidia_driver = "preinstalled"`` (the default) stops the
  deploy, before any change, when nvidia-smi does not answer; ``"install"``
  installs the ``nvidia_driver_branch`` server driver the distribution
  recommends (Ubuntu: ``ubuntu-drivers --gpgpu``; Debian, RHEL 9 and its
  rebuilds, Amazon Linux 2023: NVIDIA's CUDA repository), then reboots and
  waits for the host when ``nvidia_allow_reboot`` is true, or stops that host
  saying that it needs a reboot;
- nvidia-persistenced enabled and running;
- on NVSwitch systems (``NvidiaDevices``'s ``nvswitches``), nvidia-fabricmanager at the
  driver's version, enabled and running;
- the NVIDIA Container Toolkit at ``nvidia_toolkit_version`` from
  ``nvidia_toolkit_repo_url`` (signed apt or dnf repository), and the NVIDIA
  runtime registered in daemon.json (``nvidia-ctk runtime configure``) only
  when daemon.json lacks it, with Docker restarted only then (a run that died
  before that restart leaves daemon.json newer than the daemon: the Docker
  step of the next run restarts it);
- after any of that changed, a smoke check: a container from ``ray_image``
  given the same ``--gpus`` as ray-node lists as many GPUs as Ray is given.

A host whose detected and declared GPU count is 0 gets no NVIDIA operation at
all. What differs between distributions is data (``NVIDIA_OS``), as in
``deploy/host/platform.py``. Example:

    nvidia()   # in deploy/cluster.py, after docker() and ray_image(), before storage()
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.rpm import RpmPackages
from pyinfra.operations import apt, dnf, files, server, systemd
from pyinfra.operations.util import any_changed

from deploy.contract.settings import host_settings
from deploy.host import image_mirror
from deploy.host.base import dnf_repository, platform, signed_apt_repository
from deploy.host.docker import DAEMON_JSON, merge_daemon_config, parse_daemon_config
from deploy.host.epel import ensure_epel
from deploy.host.platform import Platform
from deploy.ray.ray_node import gpus_option, resolve_num_gpus
from deploy.run.facts import FileText, HostInfo, NvidiaDevices, fact
from deploy.run.templating import resource

#: The toolkit's packages, installed at one version (NVIDIA's install guide pins all four).
TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
TOOLKIT_KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit-keyring.asc"  # armored: apt reads .asc keys
TOOLKIT_APT_LIST = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
TOOLKIT_DNF_REPO = "/etc/yum.repos.d/nvidia-container-toolkit.repo"
TOOLKIT_DNF_TEMPLATE = resource(__package__, "nvidia-container-toolkit.repo.j2")
CUDA_DNF_TEMPLATE = resource(__package__, "cuda.repo.j2")
CUDA_KEYRING = "/etc/apt/keyrings/cuda-archive-keyring.asc"
#: CUDA repository architecture directories ("sbsa": Arm servers).
CUDA_ARCH = {"x86_64": "x86_64", "aarch64": "sbsa"}


class NvidiaDriverMissing(PyinfraError):
    """A host has NVIDIA GPUs but no working driver, and the data says not to install one."""


class UnsupportedNvidiaPlatform(PyinfraError):
    """A GPU host runs an OS for which rayrig has no NVIDIA plan."""


@dataclass(frozen=True)
class NvidiaOs:
    """What differs between distributions for the NVIDIA layer. ``{branch}`` in the
    strings is the driver branch (e.g. "550")."""

    cuda_dir: str  # directory of NVIDIA's CUDA repository for this OS, e.g. "ubuntu2204"
    cuda_key: str  # the repository's signing key, a file in that directory
    driver_from_cuda: bool  # the driver comes from the CUDA repository (else from the distribution)
    driver_install: tuple[str, ...]  # commands that install the driver
    driver_package: str  # a package installed with the driver: present means "installed, maybe not loaded"
    fabricmanager: str  # the Fabric Manager package
    fabricmanager_from_cuda: bool  # Fabric Manager comes from the CUDA repository
    needs_epel: bool = False  # the driver's DKMS comes from EPEL (deploy.host.epel), added first


_APT = "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends"

# Ubuntu: the distribution's own server driver and Fabric Manager (multiverse), which
# Canonical keeps at the same version; `ubuntu-drivers install --gpgpu` picks the kernel's
# prebuilt, signed modules. nvidia-utils-*-server brings nvidia-smi, which --gpgpu leaves out.
_UBUNTU = dict(
    cuda_key="3bf863cc.pub",
    driver_from_cuda=False,
    driver_install=(
        "apt-get update",
        f"{_APT} ubuntu-drivers-common",
        "ubuntu-drivers install --gpgpu nvidia:{branch}-server",
        f"{_APT} nvidia-utils-{{branch}}-server",
    ),
    driver_package="nvidia-utils-{branch}-server",
    fabricmanager="nvidia-fabricmanager-{branch}",
    fabricmanager_from_cuda=False,
)
# RHEL 9 family and Amazon Linux 2023: the driver's DKMS module stream from the CUDA
# repository. DKMS comes from EPEL on the RHEL 9 family (`crb` ships with epel-release), which
# deploy.host.epel adds verified (Rocky/Alma: their extras; RHEL: Fedora's package, its key
# pinned). Uncertain: NVIDIA's newest guides (580+) prefer the "-open" streams; "{branch}-dkms"
# is the proprietary module, which also drives pre-Turing GPUs. The Fabric Manager package of
# the 550+ branches in the rhel9 and amzn2023 repositories is "nvidia-fabric-manager" (older
# branches: "nvidia-fabricmanager-{branch}").
_DNF_DRIVER = "dnf module install -y nvidia-driver:{branch}-dkms"

NVIDIA_OS: dict[str, NvidiaOs] = {
    "ubuntu2204": NvidiaOs(cuda_dir="ubuntu2204", **_UBUNTU),
    "ubuntu2404": NvidiaOs(cuda_dir="ubuntu2404", **_UBUNTU),
    # Debian 12: the cuda-drivers-{branch} metapackage from the CUDA repository (DKMS, so the
    # running kernel's headers first). NVIDIA's guide also enables "contrib" for some dependencies.
    "debian12": NvidiaOs(
        cuda_dir="debian12",
        cuda_key="3bf863cc.pub",
        driver_from_cuda=True,
        driver_install=(
            "apt-get update",
            f"{_APT} linux-headers-$(uname -r)",
            f"{_APT} cuda-drivers-{{branch}}",
        ),
        driver_package="cuda-drivers-{branch}",
        fabricmanager="nvidia-fabricmanager-{branch}",
        fabricmanager_from_cuda=True,
    ),
    "rhel9": NvidiaOs(
        cuda_dir="rhel9",
        cuda_key="D42D0685.pub",
        driver_from_cuda=True,
        driver_install=(
            "crb enable",
            "dnf install -y kernel-devel-matched kernel-headers",
            _DNF_DRIVER,
        ),
        driver_package="nvidia-driver",
        fabricmanager="nvidia-fabric-manager",
        fabricmanager_from_cuda=True,
        needs_epel=True,
    ),
    "amzn2023": NvidiaOs(
        cuda_dir="amzn2023",
        cuda_key="D42D0685.pub",
        driver_from_cuda=True,
        driver_install=(
            "dnf install -y dkms kernel-devel-$(uname -r) kernel-headers-$(uname -r) kernel-modules-extra-$(uname -r)",
            _DNF_DRIVER,
        ),
        driver_package="nvidia-driver",
        fabricmanager="nvidia-fabric-manager",
        fabricmanager_from_cuda=True,
    ),
}


# --- Pure helpers ----------------------------------------------------------------------------------


def cuda_dir(plat: Platform) -> str:
    """The CUDA repository directory of a platform: "ubuntu2204", "debian12", "rhel9", "amzn2023"."""
    major = plat.version.split(".")[0]
    if plat.id == "ubuntu":
        return "ubuntu" + plat.version.replace(".", "")
    if plat.id in ("rocky", "rhel", "almalinux"):
        return f"rhel{major}"
    return f"{plat.id}{major}"


def nvidia_os(plat: Platform, host_name: str = "") -> NvidiaOs:
    """The NVIDIA data of a platform, or an error naming the host when there is none."""
    found = NVIDIA_OS.get(cuda_dir(plat))
    if found is None:
        where = f"host {host_name}: " if host_name else ""
        raise UnsupportedNvidiaPlatform(
            f"{where}NVIDIA GPUs on {plat.label}, which rayrig has no NVIDIA plan for; "
            "GPU hosts run Ubuntu 22.04/24.04, Debian 12, Rocky Linux/RHEL/AlmaLinux 9 or Amazon Linux 2023"
        )
    return found


def toolkit_specs(family: str, version: str) -> list[str]:
    """The toolkit's packages pinned at ``version``, as apt or dnf takes them.

    >>> toolkit_specs("apt", "1.17.8")[0], toolkit_specs("dnf", "1.17.8")[0]
    ('nvidia-container-toolkit=1.17.8-1', 'nvidia-container-toolkit-1.17.8-1')
    """
    join = "=" if family == "apt" else "-"
    return [f"{name}{join}{version}-1" for name in TOOLKIT_PACKAGES]


def toolkit_current(installed: dict[str, Any], version: str) -> bool:
    """Whether every toolkit package is installed at ``version`` (package fact: name -> versions)."""
    return all(f"{version}-1" in (installed.get(name) or ()) for name in TOOLKIT_PACKAGES)


def toolkit_apt_source(repo_url: str) -> str:
    """The toolkit's apt source line (apt fills in ``$(ARCH)``, as in NVIDIA's own list file)."""
    return f"deb [signed-by={TOOLKIT_KEYRING}] {repo_url.rstrip('/')}/stable/deb/$(ARCH) /\n"


def toolkit_dnf_values(repo_url: str) -> dict[str, str]:
    """What ``nvidia-container-toolkit.repo.j2`` says besides ``gpgkey`` (the local copy of the checked
    key): the toolkit's dnf repository, as NVIDIA's nvidia-container-toolkit.repo has it."""
    return {"base": repo_url.rstrip("/")}


def cuda_repo_base(repo_url: str, nos: NvidiaOs, arch: str) -> str:
    """The CUDA repository of an OS and CPU architecture, e.g. ``.../repos/rhel9/x86_64``."""
    return f"{repo_url.rstrip('/')}/{nos.cuda_dir}/{CUDA_ARCH.get(arch, arch)}"


def cuda_apt_source(repo_url: str, nos: NvidiaOs, arch: str) -> str:
    """The CUDA repository's apt source line (a flat repository: suite "/")."""
    return f"deb [signed-by={CUDA_KEYRING}] {cuda_repo_base(repo_url, nos, arch)}/ /\n"


def cuda_apt_list(nos: NvidiaOs, arch: str) -> str:
    """Where the CUDA apt source goes: the file NVIDIA's cuda-keyring package would write, so
    that the repository is configured once either way."""
    return f"/etc/apt/sources.list.d/cuda-{nos.cuda_dir}-{CUDA_ARCH.get(arch, arch)}.list"


def cuda_dnf_values(repo_url: str, nos: NvidiaOs, arch: str) -> dict[str, str]:
    """What ``cuda.repo.j2`` says besides ``gpgkey`` (the local copy of the checked key): the CUDA
    repository for dnf, as NVIDIA's cuda-<os>.repo has it (the URL from data)."""
    section = f"cuda-{nos.cuda_dir}-{CUDA_ARCH.get(arch, arch)}"
    return {"section": section, "base": cuda_repo_base(repo_url, nos, arch)}


def cuda_dnf_repo_path(nos: NvidiaOs) -> str:
    return f"/etc/yum.repos.d/cuda-{nos.cuda_dir}.repo"


def driver_commands(nos: NvidiaOs, branch: str) -> list[str]:
    """The commands that install the ``branch`` driver on an OS."""
    return [command.replace("{branch}", branch) for command in nos.driver_install]


def fabricmanager_package(nos: NvidiaOs, family: str, branch: str, driver_version: str | None) -> tuple[str, str]:
    """(package name, install argument) of Fabric Manager for a driver.

    The version must equal the driver's: pinned to the loaded driver's version when there
    is one (apt: any Debian revision, as the Ubuntu archive and the CUDA repository differ),
    else to the branch being installed from the same repository.

    >>> fabricmanager_package(NVIDIA_OS["ubuntu2204"], "apt", "550", "550.54.15")
    ('nvidia-fabricmanager-550', 'nvidia-fabricmanager-550=550.54.15-*')
    >>> fabricmanager_package(NVIDIA_OS["rhel9"], "dnf", "550", "550.54.15")
    ('nvidia-fabric-manager', 'nvidia-fabric-manager-550.54.15')
    """
    name = nos.fabricmanager.replace("{branch}", branch)
    if family == "apt":
        return name, f"{name}={driver_version}-*" if driver_version else name
    return name, f"{name}-{driver_version}" if driver_version else f"{name}-{branch}.*"


def fabricmanager_current(installed: dict[str, Any], name: str, driver_version: str | None, branch: str) -> bool:
    """Whether Fabric Manager is installed at the driver's version (or its branch, before one is loaded)."""
    prefix = f"{driver_version}-" if driver_version else f"{branch}."
    return any(str(v).startswith(prefix) for v in installed.get(name) or ())


def has_nvidia_runtime(daemon: dict[str, Any]) -> bool:
    """Whether daemon.json registers the "nvidia" runtime (what ``nvidia-ctk runtime configure`` adds)."""
    runtimes = daemon.get("runtimes")
    return isinstance(runtimes, dict) and "nvidia" in runtimes


def smoke_command(image: str, gpus: str, count: int) -> str:
    """A shell command that fails unless a container from ``image`` given ``gpus`` lists ``count`` GPUs.

    The image is not pulled here (the Ray image step did, with rayrig's registry login).
    """
    run = shlex.join(["docker", "run", "--rm", "--pull=never", gpus, "--entrypoint=nvidia-smi", image, "-L"])
    sees, expected = shlex.quote(f"a {image} container sees"), shlex.quote(f"GPUs, expected {int(count)}:")
    return (
        f'out=$({run} 2>&1) || {{ echo "$out" >&2; exit 1; }}; '
        "n=$(printf '%s\\n' \"$out\" | grep -c '^GPU '); "
        f'[ "$n" -eq {int(count)} ] || {{ echo {sees} "$n" {expected} "$out" >&2; exit 1; }}'
    )


def reboot_needed_command(host_name: str) -> str:
    """A command that fails the host with the reason: the new driver needs a reboot."""
    message = (
        f"{host_name}: the NVIDIA driver is installed but not loaded. Reboot the host and run the deploy "
        "again, or set nvidia_allow_reboot = true to let rayrig reboot it."
    )
    return f"echo {shlex.quote(message)} >&2; exit 1"


def driver_missing_message(host_name: str, pci_count: int) -> str:
    return (
        f"host {host_name}: {pci_count} NVIDIA GPU(s) on the PCI bus but no working driver (nvidia-smi is "
        'missing or fails): expected a driver with nvidia_driver = "preinstalled". Install one, or set '
        'nvidia_driver = "install" (and nvidia_driver_branch) to let rayrig install it. '
        "Nothing was changed on any host."
    )


# --- Steps ----------------------------------------------------------------------------------------


def _install(specs: list[str], name: str, family: str, allow_downgrades: bool = False) -> Any:
    if family == "apt":
        return apt.packages(
            name=name, packages=specs, update=True, no_recommends=True, allow_downgrades=allow_downgrades
        )
    return dnf.packages(name=name, packages=specs)


def _cuda_repository(plat: Platform, nos: NvidiaOs, repo_url: str) -> None:
    arch = fact(host, HostInfo)["arch"]
    if plat.family == "apt":
        signed_apt_repository(
            "the CUDA",
            key_url=f"{cuda_repo_base(repo_url, nos, arch)}/{nos.cuda_key}",
            keyring=CUDA_KEYRING,
            list_path=cuda_apt_list(nos, arch),
            line=cuda_apt_source(repo_url, nos, arch),
            setting="nvidia_cuda_repo_url",
            key="cuda-deb",
        )
    else:
        values = cuda_dnf_values(repo_url, nos, arch)
        dnf_repository(
            "the CUDA", cuda_dnf_repo_path(nos), CUDA_DNF_TEMPLATE, setting="nvidia_cuda_repo_url",
            key_url=f"{values['base']}/{nos.cuda_key}", key="cuda-rpm", **values,
        )  # fmt: skip


def _driver(plat: Platform, nos: NvidiaOs, settings: dict[str, Any], installed: dict[str, Any]) -> tuple[list, bool]:
    """Install the driver; reboot or stop. Returns (changing operations, whether the host stops here)."""
    branch = settings["nvidia_driver_branch"]
    ops = []
    if nos.driver_package.replace("{branch}", branch) not in installed:
        if nos.needs_epel:
            ensure_epel("for the NVIDIA driver's DKMS")
        ops.append(server.shell(name=f"Install the NVIDIA {branch} driver", commands=driver_commands(nos, branch)))
    if not settings["nvidia_allow_reboot"]:
        logger.warning(f"{host.name}: the NVIDIA driver needs a reboot to load; nvidia_allow_reboot is false")
        server.shell(
            name="Stop here: a reboot is needed to load the NVIDIA driver",
            commands=[reboot_needed_command(host.name)],
        )
        return ops, True
    logger.warning(f"{host.name}: the host will be rebooted to load the NVIDIA driver (nvidia_allow_reboot)")
    reboot = server.reboot(
        name="Reboot to load the NVIDIA driver", delay=30, reboot_timeout=settings["nvidia_reboot_timeout_s"]
    )
    server.shell(
        name="Check that the NVIDIA driver is loaded",
        commands=[
            "nvidia-smi -L >/dev/null || { echo 'the NVIDIA driver did not load after the reboot' >&2; exit 1; }"
        ],
    )
    return [*ops, reboot], False


def _fabricmanager(
    plat: Platform, nos: NvidiaOs, settings: dict[str, Any], driver: dict[str, Any] | None, installed: dict[str, Any]
) -> list:
    version = driver["driver_version"] if driver else None
    branch = version.split(".")[0] if version else settings["nvidia_driver_branch"]
    name, spec = fabricmanager_package(nos, plat.family, branch, version)
    ops = []
    if not fabricmanager_current(installed, name, version, branch):
        ops.append(_install([spec], f"Install nvidia-fabricmanager {version or branch}", plat.family, True))
    systemd.service(
        name="Enable and start nvidia-fabricmanager", service="nvidia-fabricmanager", running=True, enabled=True
    )
    return ops


def _toolkit(plat: Platform, settings: dict[str, Any], installed: dict[str, Any]) -> list:
    url, version = settings["nvidia_toolkit_repo_url"], settings["nvidia_toolkit_version"]
    if plat.family == "apt":
        signed_apt_repository(
            "the NVIDIA Container Toolkit",
            key_url=f"{url.rstrip('/')}/gpgkey",
            keyring=TOOLKIT_KEYRING,
            list_path=TOOLKIT_APT_LIST,
            line=toolkit_apt_source(url),
            setting="nvidia_toolkit_repo_url",
            key="nvidia-container-toolkit",
        )
    else:
        values = toolkit_dnf_values(url)
        dnf_repository(
            "the NVIDIA Container Toolkit", TOOLKIT_DNF_REPO, TOOLKIT_DNF_TEMPLATE,
            setting="nvidia_toolkit_repo_url", key_url=f"{values['base']}/gpgkey", key="nvidia-container-toolkit",
            **values,
        )  # fmt: skip
    if toolkit_current(installed, version):
        return []
    specs = toolkit_specs(plat.family, version)
    return [_install(specs, f"Install the NVIDIA Container Toolkit {version}", plat.family, allow_downgrades=True)]


def _docker_runtime(settings: dict[str, Any]) -> list:
    # daemon.json as the Docker step read it (the same memoized fact) and will leave it.
    daemon = merge_daemon_config(parse_daemon_config(fact(host, FileText, DAEMON_JSON)), settings)
    if has_nvidia_runtime(daemon):
        return []
    configure = server.shell(
        name="Register the NVIDIA runtime with Docker", commands=["nvidia-ctk runtime configure --runtime=docker"]
    )
    # An explicit restart: systemd.service(restarted=True) restarts only a service that was
    # running when the plan was made, and on a fresh host Docker was not (the Docker step
    # started it since); a start would leave the runtime unregistered.
    restart = server.shell(
        name="Restart Docker for the NVIDIA runtime",
        commands=["systemctl restart docker.service"],
        _if=configure.did_change,
    )
    return [configure, restart]


@deploy("NVIDIA")
def nvidia() -> None:
    settings = host_settings(host)
    gpus = fact(host, NvidiaDevices)
    visible = settings["nvidia_visible_devices"]
    count = resolve_num_gpus(settings["ray_num_gpus"], gpus, host.name, visible)
    if count == 0:
        return  # a CPU host: no NVIDIA package, file or command

    plat = platform()
    nos = nvidia_os(plat, host.name)
    driver = gpus.get("driver")
    if driver is None and settings["nvidia_driver"] != "install":
        raise NvidiaDriverMissing(driver_missing_message(host.name, gpus.get("pci_count", 0)))
    installed = fact(host, DebPackages if plat.family == "apt" else RpmPackages) or {}
    switches = gpus["nvswitches"]

    if plat.family == "apt":
        files.directory(name="Create the apt keyrings directory for NVIDIA", path="/etc/apt/keyrings", mode="755")
    if (driver is None and nos.driver_from_cuda) or (switches and nos.fabricmanager_from_cuda):
        _cuda_repository(plat, nos, settings["nvidia_cuda_repo_url"])
    changes: list = []
    if driver is None:
        changes, stop = _driver(plat, nos, settings, installed)
        if stop:
            return
    systemd.service(
        name="Enable and start nvidia-persistenced", service="nvidia-persistenced", running=True, enabled=True
    )
    if switches:
        changes += _fabricmanager(plat, nos, settings, driver, installed)
    changes += _toolkit(plat, settings, installed)
    changes += _docker_runtime(settings)

    if changes:
        image = settings["ray_image"]
        server.shell(
            name=f"Check that a {image} container sees {count} GPU{'s' if count != 1 else ''}",
            commands=[smoke_command(image_mirror.local_name(image), gpus_option(visible), count)],
            _if=any_changed(*changes),
        )
