"""NFS: the server role that exports shared directories, and the NFS mounts on every host.

The server (the host ``storage_nfs_server`` names) gets its packages, each export's
directory and rayrig's exports file, open to the node addresses of the cluster's present hosts only; each
mount is a systemd mount unit from ``nfs.mount.j2``, mounted once the
server answers on TCP 2049. ``deploy.storage.mounts`` calls ``serve_exports`` and
``nfs_mount``; the firewall opens ``NFS_PORT`` on the server.
"""

from __future__ import annotations

import contextlib
import ipaddress
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from pyinfra import host, inventory
from pyinfra.api import FactBase
from pyinfra.operations import files, server, systemd

from deploy.contract.ports import NFS_PORT
from deploy.contract.settings import node_address, present_hosts
from deploy.run.facts import fact
from deploy.run.templating import put_template, render, resource
from deploy.run.units import NeedDaemonReload
from deploy.storage.mount_units import (
    MARKER,
    MOUNT_TIMEOUT_S,
    UNIT_DIR,
    activate,
    activate_commands,
    merge_options,
    mount_unit_name,
)

EXPORTS_DIR = "/etc/exports.d"
EXPORTS_FILE = f"{EXPORTS_DIR}/rayrig.exports"
ETAB = "/var/lib/nfs/etab"  # the live export table, rewritten by every exportfs -r
PROBE_TIMEOUT_S = 10  # how long an NFS server has to answer on TCP 2049

EXPORT_DEFAULTS = "rw,sync,no_subtree_check,root_squash"
NFS_MOUNT_DEFAULTS = "vers=4.2,proto=tcp,hard,timeo=600,retrans=2"

NFS_SERVER_SERVICE = "nfs-server.service"  # Debian/Ubuntu's nfs-kernel-server.service is an alias of it
NFS_SERVER_PACKAGES = {"apt": ("nfs-kernel-server",), "dnf": ("nfs-utils",)}
NFS_CLIENT_PACKAGES = {"apt": ("nfs-common",), "dnf": ("nfs-utils",)}
UNIT_TEMPLATE = resource(__package__, "nfs.mount.j2")
EXPORTS_TEMPLATE = resource(__package__, "rayrig.exports.j2")


class ExportTimes(FactBase):
    """When rayrig's exports file and the live export table were last written, in seconds
    since the epoch: ``{"exports": 1733000000.5, "etab": 1733000001.25}`` (None: absent)."""

    @staticmethod
    def default() -> dict[str, float | None]:
        return {"exports": None, "etab": None}

    def command(self) -> str:
        return (
            "; ".join(
                f'[ -f {path} ] && echo "RAYRIG_WRITTEN {key} $(date -r {path} +%s.%N)"'
                for key, path in (("exports", EXPORTS_FILE), ("etab", ETAB))
            )
            + "; true"
        )

    def process(self, output: list[str]) -> dict[str, float | None]:
        times = self.default()
        for line in output:
            words = line.split()
            if len(words) == 3 and words[0] == "RAYRIG_WRITTEN" and words[1] in times:
                with contextlib.suppress(ValueError):
                    times[words[1]] = float(words[2])
        return times


def exports_unread(times: Mapping[str, float | None]) -> bool:
    """Whether rayrig's exports file was written after the live export table (``ExportTimes``)."""
    return times["exports"] is not None and (times["etab"] is None or times["exports"] > times["etab"])


# --- Pure helpers ----------------------------------------------------------------------------------


def export_options(options: str | None) -> str:
    """An export's options: rw,sync,no_subtree_check,root_squash unless ``options`` say otherwise."""
    return merge_options(EXPORT_DEFAULTS, options)


def nfs_mount_options(options: str | None) -> str:
    """An NFS mount's options: NFS 4.2 over TCP, hard, unless ``options`` say otherwise."""
    return merge_options(NFS_MOUNT_DEFAULTS, options)


def _address_key(address: str) -> tuple[int, Any, str]:
    try:
        ip = ipaddress.ip_address(address)
        return (ip.version, int(ip), address)
    except ValueError:
        return (9, 0, address)


def cluster_addresses(addresses: Iterable[str]) -> list[str]:
    """The distinct addresses of a cluster, in a stable order (IPv4, IPv6, then names)."""
    return sorted(set(addresses), key=_address_key)


def exports_text(exports: list[dict[str, Any]], addresses: Iterable[str]) -> str:
    """rayrig's exports file (``rayrig.exports.j2``): each export open to the cluster's addresses only.

    >>> print(exports_text([{"path": "/srv/shared"}], ["10.0.0.2", "10.0.0.1"]), end="")
    # Managed by rayrig (shared storage): changes here are overwritten.
    /srv/shared 10.0.0.1(rw,sync,no_subtree_check,root_squash) 10.0.0.2(rw,sync,no_subtree_check,root_squash)
    """
    return render(EXPORTS_TEMPLATE, **_exports_values(exports, addresses))


def _exports_values(exports: list[dict[str, Any]], addresses: Iterable[str]) -> dict[str, Any]:
    listed = [{"path": e["path"], "options": export_options(e.get("options"))} for e in exports]
    return {"marker": MARKER, "exports": listed, "clients": cluster_addresses(addresses)}


def nfs_source(address: str, export: str) -> str:
    """What an NFS mount mounts: ``10.0.0.1:/srv/shared`` (an IPv6 address in brackets)."""
    if ":" in address:
        address = f"[{address.strip('[]')}]"
    return f"{address}:{export}"


def unit_values(source: str, path: str, options: str) -> dict[str, Any]:
    """What ``nfs.mount.j2``, the mount unit of an NFS mount, says."""
    return {"marker": MARKER, "source": source, "path": path, "options": options, "timeout_s": MOUNT_TIMEOUT_S}


def probe_command(address: str, what: str, host_name: str) -> str:
    """A command that fails with a clear message unless ``address`` answers on TCP 2049 in time."""
    probe = shlex.join(["bash", "-c", '</dev/tcp/"$1"/"$2"', "_", address, str(NFS_PORT)])
    message = (
        f"{host_name}: the NFS server {address} did not answer on TCP {NFS_PORT} within {PROBE_TIMEOUT_S} s, "
        f"so {what} was not mounted (storage_nfs_mounts). Is the server up, serving NFS, "
        f"and is port {NFS_PORT} open to this host?"
    )
    return f"timeout {PROBE_TIMEOUT_S} {probe} 2>/dev/null || {{ echo {shlex.quote(message)} >&2; exit 1; }}"


def serves_nfs(settings: Mapping[str, Any], host_name: str) -> bool:
    """Whether the host named ``host_name`` is the cluster's NFS server (it takes TCP 2049)."""
    return settings["storage_nfs_server"] is not None and settings["storage_nfs_server"] == host_name


def resolve_server(server_name: str, hosts: Iterable[Any]) -> str:
    """An NFS mount's server as an address: an inventory host's node address, or as given."""
    for candidate in hosts:
        if candidate.name == server_name:
            return node_address(candidate)
    return server_name


# --- Steps ----------------------------------------------------------------------------------------


def serve_exports(settings: dict[str, Any]) -> None:
    """The NFS server role: export directories, the exports file, ``nfs-server`` running."""
    for export in settings["storage_nfs_exports"]:
        files.directory(
            name=f"Create the NFS export {export['path']}",
            path=export["path"],
            mode="1777",
            _no_check_owner_mode=True,  # an existing directory keeps its owner and mode
        )
    files.directory(name="Create the NFS exports directory", path=EXPORTS_DIR, mode="755")
    addresses = [node_address(h) for h in present_hosts(inventory)]
    exports = put_template(
        f"Write the NFS exports ({EXPORTS_FILE})",
        EXPORTS_TEMPLATE,
        EXPORTS_FILE,
        **_exports_values(settings["storage_nfs_exports"], addresses),
    )
    systemd.service(name="Enable and start the NFS server", service=NFS_SERVER_SERVICE, running=True, enabled=True)
    # Also when the file is newer than the live table: a run that died before re-exporting.
    when = {} if exports_unread(fact(host, ExportTimes)) else {"_if": exports.did_change}
    server.shell(name="Re-export the NFS exports", commands=["exportfs -ra"], **when)


def nfs_mount(mount: dict[str, Any], mounted: dict[str, Any], units: dict[str, bool]) -> None:
    """One NFS mount: its unit installed, and (re)mounted once the server answers, when needed."""
    address = resolve_server(mount["server"], inventory)
    source = nfs_source(address, mount["export"])
    path = mount["path"]
    name = mount_unit_name(path)
    unit = put_template(
        f"Install the NFS mount unit for {path}",
        UNIT_TEMPLATE,
        f"{UNIT_DIR}/{name}",
        **unit_values(source, path, nfs_mount_options(mount.get("options"))),
    )
    current = mounted.get(path) or {}
    ready = current.get("source") == source and current.get("fstype", "").startswith("nfs") and units.get(name)
    # A unit file newer than what systemd runs: a run died before the remount, old options are live.
    ready = ready and not fact(host, NeedDaemonReload, name)
    what = f"{source} at {path}"
    commands = [probe_command(address, f"{mount['server']}:{mount['export']} at {path}", host.name)]
    activate(what, bool(ready), [unit], [*commands, *activate_commands(name, what, path, host.name)])
