"""Which network NCCL uses between nodes, read from its INFO log, and whether an EFA host uses its EFA.

The all-reduce ranks (:mod:`checks.allreduce`) run with ``NCCL_DEBUG=INFO`` and
``NCCL_DEBUG_SUBSYS=INIT,NET`` into a file of their own (:func:`debug_env`); NCCL
names its network there when it starts, and the aws-ofi-nccl plugin names its
libfabric provider::

    ip-10-42-0-7:81:81 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)
    ip-10-42-0-7:81:81 [0] NCCL INFO Using network AWS Libfabric
    ip-10-42-0-9:77:77 [0] NCCL INFO Using network Socket

:func:`network_of` turns those lines into one word for the report
(``"EFA (libfabric efa)"``, ``"Socket"``, ``"InfiniBand"``), and
:func:`network_reasons` says it per node, with a WARN for a node declared an EFA
host (``ray_efa``) whose NCCL does not use the EFA.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .reasons import INFO, WARN, Reason

EFA = "EFA (libfabric efa)"
SOCKET = "Socket"

#: aws-ofi-nccl's line, older ("Selected Provider is efa (found 4 nics)") and newer
#: ("Selected provider is efa, fabric is efa-direct (found 32 nics)") alike.
_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is ([A-Za-z0-9_;+-]+)")
#: NCCL's own line when it picks its network plugin ("Using network AWS Libfabric", "Socket", "IB").
_NETWORK = re.compile(r"NCCL INFO Using network (\S.*?)\s*$")

#: NCCL's names of its own networks, as the report says them.
_NAMES = {"Socket": SOCKET, "IB": "InfiniBand"}


def debug_env(log_path: str) -> dict[str, str]:
    """The environment that makes NCCL write its choice of network to ``log_path`` (and nothing to stdout).

    >>> debug_env("/tmp/nccl.log")["NCCL_DEBUG_SUBSYS"]
    'INIT,NET'
    """
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_DEBUG_FILE": log_path}


def network_of(lines: Iterable[str]) -> str | None:
    """The network NCCL's INFO ``lines`` say it uses, or None when they say nothing about it.

    >>> network_of(["h:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)",
    ...             "h:1:1 [0] NCCL INFO Using network AWS Libfabric"])
    'EFA (libfabric efa)'
    """
    provider = network = None
    for line in lines:
        if found := _PROVIDER.search(line):
            provider = found.group(1)
        if found := _NETWORK.search(line):
            network = found.group(1)
    if network is None and provider is None:
        return None
    if network is None or network.startswith("AWS Libfabric"):
        if provider == "efa":
            return EFA
        return f"libfabric {provider or 'provider unknown'}"
    return _NAMES.get(network, network)


def network_reasons(
    allreduce: Mapping[str, Any] | None, efa_hosts: Iterable[str], names: Mapping[str, str]
) -> list[Reason]:
    """One INFO line per node whose NCCL network the all-reduce ranks saw; a WARN for each host in
    ``efa_hosts`` (declared ``ray_efa``) whose NCCL does not use the EFA, or did not say.

    ``names`` maps a node's address to its inventory name (the ranks know their node's address).
    """
    networks: dict[str, str | None] = {}
    for rank in (allreduce or {}).get("ranks") or []:
        host = names.get(str(rank.get("ip")), rank.get("host") or str(rank.get("ip")))
        if networks.get(host) is None:
            networks[host] = rank.get("nccl_network")
    ran = bool(networks) and (allreduce or {}).get("backend") == "nccl"
    reasons = [Reason(INFO, f"{host}: NCCL network: {net}", host) for host, net in networks.items() if net and ran]
    for host in efa_hosts:
        if not ran:
            continue
        net = networks.get(host)
        if net == EFA:
            continue
        found = f"NCCL uses {net}" if net else "NCCL's log did not say which network it uses"
        reasons.append(
            Reason(
                WARN,
                f"{host}: declared an EFA host (ray_efa) but {found}: the image needs libfabric and the "
                "aws-ofi-nccl plugin where NCCL finds them (AWS's Deep Learning Containers have them)",
                host,
            )
        )
    return reasons
