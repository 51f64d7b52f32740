"""S3 mounts: buckets mounted at the same path on every host, through s3fs or Mountpoint.

s3fs-fuse (the distribution's; Rocky/RHEL: from EPEL) runs as a ``fuse.s3fs`` mount
unit from ``s3fs.mount.j2``; Mountpoint for Amazon S3 (``"driver":
"mountpoint-s3"``, and the default on Amazon Linux 2023, which ships no s3fs) as a
``rayrig-s3-<path>.service`` from ``mountpoint-s3.service.j2``. Credentials
come from the EC2 instance profile, or from a 0600 file per bucket in
``CREDENTIALS_DIR`` that no printed command contains. ``deploy.storage.mounts`` calls
``s3_mount`` for each mount. Mountpoint itself is the version the data pins
(``storage_mountpoint_version``), downloaded from ``storage_mountpoint_url`` into a
private temp directory and installed only if its sha256 is the one the data gives
(``storage_mountpoint_sha256``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from io import StringIO
from typing import Any

from pyinfra import host

from deploy.host.platform import Platform
from deploy.host.secret_files import put_secret_file
from deploy.run.templating import put_template, resource
from deploy.storage.mount_units import (
    MARKER,
    MOUNT_TIMEOUT_S,
    UNIT_DIR,
    StorageError,
    activate,
    activate_commands,
    escape_path,
    mount_unit_name,
)

CREDENTIALS_DIR = "/etc/rayrig/s3"
#: s3fs: readable by every user (files 0644-like, directories 0755), written by root.
S3FS_UMASK = "0022"  # read-only mounts: every user (and ray-node's, whichever it is) reads
S3FS_UMASK_WRITABLE = "0000"  # writable mounts: every user writes too; the bucket's credentials are the gate

MOUNTPOINT_PACKAGE = "mount-s3"
MOUNTPOINT_BIN = "/usr/bin/mount-s3"
MOUNTPOINT_ARCH = {"x86_64": "x86_64", "aarch64": "arm64"}
S3FS_TEMPLATE = resource(__package__, "s3fs.mount.j2")
MOUNTPOINT_TEMPLATE = resource(__package__, "mountpoint-s3.service.j2")


# --- Pure helpers ----------------------------------------------------------------------------------


def mountpoint_unit_name(path: str) -> str:
    """The name of the service that runs Mountpoint for S3 at ``path``."""
    return f"rayrig-s3-{escape_path(path)}.service"


def s3_unit_name(path: str, driver: str) -> str:
    """The unit of an S3 mount: a mount unit for s3fs, a service for Mountpoint."""
    return mount_unit_name(path) if driver == "s3fs" else mountpoint_unit_name(path)


def s3_source(mount: Mapping[str, Any]) -> str:
    """What s3fs mounts: ``BUCKET`` or ``BUCKET:/PREFIX``."""
    prefix = (mount.get("prefix") or "").strip("/")
    return f"{mount['bucket']}:/{prefix}" if prefix else mount["bucket"]


def s3_url(mount: Mapping[str, Any]) -> str:
    """An S3 mount's bucket and prefix as an ``s3://`` URL, for messages."""
    prefix = (mount.get("prefix") or "").strip("/")
    return f"s3://{mount['bucket']}/{prefix}" if prefix else f"s3://{mount['bucket']}"


def s3_is_mounted(current: Mapping[str, str] | None, driver: str) -> bool:
    """Whether a ``MountTable`` entry is a mount of ``driver`` (s3fs or Mountpoint)."""
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


def _s3fs_unit_values(mount: Mapping[str, Any], options: str) -> dict[str, Any]:
    return {
        "marker": MARKER,
        "source": s3_source(mount),
        "path": mount["path"],
        "options": options,
        "timeout_s": MOUNT_TIMEOUT_S,
    }


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


def _mountpoint_unit_values(mount: Mapping[str, Any], env_file: str | None) -> dict[str, Any]:
    return {
        "marker": MARKER,
        "source": s3_source(mount),
        "path": mount["path"],
        "env_file": env_file,
        "command": shlex.join(mountpoint_args(mount)),
        "timeout_s": MOUNT_TIMEOUT_S,
    }


def mount_unit(driver: str, mount: Mapping[str, Any], secret_file: str | None) -> tuple[str, dict[str, Any], str]:
    """(template, its values, what it is) of an S3 mount's unit: a mount unit through s3fs
    (``s3fs.mount.j2``), or the service that keeps a bucket mounted through Mountpoint, which has
    no mount helper (``mountpoint-s3.service.j2``)."""
    if driver == "s3fs":
        return S3FS_TEMPLATE, _s3fs_unit_values(mount, s3fs_options(mount, secret_file)), "mount unit"
    return MOUNTPOINT_TEMPLATE, _mountpoint_unit_values(mount, secret_file), "Mountpoint service"


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


def mountpoint_package(settings: Mapping[str, Any], plat: Platform, arch: str, host_name: str) -> tuple[str, str]:
    """(URL, sha256) of the Mountpoint package a host installs, from the data; stop when the data
    has no checksum for it (nothing is installed unverified)."""
    cpu = MOUNTPOINT_ARCH.get(arch, arch)
    ext = "deb" if plat.family == "apt" else "rpm"
    version = settings["storage_mountpoint_version"]
    url = settings["storage_mountpoint_url"]
    for name, value in (("{version}", version), ("{arch}", cpu), ("{ext}", ext)):
        url = url.replace(name, value)
    entry = f"{cpu}.{ext}"
    digest = settings["storage_mountpoint_sha256"].get(entry)
    if not digest:
        other = (
            ""
            if plat.id == "amzn"  # no s3fs there
            else '. Or mount with s3fs: no "driver": "mountpoint-s3" in the host\'s storage_s3_mounts'
        )
        raise StorageError(
            f"host {host_name}: storage_mountpoint_sha256 has no {entry} entry: expected the sha256 of "
            f"{url} (Mountpoint for Amazon S3 {version}), which is checked before it is installed. "
            f'Set storage_mountpoint_sha256 = {{"{entry}": "<sha256>"}} (beside its other entries) in the '
            f"inventory's data. On a machine you trust, download the package, check AWS's signature of it "
            f"({url}.asc; AWS's guide 'Installing Mountpoint' says how) and take its sha256: "
            f"curl -fsSLO {shlex.quote(url)} && sha256sum {shlex.quote(url.rsplit('/', 1)[-1])}{other}"
        )
    return url, digest


def mountpoint_install_command(plat: Platform, url: str, sha256: str) -> str:
    """A command that downloads Mountpoint's package from ``url`` into a private temp directory and
    installs it only if its sha256 is ``sha256``; the directory goes, whatever happened."""
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError(f"expected a sha256 of 64 hex digits, got {sha256!r}")
    ext = "deb" if plat.family == "apt" else "rpm"
    if plat.family == "apt":
        install = f'DEBIAN_FRONTEND=noninteractive apt-get install -y "$d/mount-s3.{ext}"'
    else:
        install = f'dnf install -y "$d/mount-s3.{ext}"'
    mismatch = shlex.quote(f"{url}: its sha256 is not the one in storage_mountpoint_sha256")
    steps = [
        f'curl -fsSL --retry 3 -o "$d/mount-s3.{ext}" {shlex.quote(url)}',
        f'{{ echo "{sha256}  $d/mount-s3.{ext}" | sha256sum -c --quiet - || {{ echo {mismatch} >&2; false; }}; }}',
        install,
    ]
    return f'd=$(mktemp -d -t rayrig-mount-s3.XXXXXXXXXX) || exit 1; {" && ".join(steps)}; rc=$?; rm -rf "$d"; exit $rc'


def check_credentials(credentials: Mapping[str, str] | None, host_name: str) -> None:
    """Stop unless each of ``storage_s3_credentials``' values fits on one line (and the key id has no ':')."""
    for key in ("access_key_id", "secret_access_key"):
        value = (credentials or {}).get(key, "")
        if "\n" in value or "\r" in value or (key == "access_key_id" and ":" in value):
            # The value itself is never shown.
            raise StorageError(f"host {host_name}: storage_s3_credentials[{key!r}]: expected one line without ':'")


# --- Steps ----------------------------------------------------------------------------------------


def s3_mount(
    mount: dict[str, Any],
    driver: str,
    credentials: dict[str, str] | None,
    written: dict[str, Any],
    mounted: dict[str, Any],
    units: dict[str, bool],
) -> None:
    """One S3 mount: its credentials file (once per bucket, in ``written``) and unit, (re)mounted when needed."""
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
    template, values, kind = mount_unit(driver, mount, secret_file)
    unit = put_template(f"Install the S3 {kind} for {path}", template, f"{UNIT_DIR}/{name}", **values)
    ready = s3_is_mounted(mounted.get(path), driver) and units.get(name)
    what = f"{s3_url(mount)} at {path}"
    activate(what, bool(ready), [unit, *changes], activate_commands(name, what, path, host.name))
