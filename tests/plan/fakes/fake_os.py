"""A fake host's operating system, for the plan tests' fake hosts: what ``HostInfo``,
``CloudInitRunning``, pyinfra's ``Home`` and its uptime facts answer.

``HostOS("ubuntu22")`` is the same on a fresh and on a converged host (rayrig changes none
of it): a real ``/etc/os-release`` of ``os_name`` (``OS_RELEASE``), an x86_64 CPU, a 512 GiB
server, an open-files hard limit of 1048576, cloud-init done with its first boot, and the
SSH user's home ``SSH_HOME``. Each field changes one aspect:

- ``mem_kb``: the memory ``/proc/meminfo`` reports (sizes the container's ``--shm-size``);
- ``nofile_hard``: ``ulimit -Hn`` (None: "unlimited"; bounds the container's ``--ulimit nofile``);
- ``cloud_init_running``: cloud-init still runs its first boot (the deploy waits for it);
- ``arch``: ``uname -m`` (the Docker repository's architecture).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.facts.server import Home

from deploy.run.facts import CloudInitRunning, HostInfo
from tests.plan.fakes.fakestep import fact_key

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

MEM_KB = 527_958_284  # a 512 GiB server
NOFILE_HARD = 1_048_576
SSH_HOME = "/home/rayrig"  # the SSH user's home (``echo ~``)
UPLOAD_DIR = f"{SSH_HOME}/.rayrig-upload"  # where uploads through sudo pass

#: The matcher of each fact this module answers. pyinfra's ``server.Uptime`` (what
#: ``server.reboot`` compares) asks the host's kernel first, so its key is not checked.
HOST_INFO = fact_key(HostInfo, "cat /etc/os-release")
HOME = fact_key(Home, "echo ~")
CLOUD_INIT = fact_key(CloudInitRunning, "cloud-init status")
UPTIME = "/proc/uptime"


@dataclass
class HostOS:
    """A host's operating system and the limits the deploy reads (see the module's docstring)."""

    os_name: str
    mem_kb: int = MEM_KB
    nofile_hard: int | None = NOFILE_HARD
    cloud_init_running: bool = False
    arch: str = "x86_64"

    @property
    def family(self) -> str:
        """The package family: apt or dnf."""
        return FAMILY[self.os_name]

    def host_info(self) -> dict[str, list[str]]:
        """``HostInfo``'s answer: os-release, then the architecture, memory and open-files limit."""
        nofile = self.nofile_hard if self.nofile_hard is not None else "unlimited"
        lines = [f"RAYRIG_ARCH={self.arch}", f"RAYRIG_MEM_KB={self.mem_kb}", f"RAYRIG_NOFILE_HARD={nofile}"]
        return {HOST_INFO: [*OS_RELEASE[self.os_name], *lines]}

    def session(self) -> dict[str, list[str]]:
        """The SSH user's home and cloud-init's status."""
        return {HOME: [SSH_HOME], CLOUD_INIT: ["status: running" if self.cloud_init_running else "status: done"]}

    def uptime(self) -> dict[str, list[str]]:
        """Seconds since boot (before and after a reboot alike: the fake host never reboots)."""
        return {UPTIME: ["4242"]}
