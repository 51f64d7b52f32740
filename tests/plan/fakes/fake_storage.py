"""What a host looks like to the storage step of the deploy, for the plan tests' fake hosts.

``facts(os_name, converged, data, members, options)`` returns the files, directories,
packages and other fact answers that a host has: nothing of rayrig's when fresh,
everything the storage step puts there when converged (``options`` change one aspect).
``fakehosts.fake_responses`` merges them into the host's ``fake_responses``.

A converged host has, from its data: the NFS server's packages, export directories,
exports file (open to ``members``) and a running ``nfs-server``; for every mount its
client packages, its unit file (rendered with the pure helpers of ``deploy.storage.mounts``),
the unit enabled and the path mounted from the right source; the S3 credentials files
(0600 in a 0700 directory). ``options`` change one aspect:

- ``"servers"``: inventory host name -> address, for NFS mounts whose server is a host
  name (default: ``@fake/head`` is ``members[0]``, ``@fake/worker-N`` is ``members[N]``);
- ``"unmounted"``: mount points that are not mounted; ``"disabled"``: mount points
  whose unit is not enabled; ``"mounted"``: mount point -> (source, fstype) mounted there;
- ``"stale_units"``: more rayrig storage units on disk (names), ``"stale_credentials"``:
  more credentials files (paths), ``"exports"``: whether rayrig's exports file is there,
  ``"exports_unread"``: whether it was written after the live export table (a run that
  died before ``exportfs -ra``);
  ``"need_reload"``: mount units whose file changed since systemd's last daemon-reload.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from deploy.contract import settings
from deploy.run.templating import render
from deploy.storage import mount_units, nfs, s3
from deploy.storage.mounts import StorageState
from tests.plan.fakes.fakestep import FakeState, fact_key, need_reload, systemd_unit

#: The systems whose /etc/os-release says "amzn": no s3fs package there.
NO_S3FS = ("al2023",)
APT = ("ubuntu22", "ubuntu24", "debian12")

#: The matchers of the facts this module answers, checked against their commands.
MOUNT_TABLE = fact_key(mount_units.MountTable, "findmnt -rn -o TARGET,SOURCE,FSTYPE")
EXPORT_TIMES = fact_key(nfs.ExportTimes, "RAYRIG_WRITTEN exports")
STORAGE_STATE = fact_key(StorageState, "rayrig-s3-*.service")


def server_address(name: str, members: Sequence[str], servers: Mapping[str, str]) -> str:
    """An NFS mount's server as the deploy resolves it, from the fake cluster's naming."""
    if name in servers:
        return servers[name]
    if name == "@fake/head" and members:
        return members[0]
    found = re.fullmatch(r"@fake/worker-(\d+)", name)
    if found and int(found.group(1)) < len(members):
        return members[int(found.group(1))]
    return name


def s3_driver(os_name: str, mount: Mapping[str, Any]) -> str:
    return "mountpoint-s3" if os_name in NO_S3FS else mount.get("driver") or "s3fs"


def expected_units(os_name: str, s: Mapping[str, Any]) -> list[str]:
    """The systemd unit of every shared mount (merged settings ``s``), as ``mount_points`` lists them."""
    nfs_units = [mount_units.mount_unit_name(m["path"]) for m in s["storage_nfs_mounts"]]
    return nfs_units + [s3.s3_unit_name(m["path"], s3_driver(os_name, m)) for m in s["storage_s3_mounts"]]


def is_nfs_server(data: Mapping[str, Any], members: Sequence[str], servers: Mapping[str, str]) -> bool:
    """Whether the host with ``data`` is the one ``storage_nfs_server`` names (by its address)."""
    s = settings.merge(data)
    name = s["storage_nfs_server"]
    return name is not None and server_address(name, members, servers) == str(s["ray_node_ip"])


def expected_packages(os_name: str, data: Mapping[str, Any], is_server: bool = False) -> tuple[str, ...]:
    """The storage packages on a converged host."""
    s = settings.merge(data)
    apt = os_name in APT
    packages: list[str] = []
    if is_server:
        packages.append("nfs-kernel-server" if apt else "nfs-utils")
    if s["storage_nfs_mounts"]:
        packages.append("nfs-common" if apt else "nfs-utils")
    drivers = {s3_driver(os_name, m) for m in s["storage_s3_mounts"]}
    if "s3fs" in drivers:
        packages += ["s3fs"] if apt else ["epel-release", "s3fs-fuse"]
    if "mountpoint-s3" in drivers:
        packages.append("mount-s3")
    return tuple(dict.fromkeys(packages))


def _quoted_file_responses(path: str, content: str, mode: int) -> dict[str, list[str]]:
    """pyinfra's File and Sha1File answers for a path it quotes (a unit name with ``\\x2d``):
    ``fakehosts`` matches unquoted paths only."""
    quoted = shlex.quote(path)
    bits = "".join(
        ("r" if d & 4 else "-") + ("w" if d & 2 else "-") + ("x" if d & 1 else "-") for d in map(int, f"{mode:03d}")
    )
    stat = f"user=root group=root mode=-{bits} atime=1718000000 mtime=1718000000 ctime=1718000000 size=512 {quoted}"
    return {
        f"test -e {quoted} || test -L {quoted} )": [stat],
        f"test -e {quoted} && ( sha1sum {quoted}": [f"{hashlib.sha1(content.encode()).hexdigest()}  {path}"],
    }


def facts(
    os_name: str, converged: bool, data: Mapping[str, Any], members: Sequence[str], options: Mapping[str, Any]
) -> FakeState:
    """The storage step's view of one host (``members``: every node's address, the head's first)."""
    s = settings.merge(data)
    state = FakeState()
    servers = options.get("servers", {})
    is_server = converged and is_nfs_server(data, members, servers)

    units: dict[str, bool] = {}
    mounted: dict[str, tuple[str, str]] = {}
    credentials: set[str] = set()
    unmounted = set(options.get("unmounted", ()))
    disabled = set(options.get("disabled", ()))

    if converged:
        state.packages = expected_packages(os_name, data, is_server)
        if is_server:
            state.dirs[nfs.EXPORTS_DIR] = 755
            for export in s["storage_nfs_exports"]:
                state.dirs[export["path"]] = 755  # an existing export keeps its mode: any will do
            state.files[nfs.EXPORTS_FILE] = (nfs.exports_text(s["storage_nfs_exports"], members), 644)
        for mount in s["storage_nfs_mounts"]:
            address = server_address(mount["server"], members, servers)
            source = nfs.nfs_source(address, mount["export"])
            name = mount_units.mount_unit_name(mount["path"])
            values = nfs.unit_values(source, mount["path"], nfs.nfs_mount_options(mount.get("options")))
            text = render(nfs.UNIT_TEMPLATE, **values)
            state.files[f"{mount_units.UNIT_DIR}/{name}"] = (text, 644)
            units[name] = mount["path"] not in disabled
            mounted[mount["path"]] = (source, "nfs4")
        creds = s["storage_s3_credentials"]
        for mount in s["storage_s3_mounts"]:
            driver = s3_driver(os_name, mount)
            secret = s3.s3_credentials_path(driver, mount["bucket"]) if creds else None
            if secret:
                state.dirs[s3.CREDENTIALS_DIR] = 700
                state.files[secret] = (s3.s3_credentials_text(driver, creds), 600)
                credentials.add(secret)
            name = s3.s3_unit_name(mount["path"], driver)
            template, values, _kind = s3.mount_unit(driver, mount, secret)
            text = render(template, **values)
            mounted[mount["path"]] = ("s3fs", "fuse.s3fs") if driver == "s3fs" else ("mountpoint-s3", "fuse")
            state.files[f"{mount_units.UNIT_DIR}/{name}"] = (text, 644)
            units[name] = mount["path"] not in disabled

    for name in options.get("stale_units", ()):
        units[name] = True
    credentials.update(options.get("stale_credentials", ()))
    exports = options.get("exports", converged and is_server)
    mounted = {path: m for path, m in mounted.items() if path not in unmounted}
    mounted.update({path: tuple(m) for path, m in options.get("mounted", {}).items()})

    for path, (content, mode) in state.files.items():
        if shlex.quote(path) != path:
            state.responses.update(_quoted_file_responses(path, content, mode))
    # MountTable (findmnt): the system's own mounts, then the shared ones
    state.responses[MOUNT_TABLE] = [
        "/ /dev/sda1 ext4",
        "/proc proc proc",
        "/sys/fs/cgroup cgroup2 cgroup2",
        *(f"{path} {source} {fstype}" for path, (source, fstype) in mounted.items()),
    ]
    # NeedDaemonReload of the mount units
    for name in units:
        state.responses.update(need_reload(name, name in options.get("need_reload", ()), quoted=True))
    # ExportTimes: the live table rewritten 5 s after the file (converged), or 5 s before it
    if exports:
        unread = bool(options.get("exports_unread"))
        state.responses[EXPORT_TIMES] = [
            "RAYRIG_WRITTEN exports 1733000100.000000000",
            f"RAYRIG_WRITTEN etab {1733000095 if unread else 1733000105}.000000000",
        ]
    # StorageState
    state.responses[STORAGE_STATE] = [
        *(f"UNIT {name} {'enabled' if on else 'disabled'}" for name, on in units.items()),
        *(["EXPORTS"] if exports else []),
        *(f"CREDENTIALS {path}" for path in sorted(credentials)),
    ]
    # The NFS server service: a oneshot that stays "exited" once it ran
    unit = nfs.NFS_SERVER_SERVICE
    state.responses.update(
        systemd_unit(unit, "exited" if is_server else "dead", "enabled" if is_server else "disabled")
    )
    return state
