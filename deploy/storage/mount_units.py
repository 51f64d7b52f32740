"""Shared-storage mounts as systemd units: the pieces the NFS and S3 mounts share.

Each mount is a unit rayrig writes under ``/etc/systemd/system`` (its first line
``MARKER``): a mount unit named as ``systemd-escape --path`` names it, or a service
for Mountpoint for S3. Here are those names, the option merging, the commands that
(re)mount a unit and check that it answers or take it away, all bounded in time,
and the fact that says what is mounted where.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from pyinfra.api import FactBase
from pyinfra.api.exceptions import PyinfraError
from pyinfra.operations import server
from pyinfra.operations.util import any_changed

UNIT_DIR = "/etc/systemd/system"
#: First line of every file the storage step owns: how its state fact finds them.
MARKER = "# Managed by rayrig (shared storage): changes here are overwritten."

MOUNT_TIMEOUT_S = 90  # systemd's limit on mounting or unmounting (TimeoutSec=)
COMMAND_TIMEOUT_S = 120  # the deploy's limit on a systemctl command that mounts or unmounts
CHECK_TIMEOUT_S = 60  # how long a new mount has to answer a stat of its root

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


class StorageError(PyinfraError):
    """The storage data cannot be served or mounted as given on this host."""


class MountTable(FactBase):
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


def _unhex(value: str) -> str:
    r"""findmnt's raw output escapes blanks, backslashes and unprintable bytes as ``\xNN``."""
    if "\\x" not in value:
        return value
    raw = re.sub(rb"\\x([0-9a-fA-F]{2})", lambda m: bytes([int(m.group(1), 16)]), value.encode())
    return raw.decode(errors="replace")


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


def merge_options(defaults: str, given: str | None, groups: Mapping[str, str] = OPTION_GROUPS) -> str:
    """``given`` options over ``defaults``: a given option replaces the default of its group.

    >>> merge_options("rw,sync,no_subtree_check,root_squash", "ro,no_root_squash")
    'ro,sync,no_subtree_check,no_root_squash'
    >>> merge_options("vers=4.2,proto=tcp,hard,timeo=600,retrans=2", "nfsvers=3,soft,noatime")
    'nfsvers=3,proto=tcp,soft,timeo=600,retrans=2,noatime'
    """

    def group(option: str) -> str:
        key = option.split("=", 1)[0]
        return groups.get(key, key)

    chosen = {group(o): o for o in (given or "").split(",") if o}
    merged = [chosen.pop(group(o), o) for o in defaults.split(",") if o]
    return ",".join(merged + [o for o in chosen.values() if o not in merged])


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


def activate(what: str, ready: bool, changes: list[Any], commands: list[str]) -> None:
    """(Re)mount through a unit: now when it is not ready, else only when its files changed."""
    condition = {"_if": any_changed(*changes)} if ready else {}
    server.shell(name=f"Mount {what}", commands=commands, **condition)
