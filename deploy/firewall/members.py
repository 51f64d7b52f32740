"""The extra members of the firewall: every host's ``firewall_member_cidrs``, checked.

A member is known by its node address; a host whose NCCL or gloo traffic leaves
through another NIC (InfiniBand, RoCE) lists that NIC's addresses or network in
``firewall_member_cidrs``, and every host admits them. The schema takes
address-shaped strings only; here each must parse as an IP address or network no
wider than ``WIDEST_MEMBER_PREFIX``, since members reach every port.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from pyinfra.api.exceptions import PyinfraError

from deploy.contract.settings import host_settings


class InvalidMemberCidr(PyinfraError):
    """A host's ``firewall_member_cidrs`` holds something that is not a network of the cluster's own."""


#: The widest network firewall_member_cidrs may hold, per IP version: members reach every port.
WIDEST_MEMBER_PREFIX = {4: 8, 6: 32}


def member_cidr_problems(hosts: Iterable[Any]) -> list[str]:
    """What is wrong with the hosts' ``firewall_member_cidrs``, one line per value."""
    problems = []
    for current in hosts:
        for index, cidr in enumerate(host_settings(current)["firewall_member_cidrs"]):
            where = f"host {current.name}: firewall_member_cidrs[{index}] = {cidr!r}"
            try:
                network = ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                problems.append(f'{where}: expected an IP address or network such as "192.168.100.0/24"')
                continue
            widest = WIDEST_MEMBER_PREFIX[network.version]
            if network.prefixlen < widest:
                problems.append(
                    f"{where}: expected a network of the cluster's own NICs, /{widest} or narrower "
                    f"(IPv{network.version}): the members reach every port"
                )
    return problems


def member_cidrs(hosts: Iterable[Any]) -> list[str]:
    """Every host's ``firewall_member_cidrs``, each once; ``InvalidMemberCidr`` names every bad value."""
    hosts = list(hosts)
    problems = member_cidr_problems(hosts)
    if problems:
        raise InvalidMemberCidr("\n".join([*problems, "Nothing was changed on any host."]))
    return sorted({cidr for h in hosts for cidr in host_settings(h)["firewall_member_cidrs"]})
