"""Fake hosts for plan tests: pyinfra ``@fake`` host data whose ``fake_responses``
answer every fact rayrig's deploy reads, per OS and per state.

States:

- ``"fresh"``: nothing installed. Base packages and Docker are missing, no
  daemon.json, no image, no ray-node container, no rayrig file on disk.
- ``"converged"``: a previous deploy with the same data completed. Every
  package is installed (in the ``dpkg -l`` / ``rpm -qa`` formats pyinfra's
  DebPackages/RpmPackages facts parse), every file rayrig puts is there with
  its mode and sha1, daemon.json holds the merged keys, Docker is enabled and
  running, the image is present and ``ray-node`` runs with the hash label of
  the desired configuration.

The converged answers are built from the host's data independently of the
deploy modules' operations: file contents are written out here, and the
container's hash comes from the pure argument builders of ``deploy.ray.ray_node``
(``ray_start_args``/``docker_run_args``/``config_hash``), fed with the same
facts the fake host reports.

A fake connector matcher is a substring of the fact's shell command; the
first match wins, so specific matchers (a path) come before generic ones.

    hosts = cluster("ubuntu22", "fresh", gpus={"@fake/head": 8})
    # -> [("@fake/head", {...data, "fake_responses": {...}}), ...]
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from deploy.contract import settings
from deploy.firewall import nftables
from deploy.host.docker import merge_daemon_config
from deploy.host.ray_image import registry_config
from deploy.monitoring import config as monitoring_config
from deploy.ray import auth, cluster_token, env_secret, membership, ray_node, ray_temp
from deploy.storage import nfs
from deploy.storage.mounts import mount_points
from tests.plan.fakes import fake_firewall, fake_monitoring, fake_monitoring_exporters, fake_storage

FRESH = "fresh"
CONVERGED = "converged"
STATES = (FRESH, CONVERGED)

# Real /etc/os-release files of the supported systems.
OS_RELEASE: dict[str, list[str]] = {
    "ubuntu22": [
        'PRETTY_NAME="Ubuntu 22.04.4 LTS"',
        'NAME="Ubuntu"',
        'VERSION_ID="22.04"',
        'VERSION="22.04.4 LTS (Jammy Jellyfish)"',
        "VERSION_CODENAME=jammy",
        "ID=ubuntu",
        "ID_LIKE=debian",
        'HOME_URL="https://www.ubuntu.com/"',
        'SUPPORT_URL="https://help.ubuntu.com/"',
        'BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"',
        'PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"',
        "UBUNTU_CODENAME=jammy",
    ],
    "ubuntu24": [
        'PRETTY_NAME="Ubuntu 24.04.1 LTS"',
        'NAME="Ubuntu"',
        'VERSION_ID="24.04"',
        'VERSION="24.04.1 LTS (Noble Numbat)"',
        "VERSION_CODENAME=noble",
        "ID=ubuntu",
        "ID_LIKE=debian",
        'HOME_URL="https://www.ubuntu.com/"',
        'SUPPORT_URL="https://help.ubuntu.com/"',
        'BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"',
        'PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"',
        "UBUNTU_CODENAME=noble",
        "LOGO=ubuntu-logo",
    ],
    "debian12": [
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"',
        'NAME="Debian GNU/Linux"',
        'VERSION_ID="12"',
        'VERSION="12 (bookworm)"',
        "VERSION_CODENAME=bookworm",
        "ID=debian",
        'HOME_URL="https://www.debian.org/"',
        'SUPPORT_URL="https://www.debian.org/support"',
        'BUG_REPORT_URL="https://bugs.debian.org/"',
    ],
    "rocky9": [
        'NAME="Rocky Linux"',
        'VERSION="9.4 (Blue Onyx)"',
        'ID="rocky"',
        'ID_LIKE="rhel centos fedora"',
        'VERSION_ID="9.4"',
        'PLATFORM_ID="platform:el9"',
        'PRETTY_NAME="Rocky Linux 9.4 (Blue Onyx)"',
        'ANSI_COLOR="0;32"',
        'LOGO="fedora-logo-icon"',
        'CPE_NAME="cpe:/o:rocky:rocky:9::baseos"',
        'HOME_URL="https://rockylinux.org/"',
        'BUG_REPORT_URL="https://bugs.rockylinux.org/"',
        'SUPPORT_END="2032-05-31"',
        'ROCKY_SUPPORT_PRODUCT="Rocky-Linux-9"',
        'ROCKY_SUPPORT_PRODUCT_VERSION="9.4"',
        'REDHAT_SUPPORT_PRODUCT="Rocky Linux"',
        'REDHAT_SUPPORT_PRODUCT_VERSION="9.4"',
    ],
    "al2023": [
        'NAME="Amazon Linux"',
        'VERSION="2023"',
        'ID="amzn"',
        'ID_LIKE="fedora"',
        'VERSION_ID="2023"',
        'PLATFORM_ID="platform:al2023"',
        'PRETTY_NAME="Amazon Linux 2023.5.20240916"',
        'ANSI_COLOR="0;33"',
        'CPE_NAME="cpe:2.3:o:amazon:amazon_linux:2023"',
        'HOME_URL="https://aws.amazon.com/linux/amazon-linux-2023/"',
        'DOCUMENTATION_URL="https://docs.aws.amazon.com/linux/"',
        'SUPPORT_URL="https://aws.amazon.com/premiumsupport/"',
        'BUG_REPORT_URL="https://github.com/amazonlinux/amazon-linux-2023"',
        'VENDOR_NAME="AWS"',
        'VENDOR_URL="https://aws.amazon.com/"',
        'SUPPORT_END="2028-03-15"',
    ],
    # Not supported by rayrig: for the error path.
    "centos7": [
        'NAME="CentOS Linux"',
        'VERSION="7 (Core)"',
        'ID="centos"',
        'ID_LIKE="rhel fedora"',
        'VERSION_ID="7"',
        'PRETTY_NAME="CentOS Linux 7 (Core)"',
    ],
}

#: The supported systems, in the order tests report them.
OSES = ("ubuntu22", "ubuntu24", "debian12", "rocky9", "al2023")

FAMILY = {"ubuntu22": "apt", "ubuntu24": "apt", "debian12": "apt", "rocky9": "dnf", "al2023": "dnf", "centos7": "dnf"}
CODENAME = {"ubuntu22": "jammy", "ubuntu24": "noble", "debian12": "bookworm"}
DOCKER_REPO_PATH = {"ubuntu22": "ubuntu", "ubuntu24": "ubuntu", "debian12": "debian", "rocky9": "centos"}

DOCKER_CE = ("docker-ce", "docker-ce-cli", "containerd.io", "docker-buildx-plugin")
BASE_PACKAGES = {
    "ubuntu22": ("ca-certificates", "curl", "gnupg"),
    "ubuntu24": ("ca-certificates", "curl", "gnupg"),
    "debian12": ("ca-certificates", "curl", "gnupg"),
    "rocky9": ("ca-certificates", "curl", "gnupg2"),
    "al2023": ("ca-certificates", "curl-minimal", "gnupg2-minimal"),
}
#: The engine a converged host runs, per OS and docker_source.
ENGINE_PACKAGES = {
    ("ubuntu22", "distro"): ("docker.io",),
    ("ubuntu24", "distro"): ("docker.io",),
    ("debian12", "distro"): ("docker.io",),
    ("ubuntu22", "docker"): DOCKER_CE,
    ("ubuntu24", "docker"): DOCKER_CE,
    ("debian12", "docker"): DOCKER_CE,
    ("rocky9", "distro"): DOCKER_CE,  # RHEL 9 ships no Docker
    ("rocky9", "docker"): DOCKER_CE,
    ("al2023", "distro"): ("docker",),  # no Docker CE repository for Amazon Linux
    ("al2023", "docker"): ("docker",),
}
#: Packages every host has, installed or not by rayrig (so the package facts are never empty).
PREINSTALLED = ("bash", "coreutils", "openssh-server", "systemd")

H100 = "NVIDIA H100 80GB HBM3, 550.54.15, 81559"
MEM_KB = 527_958_284  # a 512 GiB server
NOFILE_HARD = 1_048_576
IMAGE_ID = "sha256:" + "ab" * 32
CONTAINER_ID = "c0ffee" * 10 + "beef"

APT_LOCK_CONF = "/etc/apt/apt.conf.d/90rayrig-lock-timeout"
APT_KEYRING = "/etc/apt/keyrings/docker.asc"
APT_DOCKER_LIST = "/etc/apt/sources.list.d/docker.list"
DNF_DOCKER_REPO = "/etc/yum.repos.d/docker-ce.repo"
DAEMON_JSON = "/etc/docker/daemon.json"
REGISTRY_CONFIG = "/etc/rayrig/docker/config.json"
SSH_HOME = "/home/rayrig"  # the SSH user's home (``echo ~``)
UPLOAD_DIR = f"{SSH_HOME}/.rayrig-upload"  # where uploads through sudo pass

# --- NVIDIA (hosts with GPUs only), written out from NVIDIA's install guides -----------------------

TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1")  # fmt: skip
TOOLKIT_KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit-keyring.asc"
TOOLKIT_APT_LIST = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
TOOLKIT_DNF_REPO = "/etc/yum.repos.d/nvidia-container-toolkit.repo"
CUDA_KEYRING = "/etc/apt/keyrings/cuda-archive-keyring.asc"
#: NVIDIA's CUDA repository directory and signing key per OS.
CUDA_REPO = {
    "ubuntu22": ("ubuntu2204", "3bf863cc.pub"),
    "ubuntu24": ("ubuntu2404", "3bf863cc.pub"),
    "debian12": ("debian12", "3bf863cc.pub"),
    "rocky9": ("rhel9", "D42D0685.pub"),
    "al2023": ("amzn2023", "D42D0685.pub"),
}
#: Ubuntu takes its driver and Fabric Manager from its own archive; the others from the CUDA repository.
FROM_CUDA = {"ubuntu22": False, "ubuntu24": False, "debian12": True, "rocky9": True, "al2023": True}
#: The package that shows the driver rayrig installs is there ("{branch}": nvidia_driver_branch).
DRIVER_PACKAGE = {
    "ubuntu22": "nvidia-utils-{branch}-server",
    "ubuntu24": "nvidia-utils-{branch}-server",
    "debian12": "cuda-drivers-{branch}",
    "rocky9": "nvidia-driver",
    "al2023": "nvidia-driver",
}
#: Fabric Manager's package and installed version, matching the fake H100s' driver 550.54.15.
FABRICMANAGER = {
    "ubuntu22": ("nvidia-fabricmanager-550", "550.54.15-0ubuntu1"),
    "ubuntu24": ("nvidia-fabricmanager-550", "550.54.15-0ubuntu1"),
    "debian12": ("nvidia-fabricmanager-550", "550.54.15-1"),
    "rocky9": ("nvidia-fabric-manager", "550.54.15-1"),
    "al2023": ("nvidia-fabric-manager", "550.54.15-1"),
}
#: What ``nvidia-ctk runtime configure --runtime=docker`` adds to daemon.json.
NVIDIA_RUNTIME = {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}


def uses_cuda_repo(os_name: str, data: Mapping[str, Any], driver: bool = True, nvswitches: int = 0) -> bool:
    """Whether rayrig configures NVIDIA's CUDA repository on a GPU host: for a driver it installs,
    or for Fabric Manager, where the distribution does not ship them."""
    installs_driver = settings.merge(data)["nvidia_driver"] == "install" and not driver
    return FROM_CUDA[os_name] and (installs_driver or nvswitches > 0)


def nvidia_files(
    os_name: str, data: Mapping[str, Any], driver: bool = True, nvswitches: int = 0
) -> dict[str, tuple[str, int]]:
    """path -> (content, mode) of the files rayrig puts on a GPU host."""
    s = settings.merge(data)
    files: dict[str, tuple[str, int]] = {}
    toolkit = s["nvidia_toolkit_repo_url"].rstrip("/")
    if FAMILY[os_name] == "apt":
        files[TOOLKIT_KEYRING] = ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n", 644)
        files[TOOLKIT_APT_LIST] = (f"deb [signed-by={TOOLKIT_KEYRING}] {toolkit}/stable/deb/$(ARCH) /\n", 644)
    else:
        files[TOOLKIT_DNF_REPO] = (
            "[nvidia-container-toolkit]\n"
            "name=nvidia-container-toolkit\n"
            f"baseurl={toolkit}/stable/rpm/$basearch\n"
            "repo_gpgcheck=1\n"
            "gpgcheck=0\n"
            "enabled=1\n"
            f"gpgkey={toolkit}/gpgkey\n"
            "sslverify=1\n"
            "sslcacert=/etc/pki/tls/certs/ca-bundle.crt\n",
            644,
        )
    if uses_cuda_repo(os_name, data, driver, nvswitches):
        directory, key = CUDA_REPO[os_name]
        base = f"{s['nvidia_cuda_repo_url'].rstrip('/')}/{directory}/x86_64"
        if FAMILY[os_name] == "apt":
            files[CUDA_KEYRING] = ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n", 644)
            files[f"/etc/apt/sources.list.d/cuda-{directory}-x86_64.list"] = (
                f"deb [signed-by={CUDA_KEYRING}] {base}/ /\n",
                644,
            )
        else:
            files[f"/etc/yum.repos.d/cuda-{directory}.repo"] = (
                f"[cuda-{directory}-x86_64]\nname=cuda-{directory}-x86_64\nbaseurl={base}\nenabled=1\n"
                f"gpgcheck=1\ngpgkey={base}/{key}\n",
                644,
            )
    return files


def nvidia_packages(
    os_name: str,
    data: Mapping[str, Any],
    nvswitches: int = 0,
    driver_packages: bool = False,
    toolkit_version: str | None = None,
) -> dict[str, str]:
    """name -> version of the NVIDIA packages on a converged GPU host."""
    s = settings.merge(data)
    version = f"{toolkit_version or s['nvidia_toolkit_version']}-1"
    packages = {name: version for name in TOOLKIT_PACKAGES}
    if nvswitches:
        name, fm_version = FABRICMANAGER[os_name]
        packages[name] = fm_version
    if driver_packages:
        packages[DRIVER_PACKAGE[os_name].replace("{branch}", s["nvidia_driver_branch"])] = "550.54.15-1"
    return packages


# --- Expected files on a converged host ---------------------------------------------------------


def expected_files(
    os_name: str, data: Mapping[str, Any], *, gpus: int = 0, driver: bool = True, nvswitches: int = 0
) -> dict[str, tuple[str, int]]:
    """path -> (content, mode) of every file rayrig puts on a host with ``data`` (and ``gpus``)."""
    s = settings.merge(data)
    files: dict[str, tuple[str, int]] = {}
    if FAMILY[os_name] == "apt":
        files[APT_LOCK_CONF] = (f'DPkg::Lock::Timeout "{s["base_wait_timeout_s"]}";\n', 644)
    if uses_docker_repo(os_name, s["docker_source"]):
        base = f"{s['docker_repo_url'].rstrip('/')}/{DOCKER_REPO_PATH[os_name]}"
        if FAMILY[os_name] == "apt":
            files[APT_KEYRING] = ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n", 644)
            files[APT_DOCKER_LIST] = (
                f"deb [arch=amd64 signed-by={APT_KEYRING}] {base} {CODENAME[os_name]} stable\n",
                644,
            )
        else:
            files[DNF_DOCKER_REPO] = (
                "[docker-ce-stable]\n"
                "name=Docker CE Stable\n"
                f"baseurl={base}/$releasever/$basearch/stable\n"
                "enabled=1\n"
                "gpgcheck=1\n"
                f"gpgkey={base}/gpg\n",
                644,
            )
    if s["docker_registry_auth"]:
        files[REGISTRY_CONFIG] = (registry_config(s["docker_registry_auth"]), 600)
    if gpus:
        files.update(nvidia_files(os_name, data, driver, nvswitches))
    name = s["ray_container_name"]
    units = fake_storage.expected_units(os_name, s)
    table = nftables.TABLE if s["firewall_enabled"] else None
    unit = ray_node.unit_text(name, mount_points(s), units, table, ray_temp.host_path(s))
    files[f"/etc/systemd/system/{name}.service"] = (unit, 644)
    if s["ray_auth"] == "token":
        files[auth.NODE_TOKEN_PATH] = (auth.read_token(auth.ensure_token(s)) + "\n", 600)
    if s["ray_env_secret"]:
        files[env_secret.ENV_FILE] = (env_secret.env_file_text(s["ray_env_secret"]), 600)
    return files


#: Directories every host of a family has before rayrig runs.
SYSTEM_DIRS = {
    "apt": ("/etc/apt/apt.conf.d", "/etc/apt/sources.list.d", "/etc/systemd/system"),
    "dnf": ("/etc/yum.repos.d", "/etc/systemd/system"),
}


def expected_dirs(os_name: str, data: Mapping[str, Any], *, gpus: int = 0) -> dict[str, int]:
    """path -> mode of every directory rayrig creates on a host with ``data`` (and ``gpus``)."""
    s = settings.merge(data)
    dirs = {"/etc/docker": 755, UPLOAD_DIR: 700, s["ray_temp_dir"]: 700}
    if FAMILY[os_name] == "apt" and (uses_docker_repo(os_name, s["docker_source"]) or gpus):
        dirs["/etc/apt/keyrings"] = 755
    if s["docker_registry_auth"]:
        dirs["/etc/rayrig/docker"] = 700
    if s["ray_auth"] == "token":
        dirs[auth.NODE_TOKEN_DIR] = 700
    if s["ray_env_secret"]:
        dirs[env_secret.ENV_DIR] = 700
    if head_monitors(s) and s["monitoring_grafana"]:
        dirs[monitoring_config.ray_dashboards_dir(s)] = 755
    return dirs


def uses_docker_repo(os_name: str, source: str) -> bool:
    return os_name in DOCKER_REPO_PATH and ENGINE_PACKAGES[(os_name, source)] == DOCKER_CE


def expected_packages(os_name: str, data: Mapping[str, Any]) -> tuple[str, ...]:
    s = settings.merge(data)
    return (*BASE_PACKAGES[os_name], *ENGINE_PACKAGES[(os_name, s["docker_source"])], *s["base_extra_packages"])


def expected_run_args(
    data: Mapping[str, Any], node_ip: str, head_ip: str, gpus: int = 0,
    mem_kb: int = MEM_KB, nofile_hard: int | None = NOFILE_HARD, monitoring: bool | None = None,
) -> list[str]:  # fmt: skip
    """The ``docker create`` arguments (without the hash label) the deploy wants for a host,
    built with the pure helpers of ``deploy.ray.ray_node`` from the host's data and facts.
    ``monitoring``: the host is the head and the monitoring host (default: the head, with
    monitoring on and no other ``monitoring_host``)."""
    s = settings.merge(data)
    visible = s["nvidia_visible_devices"]
    detected = gpus if visible == "all" else len(visible)
    num_gpus = detected if s["ray_num_gpus"] == "auto" else int(s["ray_num_gpus"])
    start = ray_node.ray_start_args(s, s["ray_role"], node_ip, head_ip, num_gpus)
    shm = ray_node.shm_size(s["ray_shm_size"], mem_kb * 1024)
    nofile = ray_node.nofile_limit(s["ray_ulimit_nofile"], nofile_hard)
    digest = auth.token_digest(auth.ensure_token(s)) if s["ray_auth"] == "token" else None
    if monitoring is None:
        monitoring = head_monitors(s)
    return ray_node.docker_run_args(s, s["ray_role"], start, num_gpus, shm, nofile, digest, monitoring)


def head_monitors(s: Mapping[str, Any]) -> bool:
    """Whether a host with settings ``s`` is the head and runs Prometheus (``monitoring_host`` unset,
    or its own address)."""
    here = s["monitoring_host"] in (None, s["ray_node_ip"])
    return bool(s["ray_role"] == "head" and s["monitoring_enabled"] and here)


# --- Fact answers --------------------------------------------------------------------------------


def _stat_line(path: str, mode: int, kind: str = "file") -> str:
    flag = {"file": "-", "directory": "d"}[kind]
    bits = "".join(
        ("r" if d & 4 else "-") + ("w" if d & 2 else "-") + ("x" if d & 1 else "-") for d in map(int, f"{mode:03d}")
    )
    return (
        f"user=root group=root mode={flag}{bits} atime=1718000000 mtime=1718000000 ctime=1718000000 size=4096 '{path}'"
    )


def _stat_matcher(path: str) -> str:
    """Substring of pyinfra's File/Directory fact command for ``path``."""
    return f"test -e {path} || test -L {path} )"


def _sha1_matcher(path: str) -> str:
    """Substring of pyinfra's Sha1File fact command for ``path``."""
    return f"test -e {path} && ( sha1sum {path}"


def _dpkg_lines(packages: Iterable[str], versioned: Mapping[str, str] | None = None) -> list[str]:
    lines = [
        "Desired=Unknown/Install/Remove/Purge/Hold",
        "| Status=Not/Inst/Conf-files/Unpacked/halF-conf/Half-inst/trig-aWait/Trig-pend",
        "|/ Err?=(none)/Reinst-required (Status,Err: uppercase=bad)",
        "||/ Name           Version            Architecture Description",
        "+++-==============-==================-============-=================================",
    ]
    lines += [f"ii  {name:<14} 1.0-1ubuntu0.1     amd64        {name} package" for name in packages]
    return lines + [f"ii  {n:<14} {v:<18} amd64        {n} package" for n, v in (versioned or {}).items()]


def _rpm_lines(packages: Iterable[str], versioned: Mapping[str, str] | None = None) -> list[str]:
    return [f"{name} 1.0-1.el9" for name in packages] + [f"{n} {v}" for n, v in (versioned or {}).items()]


def _systemd(unit: str, key: str, value: str) -> list[str]:
    return [f"Id={unit}", f"{key}={value}", ""]


def container_json(
    name: str, image: str, labels: Mapping[str, str], running: bool = True, image_id: str = IMAGE_ID
) -> str:
    """One line of ``docker container inspect --format '{{json .}}'`` (``image_id``: the image it was created from)."""
    return json.dumps(
        {
            "Id": CONTAINER_ID,
            "Image": image_id,
            "Name": f"/{name}",
            "State": {"Status": "running" if running else "exited", "Running": running, "Restarting": False},
            "Config": {"Image": image, "Labels": dict(labels)},
        }
    )


def fake_responses(
    os_name: str,
    state: str = FRESH,
    data: Mapping[str, Any] | None = None,
    *,
    head_ip: str = "10.0.0.1",
    gpus: int = 0,
    daemon_json: Mapping[str, Any] | None = None,
    daemon_json_merged: bool | None = None,
    image_present: bool | None = None,
    container_hash: str | None = None,
    container_present: bool | None = None,
    container_image_id: str = IMAGE_ID,
    unit_need_reload: bool = False,
    previous_present: bool = False,
    docker_running: bool | None = None,
    daemon_json_unread: bool = False,
    cloud_init_running: bool = False,
    mem_kb: int = MEM_KB,
    nofile_hard: int | None = NOFILE_HARD,
    driver: bool = True,
    nvswitches: int = 0,
    toolkit: bool | None = None,
    toolkit_version: str | None = None,
    nvidia_runtime: bool | None = None,
    driver_packages: bool | None = None,
    persistenced: bool | None = None,
    fabricmanager: bool | None = None,
    members: Iterable[str] = (),
    firewall: Mapping[str, Any] | None = None,
    storage: Mapping[str, Any] | None = None,
    monitoring: Mapping[str, Any] | None = None,
    recorded: Iterable[str] | None | str = CONVERGED,
    exporters: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``fake_responses`` of one host.

    ``data`` is the host's inventory data (rayrig keys); ``head_ip`` the head's
    address (for the converged container's hash). ``gpus`` NVIDIA H100s are on
    the PCI bus with a working driver. ``daemon_json`` is what another tool
    wrote to daemon.json (as is when fresh; with rayrig's keys merged in when
    converged, or as ``daemon_json_merged`` says). The other keywords change
    one aspect of the state: ``image_present``, ``container_present``,
    ``container_hash`` (the label the running container carries; giving one
    makes the container present), ``container_image_id`` (the image it was created
    from; the present image is ``IMAGE_ID``), ``previous_present`` (a stopped
    ``<name>-previous`` container, left by a replacement cut short), ``docker_running``,
    ``daemon_json_unread`` (daemon.json was written after the running daemon started: a run
    died before Docker's restart), ``unit_need_reload`` (the ray-node unit file changed since
    systemd's last daemon-reload), ``cloud_init_running``, ``mem_kb`` and ``nofile_hard``
    (None: unlimited).

    NVIDIA, on a host with ``gpus``: ``driver`` False leaves the GPUs without a
    working driver (nvidia-smi absent); ``nvswitches`` NVSwitch chips sit on the
    bus. What a converged GPU host has, each keyword overriding one aspect:
    ``toolkit`` (the Container Toolkit installed, at ``toolkit_version`` or the
    data's), ``nvidia_runtime`` (daemon.json registers the runtime),
    ``driver_packages`` (the driver rayrig installs is there, by default when the
    data says ``nvidia_driver = "install"``), ``persistenced`` and
    ``fabricmanager`` (installed at the driver's version, enabled and running).

    ``members`` are the cluster's node addresses, the head's first (the
    firewall admits them); ``firewall`` and ``storage`` are keywords for
    ``fake_firewall.facts`` and ``fake_storage.facts``, ``monitoring`` for
    ``fake_monitoring.facts`` (the monitoring server; ``cluster`` sets it), ``exporters`` for
    ``fake_monitoring_exporters.facts``. ``recorded`` is the
    membership record the host keeps (``deploy.ray.membership.MEMBERS_PATH``): by
    default, when converged, the members and every host's member networks; a
    list of members instead, or None for no record.
    """
    if state not in STATES:
        raise ValueError(f"state must be one of {STATES}, not {state!r}")
    data = dict(data or {})
    s = settings.merge(data)
    converged = state == CONVERGED
    node_ip = str(s["ray_node_ip"] or "10.0.0.99")
    responses: dict[str, Any] = {}

    # HostInfo
    responses["cat /etc/os-release"] = [
        *OS_RELEASE[os_name],
        "RAYRIG_ARCH=x86_64",
        f"RAYRIG_MEM_KB={mem_kb}",
        f"RAYRIG_NOFILE_HARD={nofile_hard if nofile_hard is not None else 'unlimited'}",
    ]
    # The SSH user's home (read as that user, for the private upload directory)
    responses["echo ~"] = [SSH_HOME]
    # CloudInitRunning
    responses["cloud-init status"] = ["status: running"] if cloud_init_running else ["status: done"]
    # NvidiaDevices, and the uptime that server.reboot compares
    responses["PCI_GPUS="] = [
        f"PCI_GPUS={gpus}",
        f"NVSWITCHES={nvswitches}",
        *([f"GPU={H100}"] * gpus if driver else []),
    ]
    responses["/proc/uptime"] = ["4242"]
    gpu_host = gpus > 0
    toolkit = converged and gpu_host if toolkit is None else toolkit
    nvidia_runtime = converged and gpu_host if nvidia_runtime is None else nvidia_runtime
    if driver_packages is None:
        driver_packages = converged and gpu_host and s["nvidia_driver"] == "install"
    persistenced = converged and gpu_host if persistenced is None else persistenced
    fabricmanager = converged and nvswitches > 0 if fabricmanager is None else fabricmanager

    members = list(members) or [head_ip, *([node_ip] if node_ip != head_ip else [])]
    steps = [
        fake_firewall.facts(os_name, converged, data, members, firewall or {}),
        fake_storage.facts(os_name, converged, data, members, storage or {}),
        fake_monitoring.facts(converged, data, monitoring or {}),
        fake_monitoring_exporters.facts(os_name, converged, data, gpus, exporters or {}),
    ]
    for step in steps:
        responses.update(step.responses)

    # rayrig's files and directories, with the daemon.json that is there
    files = expected_files(os_name, data, gpus=gpus, driver=driver, nvswitches=nvswitches) if converged else {}
    dirs = expected_dirs(os_name, data, gpus=gpus) if converged else {}
    for step in steps:
        files.update(step.files)
        dirs.update(step.dirs)
    for path in SYSTEM_DIRS[FAMILY[os_name]]:
        dirs.setdefault(path, 755)
    if recorded == CONVERGED:
        cidrs = (firewall or {}).get("member_cidrs", s["firewall_member_cidrs"])
        recorded = membership.cluster_membership(members, cidrs) if converged else None
    if recorded is not None:
        record = membership.record_text(list(recorded))
        files[membership.MEMBERS_PATH] = (record, 644)
        dirs.setdefault(membership.MEMBERS_PATH.rsplit("/", 1)[0], 755)
        responses[f"if [ -f {membership.MEMBERS_PATH} ]"] = ["RAYRIG_MEMBERS", *record.splitlines()]
    current_daemon = dict(daemon_json or {})
    if nvidia_runtime and "nvidia" not in (current_daemon.get("runtimes") or {}):
        current_daemon["runtimes"] = {**(current_daemon.get("runtimes") or {}), **NVIDIA_RUNTIME}
    if converged if daemon_json_merged is None else daemon_json_merged:
        current_daemon = merge_daemon_config(current_daemon, s)
    if current_daemon:
        files[DAEMON_JSON] = (json.dumps(current_daemon, indent=2, sort_keys=True) + "\n", 644)
        dirs.setdefault("/etc/docker", 755)
    responses[f"if [ -f {DAEMON_JSON} ]"] = (
        ["EXISTS", *files[DAEMON_JSON][0].splitlines()] if DAEMON_JSON in files else ["ABSENT"]
    )
    for path, (content, mode) in files.items():
        responses[_stat_matcher(path)] = [_stat_line(path, mode)]
        responses[_sha1_matcher(path)] = [f"{hashlib.sha1(content.encode()).hexdigest()}  {path}"]
    for path, mode in dirs.items():
        responses[_stat_matcher(path)] = [_stat_line(path, mode, "directory")]
    # The cluster's token, read from the head's file through sudo
    token_file = files.get(auth.NODE_TOKEN_PATH)
    responses[cluster_token.TOKEN_FOLLOWS] = (
        [cluster_token.TOKEN_FOLLOWS, token_file[0].strip()] if token_file else [cluster_token.NO_TOKEN]
    )

    # Packages
    installed = [*PREINSTALLED, *(expected_packages(os_name, data) if converged else ())]
    installed += [p for step in steps for p in step.packages if p not in installed]
    versioned = nvidia_packages(os_name, data, nvswitches, bool(driver_packages), toolkit_version) if gpu_host else {}
    if not toolkit:
        versioned = {n: v for n, v in versioned.items() if n not in TOOLKIT_PACKAGES}
    if not fabricmanager and os_name in FABRICMANAGER:
        versioned.pop(FABRICMANAGER[os_name][0], None)
    if FAMILY[os_name] == "apt":
        responses["dpkg -l"] = _dpkg_lines(installed, versioned)
    else:
        responses["rpm --queryformat"] = _rpm_lines(installed, versioned)

    # Docker service
    running = converged if docker_running is None else docker_running
    responses["--property SubState docker.service"] = _systemd(
        "docker.service", "SubState", "running" if running else "dead"
    )
    responses["--property UnitFileState docker.service"] = _systemd(
        "docker.service", "UnitFileState", "enabled" if converged else ""
    )
    # DockerDaemon: a daemon that started 1000 s after boot; daemon.json written 10 s before
    # that (converged), or 10 s after (a run that died before the restart).
    boot = 1_733_000_000.0
    written = boot + 1000 + (10 if daemon_json_unread else -10)
    # (first: the server.reboot's uptime matcher would answer this fact too)
    daemon = [
        f"MainPID={4242 if running else 0}",
        f"ExecMainStartTimestampMonotonic={1_000_000_000 if running else 0}",
        "RAYRIG_UPTIME=5000.00",
        f"RAYRIG_NOW={boot + 5000:.9f}",
        *([f"RAYRIG_CONFIG_WRITTEN={written:.9f}"] if DAEMON_JSON in files else []),
    ]
    responses = {"--property ExecMainStartTimestampMonotonic docker.service": daemon, **responses}

    # NVIDIA services
    for unit, up in (("nvidia-persistenced.service", persistenced), ("nvidia-fabricmanager.service", fabricmanager)):
        responses[f"--property SubState {unit}"] = _systemd(unit, "SubState", "running" if up else "dead")
        responses[f"--property UnitFileState {unit}"] = _systemd(unit, "UnitFileState", "enabled" if up else "")

    # The ray-node service
    unit = f"{s['ray_container_name']}.service"
    responses[f"--property SubState {unit}"] = _systemd(unit, "SubState", "running" if converged else "dead")
    responses[f"--property UnitFileState {unit}"] = _systemd(unit, "UnitFileState", "enabled" if converged else "")
    responses[f"--property NeedDaemonReload -- {unit}"] = [f"NeedDaemonReload={'yes' if unit_need_reload else 'no'}"]

    # The image and the ray-node container
    has_image = converged if image_present is None else image_present
    responses["docker image inspect"] = [IMAGE_ID] if has_image else []
    # A previous container left by a replacement cut short; its matcher comes before the generic one.
    previous = ray_node.previous_name(s["ray_container_name"])
    responses[f"docker container inspect --format '{{{{json .}}}}' {previous}"] = (
        [container_json(previous, s["ray_image"], {ray_node.ROLE_LABEL: s["ray_role"]}, running=False)]
        if previous_present
        else []
    )
    if container_present is None:
        container_present = converged or container_hash is not None
    if container_present:
        if container_hash is None:
            run_args = expected_run_args(
                data, node_ip, head_ip, gpus, mem_kb, nofile_hard, (monitoring or {}).get("head_monitors")
            )
            container_hash = ray_node.config_hash(run_args)
        labels = {ray_node.HASH_LABEL: container_hash, ray_node.ROLE_LABEL: s["ray_role"]}
        if s["ray_auth"] == "token":
            labels[auth.TOKEN_LABEL] = auth.token_digest(auth.ensure_token(s))
        responses["docker container inspect"] = [
            container_json(s["ray_container_name"], s["ray_image"], labels, image_id=container_image_id)
        ]
    else:
        responses["docker container inspect"] = []
    return responses


# --- Whole clusters ------------------------------------------------------------------------------

HEAD = "@fake/head"
WORKERS = ("@fake/worker-1", "@fake/worker-2")


def cluster_data(workers: int = 2) -> list[tuple[str, dict[str, Any]]]:
    """A head (10.0.0.1) and ``workers`` workers (10.0.0.2, ...), each declaring its CPUs."""
    hosts = [(HEAD, {"ray_role": "head", "ray_node_ip": "10.0.0.1"})]
    for i in range(1, workers + 1):
        hosts.append(
            (
                f"@fake/worker-{i}",
                {"ray_role": "worker", "ray_node_ip": f"10.0.0.{i + 1}", "ray_num_cpus": 16 * i},
            )
        )
    return hosts


def cluster(
    os_name: str = "ubuntu22",
    state: str = FRESH,
    hosts: list[tuple[str, Mapping[str, Any]]] | None = None,
    *,
    data: Mapping[str, Any] | None = None,
    host_data: Mapping[str, Mapping[str, Any]] | None = None,
    gpus: Mapping[str, int] | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    **common: Any,
) -> list[tuple[str, dict[str, Any]]]:
    """pyinfra (name, data) pairs of a cluster on ``os_name`` in ``state``.

    ``hosts`` defaults to ``cluster_data()``; ``data`` is added to every host,
    ``host_data`` to one host by name. ``gpus`` maps host names to their GPU
    count; ``options`` maps host names to further ``fake_responses`` keywords,
    and ``common`` keywords go to every host.
    """
    hosts = [(name, dict(d)) for name, d in (hosts or cluster_data())]
    for name, d in hosts:
        d.update(copy.deepcopy(dict(data or {})))
        d.update(copy.deepcopy(dict((host_data or {}).get(name, {}))))
    heads = [d for _n, d in hosts if d.get("ray_role") == "head"]
    head_ip = str(heads[0].get("ray_node_ip")) if heads else "10.0.0.1"
    members = [head_ip] + [str(d.get("ray_node_ip")) for _n, d in hosts if d not in heads and d.get("ray_node_ip")]
    result = []
    watcher = monitoring_host(hosts)
    view = [
        monitoring_config.Member(
            name,
            str(d.get("ray_node_ip")),
            head=d.get("ray_role") == "head",
            gpu=(gpus or {}).get(name, 0) > 0 and settings.merge(d)["monitoring_gpu_exporter"] != "none",
        )
        for name, d in hosts
        if settings.merge(d)["ray_state"] == "present"
    ]
    for name, d in hosts:
        kwargs = {"members": members, **common, **dict((options or {}).get(name, {}))}
        serves = name == watcher
        kwargs["monitoring"] = {
            "serves": serves,
            "name": name,
            "members": view,
            "head_monitors": serves and d.get("ray_role") == "head",
            **dict(kwargs.get("monitoring") or {}),
        }
        nfs_server = nfs.serves_nfs(settings.merge(d), name)
        kwargs["firewall"] = {"nfs_server": nfs_server, **dict(kwargs.get("firewall") or {})}
        responses = fake_responses(os_name, state, d, head_ip=head_ip, gpus=(gpus or {}).get(name, 0), **kwargs)
        result.append((name, {**d, "fake_responses": responses, "fake_delay": 0, "fake_delay_jitter": 0}))
    return result


def monitoring_host(hosts: list[tuple[str, Mapping[str, Any]]]) -> str | None:
    """The name of the host that runs Prometheus in a fake cluster (None: monitoring is off)."""
    present = [(n, d) for n, d in hosts if settings.merge(d)["ray_state"] == "present"]
    if not present or not settings.merge(present[0][1])["monitoring_enabled"]:
        return None
    view = [(n, str(d.get("ray_node_ip")), str(d.get("ray_role"))) for n, d in present]
    return settings.resolve_monitoring_host(settings.merge(present[0][1])["monitoring_host"], view)


# --- The reference cluster of the plan tests -------------------------------------------------------

GPU_WORKER, CPU_WORKER = WORKERS
#: What the NVIDIA Container Toolkit (nvidia-ctk runtime configure) writes to daemon.json.
NVIDIA_DAEMON_JSON = {
    "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    "default-runtime": "nvidia",
}
LAB_REGISTRY = "10.0.0.5:5000"


def reference_hosts() -> list[tuple[str, dict[str, Any]]]:
    """A CPU head declaring 8 CPUs, an 8-GPU worker declaring its GPUs and CPUs, and a
    CPU worker with a custom resource and its CPUs left to Ray."""
    return [
        (HEAD, {"ray_role": "head", "ray_node_ip": "10.0.0.1", "ray_num_cpus": 8}),
        (GPU_WORKER, {"ray_role": "worker", "ray_node_ip": "10.0.0.2", "ray_num_gpus": 8, "ray_num_cpus": 96}),
        (CPU_WORKER, {"ray_role": "worker", "ray_node_ip": "10.0.0.3", "ray_resources": {"nvme": 1}}),
    ]


def reference_cluster(os_name: str, state: str = FRESH, **kwargs: Any) -> list[tuple[str, dict[str, Any]]]:
    """``reference_hosts()`` on ``os_name``: 8 H100s and an NVIDIA daemon.json on the GPU
    worker, every host using the lab registry over plain HTTP. ``kwargs`` go to ``cluster``."""
    kwargs.setdefault("gpus", {GPU_WORKER: 8})
    kwargs.setdefault("options", {GPU_WORKER: {"daemon_json": NVIDIA_DAEMON_JSON}})
    data = {"docker_insecure_registries": [LAB_REGISTRY], **kwargs.pop("data", {})}
    return cluster(os_name, state, kwargs.pop("hosts", reference_hosts()), data=data, **kwargs)


def with_data(hosts: list[tuple[str, dict[str, Any]]], name: str, **changes: Any) -> list[tuple[str, dict[str, Any]]]:
    """``hosts`` with ``changes`` made to one host's inventory data, its facts left as they are
    (what a user does when editing the inventory of a deployed cluster)."""
    return [(n, {**d, **changes} if n == name else d) for n, d in hosts]
