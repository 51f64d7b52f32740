"""The operating systems rayrig supports, and what differs between them.

OS-specific details live here as data, so that the deploy steps read the same
for every distribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyinfra.api.exceptions import PyinfraError

SUPPORTED = "Ubuntu 22.04/24.04, Debian 12, Rocky Linux/RHEL/AlmaLinux 9, Amazon Linux 2023"


@dataclass(frozen=True)
class Platform:
    """One supported OS: its package family and the names that differ."""

    id: str  # os-release ID, e.g. "ubuntu"
    version: str  # os-release VERSION_ID
    codename: str  # apt suite for third-party repositories ("" on dnf systems)
    family: str  # "apt" or "dnf"
    base_packages: tuple[str, ...]
    distro_docker: tuple[str, ...]  # the engine from the distribution, () if it ships none
    docker_repo_path: str  # path under docker_repo_url: "ubuntu", "debian", "rhel", ...

    @property
    def label(self) -> str:
        return f"{self.id} {self.version}"


class UnsupportedPlatform(PyinfraError):
    """The host runs an OS that rayrig has no plan for."""


def detect(info: dict[str, Any], host_name: str = "") -> Platform:
    """The Platform of a host from its ``HostInfo`` fact."""
    os_id, version = info.get("id", ""), info.get("version_id", "")
    major = version.split(".")[0]
    codename = info.get("codename", "")
    apt_base = ("ca-certificates", "curl", "gnupg")
    dnf_base = ("ca-certificates", "curl", "gnupg2")
    if os_id == "ubuntu" and version in ("22.04", "24.04"):
        return Platform(os_id, version, codename, "apt", apt_base, ("docker.io",), "ubuntu")
    if os_id == "debian" and major == "12":
        return Platform(os_id, version, codename, "apt", apt_base, ("docker.io",), "debian")
    if os_id in ("rocky", "rhel", "almalinux") and major == "9":
        # RHEL 9 and its rebuilds ship podman, not Docker: the engine comes from Docker's repository.
        return Platform(os_id, version, "", "dnf", dnf_base, (), "rhel" if os_id == "rhel" else "centos")
    if os_id == "amzn" and version == "2023":
        # AL2023 ships curl-minimal and gnupg2-minimal, which conflict with the full packages.
        al_base = ("ca-certificates", "curl-minimal", "gnupg2-minimal")
        return Platform(os_id, version, "", "dnf", al_base, ("docker",), "")
    found = f"{os_id or 'unknown'} {version}".strip()
    where = f"host {host_name}: " if host_name else ""
    raise UnsupportedPlatform(f"{where}unsupported OS {found!r}; rayrig supports {SUPPORTED}")
