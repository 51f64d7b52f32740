"""What a host looks like to the firewall step of the deploy, for the plan tests' fake hosts.

``facts(os_name, converged, data, members, options)`` returns the files, directories,
packages and other fact answers that a host has: nothing of rayrig's when fresh,
everything the firewall step puts there when converged (``options`` change one aspect).
``fakehosts.fake_responses`` merges them into the host's ``fake_responses``.

A converged host with ``firewall_enabled`` has the nftables package, the ruleset
(rendered by the pure ``deploy.firewall.nftables.render_ruleset`` from the host's data, the
members and the deploy's source address), the unit file and the drop-in for
nftables.service with their modes, the unit enabled and active, systemd running
the files on disk, and the table loaded from that ruleset (its comment carries the
ruleset's digest). One with ``firewall_enabled = False`` has none of it.

Options:

- ``deploy_source``: the address the deploy's SSH connection comes from
  (``DEPLOY_SOURCE`` by default; None: no SSH, as under ``@local``);
- ``ssh_server_port``: the host's side of that connection (default 22);
- ``ufw`` / ``firewalld``: "active" or "enabled" (default: neither);
- ``installed``: whether rayrig's firewall is there (default: converged and enabled);
- ``table_loaded``: whether ``table inet rayrig`` is loaded (default: ``installed``);
- ``table_digest``: the digest the loaded table's comment carries (default: the
  ruleset's own; None: a table without one);
- ``member_cidrs``: every host's ``firewall_member_cidrs`` (default: this host's own);
- ``need_reload``: units whose files changed since systemd's last daemon-reload
  (``rayrig-firewall.service``, ``nftables.service``);
- ``nfs_server``: the host serves NFS to the members (``fakehosts.cluster`` sets it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from deploy.contract import settings
from deploy.contract.ports import member_ports
from deploy.firewall import guard, nftables
from deploy.run.templating import resource
from tests.plan.fakes.fakestep import FakeState, fact_key, need_reload, systemd_unit

#: The operator's address the fake hosts see the deploy connect from (TEST-NET-2).
DEPLOY_SOURCE = "198.51.100.7"

#: The matchers of the facts this module answers, checked against their commands.
DEPLOY_SOURCE_FACT = fact_key(nftables.DeploySource, "RAYRIG_SSH_CONNECTION=")
OTHER_FIREWALLS = fact_key(nftables.OtherFirewalls, "RAYRIG_FIREWALL=")
RAYRIG_TABLE = fact_key(nftables.RayrigTable, f"nft list table {nftables.TABLE}")


def expected_ruleset(
    data: Mapping[str, Any],
    members: Sequence[str],
    deploy_source: str | None = DEPLOY_SOURCE,
    server_port: int = 22,
    nfs_server: bool = False,
    member_cidrs: Sequence[str] | None = None,
) -> str:
    """The ruleset a deploy with ``data`` leaves on a host (``member_cidrs``: every
    host's ``firewall_member_cidrs``, this host's own by default)."""
    s = settings.merge(data)
    ssh = sorted({int(data.get("ssh_port") or 22), *([server_port] if deploy_source else [])})
    return nftables.render_ruleset(
        ray_ports=member_ports(s),
        members=members,
        admin_cidrs=s["firewall_admin_cidrs"],
        extra_tcp_ports=s["firewall_extra_tcp_ports"],
        ssh_ports=ssh,
        dashboard_host=s["ray_dashboard_host"],
        deploy_source=deploy_source,
        nfs_server=nfs_server,
        members_all_ports=s["firewall_members_all_ports"],
        member_cidrs=s["firewall_member_cidrs"] if member_cidrs is None else member_cidrs,
    )


def table_listing(ruleset: str, digest: str | None) -> list[str]:
    """What ``nft list table inet rayrig`` prints (the start of it) for a table loaded with
    a comment carrying ``digest`` (None: no comment)."""
    comment = [f'\tcomment "{nftables.DIGEST_PREFIX}{digest}"'] if digest else []
    return [f"table {nftables.TABLE} {{", *comment, "\tset members_v4 {", "\t\ttype ipv4_addr", "\t}", "}"]


def facts(
    os_name: str, converged: bool, data: Mapping[str, Any], members: Sequence[str], options: Mapping[str, Any]
) -> FakeState:
    """The firewall step's view of one host (``members``: every node's address, the head's first)."""
    s = settings.merge(data)
    source = options.get("deploy_source", DEPLOY_SOURCE)
    server_port = int(options.get("ssh_server_port", 22))
    installed = options.get("installed", converged and s["firewall_enabled"])
    table_loaded = options.get("table_loaded", installed)
    state = FakeState()

    node_ip = str(s["ray_node_ip"] or "10.0.0.99")
    connection = f"{source} 52814 {node_ip} {server_port}" if source else ""
    client = f"{source} 52814 {server_port}" if source else ""
    state.responses[DEPLOY_SOURCE_FACT] = [f"RAYRIG_SSH_CONNECTION={connection}", f"RAYRIG_SSH_CLIENT={client}"]
    state.responses[OTHER_FIREWALLS] = [
        f"RAYRIG_FIREWALL={name} {options[name]}" for name in ("ufw", "firewalld") if options.get(name)
    ]
    try:
        ruleset = expected_ruleset(
            data, members, source, server_port, bool(options.get("nfs_server")), options.get("member_cidrs")
        )
    except ValueError:  # data the deploy refuses before any operation: no ruleset of it was ever loaded
        ruleset, table_loaded, installed = "", False, False
    # RayrigTable
    digest = options.get("table_digest", nftables.ruleset_digest(ruleset))
    state.responses[RAYRIG_TABLE] = table_listing(ruleset, digest) if table_loaded else []
    # NeedDaemonReload of the firewall's unit and of nftables.service (its drop-in)
    for unit in (nftables.UNIT, nftables.NFTABLES_UNIT, guard.UNIT):
        state.responses.update(need_reload(unit, unit in options.get("need_reload", ())))
    state.responses.update(
        systemd_unit(nftables.UNIT, "exited" if installed else "dead", "enabled" if installed else "")
    )
    guarded = options.get("guard_installed", installed)
    state.responses.update(systemd_unit(guard.UNIT, "running" if guarded else "dead", "enabled" if guarded else ""))
    if installed:
        state.packages = ("nftables",)
        state.dirs["/etc/rayrig"] = 755
        state.dirs[nftables.DROP_IN_PATH.rsplit("/", 1)[0]] = 755
        state.files[nftables.RULESET_PATH] = (ruleset, 644)
        state.files[nftables.UNIT_PATH] = (nftables.unit_text(), 644)
        state.files[nftables.DROP_IN_PATH] = (nftables.drop_in_text(), 644)
    if guarded:
        state.dirs["/usr/local/lib/rayrig"] = 755
        state.files[guard.SCRIPT] = (Path(resource("deploy.firewall", "firewall-guard.sh")).read_text(), 755)
        state.files[guard.UNIT_PATH] = (guard.unit_text(nftables.TABLE, nftables.RULESET_PATH, nftables.UNIT), 644)
    return state
