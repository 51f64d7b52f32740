"""A spec's availability zones and the subnets they need (``cloud/ec2/spec.py`` reads the spec; ``apply``
places each zone's subnet)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any


def parse_zones(
    data: Mapping[str, Any],
    region: str,
    vpc_net: ipaddress.IPv4Network | None,
    subnet_net: ipaddress.IPv4Network | None,
    where: Any,
) -> tuple[str, ...]:
    """The zones of ``network.availability_zones`` (or the one of ``availability_zone``): in ``region``, each
    once, and room in the VPC for one subnet of ``subnet_cidr``'s size per zone."""
    if "availability_zone" in data and "availability_zones" in data:
        where(
            "network.availability_zone",
            data["availability_zone"],
            "no value next to network.availability_zones (a list of one zone is the same)",
        )
    key = "availability_zones" if "availability_zones" in data else "availability_zone"
    given = data.get(key)
    zones = (given,) if isinstance(given, str) else tuple(given or ())
    for i, zone in enumerate(zones):
        if zone[:-1] != region:
            label = f"network.{key}[{i}]" if key == "availability_zones" else f"network.{key}"
            where(label, zone, f"an availability zone of region {region}, such as '{region}a'")
    twice = sorted({zone for zone in zones if zones.count(zone) > 1})
    if twice:
        where(f"network.{key}", list(zones), f"each zone once ({', '.join(twice)} listed more than once)")
    if vpc_net is not None and subnet_net is not None and subnet_net.subnet_of(vpc_net):
        room = len(subnet_blocks(vpc_net, subnet_net))
        if len(set(zones)) > room:
            where(
                "network.subnet_cidr",
                str(subnet_net),
                f"room in vpc_cidr {vpc_net} for one subnet of this size per availability zone "
                f"({len(set(zones))} zones; a /{subnet_net.prefixlen} leaves room for {room})",
            )
    return zones


def subnet_blocks(vpc_net: ipaddress.IPv4Network, subnet_net: ipaddress.IPv4Network) -> list[ipaddress.IPv4Network]:
    """The subnets of ``subnet_net``'s size in ``vpc_net``, ``subnet_net`` first, then the ones after it, then
    the ones before it: where the subnets of a cluster's zones go, each in the first block no subnet holds.

    >>> [str(n) for n in subnet_blocks(ipaddress.ip_network("10.0.0.0/22"), ipaddress.ip_network("10.0.1.0/24"))]
    ['10.0.1.0/24', '10.0.2.0/24', '10.0.3.0/24', '10.0.0.0/24']
    """
    blocks = list(vpc_net.subnets(new_prefix=subnet_net.prefixlen))
    first = blocks.index(subnet_net)
    return blocks[first:] + blocks[:first]
