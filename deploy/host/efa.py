"""EFA in ray-node: the devices, the memlock limit and the libfabric/NCCL environment of an EFA host.

A host with ``ray_efa = true`` (``inventories/ec2.py`` sets it on instances
launched with EFA interfaces) gets, in its ray-node container:

- ``--device=/dev/infiniband``: the EFA's verbs devices (``uverbs0``, ...);
- ``--ulimit=memlock=-1:-1``: libfabric pins the buffers it registers with the EFA;
- ``FI_PROVIDER=efa``: libfabric uses the EFA, never its TCP provider;
- ``FI_EFA_USE_DEVICE_RDMA=1`` with ``ray_efa_device_rdma`` (p4d, p5: EFA RDMA reads);
- ``NCCL_SOCKET_IFNAME=^docker,lo,veth``: NCCL's own connections (its bootstrap,
  and the socket fallback) on the host's network interfaces, not Docker's bridges.

``NCCL_PROTO`` is left alone: aws-ofi-nccl itself forces the Simple protocol
where the provider cannot do GPUDirect, and setting it everywhere would slow
down p4d and p5. ``ray_env`` may set any of these names otherwise.

What the host must have, and the deploy checks before any operation: the EFA
driver's device ``/dev/infiniband/uverbs0`` (AWS's EFA installer, or a Deep
Learning AMI, which has it). What the image must have: libfabric and the
aws-ofi-nccl plugin where NCCL finds them (AWS's Deep Learning Containers
do); without them NCCL falls back to sockets, which the checks report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyinfra.api import FactBase
from pyinfra.api.exceptions import PyinfraError

#: The folder of the EFA's verbs devices, passed to the container whole.
DEVICE_DIR = "/dev/infiniband"
#: The device an EFA host must have: the first EFA's verbs device.
FIRST_DEVICE = "uverbs0"

#: AWS's guide to installing the EFA driver and libfabric on a host.
INSTALL_HINT = (
    "install the EFA driver (AWS's EFA installer: curl -O https://efa-installer.amazonaws.com/"
    "aws-efa-installer-latest.tar.gz, then sudo ./efa_installer.sh -y in the unpacked folder, and reboot), "
    "or launch it from a Deep Learning AMI, which has it"
)


class EfaDeviceError(PyinfraError):
    """A host declared EFA (``ray_efa``) has no EFA device."""


class EfaDevices(FactBase):
    """The names in ``/dev/infiniband`` (``["uverbs0", "rdma_cm"]``); empty when it does not exist."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self) -> str:
        return f"ls -1 {DEVICE_DIR} 2>/dev/null || true"

    def process(self, output: list[str]) -> list[str]:
        return [line.strip() for line in output if line.strip()]


def check_devices(settings: Mapping[str, Any], devices: list[str], host_name: str) -> None:
    """Raise ``EfaDeviceError`` naming the host when it declares EFA but has no EFA device."""
    if settings["ray_efa"] and FIRST_DEVICE not in devices:
        raise EfaDeviceError(
            f"host {host_name}: ray_efa = True: expected the EFA device {DEVICE_DIR}/{FIRST_DEVICE}, "
            f"which the host lacks; {INSTALL_HINT}; or set ray_efa = false for this host"
        )


def container_env(settings: Mapping[str, Any]) -> dict[str, str]:
    """The environment of an EFA host's ray-node (none for the others).

    >>> container_env({"ray_efa": True, "ray_efa_device_rdma": True})["FI_EFA_USE_DEVICE_RDMA"]
    '1'
    """
    if not settings["ray_efa"]:
        return {}
    env = {"FI_PROVIDER": "efa", "NCCL_SOCKET_IFNAME": "^docker,lo,veth"}
    if settings["ray_efa_device_rdma"]:
        env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return env


def run_args(settings: Mapping[str, Any]) -> list[str]:
    """``docker create`` options of an EFA host's ray-node: the EFA devices and an unlimited memlock."""
    if not settings["ray_efa"]:
        return []
    return [f"--device={DEVICE_DIR}", "--ulimit=memlock=-1:-1"]
