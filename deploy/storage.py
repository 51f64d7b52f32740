"""Shared storage: an NFS server role, and NFS and S3 mounts at the same paths on every host.

From ``storage_nfs_server``, ``storage_nfs_exports``, ``storage_nfs_mounts``,
``storage_s3_mounts`` and ``storage_s3_credentials``, ensures:

- on the host named by ``storage_nfs_server`` (None: an existing filer, no
  server role): the NFS server packages, each export's directory (created
  1777, sticky, when missing; an existing one keeps its owner and mode), the
  exports in rayrig's own file ``/etc/exports.d/rayrig.exports``, each open
  only to the cluster's node addresses with ``rw,sync,no_subtree_check,
  root_squash`` unless its ``options`` say otherwise, ``exportfs -ra`` when
  that file changed, and ``nfs-server`` enabled and running;
- for each NFS mount: the NFS client, one systemd mount unit
  (``/etc/systemd/system/<systemd-escape --path>.mount``: NFS 4.2, hard,
  bounded by ``TimeoutSec``, wanted by ``remote-fs.target``), enabled and
  mounted. Before mounting, the server (an inventory host name or an address)
  must answer on TCP 2049 within 10 seconds, else the host stops with an error
  naming the server, the export and the mount point;
- for each S3 mount: s3fs-fuse from the distribution (Rocky/RHEL: from EPEL)
  as a ``fuse.s3fs`` mount unit, or Mountpoint for Amazon S3 (``"driver":
  "mountpoint-s3"``, and the default on Amazon Linux 2023, which ships no
  s3fs) as a ``rayrig-s3-<path>.service``; mounted with ``allow_other`` so that
  every user and the ray-node container can read. Credentials come from the EC2
  instance profile when ``storage_s3_credentials`` is None, else from a 0600
  file in ``/etc/rayrig/s3`` (0700) that no printed command contains.

A mount is (re)started only when it is not mounted from the right source, its
unit is not enabled, or its unit or credentials changed; a re-run with
unchanged data plans nothing. Units of mounts that left the data are stopped,
disabled and removed, and so are credentials files no mount uses and the
exports file of a host that no longer serves NFS. Example:

    storage()   # in deploy/cluster.py, after nvidia(), before firewall() and ray_node()
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Iterable, Mapping
from io import StringIO
from typing import Any

from pyinfra import host, inventory
from pyinfra.api import FactBase, deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from deploy.base import install_packages, missing_packages, platform
from deploy.facts import HostInfo, fact
from deploy.image import put_secret_file
from deploy.platform import Platform
from deploy.settings import host_settings, node_address

UNIT_DIR = "/etc/systemd/system"
EXPORTS_DIR = "/etc/exports.d"
EXPORTS_FILE = f"{EXPORTS_DIR}/rayrig.exports"
CREDENTIALS_DIR = "/etc/rayrig/s3"
#: First line of every file this step owns: how the storage state fact finds them.
MARKER = "# Managed by rayrig (shared storage): changes here are overwritten."

NFS_PORT = 2049
PROBE_TIMEOUT_S = 10  # how long an NFS server has to answer on TCP 2049
MOUNT_TIMEOUT_S = 90  # systemd's limit on mounting or unmounting (TimeoutSec=)
COMMAND_TIMEOUT_S = 120  # the deploy's limit on a systemctl command that mounts or unmounts
CHECK_TIMEOUT_S = 60  # how long a new mount has to answer a stat of its root

EXPORT_DEFAULTS = "rw,sync,no_subtree_check,root_squash"
NFS_MOUNT_DEFAULTS = "vers=4.2,proto=tcp,hard,timeo=600,retrans=2"
#: Options that exclude each other (or name the same thing): an option given in data
#: replaces the default of its group.
OPTION_GROUPS = {
    "ro": "rw",
    "async": "sync",
    "subtree_check": "no_subtree_check",
    "no_root_squash": "root_squash",
    "soft": "hard",
    "nfsvers": "vers",
}
#: s3fs: readable by every user (files 0644-like, directories 0755), written by root.
S3FS_UMASK = "0022"  # read-only mounts: every user (and ray-node's, whichever it is) reads
S3FS_UMASK_WRITABLE = "0000"  # writable mounts: every user writes too; the bucket's credentials are the gate

NFS_SERVER_SERVICE = "nfs-server.service"  # Debian/Ubuntu's nfs-kernel-server.service is an alias of it
NFS_SERVER_PACKAGES = {"apt": ("nfs-kernel-server",), "dnf": ("nfs-utils",)}
NFS_CLIENT_PACKAGES = {"apt": ("nfs-common",), "dnf": ("nfs-utils",)}
EPEL_RHEL_URL = "https://dl.fedoraproject.org/pub/epel/epel-release-latest-9.noarch.rpm"
MOUNTPOINT_URL = "https://s3.amazonaws.com/mountpoint-s3-release/latest/{arch}/mount-s3.{ext}"
MOUNTPOINT_PACKAGE = "mount-s3"
MOUNTPOINT_BIN = "/usr/bin/mount-s3"
MOUNTPOINT_ARCH = {"x86_64": "x86_64", "aarch64": "arm64"}


class StorageError(PyinfraError):
    """The storage data cannot be served or mounted as given on this host."""


# --- Facts -----------------------------------------------------------------------------------------


class Mounts(FactBase):
    """What is mounted where: ``{"/mnt/shared": {"source": "10.0.0.1:/srv/shared", "fstype": "nfs4"}}``.

    The last mount listed on a path (the one on top) wins.
    """

    @staticmethod
    def default() -> dict[str, dict[str, str]]:
        return {}

    def command(self) -> str:
        return "findmnt -rn -o TARGET,SOURCE,FSTYPE 2>/dev/null || true"

    def process(self, output: list[str]) -> dict[str, dict[str, str]]:
        mounts = {}
        for line in output:
            parts = line.split(" ")
            if len(parts) == 3 and parts[0].startswith("/"):
                target, source, fstype = (_unhex(p) for p in parts)
                mounts[target] = {"source": source, "fstype": fstype}
        return mounts


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


def _unhex(value: str) -> str:
    r"""findmnt's raw output escapes blanks, backslashes and unprintable bytes as ``\xNN``."""
    if "\\x" not in value:
        return value
    raw = re.sub(rb"\\x([0-9a-fA-F]{2})", lambda m: bytes([int(m.group(1), 16)]), value.encode())
    return raw.decode(errors="replace")


# --- Pure helpers ----------------------------------------------------------------------------------


def mount_points(settings: dict[str, Any]) -> list[str]:
    """Every shared mount point of a host, NFS then S3, as the data lists them."""
    return [m["path"] for m in settings["storage_nfs_mounts"]] + [m["path"] for m in settings["storage_s3_mounts"]]


def escape_path(path: str) -> str:
    r"""A path escaped for a systemd unit name, as ``systemd-escape --path`` does it.

    >>> escape_path("/mnt/my-data"), escape_path("/"), escape_path("/srv//a.b/")
    ('mnt-my\\x2ddata', '-', 'srv-a.b')
    """
    parts = [p for p in path.split("/") if p and p != "."]
    if not parts:
        return "-"
    out = []
    for i, byte in enumerate("/".join(parts).encode()):
        char = chr(byte)
        if char == "/":
            out.append("-")
        elif (char.isascii() and char.isalnum()) or char in ":_" or (char == "." and i > 0):
            out.append(char)
        else:
            out.append(f"\\x{byte:02x}")
    return "".join(out)


def mount_unit_name(path: str) -> str:
    """The name of the systemd mount unit of a mount point, e.g. ``mnt-shared.mount``."""
    return f"{escape_path(path)}.mount"


def mountpoint_unit_name(path: str) -> str:
    """The name of the service that runs Mountpoint for S3 at ``path``."""
    return f"rayrig-s3-{escape_path(path)}.service"


def s3_unit_name(path: str, driver: str) -> str:
    """The unit of an S3 mount: a mount unit for s3fs, a service for Mountpoint."""
    return mount_unit_name(path) if driver == "s3fs" else mountpoint_unit_name(path)


def merge_options(defaults: str, given: str | None, groups: Mapping[str, str] = OPTION_GROUPS) -> str:
    """``given`` options over ``defaults``: a given option replaces the default of its group.

    >>> merge_options(EXPORT_DEFAULTS, "ro,no_root_squash")
    'ro,sync,no_subtree_check,no_root_squash'
    >>> merge_options(NFS_MOUNT_DEFAULTS, "nfsvers=3,soft,noatime")
    'nfsvers=3,proto=tcp,soft,timeo=600,retrans=2,noatime'
    """

    def group(option: str) -> str:
        key = option.split("=", 1)[0]
        return groups.get(key, key)

    chosen = {group(o): o for o in (given or "").split(",") if o}
    merged = [chosen.pop(group(o), o) for o in defaults.split(",") if o]
    return ",".join(merged + [o for o in chosen.values() if o not in merged])


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
    """rayrig's exports file: each export open to the cluster's addresses only.

    >>> print(exports_text([{"path": "/srv/shared"}], ["10.0.0.2", "10.0.0.1"]), end="")
    # Managed by rayrig (shared storage): changes here are overwritten.
    /srv/shared 10.0.0.1(rw,sync,no_subtree_check,root_squash) 10.0.0.2(rw,sync,no_subtree_check,root_squash)
    """
    clients = cluster_addresses(addresses)
    lines = [MARKER]
    for export in exports:
        options = export_options(export.get("options"))
        lines.append(" ".join([export["path"], *(f"{client}({options})" for client in clients)]))
    return "\n".join(lines) + "\n"


def nfs_source(address: str, export: str) -> str:
    """What an NFS mount mounts: ``10.0.0.1:/srv/shared`` (an IPv6 address in brackets)."""
    if ":" in address:
        address = f"[{address.strip('[]')}]"
    return f"{address}:{export}"


def _unit_value(value: str) -> str:
    """A value as a unit file reads it literally (``%`` starts a specifier)."""
    return value.replace("%", "%%")


def nfs_unit_text(source: str, path: str, options: str) -> str:
    """The mount unit of an NFS mount."""
    return f"""{MARKER}
[Unit]
Description=NFS {_unit_value(source)} at {path} (rayrig)
Wants=network-online.target
After=network-online.target

[Mount]
What={_unit_value(source)}
Where={path}
Type=nfs
Options={_unit_value(options)}
TimeoutSec={MOUNT_TIMEOUT_S}

[Install]
WantedBy=remote-fs.target
"""


def s3_source(mount: Mapping[str, Any]) -> str:
    """What s3fs mounts: ``BUCKET`` or ``BUCKET:/PREFIX``."""
    prefix = (mount.get("prefix") or "").strip("/")
    return f"{mount['bucket']}:/{prefix}" if prefix else mount["bucket"]


def s3_url(mount: Mapping[str, Any]) -> str:
    """An S3 mount's bucket and prefix as an ``s3://`` URL, for messages."""
    prefix = (mount.get("prefix") or "").strip("/")
    return f"s3://{mount['bucket']}/{prefix}" if prefix else f"s3://{mount['bucket']}"


def s3_is_mounted(current: Mapping[str, str] | None, driver: str) -> bool:
    """Whether a ``Mounts`` entry is a mount of ``driver`` (s3fs or Mountpoint)."""
    if not current:
        return False
    if driver == "s3fs":
        return current.get("fstype") == "fuse.s3fs"
    return current.get("fstype") == "fuse" and current.get("source") == "mountpoint-s3"


def s3_credentials_path(driver: str, bucket: str) -> str:
    """Where the credentials of a bucket's mounts live: s3fs's passwd file or Mountpoint's environment."""
    return f"{CREDENTIALS_DIR}/{'passwd' if driver == 's3fs' else 'env'}-{bucket}"


def s3_credentials_text(driver: str, credentials: Mapping[str, str]) -> str:
    """The credentials file: ``ACCESS:SECRET`` for s3fs, AWS_* variables for Mountpoint."""
    key, secret = credentials["access_key_id"], credentials["secret_access_key"]
    if driver == "s3fs":
        return f"{key}:{secret}\n"
    return f"AWS_ACCESS_KEY_ID={key}\nAWS_SECRET_ACCESS_KEY={secret}\n"


def s3fs_options(mount: Mapping[str, Any], passwd_file: str | None) -> str:
    """The s3fs mount options of an S3 mount (``passwd_file`` None: the EC2 instance profile).

    >>> s3fs_options({"bucket": "d", "path": "/mnt/d", "endpoint_url": "http://10.0.0.5:9000",
    ...               "path_style": True, "read_only": True}, "/etc/rayrig/s3/passwd-d")
    '_netdev,allow_other,umask=0022,passwd_file=/etc/rayrig/s3/passwd-d,url=http://10.0.0.5:9000,use_path_request_style,ro'
    """
    umask = S3FS_UMASK if mount.get("read_only") else S3FS_UMASK_WRITABLE
    options = ["_netdev", "allow_other", f"umask={umask}"]
    options.append(f"passwd_file={passwd_file}" if passwd_file else "iam_role=auto")
    region = mount.get("region")
    if mount.get("endpoint_url"):
        options.append(f"url={mount['endpoint_url']}")
    elif region:
        options.append(f"url=https://s3.{region}.amazonaws.com")
    if region:
        options.append(f"endpoint={region}")
    if mount.get("path_style"):
        options.append("use_path_request_style")
    if mount.get("read_only"):
        options.append("ro")
    return ",".join(options)


def s3fs_unit_text(mount: Mapping[str, Any], options: str) -> str:
    """The mount unit of an S3 mount through s3fs."""
    source = _unit_value(s3_source(mount))
    return f"""{MARKER}
[Unit]
Description=S3 bucket {source} at {mount["path"]} through s3fs (rayrig)
Wants=network-online.target
After=network-online.target

[Mount]
What={source}
Where={mount["path"]}
Type=fuse.s3fs
Options={_unit_value(options)}
TimeoutSec={MOUNT_TIMEOUT_S}

[Install]
WantedBy=remote-fs.target
"""


def mountpoint_args(mount: Mapping[str, Any]) -> list[str]:
    """The ``mount-s3`` command line of an S3 mount through Mountpoint for Amazon S3."""
    args = [MOUNTPOINT_BIN, "--allow-other"]
    args.append("--read-only" if mount.get("read_only") else "--allow-delete")
    prefix = (mount.get("prefix") or "").strip("/")
    if prefix:
        args += ["--prefix", f"{prefix}/"]
    if mount.get("region"):
        args += ["--region", mount["region"]]
    if mount.get("endpoint_url"):
        args += ["--endpoint-url", mount["endpoint_url"]]
    if mount.get("path_style"):
        args.append("--force-path-style")
    return [*args, mount["bucket"], mount["path"]]


def mountpoint_unit_text(mount: Mapping[str, Any], env_file: str | None) -> str:
    """The service that keeps a bucket mounted through Mountpoint (which has no mount helper)."""
    path = mount["path"]
    env = f"EnvironmentFile={env_file}\n" if env_file else ""
    return f"""{MARKER}
[Unit]
Description=S3 bucket {_unit_value(s3_source(mount))} at {path} through Mountpoint for Amazon S3 (rayrig)
Wants=network-online.target
After=network-online.target

[Service]
Type=forking
{env}ExecStartPre=/usr/bin/mkdir -p {path}
ExecStart={_unit_value(shlex.join(mountpoint_args(mount)))}
ExecStop=/usr/bin/umount {path}
TimeoutSec={MOUNT_TIMEOUT_S}

[Install]
WantedBy=remote-fs.target
"""


def probe_command(address: str, what: str, host_name: str) -> str:
    """A command that fails with a clear message unless ``address`` answers on TCP 2049 in time."""
    probe = shlex.quote(f"</dev/tcp/{address}/{NFS_PORT}")
    message = (
        f"{host_name}: the NFS server {address} did not answer on TCP {NFS_PORT} within {PROBE_TIMEOUT_S} s, "
        f"so {what} was not mounted (storage_nfs_mounts). Is the server up, serving NFS, "
        f"and is port {NFS_PORT} open to this host?"
    )
    return f"timeout {PROBE_TIMEOUT_S} bash -c {probe} 2>/dev/null || {{ echo {shlex.quote(message)} >&2; exit 1; }}"


def activate_commands(unit: str, what: str, path: str, host_name: str) -> list[str]:
    """Commands that enable a storage unit, (re)mount it and check that the mount answers, each
    bounded in time and failing with a clear message.

    A FUSE mount can come up before its first request fails (s3fs checks the bucket after
    mounting): the ``stat`` waits for that check.
    """
    quoted, see = shlex.quote(unit), f"see: systemctl status {unit}; journalctl -u {unit}"
    failed = shlex.quote(f"{host_name}: could not mount {what} within {COMMAND_TIMEOUT_S} s; {see}")
    silent = shlex.quote(f"{host_name}: {what} is mounted but does not answer within {CHECK_TIMEOUT_S} s; {see}")
    return [
        "systemctl daemon-reload",
        f"systemctl enable {quoted}",
        f"timeout {COMMAND_TIMEOUT_S} systemctl restart {quoted} || {{ echo {failed} >&2; exit 1; }}",
        f"timeout -k 5 {CHECK_TIMEOUT_S} stat {shlex.quote(path + '/.')} >/dev/null || "
        f"{{ echo {silent} >&2; exit 1; }}",
    ]


def remove_commands(unit: str, host_name: str) -> list[str]:
    """Commands that unmount, disable and remove a storage unit."""
    quoted = shlex.quote(unit)
    message = shlex.quote(
        f"{host_name}: could not unmount {unit} (no longer in the data) within {COMMAND_TIMEOUT_S} s: busy?"
    )
    return [
        f"timeout {COMMAND_TIMEOUT_S} systemctl disable --now {quoted} || {{ echo {message} >&2; exit 1; }}",
        f"rm -f {shlex.quote(f'{UNIT_DIR}/{unit}')}",
        "systemctl daemon-reload",
    ]


def serves_nfs(settings: Mapping[str, Any], host_name: str) -> bool:
    """Whether the host named ``host_name`` is the cluster's NFS server (it takes TCP 2049)."""
    return settings["storage_nfs_server"] is not None and settings["storage_nfs_server"] == host_name


def resolve_server(server_name: str, hosts: Iterable[Any]) -> str:
    """An NFS mount's server as an address: an inventory host's node address, or as given."""
    for candidate in hosts:
        if candidate.name == server_name:
            return node_address(candidate)
    return server_name


def s3_driver(mount: Mapping[str, Any], plat: Platform, host_name: str = "") -> str:
    """The driver of an S3 mount: the data's, else s3fs (Mountpoint on Amazon Linux 2023, which has no s3fs)."""
    driver = mount.get("driver")
    if plat.id == "amzn":
        if driver == "s3fs":
            raise StorageError(
                f"host {host_name}: storage_s3_mounts {mount['path']}: driver 's3fs' is not available on "
                f'{plat.label} (no s3fs package); expected "driver": "mountpoint-s3" or no driver'
            )
        return "mountpoint-s3"
    return driver or "s3fs"


def s3fs_packages(plat: Platform) -> tuple[str, ...]:
    """The s3fs packages of a platform (Rocky/RHEL/Alma: from EPEL)."""
    return ("s3fs",) if plat.family == "apt" else ("s3fs-fuse",)


def mountpoint_install_command(plat: Platform, arch: str) -> str:
    """A command that installs Mountpoint for Amazon S3 from AWS's download site."""
    cpu = MOUNTPOINT_ARCH.get(arch, arch)
    if plat.family == "apt":
        url = MOUNTPOINT_URL.format(arch=cpu, ext="deb")
        deb = "/tmp/rayrig-mount-s3.deb"
        return (
            f"curl -fsSL --retry 3 -o {deb} {shlex.quote(url)} && "
            f"DEBIAN_FRONTEND=noninteractive apt-get install -y {deb}; rc=$?; rm -f {deb}; exit $rc"
        )
    return f"dnf install -y {shlex.quote(MOUNTPOINT_URL.format(arch=cpu, ext='rpm'))}"


def _check_credentials(credentials: Mapping[str, str] | None, host_name: str) -> None:
    for key in ("access_key_id", "secret_access_key"):
        value = (credentials or {}).get(key, "")
        if "\n" in value or "\r" in value or (key == "access_key_id" and ":" in value):
            # The value itself is never shown.
            raise StorageError(f"host {host_name}: storage_s3_credentials[{key!r}]: expected one line without ':'")


# --- Steps ----------------------------------------------------------------------------------------


def _packages(plat: Platform, settings: dict[str, Any], is_server: bool, drivers: list[str]) -> None:
    wanted: list[str] = []
    if is_server:
        wanted += NFS_SERVER_PACKAGES[plat.family]
    if settings["storage_nfs_mounts"]:
        wanted += NFS_CLIENT_PACKAGES[plat.family]
    if "s3fs" in drivers:
        if plat.family == "dnf" and missing_packages(["s3fs-fuse"]):
            if plat.id == "rhel" and missing_packages(["epel-release"]):
                server.shell(name="Add the EPEL repository (for s3fs)", commands=[f"dnf install -y {EPEL_RHEL_URL}"])
            else:
                install_packages(["epel-release"], "Add the EPEL repository (for s3fs)")
        wanted += s3fs_packages(plat)
    install_packages(list(dict.fromkeys(wanted)), "Install the shared-storage packages")
    if "mountpoint-s3" in drivers and missing_packages([MOUNTPOINT_PACKAGE]):
        server.shell(
            name="Install Mountpoint for Amazon S3",
            commands=[mountpoint_install_command(plat, fact(host, HostInfo)["arch"])],
        )


def _nfs_server(settings: dict[str, Any]) -> None:
    for export in settings["storage_nfs_exports"]:
        files.directory(
            name=f"Create the NFS export {export['path']}",
            path=export["path"],
            mode="1777",
            _no_check_owner_mode=True,  # an existing directory keeps its owner and mode
        )
    files.directory(name="Create the NFS exports directory", path=EXPORTS_DIR, mode="755")
    addresses = [node_address(h) for h in inventory]
    exports = files.put(
        name=f"Write the NFS exports ({EXPORTS_FILE})",
        src=StringIO(exports_text(settings["storage_nfs_exports"], addresses)),
        dest=EXPORTS_FILE,
        mode="644",
    )
    systemd.service(name="Enable and start the NFS server", service=NFS_SERVER_SERVICE, running=True, enabled=True)
    server.shell(name="Re-export the NFS exports", commands=["exportfs -ra"], _if=exports.did_change)


def _activate(what: str, ready: bool, changes: list[Any], commands: list[str]) -> None:
    """(Re)mount through a unit: now when it is not ready, else only when its files changed."""
    condition = {"_if": any_changed(*changes)} if ready else {}
    server.shell(name=f"Mount {what}", commands=commands, **condition)


def _nfs_mount(mount: dict[str, Any], mounted: dict[str, Any], units: dict[str, bool]) -> None:
    address = resolve_server(mount["server"], inventory)
    source = nfs_source(address, mount["export"])
    path = mount["path"]
    name = mount_unit_name(path)
    unit = files.put(
        name=f"Install the NFS mount unit for {path}",
        src=StringIO(nfs_unit_text(source, path, nfs_mount_options(mount.get("options")))),
        dest=f"{UNIT_DIR}/{name}",
        mode="644",
    )
    current = mounted.get(path) or {}
    ready = current.get("source") == source and current.get("fstype", "").startswith("nfs") and units.get(name)
    what = f"{source} at {path}"
    commands = [probe_command(address, f"{mount['server']}:{mount['export']} at {path}", host.name)]
    _activate(what, bool(ready), [unit], [*commands, *activate_commands(name, what, path, host.name)])


def _s3_mount(
    mount: dict[str, Any],
    driver: str,
    credentials: dict[str, str] | None,
    written: dict[str, Any],
    mounted: dict[str, Any],
    units: dict[str, bool],
) -> None:
    path = mount["path"]
    secret_file = s3_credentials_path(driver, mount["bucket"]) if credentials else None
    changes = []
    if secret_file:
        if secret_file not in written:  # one file per bucket, however many mounts share it
            written[secret_file] = put_secret_file(
                name=f"Write the S3 credentials for {mount['bucket']} ({secret_file})",
                src=StringIO(s3_credentials_text(driver, credentials)),
                dest=secret_file,
                mode="600",
            )
        changes.append(written[secret_file])
    name = s3_unit_name(path, driver)
    if driver == "s3fs":
        text, kind = s3fs_unit_text(mount, s3fs_options(mount, secret_file)), "mount unit"
    else:
        text, kind = mountpoint_unit_text(mount, secret_file), "Mountpoint service"
    unit = files.put(
        name=f"Install the S3 {kind} for {path}", src=StringIO(text), dest=f"{UNIT_DIR}/{name}", mode="644"
    )
    ready = s3_is_mounted(mounted.get(path), driver) and units.get(name)
    what = f"{s3_url(mount)} at {path}"
    _activate(what, bool(ready), [unit, *changes], activate_commands(name, what, path, host.name))


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
    _check_credentials(credentials, host.name)
    s3 = [(mount, s3_driver(mount, plat, host.name)) for mount in s3_mounts]
    mounted = fact(host, Mounts) if nfs_mounts or s3_mounts else {}

    units = {mount_unit_name(m["path"]) for m in nfs_mounts} | {s3_unit_name(m["path"], d) for m, d in s3}
    secrets = {s3_credentials_path(d, m["bucket"]) for m, d in s3} if credentials else set()
    _remove_stale(state, units, secrets, is_server)

    _packages(plat, settings, is_server, [d for _m, d in s3])
    if is_server:
        _nfs_server(settings)
    for mount in nfs_mounts:
        _nfs_mount(mount, mounted, state["units"])
    written: dict[str, Any] = {}
    if s3 and credentials:
        files.directory(name="Create the S3 credentials directory", path=CREDENTIALS_DIR, mode="700")
    for mount, driver in s3:
        _s3_mount(mount, driver, credentials, written, mounted, state["units"])
