"""The parsers of the facts in ``deploy.run.facts``, and the PCI scan run for real against a fake sysfs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from deploy.run.facts import ContainerState, DockerImageId, FileText, HostInfo, NvidiaDevices
from deploy.run.units import NeedDaemonReload
from tests.plan.fakes.fakehosts import H100, OS_RELEASE


def host_info(os_name: str, **extra: str) -> dict:
    lines = [*OS_RELEASE[os_name], "RAYRIG_ARCH=x86_64", "RAYRIG_MEM_KB=16384000", "RAYRIG_NOFILE_HARD=1048576"]
    return HostInfo().process(lines + [f"{k}={v}" for k, v in extra.items()])


def test_host_info_reads_memory_arch_and_limits():
    info = host_info("ubuntu22")
    assert info["arch"] == "x86_64"
    assert info["mem_bytes"] == 16384000 * 1024
    assert info["nofile_hard"] == 1048576
    unlimited = HostInfo().process([*OS_RELEASE["rocky9"], "RAYRIG_NOFILE_HARD=unlimited", "RAYRIG_MEM_KB="])
    assert unlimited["nofile_hard"] is None and unlimited["mem_bytes"] is None
    assert unlimited["id"] == "rocky" and unlimited["version_id"] == "9.4"


def test_nvidia_devices_with_a_driver():
    gpus = NvidiaDevices().process(["PCI_GPUS=8", "NVSWITCHES=4", *[f"GPU={H100}"] * 8])
    assert gpus["pci_count"] == 8
    assert gpus["nvswitches"] == 4
    assert gpus["driver"]["count"] == 8
    assert gpus["driver"]["models"] == ["NVIDIA H100 80GB HBM3"] * 8
    assert gpus["driver"]["driver_version"] == "550.54.15"
    assert gpus["driver"]["memory_mib"] == [81559] * 8


@pytest.mark.parametrize(
    "lines", [["PCI_GPUS=4"], ["PCI_GPUS=4", "SMI_FAILED"], ["PCI_GPUS=4", f"GPU={H100}", "SMI_FAILED"]]
)
def test_nvidia_devices_without_a_working_driver(lines):
    assert NvidiaDevices().process(lines) == {"pci_count": 4, "nvswitches": 0, "driver": None}


def test_nvidia_devices_count_nvswitches():
    assert NvidiaDevices().process(["PCI_GPUS=8", "NVSWITCHES=4"])["nvswitches"] == 4
    assert NvidiaDevices().process(["NVSWITCHES=0"])["nvswitches"] == 0
    assert NvidiaDevices().process([])["nvswitches"] == 0
    assert NvidiaDevices.default() == {"pci_count": 0, "nvswitches": 0, "driver": None}


def test_nvidia_devices_scan_counts_nvidia_gpus_and_bridges_only(tmp_path: Path):
    devices = {
        "0000:05:00.0": ("0x10de", "0x030200"),  # H100 (3D controller)
        "0000:06:00.0": ("0x10de", "0x030000"),  # a VGA GPU
        "0000:07:00.0": ("0x10de", "0x068000"),  # NVSwitch
        "0000:08:00.0": ("0x10de", "0x068000"),  # NVSwitch
        "0000:09:00.0": ("0x8086", "0x068000"),  # another vendor's bridge
        "0000:0a:00.0": ("0x15b3", "0x020700"),  # a NIC
        "0000:0b:00.0": ("0x1af4", "0x030000"),  # another vendor's VGA
    }
    for name, (vendor, cls) in devices.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "vendor").write_text(vendor + "\n")
        (tmp_path / name / "class").write_text(cls + "\n")
    command = NvidiaDevices().command().replace("/sys/bus/pci/devices", str(tmp_path))
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout
    found = NvidiaDevices().process(output.splitlines())
    assert (found["pci_count"], found["nvswitches"]) == (2, 2)


def test_docker_facts():
    assert DockerImageId().process(["sha256:" + "a" * 64]) == "sha256:" + "a" * 64
    assert DockerImageId().process([]) is None
    assert ContainerState().process([]) is None
    container = ContainerState().process(
        [
            json.dumps(
                {"Id": "abc", "Image": "sha256:ab", "State": {"Running": True},
                 "Config": {"Image": "img", "Labels": {"a": "b"}}}
            )
        ]
    )  # fmt: skip
    assert container == {
        "id": "abc", "running": True, "restarting": False, "image": "img", "image_id": "sha256:ab", "labels": {"a": "b"}
    }  # fmt: skip
    assert FileText().process(["ABSENT"]) is None
    assert FileText().process(["EXISTS", "{", "}"]) == "{\n}"


def test_need_daemon_reload_fact():
    fact = NeedDaemonReload()
    assert fact.process(["NeedDaemonReload=yes"]) is True
    assert fact.process(["NeedDaemonReload=no"]) is False
    assert fact.process([]) is False  # no systemd, or a unit it does not know
    assert "--property NeedDaemonReload -- 'ray node.service'" in fact.command("ray node.service")
