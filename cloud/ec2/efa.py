"""EFA (Elastic Fabric Adapter) for the groups whose instance type has it: how many interfaces, and which.

Each group's ``efa`` key in the spec says whether its instances get EFA network
interfaces: ``"auto"`` (the default) when the type is built for EFA (:func:`built_for_efa`:
more than one EFA interface, or EFA with RDMA reads: p4d, p5, g6e.48xlarge, trn1...)
and the group runs in the cluster placement group (the workers, with
``placement_group = true``); ``"on"`` whenever the type supports EFA at all
(g5.12xlarge, c5n.18xlarge...; a type without EFA is refused before anything is
created); ``"off"`` never. ``"auto"`` leaves the types where EFA is an option
rather than the point alone: an EFA host needs the EFA driver (AWS's Deep
Learning AMIs have it), which the deploy checks for. What a type supports comes from
EC2's ``DescribeInstanceTypes`` (``NetworkInfo.EfaSupported``,
``EfaInfo.MaximumEfaInterfaces``, ``NetworkCards``), read once per run.

An EFA instance gets one EFA interface per network card, up to the type's
``MaximumEfaInterfaces`` (p4d.24xlarge: 4, p5.48xlarge: 32): device index 0
on card 0, device index 1 on every further card, each in the cluster's subnet
and security group. EC2 assigns no public address to an instance launched with
more than one interface, so where the hosts are reached at their public
addresses (``network.public_ips`` and no ``network.bastion``) an EFA instance
gets only its primary interface, an EFA one with the public address; with a
bastion, or private addresses, it gets all of them. The plan says which.

Instances launched with EFA carry the tag ``rayrig:efa`` (the number of EFA
interfaces); ``inventories/ec2.py`` gives their hosts ``ray_efa = true``, and
``ray_efa_device_rdma = true`` on the types whose EFA does RDMA reads
(:data:`DEVICE_RDMA_FAMILIES`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloud.ec2.aws import CloudError
from cloud.ec2.spec import ClusterSpec, GroupSpec

#: The tag an instance launched with EFA interfaces carries: how many it has.
TAG_EFA = "rayrig:efa"

#: Instance families whose EFA supports RDMA reads (libfabric's FI_EFA_USE_DEVICE_RDMA).
DEVICE_RDMA_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6e-gb200", "trn1", "trn1n", "trn2")


def efa_supported(info: Mapping[str, Any]) -> bool:
    """Whether a described instance type supports EFA."""
    return bool(info.get("NetworkInfo", {}).get("EfaSupported"))


def max_efa_interfaces(info: Mapping[str, Any]) -> int:
    """How many EFA interfaces an instance of a described type takes: one per network card, at most
    ``MaximumEfaInterfaces``; 0 without EFA."""
    net = info.get("NetworkInfo", {})
    if not net.get("EfaSupported"):
        return 0
    cards = len(net.get("NetworkCards", [])) or int(net.get("MaximumNetworkCards", 1))
    return max(1, min(int(net.get("EfaInfo", {}).get("MaximumEfaInterfaces", 1)), cards))


def device_rdma(instance_type: str) -> bool:
    """Whether the EFA of ``instance_type`` does RDMA reads (``p4d.24xlarge``, ``p5.48xlarge``, ...)."""
    return instance_type.split(".")[0] in DEVICE_RDMA_FAMILIES


def built_for_efa(instance_type: str, info: Mapping[str, Any]) -> bool:
    """Whether ``"auto"`` turns EFA on for a described type: more than one EFA interface, or EFA RDMA reads."""
    return efa_supported(info) and (max_efa_interfaces(info) > 1 or device_rdma(instance_type))


def public_reach(spec: ClusterSpec) -> bool:
    """Whether the hosts are reached at their public addresses (then an instance may have one interface only)."""
    return spec.network.public_ips and not spec.network.bastion


def in_placement_group(spec: ClusterSpec, group: GroupSpec) -> bool:
    """Whether ``group`` runs in the cluster placement group (the workers, when the spec asks for one)."""
    return spec.placement_group and group.role == "worker"


def efa_plan(spec: ClusterSpec, types: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    """How many EFA interfaces each group's instances get (0: none), by group name and instance type: each
    type of a group's preference list, as a capacity failover may launch any of them.

    Raises ``CloudError`` naming every group whose ``efa = "on"`` one of its types cannot
    honour, before anything is created.
    """
    plan: dict[tuple[str, str], int] = {}
    problems = []
    for where, group in [("head", spec.head)] + [(f"workers[{i}]", g) for i, g in enumerate(spec.workers)]:
        for instance_type in group.preferences:
            info = types.get(instance_type, {})
            supported = efa_supported(info)
            if group.efa == "on" and not supported:
                problems.append(
                    f'{where}.efa = "on": group {group.name}\'s instance type {instance_type} does not support EFA '
                    f'(choose an EFA type such as p4d.24xlarge or p5.48xlarge, or set efa = "auto" or "off")'
                )
            auto = group.efa == "auto" and in_placement_group(spec, group) and built_for_efa(instance_type, info)
            wanted = group.efa == "on" or auto
            count = (1 if public_reach(spec) else max_efa_interfaces(info)) if supported and wanted else 0
            plan[(group.name, instance_type)] = count
    if problems:
        raise CloudError(f"{spec.path}: " + "; ".join(problems) + "; nothing was created")
    return plan


def plan_lines(
    spec: ClusterSpec, plan: Mapping[tuple[str, str], int], types: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """What the plan says about EFA, one line per group that gets it."""
    lines = []
    for group in spec.groups:
        count = plan.get((group.name, group.instance_type), 0)
        if not count:
            continue
        most = max_efa_interfaces(types.get(group.instance_type, {}))
        text = f"{group.name}: {count} EFA interface(s) per {group.instance_type}"
        if count < most:
            text += (
                f" of its {most}: EC2 gives no public address to an instance with several interfaces; "
                "set network.bastion (or public_ips = false in your own reachable subnet) for all of them"
            )
        lines.append(text)
    return lines


def network_interfaces(count: int, subnet_id: str, group_id: str, public_ip: bool) -> list[dict[str, Any]]:
    """``RunInstances``' ``NetworkInterfaces`` for ``count`` EFA interfaces: card 0 device 0, then device 1
    on each further card. Only a single interface may ask for a public address."""
    interfaces = []
    for card in range(count):
        interface: dict[str, Any] = {
            "NetworkCardIndex": card,
            "DeviceIndex": 0 if card == 0 else 1,
            "InterfaceType": "efa",
            "SubnetId": subnet_id,
            "Groups": [group_id],
            "DeleteOnTermination": True,
        }
        if count == 1:
            interface["AssociatePublicIpAddress"] = public_ip
        interfaces.append(interface)
    return interfaces
