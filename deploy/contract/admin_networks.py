"""Who may administer a cluster: how wide an admin network may be before it counts as "anywhere".

One rule for the inventory (``firewall_admin_cidrs``, see :mod:`deploy.contract.schema`) and the EC2
spec (``admin_cidrs``, see :mod:`cloud.ec2.spec`): a network wider than /8 (IPv6: /16) is a
large part of the internet, and a few of them (``0.0.0.0/1`` and ``128.0.0.0/1``, or
``::/1``) cover all of it. Such a network needs its key's explicit "from anywhere" flag.

    if too_wide(ipaddress.ip_network("0.0.0.0/1")):
        problem = narrow_expected(4, "allow_ssh_from_anywhere = true")
"""

from __future__ import annotations

import ipaddress

#: Admin networks wider than these count as "anywhere": together a few of them cover the internet.
WIDEST_ADMIN_PREFIX = {4: 8, 6: 16}


def too_wide(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    """Whether an admin network is wider than :data:`WIDEST_ADMIN_PREFIX` allows.

    >>> too_wide(ipaddress.ip_network("10.0.0.0/8")), too_wide(ipaddress.ip_network("::/1"))
    (False, True)
    """
    return network.prefixlen < WIDEST_ADMIN_PREFIX[network.version]


def narrow_expected(version: int, flag: str) -> str:
    """What an error expects of a too-wide admin network; ``flag`` is the setting that allows it."""
    return (
        f"your office's or VPN's CIDR (at most /{WIDEST_ADMIN_PREFIX[version]} wide): SSH from the "
        f"whole internet, or from a large part of it, needs {flag}"
    )
