"""A fake host's NVIDIA GPUs and NVIDIA software, for the plan tests' fake hosts: what
``NvidiaDevices``, the package facts and the NVIDIA services' systemd facts answer.

``HostGPUs(count=8)`` puts 8 H100s with a working driver (550.54.15) on the PCI bus. On a fresh
host that is all; on a converged GPU host the Container Toolkit is installed at the data's
``nvidia_toolkit_version`` from NVIDIA's repository, daemon.json registers the ``nvidia`` runtime,
the driver rayrig installs is there when the data says ``nvidia_driver = "install"``,
nvidia-persistenced runs, and with NVSwitches Fabric Manager is installed at the driver's version
and runs. The package lists and repository files are written out from NVIDIA's install guides.
Each field changes one aspect (None: as the state says):

- ``count``: GPUs on the PCI bus (0: a CPU host, which has none of this);
- ``nvswitches``: NVSwitch chips on the bus (HGX boards; Fabric Manager needs to run);
- ``driver``: False leaves the GPUs without a working driver (nvidia-smi absent);
- ``toolkit`` / ``toolkit_version``: the Container Toolkit installed, at that version;
- ``nvidia_runtime``: daemon.json registers the runtime (``HostDocker`` writes it);
- ``driver_packages``: the driver package rayrig installs is there;
- ``persistenced`` / ``fabricmanager``: installed, enabled and running.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deploy.contract import settings
from deploy.host.repo_keys import rpm_key_path
from deploy.run.facts import NvidiaDevices
from tests.plan.fakes.fake_os import FAMILY
from tests.plan.fakes.fake_repo_keys import FAKE_KEY
from tests.plan.fakes.fakestep import fact_key, systemd_unit

H100 = "NVIDIA H100 80GB HBM3, 550.54.15, 81559"
NVIDIA_DEVICES = fact_key(NvidiaDevices, "PCI_GPUS=")

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


@dataclass
class HostGPUs:
    """A host's NVIDIA devices and software (see the module's docstring)."""

    count: int = 0
    nvswitches: int = 0
    driver: bool = True
    toolkit: bool | None = None
    toolkit_version: str | None = None
    nvidia_runtime: bool | None = None
    driver_packages: bool | None = None
    persistenced: bool | None = None
    fabricmanager: bool | None = None

    def settled(self, converged: bool, data: Mapping[str, Any]) -> HostGPUs:
        """A copy with every aspect left None set as a host in that state has it."""
        gpu_host = converged and self.count > 0
        defaults = {
            "toolkit": gpu_host,
            "nvidia_runtime": gpu_host,
            "driver_packages": gpu_host and settings.merge(data)["nvidia_driver"] == "install",
            "persistenced": gpu_host,
            "fabricmanager": converged and self.nvswitches > 0,
        }
        return dataclasses.replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})

    def devices(self) -> dict[str, list[str]]:
        """``NvidiaDevices``' answer: the PCI bus, and nvidia-smi's GPUs when the driver works."""
        gpus = [f"GPU={H100}"] * self.count if self.driver else []
        return {NVIDIA_DEVICES: [f"PCI_GPUS={self.count}", f"NVSWITCHES={self.nvswitches}", *gpus]}

    def packages(self, os_name: str, data: Mapping[str, Any]) -> dict[str, str]:
        """name -> version of the NVIDIA packages installed (of a ``settled`` copy)."""
        if not self.count:
            return {}
        versioned = nvidia_packages(os_name, data, self.nvswitches, bool(self.driver_packages), self.toolkit_version)
        if not self.toolkit:
            versioned = {n: v for n, v in versioned.items() if n not in TOOLKIT_PACKAGES}
        if not self.fabricmanager and os_name in FABRICMANAGER:
            versioned.pop(FABRICMANAGER[os_name][0], None)
        return versioned

    def services(self) -> dict[str, list[str]]:
        """What systemd says of nvidia-persistenced and Fabric Manager (of a ``settled`` copy)."""
        responses = {}
        units = {"nvidia-persistenced.service": self.persistenced, "nvidia-fabricmanager.service": self.fabricmanager}
        for unit, up in units.items():
            responses.update(systemd_unit(unit, "running" if up else "dead", "enabled" if up else ""))
        return responses


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
        files[TOOLKIT_KEYRING] = (FAKE_KEY, 644)
        files[TOOLKIT_APT_LIST] = (f"deb [signed-by={TOOLKIT_KEYRING}] {toolkit}/stable/deb/$(ARCH) /\n", 644)
    else:
        files[TOOLKIT_DNF_REPO] = (
            "[nvidia-container-toolkit]\n"
            "name=nvidia-container-toolkit\n"
            f"baseurl={toolkit}/stable/rpm/$basearch\n"
            "repo_gpgcheck=1\n"
            "gpgcheck=0\n"
            "enabled=1\n"
            f"gpgkey=file://{rpm_key_path('nvidia-container-toolkit')}\n"
            "sslverify=1\n"
            "sslcacert=/etc/pki/tls/certs/ca-bundle.crt\n",
            644,
        )
        files[rpm_key_path("nvidia-container-toolkit")] = (FAKE_KEY, 644)
    if uses_cuda_repo(os_name, data, driver, nvswitches):
        directory, _key = CUDA_REPO[os_name]
        base = f"{s['nvidia_cuda_repo_url'].rstrip('/')}/{directory}/x86_64"
        if FAMILY[os_name] == "apt":
            files[CUDA_KEYRING] = (FAKE_KEY, 644)
            files[f"/etc/apt/sources.list.d/cuda-{directory}-x86_64.list"] = (
                f"deb [signed-by={CUDA_KEYRING}] {base}/ /\n",
                644,
            )
        else:
            files[f"/etc/yum.repos.d/cuda-{directory}.repo"] = (
                f"[cuda-{directory}-x86_64]\nname=cuda-{directory}-x86_64\nbaseurl={base}\nenabled=1\n"
                f"gpgcheck=1\ngpgkey=file://{rpm_key_path('cuda-rpm')}\n",
                644,
            )
            files[rpm_key_path("cuda-rpm")] = (FAKE_KEY, 644)
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
