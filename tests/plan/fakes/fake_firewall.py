"""What a host looks like to the firewall step of the deploy, for the plan tests' fake hosts.

``facts(os_name, converged, data, members, options)`` returns the files, directories,
packages and other fact answers that a host has: nothing of rayrig's when fresh,
everything the firewall step puts there when converged (``options`` change one aspect).
``fakehosts.fake_responses`` merges them into the host's ``fake_responses``.

A converged host with ``firewall_enabled`` has the nftables package, the ruleset
(rendered by the pure ``deploy.firewall.render_ruleset`` from the host's data, the
members and the deploy's source address) and the unit file with their modes, the
unit enabled and active, and the table loaded beside Docker's. One with
``firewall_enabled = False`` has none of it.

Options:

- ``deploy_source``: the address the deploy's SSH connection comes from
  (``DEPLOY_SOURCE`` by default; None: no SSH, as under ``@local``);
- ``ssh_server_port``: the host's side of that connection (default 22);
- ``ufw`` / ``firewalld``: "active" or "enabled" (default: neither);
- ``installed``: whether rayrig's firewall is there (default: converged and enabled);
- ``table_loaded``: whether ``table inet rayrig`` is loaded (default: ``installed``);
- ``nfs_server``: the host serves NFS to the members (``fakehosts.cluster`` sets it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deploy import firewall, settings
from tests.plan.fakes.fakestep import FakeState

#: The operator's address the fake hosts see the deploy connect from (TEST-NET-2).
DEPLOY_SOURCE = "198.51.100.7"
#: What Docker (iptables-nft) loads on a host where it runs.
DOCKER_TABLES = ("table ip nat", "table ip filter", "table ip6 nat", "table ip6 filter")


def expected_ruleset(
    data: Mapping[str, Any],
    members: Sequence[str],
    deploy_source: str | None = DEPLOY_SOURCE,
    server_port: int = 22,
    nfs_server: bool = False,
) -> str:
    """The ruleset a deploy with ``data`` leaves on a host."""
    s = settings.merge(data)
    ssh = sorted({int(data.get("ssh_port") or 22), *([server_port] if deploy_source else [])})
    return firewall.render_ruleset(
        ray_ports=s["ray_ports"],
        members=members,
        admin_cidrs=s["firewall_admin_cidrs"],
        extra_tcp_ports=s["firewall_extra_tcp_ports"],
        ssh_ports=ssh,
        dashboard_host=s["ray_dashboard_host"],
        deploy_source=deploy_source,
        nfs_server=nfs_server,
        members_all_ports=s["firewall_members_all_ports"],
    )


def _systemd(key: str, value: str) -> list[str]:
    return [f"Id={firewall.UNIT}", f"{key}={value}", ""]


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
    state.responses["RAYRIG_SSH_CONNECTION="] = [f"RAYRIG_SSH_CONNECTION={connection}", f"RAYRIG_SSH_CLIENT={client}"]
    state.responses["RAYRIG_FIREWALL="] = [
        f"RAYRIG_FIREWALL={name} {options[name]}" for name in ("ufw", "firewalld") if options.get(name)
    ]
    tables = list(DOCKER_TABLES) if converged else []
    state.responses["nft list tables"] = [*tables, *([f"table {firewall.TABLE}"] if table_loaded else [])]
    state.responses[f"--property SubState {firewall.UNIT}"] = _systemd("SubState", "exited" if installed else "dead")
    state.responses[f"--property UnitFileState {firewall.UNIT}"] = _systemd(
        "UnitFileState", "enabled" if installed else ""
    )
    if installed:
        state.packages = ("nftables",)
        state.dirs["/etc/rayrig"] = 755
        state.files[firewall.RULESET_PATH] = (
            expected_ruleset(data, members, source, server_port, bool(options.get("nfs_server"))),
            644,
        )
        state.files[firewall.UNIT_PATH] = (firewall.unit_text(), 644)
    return state
