"""The pure helpers of the shared-storage step: unit-name escaping, option merging, the
exports file, the mount units, the s3fs options (mounted for real where s3fs can run),
the probe and mount commands, and the facts' parsers."""

from __future__ import annotations

import configparser
import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from deploy.contract.settings import merge
from deploy.host.platform import detect
from deploy.run.templating import render
from deploy.storage import mount_units, mounts, nfs, s3

SYSTEMD_ESCAPE = shutil.which("systemd-escape")
PATHS = ["/mnt/shared", "/mnt/my-data", "/", "/srv//a.b/", "/.hidden/x", "/data/x.y-z", "/mnt/a:b_c", "/mnt/ü ber"]


def s3_unit_text(driver: str, mount: dict, secret_file: str | None) -> str:
    """An S3 mount's unit as the deploy writes it: its template and values (``s3.mount_unit``)."""
    template, values, _kind = s3.mount_unit(driver, mount, secret_file)
    return render(template, **values)


def unit(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # keys keep their case
    parser.read_string(text)
    return parser


def fake_host(name: str, **data):
    return SimpleNamespace(name=name, data=SimpleNamespace(dict=lambda: dict(data)))


# --- Unit names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path,expected",
    [
        ("/mnt/shared", "mnt-shared"),
        ("/mnt/my-data", "mnt-my\\x2ddata"),
        ("/", "-"),
        ("/srv//a.b/", "srv-a.b"),
        ("/.hidden/x", "\\x2ehidden-x"),
        ("/mnt/ü ber", "mnt-\\xc3\\xbc\\x20ber"),
    ],
)
def test_escape_path(path, expected):
    assert mount_units.escape_path(path) == expected


@pytest.mark.skipif(SYSTEMD_ESCAPE is None, reason="systemd-escape is not installed here")
@pytest.mark.parametrize("path", PATHS)
def test_escape_path_is_what_systemd_escape_says(path):
    real = subprocess.run([SYSTEMD_ESCAPE, "--path", path], capture_output=True, text=True, check=True).stdout.strip()
    assert mount_units.escape_path(path) == real


def test_unit_names():
    assert mount_units.mount_unit_name("/mnt/my-data") == "mnt-my\\x2ddata.mount"
    assert s3.mountpoint_unit_name("/mnt/datasets") == "rayrig-s3-mnt-datasets.service"
    assert s3.s3_unit_name("/mnt/d", "s3fs") == "mnt-d.mount"
    assert s3.s3_unit_name("/mnt/d", "mountpoint-s3") == "rayrig-s3-mnt-d.service"


# --- Options --------------------------------------------------------------------------------------


def test_export_options_default_to_root_squash():
    assert nfs.export_options(None) == "rw,sync,no_subtree_check,root_squash"
    assert nfs.export_options("") == "rw,sync,no_subtree_check,root_squash"


@pytest.mark.parametrize(
    "given,expected",
    [
        ("ro", "ro,sync,no_subtree_check,root_squash"),
        ("no_root_squash", "rw,sync,no_subtree_check,no_root_squash"),
        ("async,subtree_check", "rw,async,subtree_check,root_squash"),
        (
            "all_squash,anonuid=1000,anongid=1000",
            "rw,sync,no_subtree_check,root_squash,all_squash,anonuid=1000,anongid=1000",
        ),
        ("rw,sync,no_subtree_check,root_squash", "rw,sync,no_subtree_check,root_squash"),
    ],
)
def test_export_options_replace_only_what_the_data_says(given, expected):
    assert nfs.export_options(given) == expected


@pytest.mark.parametrize(
    "given,expected",
    [
        (None, "vers=4.2,proto=tcp,hard,timeo=600,retrans=2"),
        ("vers=4.1", "vers=4.1,proto=tcp,hard,timeo=600,retrans=2"),
        ("nfsvers=3,soft", "nfsvers=3,proto=tcp,soft,timeo=600,retrans=2"),
        ("ro,noatime,rsize=1048576", "vers=4.2,proto=tcp,hard,timeo=600,retrans=2,ro,noatime,rsize=1048576"),
    ],
)
def test_nfs_mount_options(given, expected):
    assert nfs.nfs_mount_options(given) == expected


# --- The exports file ---------------------------------------------------------------------------


def test_exports_open_each_export_to_the_cluster_addresses_only():
    text = nfs.exports_text(
        [{"path": "/srv/shared"}, {"path": "/srv/scratch", "options": "no_root_squash"}],
        ["10.0.0.10", "10.0.0.2", "10.0.0.1", "10.0.0.2"],
    )
    lines = text.splitlines()
    assert lines[0] == mount_units.MARKER
    assert lines[1] == (
        "/srv/shared 10.0.0.1(rw,sync,no_subtree_check,root_squash) 10.0.0.2(rw,sync,no_subtree_check,root_squash) "
        "10.0.0.10(rw,sync,no_subtree_check,root_squash)"
    )
    assert lines[2].split() == [
        "/srv/scratch",
        "10.0.0.1(rw,sync,no_subtree_check,no_root_squash)",
        "10.0.0.2(rw,sync,no_subtree_check,no_root_squash)",
        "10.0.0.10(rw,sync,no_subtree_check,no_root_squash)",
    ]
    assert "*" not in text and "/24" not in text
    assert len(lines) == 3


def test_exports_order_does_not_depend_on_the_inventory_order():
    exports = [{"path": "/srv/shared"}]
    addresses = ["10.0.0.3", "fd00::1", "gpu01.lab", "10.0.0.1"]
    assert nfs.exports_text(exports, addresses) == nfs.exports_text(exports, reversed(addresses))
    assert nfs.cluster_addresses(addresses) == ["10.0.0.1", "10.0.0.3", "fd00::1", "gpu01.lab"]


# --- NFS mounts -----------------------------------------------------------------------------------


def test_nfs_source():
    assert nfs.nfs_source("10.0.0.1", "/srv/shared") == "10.0.0.1:/srv/shared"
    assert nfs.nfs_source("fd00::1", "/srv/shared") == "[fd00::1]:/srv/shared"
    assert nfs.nfs_source("filer.lab", "/vol/a") == "filer.lab:/vol/a"


def test_nfs_unit():
    text = render(
        nfs.UNIT_TEMPLATE, **nfs.unit_values("10.0.0.1:/srv/shared", "/mnt/shared", nfs.nfs_mount_options(None))
    )
    assert text.startswith(mount_units.MARKER + "\n")
    parsed = unit(text)
    assert dict(parsed["Mount"]) == {
        "What": "10.0.0.1:/srv/shared",
        "Where": "/mnt/shared",
        "Type": "nfs",
        "Options": "vers=4.2,proto=tcp,hard,timeo=600,retrans=2",
        "TimeoutSec": str(mount_units.MOUNT_TIMEOUT_S),
    }
    assert parsed["Unit"]["Wants"] == "network-online.target"
    assert parsed["Unit"]["After"] == "network-online.target"
    assert parsed["Install"]["WantedBy"] == "remote-fs.target"


def test_resolve_server_takes_an_inventory_hosts_node_address():
    hosts = [fake_host("head", ray_node_ip="10.0.0.1"), fake_host("filer", ssh_hostname="filer.lab")]
    assert nfs.resolve_server("head", hosts) == "10.0.0.1"
    assert nfs.resolve_server("filer", hosts) == "filer.lab"
    assert nfs.resolve_server("10.9.9.9", hosts) == "10.9.9.9"


def test_serves_nfs():
    assert nfs.serves_nfs({"storage_nfs_server": "head"}, "head")
    assert not nfs.serves_nfs({"storage_nfs_server": "head"}, "worker")
    assert not nfs.serves_nfs({"storage_nfs_server": None}, "head")


def test_probe_fails_fast_with_a_message_naming_server_export_and_path():
    with socket.socket() as sock:  # a port that was just free: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = nfs.probe_command("127.0.0.1", "filer:/vol/data at /mnt/data", "gpu01")
    command = command.replace(" 127.0.0.1 2049 ", f" 127.0.0.1 {port} ")
    started = time.monotonic()
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert time.monotonic() - started < nfs.PROBE_TIMEOUT_S
    assert "gpu01: the NFS server 127.0.0.1 did not answer on TCP 2049" in proc.stderr
    assert "filer:/vol/data at /mnt/data was not mounted" in proc.stderr


def test_probe_passes_when_the_port_answers():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        command = nfs.probe_command("127.0.0.1", "x", "h").replace(" 127.0.0.1 2049 ", f" 127.0.0.1 {port} ")
        assert subprocess.run(["bash", "-c", command], capture_output=True, timeout=30).returncode == 0


def test_probe_is_bounded_in_time():
    command = nfs.probe_command("10.0.0.1", "x", "h")
    assert command.startswith(f'timeout {nfs.PROBE_TIMEOUT_S} bash -c \'</dev/tcp/"$1"/"$2"\' _ 10.0.0.1 2049 ')


HOSTILE_ADDRESSES = ["10.0.0.1%x/1);touch {marker};(true", "$(touch {marker})", "`touch {marker}`", "x;touch {marker}"]


@pytest.mark.parametrize("address", HOSTILE_ADDRESSES)
def test_probe_passes_the_address_to_bash_as_an_argument_never_as_code(address, tmp_path):
    marker = tmp_path / "P"
    command = nfs.probe_command(address.format(marker=marker), "x", "h")
    subprocess.run(["bash", "-c", command], capture_output=True, timeout=30)
    assert not marker.exists()


def test_activate_commands_are_bounded_and_say_where_to_look():
    commands = mount_units.activate_commands(
        "mnt-my\\x2ddata.mount", "filer:/vol at /mnt/my-data", "/mnt/my-data", "h1"
    )
    assert commands[:2] == ["systemctl daemon-reload", "systemctl enable 'mnt-my\\x2ddata.mount'"]
    assert commands[2].startswith(
        f"timeout {mount_units.COMMAND_TIMEOUT_S} systemctl restart 'mnt-my\\x2ddata.mount' || "
    )
    assert "h1: could not mount filer:/vol at /mnt/my-data" in commands[2]
    assert "journalctl -u mnt-my\\x2ddata.mount" in commands[2]
    assert commands[3].startswith(f"timeout -k 5 {mount_units.CHECK_TIMEOUT_S} stat /mnt/my-data/. >/dev/null || ")


def test_remove_commands_unmount_disable_and_delete_the_unit():
    commands = mount_units.remove_commands("mnt-old.mount", "h1")
    assert commands[0].startswith(f"timeout {mount_units.COMMAND_TIMEOUT_S} systemctl disable --now mnt-old.mount || ")
    assert commands[1:] == ["rm -f /etc/systemd/system/mnt-old.mount", "systemctl daemon-reload"]


# --- S3 mounts ------------------------------------------------------------------------------------

MINIO = {"bucket": "datasets", "path": "/mnt/datasets", "endpoint_url": "http://10.0.0.5:9000", "path_style": True}


def test_s3fs_options_for_an_s3_compatible_store():
    # Writable: every user may write (the ray-node container's user is not always root).
    assert s3.s3fs_options(MINIO, "/etc/rayrig/s3/passwd-datasets") == (
        "_netdev,allow_other,umask=0000,passwd_file=/etc/rayrig/s3/passwd-datasets,"
        "url=http://10.0.0.5:9000,use_path_request_style"
    )


def test_s3fs_options_from_the_instance_profile_in_a_region_read_only():
    mount = {"bucket": "datasets", "path": "/mnt/d", "region": "eu-west-1", "read_only": True}
    assert s3.s3fs_options(mount, None) == (
        "_netdev,allow_other,umask=0022,iam_role=auto,url=https://s3.eu-west-1.amazonaws.com,endpoint=eu-west-1,ro"
    )


def test_s3_source_and_url():
    assert s3.s3_source({"bucket": "b"}) == "b"
    assert s3.s3_source({"bucket": "b", "prefix": "imagenet/train/"}) == "b:/imagenet/train"
    assert s3.s3_url({"bucket": "b", "prefix": "imagenet/"}) == "s3://b/imagenet"


def test_s3fs_unit():
    mount = {**MINIO, "prefix": "imagenet/", "read_only": True}
    parsed = unit(s3_unit_text("s3fs", mount, "/etc/rayrig/s3/passwd-datasets"))
    assert parsed["Mount"]["What"] == "datasets:/imagenet"
    assert parsed["Mount"]["Where"] == "/mnt/datasets"
    assert parsed["Mount"]["Type"] == "fuse.s3fs"
    assert parsed["Mount"]["Options"].endswith(",use_path_request_style,ro")
    assert parsed["Install"]["WantedBy"] == "remote-fs.target"


def test_a_percent_sign_reaches_the_mount_literally():
    mount = {**MINIO, "endpoint_url": "http://10.0.0.5:9000/a%20b"}
    parsed = unit(s3_unit_text("s3fs", mount, None))
    assert "url=http://10.0.0.5:9000/a%%20b" in parsed["Mount"]["Options"]  # systemd reads %% as %


def test_credentials_files():
    creds = {"access_key_id": "AKID", "secret_access_key": "se/cr+et"}
    assert s3.s3_credentials_text("s3fs", creds) == "AKID:se/cr+et\n"
    assert s3.s3_credentials_text("mountpoint-s3", creds) == "AWS_ACCESS_KEY_ID=AKID\nAWS_SECRET_ACCESS_KEY=se/cr+et\n"
    assert s3.s3_credentials_path("s3fs", "datasets") == "/etc/rayrig/s3/passwd-datasets"
    assert s3.s3_credentials_path("mountpoint-s3", "datasets") == "/etc/rayrig/s3/env-datasets"


def test_credentials_that_would_break_the_file_are_refused_without_showing_them():
    with pytest.raises(mount_units.StorageError) as err:
        s3.check_credentials({"access_key_id": "AK:ID", "secret_access_key": "Sekrit"}, "h1")
    assert "storage_s3_credentials['access_key_id']" in str(err.value)
    assert "AK:ID" not in str(err.value) and "Sekrit" not in str(err.value)
    with pytest.raises(mount_units.StorageError) as err:
        s3.check_credentials({"access_key_id": "AKID", "secret_access_key": "Sek\nrit"}, "h1")
    assert "Sek" not in str(err.value)


def test_mountpoint_args_and_unit():
    mount = {**MINIO, "prefix": "imagenet", "region": "us-east-1", "read_only": True}
    assert s3.mountpoint_args(mount) == [
        "/usr/bin/mount-s3", "--allow-other", "--read-only", "--prefix", "imagenet/", "--region", "us-east-1",
        "--endpoint-url", "http://10.0.0.5:9000", "--force-path-style", "datasets", "/mnt/datasets",
    ]  # fmt: skip
    assert "--allow-delete" in s3.mountpoint_args({"bucket": "b", "path": "/mnt/b"})
    parsed = unit(s3_unit_text("mountpoint-s3", mount, "/etc/rayrig/s3/env-datasets"))
    assert parsed["Service"]["Type"] == "forking"
    assert parsed["Service"]["EnvironmentFile"] == "/etc/rayrig/s3/env-datasets"
    assert parsed["Service"]["ExecStart"].startswith("/usr/bin/mount-s3 --allow-other --read-only")
    assert parsed["Service"]["ExecStop"] == "/usr/bin/umount /mnt/datasets"
    assert parsed["Install"]["WantedBy"] == "remote-fs.target"
    assert "EnvironmentFile" not in unit(s3_unit_text("mountpoint-s3", mount, None))["Service"]


def test_s3_is_mounted():
    assert s3.s3_is_mounted({"source": "s3fs", "fstype": "fuse.s3fs"}, "s3fs")
    assert not s3.s3_is_mounted({"source": "10.0.0.1:/x", "fstype": "nfs4"}, "s3fs")
    assert s3.s3_is_mounted({"source": "mountpoint-s3", "fstype": "fuse"}, "mountpoint-s3")
    assert not s3.s3_is_mounted(None, "s3fs")


UBUNTU = detect({"id": "ubuntu", "version_id": "22.04", "codename": "jammy"})
ROCKY = detect({"id": "rocky", "version_id": "9.4"})
AL2023 = detect({"id": "amzn", "version_id": "2023"})


def test_s3_driver_per_platform():
    assert s3.s3_driver({"path": "/mnt/d"}, UBUNTU) == "s3fs"
    assert s3.s3_driver({"path": "/mnt/d", "driver": "mountpoint-s3"}, ROCKY) == "mountpoint-s3"
    assert s3.s3_driver({"path": "/mnt/d"}, AL2023) == "mountpoint-s3"  # no s3fs package there
    with pytest.raises(mount_units.StorageError, match=r"host h1: storage_s3_mounts /mnt/d: driver 's3fs' is not"):
        s3.s3_driver({"path": "/mnt/d", "driver": "s3fs"}, AL2023, "h1")


def test_mountpoint_package_is_the_pinned_version_with_its_checksum():
    settings = merge({"storage_mountpoint_sha256": {"arm64.deb": "a" * 64, "x86_64.rpm": "b" * 64}})
    release = "https://s3.amazonaws.com/mountpoint-s3-release/1.24.0"
    assert s3.mountpoint_package(settings, UBUNTU, "aarch64", "h1") == (
        f"{release}/arm64/mount-s3-1.24.0-arm64.deb",
        "a" * 64,
    )
    assert s3.mountpoint_package(settings, AL2023, "x86_64", "h1")[1] == "b" * 64
    mirror = merge({**settings, "storage_mountpoint_url": "http://mirror.lab/{arch}/mount-s3-{version}.{ext}"})
    assert s3.mountpoint_package(mirror, AL2023, "x86_64", "h1")[0] == "http://mirror.lab/x86_64/mount-s3-1.24.0.rpm"
    with pytest.raises(mount_units.StorageError, match=r"host h1: storage_mountpoint_sha256 has no x86_64.deb entry"):
        s3.mountpoint_package(settings, UBUNTU, "x86_64", "h1")


@pytest.mark.parametrize("plat,entry", [(UBUNTU, "x86_64.deb"), (AL2023, "x86_64.rpm")], ids=["ubuntu", "al2023"])
def test_a_missing_mountpoint_checksum_says_which_entry_to_set_and_how_to_get_it(plat, entry):
    package = f"mount-s3-1.24.0-{entry}"
    url = f"https://s3.amazonaws.com/mountpoint-s3-release/1.24.0/x86_64/{package}"
    with pytest.raises(mount_units.StorageError) as error:
        s3.mountpoint_package(merge({"storage_mountpoint_sha256": {}}), plat, "x86_64", "gpu-01")
    message = str(error.value)
    assert message.startswith(f"host gpu-01: storage_mountpoint_sha256 has no {entry} entry: expected the sha256 of ")
    assert f'Set storage_mountpoint_sha256 = {{"{entry}": "<sha256>"}}' in message
    assert f"curl -fsSLO {url} && sha256sum {package}" in message
    assert f"signature of it ({url}.asc;" in message
    # s3fs is the way around it, where the distribution has s3fs (Amazon Linux 2023 has none)
    assert ('no "driver": "mountpoint-s3"' in message) is (plat is UBUNTU)


def _stub_installer(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A PATH whose dnf records the package it was given (and that the file was there)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "installed"
    (bin_dir / "dnf").write_text(f'#!/bin/sh\nshift 2\ntest -f "$1" && echo "$1" >> {log}\n')
    (bin_dir / "dnf").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp_path)}, log


@pytest.mark.parametrize("matches", [True, False])
def test_mountpoint_is_installed_only_when_its_checksum_matches_and_no_temp_file_stays(tmp_path, matches):
    package = tmp_path / "mount-s3.rpm"
    package.write_bytes(b"the package")
    digest = hashlib.sha256(b"the package").hexdigest() if matches else "0" * 64
    env, log = _stub_installer(tmp_path)
    command = s3.mountpoint_install_command(AL2023, package.as_uri(), digest)
    done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode == 0) is matches, done.stderr
    assert log.exists() is matches
    if not matches:
        assert "its sha256 is not the one in storage_mountpoint_sha256" in done.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("rayrig-mount-s3.")] == []
    assert "/tmp/" not in command.replace(package.as_uri(), "")  # a private mktemp directory, no fixed path


# --- Facts ----------------------------------------------------------------------------------------


def test_mounts_fact_parses_findmnt():
    output = [
        "/ /dev/sda1 ext4",
        "/mnt/shared 10.0.0.1:/srv/shared nfs4",
        "/mnt/my\\x20data s3fs fuse.s3fs",
        "/mnt/\\xc3\\xbc s3fs fuse.s3fs",
        "/mnt/x  tmpfs",  # no source
        "/mnt/shared 10.0.0.9:/other nfs4",  # mounted on top: wins
    ]
    mounts = mount_units.MountTable().process(output)
    assert mounts["/mnt/shared"] == {"source": "10.0.0.9:/other", "fstype": "nfs4"}
    assert mounts["/mnt/my data"] == {"source": "s3fs", "fstype": "fuse.s3fs"}
    assert mounts["/mnt/ü"] == {"source": "s3fs", "fstype": "fuse.s3fs"}
    assert mounts["/mnt/x"] == {"source": "", "fstype": "tmpfs"}
    assert mount_units.MountTable().process([]) == {}


def test_mounts_fact_reads_this_machine():
    command = mount_units.MountTable().command()
    output = subprocess.run(["sh", "-c", command], capture_output=True, text=True).stdout.splitlines()
    assert "/" in mount_units.MountTable().process(output) or not shutil.which("findmnt")


def test_storage_state_fact():
    output = [
        "UNIT mnt-shared.mount enabled",
        "UNIT mnt-my\\x2ddata.mount disabled",
        "UNIT rayrig-s3-mnt-d.service ",
        "EXPORTS",
        "CREDENTIALS /etc/rayrig/s3/passwd-datasets",
    ]
    assert mounts.StorageState().process(output) == {
        "units": {"mnt-shared.mount": True, "mnt-my\\x2ddata.mount": False, "rayrig-s3-mnt-d.service": False},
        "exports": True,
        "credentials": ["/etc/rayrig/s3/passwd-datasets"],
    }
    assert mounts.StorageState().process([]) == {"units": {}, "exports": False, "credentials": []}


def test_storage_state_fact_command_finds_only_marked_units(tmp_path):
    units = tmp_path / "units"
    units.mkdir()
    (units / "mnt-ours.mount").write_text(mount_units.MARKER + "\n[Mount]\n")
    (units / "mnt-theirs.mount").write_text("[Mount]\n")
    command = mounts.StorageState().command().replace(mount_units.UNIT_DIR, str(units))
    command = command.replace(s3.CREDENTIALS_DIR, str(tmp_path / "none"))
    command = command.replace(nfs.EXPORTS_FILE, str(tmp_path / "exports"))
    output = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True).stdout.splitlines()
    assert list(mounts.StorageState().process(output)["units"]) == ["mnt-ours.mount"]


def test_mount_points_lists_nfs_then_s3():
    settings = {"storage_nfs_mounts": [{"path": "/mnt/a"}], "storage_s3_mounts": [{"path": "/mnt/b"}]}
    assert mounts.mount_points(settings) == ["/mnt/a", "/mnt/b"]


# --- s3fs for real --------------------------------------------------------------------------------


def _can_mount_s3fs() -> bool:
    return bool(shutil.which("s3fs")) and os.path.exists("/dev/fuse") and os.geteuid() == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _in_time(*command: str, user: int | None = None) -> subprocess.CompletedProcess:
    """Run a command that touches a FUSE mount in a child, bounded: the test itself never
    waits on the mount (a stuck request would leave it unkillable)."""
    who = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user is not None else []
    return subprocess.run(["timeout", "-k", "5", "60", *who, *command], capture_output=True, text=True)


@pytest.mark.slow
@pytest.mark.skipif(not _can_mount_s3fs(), reason="needs s3fs, /dev/fuse and root")
def test_s3fs_mounts_a_bucket_with_the_options_the_unit_uses(tmp_path):
    """The unit's What=, Type= and Options= given to mount(8), against moto's S3 on loopback:
    a file written through the mount is an object in the bucket, a read-only prefix mount
    reads it and refuses writes, and another user can read."""
    boto3 = pytest.importorskip("boto3")
    moto_server = Path(sys.executable).with_name("moto_server")
    if not moto_server.exists():
        pytest.skip("moto_server is not installed")
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    moto = subprocess.Popen(
        [str(moto_server), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    mounted: list[Path] = []
    points = Path(tempfile.mkdtemp(prefix="rayrig-s3fs-"))  # outside pytest's 0700 folders: others may read
    points.chmod(0o755)
    try:
        creds = {"access_key_id": "AKIDRAYRIGTEST", "secret_access_key": "rayrig/Secret+Key"}
        bucket = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=creds["access_key_id"],
            aws_secret_access_key=creds["secret_access_key"],
        )
        for _ in range(100):  # moto's server takes a moment to listen
            try:
                bucket.create_bucket(Bucket="rayrig-test")
                break
            except Exception:  # noqa: BLE001 - connection refused until it listens
                time.sleep(0.1)
        bucket.put_object(Bucket="rayrig-test", Key="imagenet/hello.txt", Body=b"hello\n")
        passwd = tmp_path / "passwd-rayrig-test"
        passwd.write_text(s3.s3_credentials_text("s3fs", creds))
        passwd.chmod(0o600)

        def mount(data: dict) -> Path:
            where = Path(data["path"])
            where.mkdir()
            parsed = unit(s3_unit_text("s3fs", data, str(passwd)))["Mount"]
            done = _in_time("mount", "-t", parsed["Type"], parsed["What"], parsed["Where"], "-o", parsed["Options"])
            assert done.returncode == 0, done.stderr
            mounted.append(where)
            assert _in_time("stat", f"{where}/.").returncode == 0
            return where

        base = {"bucket": "rayrig-test", "endpoint_url": endpoint, "path_style": True}
        rw = mount({**base, "path": str(points / "rw")})
        assert _in_time("sh", "-c", f"echo 'through s3fs' > {rw}/written.txt").returncode == 0
        assert bucket.get_object(Bucket="rayrig-test", Key="written.txt")["Body"].read() == b"through s3fs\n"
        assert _in_time("cat", f"{rw}/imagenet/hello.txt").stdout == "hello\n"

        ro = mount({**base, "path": str(points / "ro"), "prefix": "imagenet/", "read_only": True})
        assert _in_time("cat", f"{ro}/hello.txt").stdout == "hello\n"
        refused = _in_time("sh", "-c", f"echo x > {ro}/nope.txt")
        assert refused.returncode != 0 and "Read-only file system" in refused.stderr
        other = _in_time("cat", f"{ro}/hello.txt", user=65534)  # allow_other and umask=0022: others read
        assert other.returncode == 0 and other.stdout == "hello\n", other.stderr
    finally:
        for where in reversed(mounted):
            if _in_time("umount", str(where)).returncode != 0:
                _in_time("umount", "-l", str(where))
        moto.terminate()
        moto.wait(timeout=30)
        for where in mounted:
            if not os.path.ismount(where):
                where.rmdir()
        with contextlib.suppress(OSError):
            points.rmdir()


# --- The live export table against rayrig's exports file ---------------------------------------------


def test_export_times_fact_and_when_the_exports_are_unread():
    process = nfs.ExportTimes().process
    times = process(["RAYRIG_WRITTEN exports 1733000100.5", "RAYRIG_WRITTEN etab 1733000101.25"])
    assert times == {"exports": 1733000100.5, "etab": 1733000101.25}
    assert not nfs.exports_unread(times)  # exportfs -r rewrote the table after the file
    assert nfs.exports_unread({"exports": 1733000102.0, "etab": 1733000101.25})  # died before exportfs -ra
    assert nfs.exports_unread({"exports": 1733000102.0, "etab": None})  # never exported
    assert not nfs.exports_unread(process([]))  # no file of rayrig's
    assert nfs.ETAB in nfs.ExportTimes().command() and nfs.EXPORTS_FILE in nfs.ExportTimes().command()
