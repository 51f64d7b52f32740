"""The cluster's security group rules: what they must be, what they are, and whether Ray is exposed.

Everything within the group (the Ray ports, NCCL and EFA included) in and
out; SSH (tcp 22) from the admin CIDRs only; outbound internet unless the spec
turns it off. No address range may reach a Ray port or a metrics port (Ray's
and the exporters': they answer anyone who asks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from cloud.ec2.spec import ClusterSpec
from deploy.contract.ports import member_ports, ray_port_ranges
from deploy.contract.settings import merge


def ray_ports(host_data: Mapping[str, Any] | None = None) -> dict[str, int]:
    """The ports only the cluster's members may reach, with the spec's overrides: ``ray_ports`` (Ray's
    metrics ports included) and the exporters' ``monitoring_ports`` (``deploy.contract.ports.member_ports``, the
    list the host firewall admits from the members)."""
    return member_ports(merge(host_data or {}))


class Rule(NamedTuple):
    """One security group rule, normalised: direction, protocol, ports and one peer."""

    direction: str  # "ingress" or "egress"
    protocol: str  # "-1" (all), "tcp", "udp", "icmp", ...
    from_port: int | None
    to_port: int | None
    peer_kind: str  # "sg", "cidr", "cidr6" or "prefix-list"
    peer: str

    def covers(self, lo: int, hi: int) -> bool:
        """Whether this rule admits any TCP or UDP port in lo..hi."""
        if self.protocol == "-1":
            return True
        if self.protocol not in ("tcp", "udp", "6", "17") or self.from_port is None or self.to_port is None:
            return False
        return self.from_port <= hi and self.to_port >= lo

    def permission(self, description: str | None = None) -> dict[str, Any]:
        """The rule as an EC2 ``IpPermissions`` entry."""
        perm: dict[str, Any] = {"IpProtocol": self.protocol}
        if self.protocol != "-1" and self.from_port is not None:
            perm["FromPort"], perm["ToPort"] = self.from_port, self.to_port
        extra = {"Description": description} if description else {}
        if self.peer_kind == "sg":
            perm["UserIdGroupPairs"] = [{"GroupId": self.peer, **extra}]
        elif self.peer_kind == "cidr":
            perm["IpRanges"] = [{"CidrIp": self.peer, **extra}]
        elif self.peer_kind == "cidr6":
            perm["Ipv6Ranges"] = [{"CidrIpv6": self.peer, **extra}]
        else:
            perm["PrefixListIds"] = [{"PrefixListId": self.peer, **extra}]
        return perm

    def __str__(self) -> str:
        ports = "all traffic" if self.protocol == "-1" else f"{self.protocol} {self.from_port}-{self.to_port}"
        word = "from" if self.direction == "ingress" else "to"
        return f"{self.direction} {ports} {word} {self.peer}"


def rules_of(group: Mapping[str, Any]) -> set[Rule]:
    """The rules of a described security group, normalised."""
    rules: set[Rule] = set()
    for direction, key in (("ingress", "IpPermissions"), ("egress", "IpPermissionsEgress")):
        for perm in group.get(key, []):
            proto = str(perm.get("IpProtocol", "-1"))
            lo = perm.get("FromPort") if proto != "-1" else None
            hi = perm.get("ToPort") if proto != "-1" else None
            peers = [("sg", p["GroupId"]) for p in perm.get("UserIdGroupPairs", [])]
            peers += [("cidr", p["CidrIp"]) for p in perm.get("IpRanges", [])]
            peers += [("cidr6", p["CidrIpv6"]) for p in perm.get("Ipv6Ranges", [])]
            peers += [("prefix-list", p["PrefixListId"]) for p in perm.get("PrefixListIds", [])]
            rules.update(Rule(direction, proto, lo, hi, kind, peer) for kind, peer in peers)
    return rules


def desired_rules(group_id: str, spec: ClusterSpec) -> dict[Rule, str]:
    """The exact rules of the cluster's security group, each with its description.

    Everything within the group (the Ray ports, NCCL and EFA included) in and
    out; SSH from the admin CIDRs only; outbound internet if the spec keeps it.
    """
    rules = {
        Rule("ingress", "-1", None, None, "sg", group_id): "rayrig: all traffic within the cluster (Ray, NCCL, EFA)",
        Rule("egress", "-1", None, None, "sg", group_id): "rayrig: all traffic within the cluster (EFA needs it)",
    }
    for cidr in spec.admin_cidrs:
        kind = "cidr6" if ":" in cidr else "cidr"
        rules[Rule("ingress", "tcp", 22, 22, kind, cidr)] = "rayrig: SSH from an admin CIDR"
    if spec.network.internet_egress:
        rules[Rule("egress", "-1", None, None, "cidr", "0.0.0.0/0")] = "rayrig: outbound internet (packages, images)"
    return rules


def exposed_ray_ports(rules: Iterable[Rule], ports: Mapping[str, int]) -> list[str]:
    """Every ingress rule that lets an address range (not the group itself) reach one of ``ports``
    (:func:`ray_ports`: Ray's and the metrics exporters', none of which asks who calls)."""
    problems = []
    for rule in sorted(rules):
        if rule.direction != "ingress" or rule.peer_kind == "sg":
            continue
        for lo, hi in ray_port_ranges(ports):
            if rule.covers(lo, hi):
                problems.append(f"{rule} reaches Ray or metrics port(s) {lo}-{hi}")
    return problems


def ports_text(ports: Mapping[str, int]) -> str:
    """The members' ports (:func:`ray_ports`) as ranges, for the plan: ``6379-6383, 8265, ...``."""
    return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ray_port_ranges(ports))
