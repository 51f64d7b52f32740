"""Shared storage: an NFS server role, and NFS and S3 mounts at the same paths on every host; this
module decides what a host gets, :mod:`deploy.storage.nfs` and :mod:`deploy.storage.s3` do it,
:mod:`deploy.storage.mount_units` holds what their mount units share.

Exports, mount units, credentials and removal: docs/design/storage.md.
"""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase, deploy
from pyinfra.operations import files, server

from deploy.contract.settings import host_settings
from deploy.host.base import install_packages, missing_packages, platform
from deploy.host.epel import ensure_epel
from deploy.host.platform import Platform
from deploy.run.facts import HostInfo, fact
from deploy.storage.mount_units import MARKER, UNIT_DIR, MountTable, mount_unit_name, remove_commands
from deploy.storage.nfs import (
    EXPORTS_FILE,
    NFS_CLIENT_PACKAGES,
    NFS_SERVER_PACKAGES,
    nfs_mount,
    serve_exports,
    serves_nfs,
)
from deploy.storage.s3 import (
    CREDENTIALS_DIR,
    MOUNTPOINT_PACKAGE,
    check_credentials,
    mountpoint_install_command,
    mountpoint_package,
    s3_credentials_path,
    s3_driver,
    s3_mount,
    s3_unit_name,
    s3fs_packages,
)


class StorageState(FactBase):
    """The files of this step on a host: its units with whether each is enabled, whether
    the exports file is there, and the credentials files.

    Returns ``{"units": {"mnt-shared.mount": True}, "exports": False,
    "credentials": ["/etc/rayrig/s3/passwd-datasets"]}``.
    """

    @staticmethod
    def default() -> dict[str, Any]:
        return {"units": {}, "exports": False, "credentials": []}

    def command(self) -> str:
        marker = shlex.quote(MARKER)
        return (
            f"for f in {UNIT_DIR}/*.mount {UNIT_DIR}/rayrig-s3-*.service; do "
            f'[ -f "$f" ] && grep -qxF {marker} "$f" || continue; u=${{f##*/}}; '
            'echo "UNIT $u $(systemctl is-enabled "$u" 2>/dev/null)"; done; '
            f"[ -f {EXPORTS_FILE} ] && echo EXPORTS; "
            f'for f in {CREDENTIALS_DIR}/*; do [ -f "$f" ] && echo "CREDENTIALS $f"; done; true'
        )

    def process(self, output: list[str]) -> dict[str, Any]:
        state = self.default()
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            if kind == "UNIT" and rest:
                name, _, enabled = rest.partition(" ")
                state["units"][name] = enabled.strip() == "enabled"
            elif kind == "EXPORTS":
                state["exports"] = True
            elif kind == "CREDENTIALS" and rest:
                state["credentials"].append(rest)
        return state


def mount_points(settings: dict[str, Any]) -> list[str]:
    """Every shared mount point of a host, NFS then S3, as the data lists them."""
    return [m["path"] for m in settings["storage_nfs_mounts"]] + [m["path"] for m in settings["storage_s3_mounts"]]


def mount_units(settings: dict[str, Any], plat: Platform, host_name: str = "") -> list[str]:
    """The systemd unit of every shared mount of a host, as ``mount_points`` lists them."""
    nfs = [mount_unit_name(m["path"]) for m in settings["storage_nfs_mounts"]]
    return nfs + [s3_unit_name(m["path"], s3_driver(m, plat, host_name)) for m in settings["storage_s3_mounts"]]


# --- Steps ----------------------------------------------------------------------------------------


def _packages(plat: Platform, settings: dict[str, Any], is_server: bool, drivers: list[str]) -> None:
    wanted: list[str] = []
    if is_server:
        wanted += NFS_SERVER_PACKAGES[plat.family]
    if settings["storage_nfs_mounts"]:
        wanted += NFS_CLIENT_PACKAGES[plat.family]
    if "s3fs" in drivers:
        if plat.family == "dnf" and missing_packages(["s3fs-fuse"]):
            ensure_epel("for s3fs")
        wanted += s3fs_packages(plat)
    install_packages(list(dict.fromkeys(wanted)), "Install the shared-storage packages")
    if "mountpoint-s3" in drivers and missing_packages([MOUNTPOINT_PACKAGE]):
        server.shell(
            name="Install Mountpoint for Amazon S3",
            commands=[
                mountpoint_install_command(
                    plat, *mountpoint_package(settings, plat, fact(host, HostInfo)["arch"], host.name)
                )
            ],
        )


def _remove_stale(state: dict[str, Any], units: set[str], secrets: set[str], is_server: bool) -> None:
    for name in sorted(set(state["units"]) - units):
        server.shell(
            name=f"Remove the storage unit {name} (no longer in the data)", commands=remove_commands(name, host.name)
        )
    stale = sorted(set(state["credentials"]) - secrets)
    if stale:
        server.shell(name="Remove S3 credentials no mount uses", commands=[shlex.join(["rm", "-f", *stale])])
    if state["exports"] and not is_server:
        server.shell(
            name="Remove rayrig's NFS exports (this host no longer serves NFS)",
            commands=[f"rm -f {EXPORTS_FILE}", "command -v exportfs >/dev/null && exportfs -ra || true"],
        )


def remove_storage() -> None:
    """Take away every mount unit, S3 credentials file and exports file an earlier deploy put on the
    host (a host that leaves the cluster); plan nothing where there is nothing."""
    _remove_stale(fact(host, StorageState), set(), set(), is_server=False)


@deploy("Shared storage")
def storage() -> None:
    """Serve and mount the host's shared storage."""
    settings = host_settings(host)
    is_server = serves_nfs(settings, host.name)
    nfs_mounts, s3_mounts = settings["storage_nfs_mounts"], settings["storage_s3_mounts"]
    state = fact(host, StorageState)
    if not (is_server or nfs_mounts or s3_mounts or any(state.values())):
        return  # nothing to serve, mount or clean up: no operation at all

    plat = platform()
    credentials = settings["storage_s3_credentials"]
    check_credentials(credentials, host.name)
    s3 = [(mount, s3_driver(mount, plat, host.name)) for mount in s3_mounts]
    mounted = fact(host, MountTable) if nfs_mounts or s3_mounts else {}

    units = {mount_unit_name(m["path"]) for m in nfs_mounts} | {s3_unit_name(m["path"], d) for m, d in s3}
    secrets = {s3_credentials_path(d, m["bucket"]) for m, d in s3} if credentials else set()
    _remove_stale(state, units, secrets, is_server)

    _packages(plat, settings, is_server, [d for _m, d in s3])
    if is_server:
        serve_exports(settings)
    for mount in nfs_mounts:
        nfs_mount(mount, mounted, state["units"])
    written: dict[str, Any] = {}
    if s3 and credentials:
        files.directory(name="Create the S3 credentials directory", path=CREDENTIALS_DIR, mode="700")
    for mount, driver in s3:
        s3_mount(mount, driver, credentials, written, mounted, state["units"])
