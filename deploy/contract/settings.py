"""A host's rayrig settings: the defaults of ``inventories/group_data/all.py``
overlaid with what the inventory sets for that host.

pyinfra loads group data only from the inventory's folder and the working
directory, so an inventory kept elsewhere would lose every default. rayrig
reads the defaults file itself, so the deploy behaves the same wherever the
inventory lives.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import re
import runpy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

DEFAULTS_FILE = Path(__file__).resolve().parents[2] / "inventories" / "group_data" / "all.py"

#: Data keys with these prefixes belong to rayrig; an unknown one is a typo.
PREFIXES = (
    "ray_", "docker_", "base_", "nvidia_", "firewall_", "storage_", "checks_", "image_", "monitoring_", "health_",
)  # fmt: skip

#: Dict-valued settings where a host may set only some keys (the rest keep their defaults).
PARTIAL_DICTS = ("ray_ports", "monitoring_ports")


@functools.cache
def _load_defaults() -> dict[str, Any]:
    namespace = runpy.run_path(str(DEFAULTS_FILE))
    return {k: v for k, v in namespace.items() if k.startswith(PREFIXES)}


def defaults() -> dict[str, Any]:
    """Every rayrig key with its default value (a fresh copy each call)."""
    return copy.deepcopy(_load_defaults())


def is_rayrig_key(key: str) -> bool:
    """Whether a data key is in rayrig's namespace (known or not)."""
    return key.startswith(PREFIXES)


def merge(data: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults overlaid with the rayrig keys set in ``data``.

    >>> merge({"ray_role": "head", "ray_ports": {"gcs": 7000}})["ray_ports"]["dashboard"]
    8265
    """
    merged = defaults()
    for key, value in data.items():
        if key not in merged:
            continue
        if key in PARTIAL_DICTS and isinstance(value, Mapping) and isinstance(merged[key], dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def host_data(host: Any) -> dict[str, Any]:
    """All data pyinfra holds for a host (inventory, groups, overrides)."""
    return dict(host.data.dict())


def host_settings(host: Any) -> dict[str, Any]:
    """The effective rayrig settings of a pyinfra host."""
    return merge(host_data(host))


def is_absent(host: Any) -> bool:
    """Whether the host is marked ``ray_state = "absent"``: it leaves the cluster."""
    return host_settings(host)["ray_state"] == "absent"


def present_hosts(hosts: Iterable[Any]) -> list[Any]:
    """The cluster's members: the hosts not marked ``ray_state = "absent"``, in inventory order."""
    return [h for h in hosts if not is_absent(h)]


def node_address(host: Any) -> str:
    """The address other nodes use to reach ``host``.

    ``ray_node_ip`` when set, else the SSH hostname, else the inventory name.
    """
    data = host_data(host)
    return str(data.get("ray_node_ip") or data.get("ssh_hostname") or host.name)


#: An IPv6 zone (interface name or index): what Linux allows in an interface name, no more.
_ZONE = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")
#: An RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens.
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")


def parse_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """An IP address without its zone; an IPv4-mapped IPv6 address as IPv4. None if not an address.

    A zone (``%eth0``) is accepted on an IPv6 address only, and only as an interface name.

    >>> parse_address("::ffff:192.0.2.7"), parse_address("fe80::1%eth0"), parse_address("node-1")
    (IPv4Address('192.0.2.7'), IPv6Address('fe80::1'), None)
    >>> parse_address("10.0.0.1%eth0"), parse_address("fe80::1%x;y")
    (None, None)
    """
    text, percent, zone = text.partition("%")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if percent and (not isinstance(address, ipaddress.IPv6Address) or not _ZONE.match(zone)):
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def is_hostname(text: str) -> bool:
    """Whether ``text`` is an RFC 1123 host name (at most 253 characters, labels of 1-63).

    >>> is_hostname("gpu-01.lab.example"), is_hostname("-x"), is_hostname("a b"), is_hostname("node\\n")
    (True, False, False, False)
    """
    return 0 < len(text) <= 253 and all(_LABEL.match(label) for label in text.split("."))


def is_address(text: str) -> bool:
    """Whether ``text`` is an IP address (a zone on IPv6 only) or an RFC 1123 host name."""
    return parse_address(text) is not None or is_hostname(text)


#: A pyinfra connector's host name: ``@fake/head``, ``@docker/ray``, ``@local``.
_CONNECTOR_NAME = re.compile(r"@[a-z][a-z0-9_]*(?:/[A-Za-z0-9][A-Za-z0-9._:-]*)?")


def is_host_name(name: str) -> bool:
    """Whether an inventory host's name is one rayrig can carry into messages, files and commands: an
    address, a host name, or a pyinfra connector's ``@connector/target`` of such characters.

    >>> is_host_name("gpu-01.lab.example"), is_host_name("@fake/head"), is_host_name("a;b"), is_host_name("@x/'")
    (True, True, False, False)
    """
    return is_address(name) or _CONNECTOR_NAME.fullmatch(name) is not None


def is_loopback(address: str) -> bool:
    """Whether an address is loopback only ("localhost", 127.0.0.0/8, ::1, also zoned or IPv4-mapped).

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if address.strip().lower() == "localhost":
        return True
    parsed = parse_address(address.strip())
    return bool(parsed and parsed.is_loopback)


def resolve_monitoring_host(value: str | None, hosts: Iterable[tuple[str, str, str]]) -> str | None:
    """The inventory name of the monitoring host: ``value`` (``monitoring_host``) as a host's name or
    address, or the head for None; ``hosts`` are (name, node address, role). None: no such host.

    >>> hosts = [("head", "10.0.0.1", "head"), ("w1", "10.0.0.2", "worker")]
    >>> resolve_monitoring_host(None, hosts), resolve_monitoring_host("10.0.0.2", hosts)
    ('head', 'w1')
    """
    hosts = list(hosts)
    if value is None:
        return next((name for name, _address, role in hosts if role == "head"), None)
    by_name = [name for name, _address, _role in hosts if name == value]
    by_address = [name for name, address, _role in hosts if address == value]
    return (by_name or by_address or [None])[0]
