"""Firewall: each host's inbound traffic filtered by an nftables table of rayrig's own, ``inet rayrig``
(``ruleset.nft.j2``, filled by :func:`ruleset_values`), loaded at boot by ``rayrig-firewall.service``
and again after the distribution's ``nftables.service``; removed with ``firewall_enabled = False``.

What the table admits and why: docs/design/firewall.md.
"""

from __future__ import annotations

import hashlib
import ipaddress
import shlex
import socket
from collections.abc import Iterable, Mapping
from io import StringIO
from typing import Any

from pyinfra import host, inventory
from pyinfra.api import FactBase, deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.files import File
from pyinfra.operations import files, server, systemd

from deploy.contract.data_keys import MONITORING_PORT_NAMES
from deploy.contract.ports import WORKER_RANGE, member_ports, port_ranges
from deploy.contract.settings import host_data, host_settings, is_loopback, node_address, parse_address, present_hosts
from deploy.firewall import guard
from deploy.firewall.members import member_cidrs
from deploy.host import image_mirror
from deploy.host.base import install_packages
from deploy.run.facts import fact
from deploy.run.memo import run_memo
from deploy.run.templating import put_template, render, resource
from deploy.run.units import NeedDaemonReload, daemon_reload
from deploy.storage.nfs import NFS_PORT, serves_nfs

TABLE = guard.TABLE
RULESET_PATH = "/etc/rayrig/firewall.nft"
UNIT = guard.FIREWALL_UNIT
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
UNIT_TEMPLATE = resource(__package__, "rayrig-firewall.service.j2")
#: The distribution's nftables.service, and rayrig's drop-in that loads rayrig's table after it.
NFTABLES_UNIT = "nftables.service"
DROP_IN_PATH = f"/etc/systemd/system/{NFTABLES_UNIT}.d/rayrig.conf"
DROP_IN_TEMPLATE = resource(__package__, "nftables-rayrig.conf.j2")
RULESET_TEMPLATE = resource(__package__, "ruleset.nft.j2")
#: The table's comment: this prefix, then the digest of the ruleset (``ruleset_digest``).
DIGEST_PREFIX = "rayrig ruleset "
NFT = guard.NFT
#: The other firewalls rayrig refuses to run beside, with how to turn each off.
OTHER_FIREWALLS = {"ufw": "sudo ufw disable", "firewalld": "sudo systemctl disable --now firewalld"}
#: The ray_ports key open to the members only when the dashboard listens beyond loopback.
DASHBOARD = "dashboard"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class FirewallConflict(PyinfraError):
    """Another firewall (ufw, firewalld) manages the host's inbound traffic."""


class UnresolvableNode(PyinfraError):
    """A cluster member's node address does not resolve to an IP address."""


# --- Facts ----------------------------------------------------------------------------------------


class DeploySource(FactBase):
    """Where the deploy's SSH connection comes from, as the host sees it.

    Returns ``{"address": "198.51.100.7", "port": 22}`` (``port``: the host's
    side of the connection), or None when the deploy does not run over SSH
    (``@local``, ``@docker``). Read without sudo, which drops ``$SSH_CONNECTION``.
    """

    @staticmethod
    def default() -> None:
        return None

    def command(self) -> str:
        return 'echo "RAYRIG_SSH_CONNECTION=${SSH_CONNECTION:-}"; echo "RAYRIG_SSH_CLIENT=${SSH_CLIENT:-}"'

    def process(self, output: list[str]) -> dict[str, Any] | None:
        values = dict(line.partition("=")[::2] for line in output if line.startswith("RAYRIG_SSH_"))
        # SSH_CONNECTION: client-address client-port server-address server-port
        # SSH_CLIENT (older sshd):  client-address client-port server-port
        for key, port_at in (("RAYRIG_SSH_CONNECTION", 3), ("RAYRIG_SSH_CLIENT", 2)):
            words = values.get(key, "").split()
            if len(words) > port_at:
                address = parse_address(words[0])
                if address is not None:
                    port = int(words[port_at]) if words[port_at].isdigit() else None
                    return {"address": str(address), "port": port}
        return None


class RayrigTable(FactBase):
    """rayrig's nftables table as loaded now: None when it is not loaded (or nft is not
    installed), else ``{"digest": "3f2a9c0d5e6b7a81"}``, the digest of the ruleset its
    comment carries (None in a table loaded without one)."""

    @staticmethod
    def default() -> None:
        return None

    def command(self) -> str:
        return f"command -v nft >/dev/null 2>&1 && nft list table {TABLE} 2>/dev/null || true"

    def process(self, output: list[str]) -> dict[str, str | None] | None:
        if not any(line.strip().startswith(f"table {TABLE} ") for line in output):
            return None
        marker = f'comment "{DIGEST_PREFIX}'
        digests = [line.strip()[len(marker) :].rstrip('"') for line in output if line.strip().startswith(marker)]
        return {"digest": digests[0] if digests else None}


class OtherFirewalls(FactBase):
    """The other firewalls that manage the host: name -> "active" or "enabled" (it
    starts at boot), e.g. ``{"ufw": "active"}``; empty when there is none."""

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def command(self) -> str:
        return (
            "if command -v ufw >/dev/null 2>&1; then "
            "if ufw status 2>/dev/null | grep -q '^Status: active'; then echo 'RAYRIG_FIREWALL=ufw active'; "
            "elif grep -qs '^ENABLED=yes' /etc/ufw/ufw.conf; then echo 'RAYRIG_FIREWALL=ufw enabled'; fi; fi; "
            "if command -v systemctl >/dev/null 2>&1; then "
            "if systemctl is-active --quiet firewalld 2>/dev/null; then echo 'RAYRIG_FIREWALL=firewalld active'; "
            "elif systemctl is-enabled --quiet firewalld 2>/dev/null; then "
            "echo 'RAYRIG_FIREWALL=firewalld enabled'; fi; fi"
        )

    def process(self, output: list[str]) -> dict[str, str]:
        found = {}
        for line in output:
            if line.startswith("RAYRIG_FIREWALL="):
                name, _sep, state = line.split("=", 1)[1].partition(" ")
                found[name] = state or "active"
        return found


# --- Pure helpers ---------------------------------------------------------------------------------


def _port(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def ports_match(ports: Iterable[int | str]) -> str:
    """The right-hand side of ``tcp dport``: one port, or an anonymous set.

    >>> ports_match([22]), ports_match([2222, 22, "8000-8010"])
    ('22', '{ 22, 2222, 8000-8010 }')
    """
    elements = [_port(first, last) for first, last in port_ranges(ports)]
    return elements[0] if len(elements) == 1 else "{ " + ", ".join(elements) + " }"


def _address_key(address: IPAddress | IPNetwork) -> tuple[int, int]:
    return address.version, int(address.network_address if hasattr(address, "network_address") else address)


def collapse_networks(cidrs: Iterable[str]) -> list[IPNetwork]:
    """Networks (host bits cleared), overlaps and neighbours merged, IPv4 first, sorted.

    >>> [str(n) for n in collapse_networks(["10.0.0.7/24", "10.0.0.9", "2001:db8::1"])]
    ['10.0.0.0/24', '2001:db8::1/128']
    """
    networks = [ipaddress.ip_network(c.split("%", 1)[0], strict=False) for c in cidrs]
    collapsed: list[IPNetwork] = []
    for version in (4, 6):
        same = [n for n in networks if n.version == version]
        collapsed += list(ipaddress.collapse_addresses(same))  # type: ignore[arg-type]
    return sorted(collapsed, key=_address_key)


def _element(network: IPNetwork) -> str:
    return str(network.network_address) if network.prefixlen == network.max_prefixlen else str(network)


def ray_member_ports(ray_ports: Mapping[str, int], dashboard_open: bool) -> list[tuple[str, str]]:
    """(port or range, what it is) of every Ray port the members reach, sorted by port.

    The dashboard is among them only when it listens beyond loopback.
    """
    entries = []
    for name, port in ray_ports.items():
        if name in WORKER_RANGE or (name == DASHBOARD and not dashboard_open):
            continue
        entries.append((int(port), int(port), name))
    lo, hi = (int(ray_ports[name]) for name in WORKER_RANGE)
    entries.append((lo, hi, "-".join(WORKER_RANGE) + " (Ray's workers)"))
    return [(_port(first, last), name) for first, last, name in sorted(entries)]


def member_networks(cidrs: Iterable[str]) -> list[IPNetwork]:
    """``firewall_member_cidrs`` as networks, overlaps merged (``collapse_networks``);
    a ValueError names the first value that is not an address or network."""
    for cidr in cidrs:
        ipaddress.ip_network(cidr, strict=False)
    return collapse_networks(cidrs)


def member_elements(addresses: Iterable[IPAddress], networks: Iterable[IPNetwork], version: int) -> list[str]:
    """The members set's elements of one IP version: the node addresses no network
    covers (an interval set refuses overlaps), and the networks, sorted.

    >>> member_elements([ipaddress.ip_address("10.0.0.1"), ipaddress.ip_address("192.168.1.5")],
    ...                 [ipaddress.ip_network("192.168.1.0/24")], 4)
    ['10.0.0.1', '192.168.1.0/24']
    """
    nets = [n for n in networks if n.version == version]
    lone = [a for a in addresses if a.version == version and not any(a in n for n in nets)]
    entries: list[IPAddress | IPNetwork] = [*lone, *nets]
    return [str(e) if not hasattr(e, "prefixlen") else _element(e) for e in sorted(entries, key=_address_key)]


def ruleset_digest(text: str) -> str:
    """A short digest of a ruleset, its own digest comment left out: what the loaded
    table's comment says it was loaded from."""
    marker = f'\tcomment "{DIGEST_PREFIX}'
    body = "\n".join(line for line in text.split("\n") if not line.startswith(marker))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def render_ruleset(**inputs: Any) -> str:
    """The nftables file of one host (``ruleset.nft.j2``, filled by :func:`ruleset_values`): rayrig's
    table, replaced in one transaction when loaded, with a digest of itself in the table's comment.

    >>> ports = {"gcs": 7000, "dashboard": 7001, "worker_min": 7100, "worker_max": 7199}
    >>> text = render_ruleset(ray_ports=ports, members=["10.0.0.1"])
    >>> "policy drop;" in text, "ip saddr @members_v4 tcp dport @ray_ports accept" in text
    (True, True)
    """
    body = render(RULESET_TEMPLATE, **ruleset_values(**inputs))
    table = "table inet rayrig {\n"
    at = body.index(table, body.index("delete table inet rayrig")) + len(table)
    return f'{body[:at]}\tcomment "{DIGEST_PREFIX}{ruleset_digest(body)}"\n{body[at:]}'


def ruleset_values(
    *,
    ray_ports: Mapping[str, int],
    members: Iterable[str],
    admin_cidrs: Iterable[str] = (),
    extra_tcp_ports: Iterable[int | str] = (),
    ssh_ports: Iterable[int] = (22,),
    dashboard_host: str = "127.0.0.1",
    deploy_source: str | None = None,
    nfs_server: bool = False,
    members_all_ports: bool = True,
    member_cidrs: Iterable[str] = (),
    mirror_port: int | None = None,
    gate_source: str | None = None,
) -> dict[str, Any]:
    """What ``ruleset.nft.j2`` says of one host.

    ``members`` are the cluster's IP addresses; ``admin_cidrs`` who administers it
    (``firewall_admin_cidrs``), joined by ``deploy_source``, the address the deploy
    connects from. ``nfs_server``: the host serves NFS (``storage_nfs_server``), so
    the members also reach TCP 2049. ``members_all_ports``: the members reach every
    port (``firewall_members_all_ports``). The values depend only on the arguments'
    values, never on their order, so that a re-run with the same data rewrites nothing.
    ``gate_source``: the health gate's host (``health_gate``), which reaches SSH here.
    """
    admin_cidrs, ssh_ports, members, member_cidrs = (
        list(admin_cidrs),
        list(ssh_ports),
        list(members),
        list(member_cidrs),
    )
    parsed = [parse_address(m) for m in members]
    if None in parsed:
        raise ValueError(f"members must be IP addresses (resolve names first): {members!r}")
    member_addresses = sorted(set(parsed), key=_address_key)  # type: ignore[arg-type]
    extra_members = member_networks(member_cidrs)
    admins = collapse_networks([*admin_cidrs, *([deploy_source] if deploy_source else [])])
    dashboard_open = not is_loopback(dashboard_host)
    ray = ray_member_ports(ray_ports, dashboard_open)
    if nfs_server:
        ray.append((str(NFS_PORT), "nfs (this host is storage_nfs_server)"))
    if mirror_port is not None:
        ray.append((str(mirror_port), "the image mirror (image_mirror = head)"))
    ray.sort(key=lambda e: int(e[0].split("-")[0]))
    exporters = any(name in ray_ports for name in MONITORING_PORT_NAMES)
    open_to = _open_to(
        ssh_ports, bool(admin_cidrs), exporters, bool(member_cidrs), members_all_ports, nfs_server, mirror_port,
        int(ray_ports[DASHBOARD]) if dashboard_open else None, port_ranges(extra_tcp_ports),
    )  # fmt: skip
    return {
        "nft": NFT,
        "open_to": [f"{line.rstrip(';.')}{';' if i < len(open_to) - 1 else '.'}" for i, line in enumerate(open_to)],
        "dashboard_open": dashboard_open,
        "dashboard": int(ray_ports[DASHBOARD]),
        "dashboard_host": dashboard_host,
        "member_cidrs": bool(member_cidrs),
        "members_v4": member_elements(member_addresses, extra_members, 4),
        "members_v6": member_elements(member_addresses, extra_members, 6),
        "source": f"the address this deploy connects from ({deploy_source})" if deploy_source else "no deploy address",
        "admins_v4": [_element(n) for n in admins if n.version == 4],
        "admins_v6": [_element(n) for n in admins if n.version == 6],
        "ports_comment": " and ".join(
            what
            for what, on in (
                ("Ray's ports (ray_ports)", True),
                ("the exporters' (monitoring_ports)", exporters),
                ("NFS", nfs_server),
            )
            if on
        ),
        "ray_ports": [port for port, _name in ray],
        "ray_port_names": [name for _port, name in ray],
        "admins": bool(admin_cidrs),
        "ssh": ports_match(ssh_ports),
        "members_all_ports": members_all_ports,
        "extra_ports": ports_match(extra_tcp_ports) if port_ranges(extra_tcp_ports) else None,
        "gate_source": _gate_element(gate_source, bool(admin_cidrs), members_all_ports),
    }


def _gate_element(source: str | None, admins: bool, members_all_ports: bool) -> dict[str, Any] | None:
    """The health gate's address and family, where a rule of its own is needed: SSH is not open to
    all (``firewall_admin_cidrs``) and the members do not reach every port already."""
    address = parse_address(source) if source else None
    if address is None or not admins or members_all_ports:
        return None
    return {"family": "ip" if address.version == 4 else "ip6", "address": str(address)}


def _open_to(
    ssh_ports: list[int],
    admins: bool,
    exporters: bool,
    member_cidrs: bool,
    members_all_ports: bool,
    nfs_server: bool,
    mirror_port: int | None,
    open_dashboard: int | None,
    extra: list[tuple[int, int]],
) -> list[str]:
    """The ruleset header's list of what may come in, one line each."""
    ssh_listed = ", ".join(str(p) for p in sorted(set(ssh_ports)))
    open_to = ["loopback, replies to this host's own connections, ICMP and ICMPv6, DHCPv6 replies;"]
    if admins:
        open_to.append(f"SSH (TCP {ssh_listed}) from the admins;")
    else:
        open_to.append(f"SSH (TCP {ssh_listed}) from anywhere, as firewall_admin_cidrs is empty;")
    open_to.append(
        "Ray's ports (ray_ports)"
        + (" and the exporters' (monitoring_ports)" if exporters else "")
        + " from the cluster's members"
        + (" (their node addresses and firewall_member_cidrs);" if member_cidrs else ";")
    )
    if members_all_ports:
        open_to.append(
            "every other port from the members too (firewall_members_all_ports): torch.distributed's "
            "gloo and NCCL listen on ports no one can pin;"
        )
    if nfs_server:
        open_to.append(f"NFS (TCP {NFS_PORT}) from the cluster's members, as this host serves storage_nfs_exports;")
    if mirror_port is not None:
        open_to.append(f"the image mirror (TCP {mirror_port}) from the cluster's members, as this host is the head;")
    if open_dashboard is not None:
        open_to.append(f"the dashboard (TCP {open_dashboard}) from the admins and the members;")
    if extra:
        listed = ", ".join(_port(first, last) for first, last in extra)
        open_to.append(f"TCP {listed} from anywhere (firewall_extra_tcp_ports)")
    return open_to


def unit_text() -> str:
    """rayrig-firewall.service (``rayrig-firewall.service.j2``): loads the ruleset at boot,
    before the network is up."""
    return render(UNIT_TEMPLATE, **_unit_values())


def _unit_values() -> dict[str, str]:
    return {"nft": NFT, "ruleset_path": RULESET_PATH, "table": TABLE}


def drop_in_text() -> str:
    """The drop-in for the distribution's nftables.service (``nftables-rayrig.conf.j2``):
    after nftables.service flushed the ruleset (start, restart, reload), rayrig's table is loaded again."""
    return render(DROP_IN_TEMPLATE, **_unit_values())


def check_command(path: str = RULESET_PATH) -> str:
    """``nft -c -f``: a ruleset the kernel would refuse is not left behind to be loaded at boot."""
    quoted = shlex.quote(path)
    return f"nft -c -f {quoted} || {{ rm -f {quoted}; exit 1; }}"


def conflict_message(host_name: str, others: Mapping[str, str], ray_ports: Mapping[str, int]) -> str:
    """The error for a host where another firewall manages inbound traffic."""
    found = " and ".join(f"{name} is {state}" for name, state in sorted(others.items()))
    turn_off = "; ".join(f"`{OTHER_FIREWALLS.get(name, name)}`" for name in sorted(others))
    ports = ", ".join(p for p, _n in ray_member_ports(ray_ports, dashboard_open=False))
    return (
        f"host {host_name}: {found}, and rayrig manages this host's firewall (firewall_enabled = True): "
        "two firewalls would fight over the same traffic. Either turn it off "
        f"({turn_off}) and run the deploy again, or set firewall_enabled = False for this host and "
        f"open Ray's ports (ray_ports: TCP {ports}) to the cluster's nodes yourself. "
        "Nothing was changed on any host."
    )


# --- The cluster's members ------------------------------------------------------------------------


def resolve_address(address: str, host_name: str) -> list[str]:
    """The IP addresses of a node address: itself when it is one, else what it resolves to here."""
    parsed = parse_address(address)
    if parsed is not None:
        return [str(parsed)]
    try:
        infos = socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise UnresolvableNode(
            f"host {host_name}: its node address {address!r} (ray_node_ip, else ssh_hostname, else the "
            f"inventory name) does not resolve to an IP address on this machine ({reason}): expected a name "
            "that resolves, as the firewall admits the cluster's members by address. Set ray_node_ip to the "
            "host's IP address, or set firewall_enabled = False. Nothing was changed on any host."
        ) from error
    found = {parse_address(str(info[4][0])) for info in infos}
    return [str(a) for a in sorted((a for a in found if a), key=_address_key)]


def member_addresses(hosts: Iterable[Any]) -> list[str]:
    """Every IP address of the given inventory hosts' node addresses, sorted."""
    found = {parse_address(a) for h in hosts for a in resolve_address(node_address(h), h.name)}
    return [str(a) for a in sorted((a for a in found if a), key=_address_key)]


def cluster_members() -> list[str]:
    """The member addresses of the current inventory's hosts, absent ones left out (resolved once per deploy run)."""
    memo = run_memo(host.state, "firewall")
    if "members" not in memo:
        memo["members"] = member_addresses(present_hosts(inventory))
    return memo["members"]


def cluster_member_cidrs() -> list[str]:
    """The ``firewall_member_cidrs`` of the current inventory's hosts, absent ones left out (checked once per run)."""
    memo = run_memo(host.state, "firewall")
    if "member_cidrs" not in memo:
        memo["member_cidrs"] = member_cidrs(present_hosts(inventory))
    return memo["member_cidrs"]


def ssh_ports(data: Mapping[str, Any], source: Mapping[str, Any] | None) -> list[int]:
    """SSH's ports: ``ssh_port`` (default 22) and the one the deploy is connected to."""
    ports = {int(data.get("ssh_port") or 22)}
    if source and source.get("port"):
        ports.add(int(source["port"]))
    return sorted(ports)


def host_ruleset(
    current_host: Any, members: list[str], source: Mapping[str, Any] | None, cidrs: Iterable[str] = ()
) -> str:
    """The ruleset of a host from its settings, the cluster's members (``cidrs``: every host's
    ``firewall_member_cidrs``) and the deploy's source."""
    settings = host_settings(current_host)
    return render_ruleset(
        ray_ports=member_ports(settings),  # Ray's ports and the exporters' (monitoring_ports)
        members=members,
        admin_cidrs=settings["firewall_admin_cidrs"],
        extra_tcp_ports=settings["firewall_extra_tcp_ports"],
        ssh_ports=ssh_ports(host_data(current_host), source),
        dashboard_host=settings["ray_dashboard_host"],
        deploy_source=source["address"] if source else None,
        nfs_server=serves_nfs(settings, current_host.name),
        members_all_ports=settings["firewall_members_all_ports"],
        member_cidrs=cidrs,
        mirror_port=_mirror_port(current_host),
        gate_source=_gate_source(current_host),
    )


def _gate_source(current_host: Any) -> str | None:
    """The health gate's host address, on the other hosts while ``health_gate`` is on (None elsewhere)."""
    from deploy.monitoring.health import gate_host  # noqa: PLC0415 - the health gate imports the firewall's unit

    gate = gate_host()
    return node_address(gate) if gate is not None and gate.name != current_host.name else None


def _mirror_port(current_host: Any) -> int | None:
    """The image mirror's port on the head that runs it (``image_mirror = "head"``), when the members
    do not reach every port anyway (``firewall_members_all_ports``); else None."""
    if not image_mirror.runs_mirror(current_host) or host_settings(current_host)["firewall_members_all_ports"]:
        return None
    return int(host_settings(current_host)["image_mirror_port"])


def needs_load(loaded: Mapping[str, Any] | None, ruleset: str) -> bool:
    """Whether the ruleset must be loaded: the table is not loaded, or not from this ruleset
    (``loaded``: the fact ``RayrigTable``)."""
    return loaded is None or loaded.get("digest") != ruleset_digest(ruleset)


# --- Steps ----------------------------------------------------------------------------------------

PACKAGES = ("nftables",)


def distro_packages() -> tuple[str, ...]:
    """The firewall's packages for the current host, to install with the base packages (``deploy.host.base.base``)."""
    return PACKAGES if host_settings(host)["firewall_enabled"] else ()


def remove_firewall() -> None:
    """Take away what an earlier deploy put there; plan nothing where there is nothing."""
    guard.remove_guard()
    unit = fact(host, File, UNIT_PATH)
    drop_in = fact(host, File, DROP_IN_PATH)
    if fact(host, RayrigTable) is not None:
        server.shell(name="Delete rayrig's nftables table", commands=[f"nft delete table {TABLE}"])
    removed = []
    if unit:
        systemd.service(name=f"Stop and disable {UNIT}", service=UNIT, running=False, enabled=False)
        removed.append(files.file(name=f"Remove the {UNIT} unit", path=UNIT_PATH, present=False))
    if drop_in:
        name = f"Remove rayrig's drop-in for {NFTABLES_UNIT}"
        removed.append(files.file(name=name, path=DROP_IN_PATH, present=False))
    # Also when an earlier run removed the files and died before the reload.
    if removed or any(fact(host, NeedDaemonReload, u) for u in (UNIT, NFTABLES_UNIT)):
        daemon_reload("Reload systemd units without rayrig's firewall", removed, [UNIT, NFTABLES_UNIT])
    if fact(host, File, RULESET_PATH):
        files.file(name="Remove rayrig's nftables ruleset", path=RULESET_PATH, present=False)


@deploy("Firewall")
def firewall() -> None:
    settings = host_settings(host)
    if not settings["firewall_enabled"]:
        remove_firewall()
        return

    others = fact(host, OtherFirewalls)
    if others:
        raise FirewallConflict(conflict_message(host.name, others, settings["ray_ports"]))
    # Without sudo: sudo clears $SSH_CONNECTION.
    source = host.get_fact(DeploySource, _sudo=False)
    ruleset = host_ruleset(host, cluster_members(), source, cluster_member_cidrs())

    install_packages(PACKAGES, "Install nftables")
    files.put(name="Install rayrig's nftables ruleset", src=StringIO(ruleset), dest=RULESET_PATH, mode="644")
    # Load unless the table loaded now is this ruleset: not on whether the file changed, so that
    # a run that died before loading, a reboot without the unit or a flush are put right.
    if needs_load(fact(host, RayrigTable), ruleset):
        server.shell(name="Check rayrig's nftables ruleset", commands=[check_command()])
        server.shell(name="Load rayrig's nftables ruleset", commands=[f"nft -f {shlex.quote(RULESET_PATH)}"])

    unit = put_template(f"Install the {UNIT} unit", UNIT_TEMPLATE, UNIT_PATH, **_unit_values())
    drop_in = put_template(
        f"Install the drop-in that loads rayrig's table after {NFTABLES_UNIT}",
        DROP_IN_TEMPLATE,
        DROP_IN_PATH,
        **_unit_values(),
    )
    daemon_reload("Reload systemd units for rayrig's firewall", [unit, drop_in], [UNIT, NFTABLES_UNIT])
    systemd.service(name=f"Enable {UNIT} (loads the ruleset at boot)", service=UNIT, running=True, enabled=True)
    guard.keep_guard(TABLE, RULESET_PATH, UNIT)
