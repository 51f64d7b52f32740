"""Plans of the shared-storage step: the NFS server role, NFS and S3 mounts, their re-runs."""

from __future__ import annotations

import configparser
import re

import pytest

from deploy.storage import mount_units, nfs
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, OSES, cluster, reference_cluster, with_data
from tests.plan.harness import run_deploy
from tests.plan.test_cli_fake import command_lines, run_pyinfra

MEMBERS = ("10.0.0.1", "10.0.0.2", "10.0.0.3")
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLEKEY"
CREDENTIALS = {"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": SECRET}
MOUNTPOINT_SHA256 = {"x86_64.deb": "d" * 64, "x86_64.rpm": "e" * 64}
MOUNTPOINT = "https://s3.amazonaws.com/mountpoint-s3-release/1.24.0/x86_64/mount-s3-1.24.0-x86_64"
NFS = {
    "storage_nfs_server": HEAD,
    "storage_nfs_exports": [
        {"path": "/srv/shared"},
        {"path": "/srv/scratch", "options": "async,no_root_squash", "allow_unsafe": True},
    ],
    "storage_nfs_mounts": [
        {"server": "10.0.0.1", "export": "/srv/shared", "path": "/mnt/shared"},
        {"server": "filer.lab", "export": "/vol/ml-data", "path": "/mnt/ml-data", "options": "ro,nfsvers=4.1"},
    ],
}
S3 = {
    "storage_s3_mounts": [
        {
            "bucket": "datasets",
            "path": "/mnt/datasets",
            "prefix": "imagenet/",
            "read_only": True,
            "endpoint_url": "http://10.0.0.5:9000",
            "path_style": True,
        },
        {"bucket": "checkpoints", "path": "/mnt/checkpoints", "endpoint_url": "http://10.0.0.5:9000"},
    ],
    "storage_s3_credentials": CREDENTIALS,
    "storage_mountpoint_sha256": MOUNTPOINT_SHA256,
}
ALL = {**NFS, **S3}
HOSTS = (HEAD, GPU_WORKER, CPU_WORKER)
SERVER_PACKAGE = {"apt": "nfs-kernel-server", "dnf": "nfs-utils"}
CLIENT_PACKAGE = {"apt": "nfs-common", "dnf": "nfs-utils"}
FAMILY = {"ubuntu22": "apt", "ubuntu24": "apt", "debian12": "apt", "rocky9": "dnf", "al2023": "dnf"}


def unit(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str
    parser.read_string(text)
    return parser


def storage_ops(host_run) -> list:
    return [op for op in host_run.ops if op.name.startswith("Shared storage |")]


def storage_changes(run) -> dict[str, list[str]]:
    """The changed storage operations per host (a changed mount list also replaces ray-node,
    which bind-mounts every shared path: that is the Ray node step's business)."""
    changes = {
        name: [n for n in names if n.startswith("Shared storage |")] for name, names in run.changed_hosts.items()
    }
    return {name: names for name, names in changes.items() if names}


def install_command(host_run) -> str:
    return host_run.op(r"Install the shared-storage packages").commands[-1]


# --- The NFS server role ----------------------------------------------------------------------------


@pytest.mark.parametrize("os_name", OSES)
def test_nfs_server_exports_to_the_cluster_only(os_name):
    run = run_deploy(reference_cluster(os_name, data=NFS))
    head = run[HEAD]
    family = FAMILY[os_name]
    assert install_command(head).split()[-2:] == (
        [SERVER_PACKAGE[family], CLIENT_PACKAGE[family]] if family == "apt" else ["-y", "nfs-utils"]
    )
    assert head.op("Create the NFS export /srv/shared").commands == ["mkdir -p /srv/shared", "chmod 1777 /srv/shared"]
    exports = head.op(r"Write the NFS exports").uploads[nfs.EXPORTS_FILE]
    lines = exports.splitlines()
    assert lines[0].startswith("# Managed by rayrig")
    assert lines[1:] == [
        "/srv/shared " + " ".join(f"{ip}(rw,sync,no_subtree_check,root_squash)" for ip in MEMBERS),
        "/srv/scratch " + " ".join(f"{ip}(rw,async,no_subtree_check,no_root_squash)" for ip in MEMBERS),
    ]
    assert "chmod 644 /etc/exports.d/rayrig.exports" in head.op(r"Write the NFS exports").commands
    assert head.op("Enable and start the NFS server").commands == [
        "systemctl start nfs-server.service",
        "systemctl enable nfs-server.service",
    ]
    assert head.op("Re-export the NFS exports").commands == ["exportfs -ra"]
    # Only the head serves.
    for name in (GPU_WORKER, CPU_WORKER):
        assert not run[name].has_op("NFS export|NFS server|exportfs")
        assert SERVER_PACKAGE[family] not in install_command(run[name]) or family == "dnf"
        assert nfs.EXPORTS_FILE not in run[name].uploads


def test_exports_follow_the_inventory_addresses():
    hosts = [
        (HEAD, {"ray_role": "head", "ray_node_ip": "192.168.7.10"}),
        ("@fake/worker-1", {"ray_role": "worker", "ray_node_ip": "192.168.7.11"}),
        ("@fake/worker-2", {"ray_role": "worker", "ssh_hostname": "gpu02.lab"}),
    ]
    data = {**NFS, "storage_nfs_mounts": [], "firewall_enabled": False}  # the firewall resolves names here
    run = run_deploy(cluster("ubuntu22", hosts=hosts, data=data))
    exports = run[HEAD].op(r"Write the NFS exports").uploads[nfs.EXPORTS_FILE]
    clients = {re.sub(r"\(.*", "", c) for line in exports.splitlines()[1:] for c in line.split()[1:]}
    assert clients == {"192.168.7.10", "192.168.7.11", "gpu02.lab"}


def test_no_server_role_for_an_existing_filer():
    run = run_deploy(reference_cluster("ubuntu22", data={**NFS, "storage_nfs_server": None, "storage_nfs_exports": []}))
    for name in HOSTS:
        assert not run[name].has_op("NFS export|NFS server|exportfs")
        assert install_command(run[name]).endswith(" nfs-common")


# --- NFS mounts -----------------------------------------------------------------------------------


@pytest.mark.parametrize("os_name", OSES)
def test_nfs_mounts_are_systemd_units_mounted_after_a_probe(os_name):
    run = run_deploy(reference_cluster(os_name, data={**NFS, "storage_nfs_server": None, "storage_nfs_exports": []}))
    for name in HOSTS:
        host = run[name]
        assert install_command(host).endswith(" " + CLIENT_PACKAGE[FAMILY[os_name]])
        shared = unit(
            host.op("Install the NFS mount unit for /mnt/shared$").uploads["/etc/systemd/system/mnt-shared.mount"]
        )
        assert dict(shared["Mount"]) == {
            "What": "10.0.0.1:/srv/shared",
            "Where": "/mnt/shared",
            "Type": "nfs",
            "Options": "vers=4.2,proto=tcp,hard,timeo=600,retrans=2",
            "TimeoutSec": "90",
        }
        assert shared["Unit"]["Wants"] == shared["Unit"]["After"] == "network-online.target"
        assert shared["Install"]["WantedBy"] == "remote-fs.target"
        data_unit = host.op("Install the NFS mount unit for /mnt/ml-data").uploads[
            "/etc/systemd/system/mnt-ml\\x2ddata.mount"
        ]
        assert unit(data_unit)["Mount"]["What"] == "filer.lab:/vol/ml-data"
        assert unit(data_unit)["Mount"]["Options"] == "nfsvers=4.1,proto=tcp,hard,timeo=600,retrans=2,ro"

        commands = host.op(r"Mount filer.lab:/vol/ml-data at /mnt/ml-data").commands
        assert commands[0].startswith(
            'timeout 10 bash -c \'</dev/tcp/"$1"/"$2"\' _ filer.lab 2049 2>/dev/null || { echo '
        )
        assert f"{name}: the NFS server filer.lab did not answer on TCP 2049" in commands[0]
        assert "filer.lab:/vol/ml-data at /mnt/ml-data was not mounted" in commands[0]
        assert commands[0].endswith(">&2; exit 1; }")
        assert commands[1:4] == [
            "systemctl daemon-reload",
            "systemctl enable 'mnt-ml\\x2ddata.mount'",
            commands[3],
        ]
        assert commands[3].startswith("timeout 120 systemctl restart 'mnt-ml\\x2ddata.mount' || ")
        assert commands[4].startswith("timeout -k 5 60 stat /mnt/ml-data/. >/dev/null || ")
        # Every command that could wait on the network is bounded.
        storage_commands = [c for op in storage_ops(host) for c in op.commands]
        for command in storage_commands:
            if re.search(r"systemctl restart|/dev/tcp|stat ", command):
                assert command.startswith("timeout "), command


def test_a_mount_server_named_by_inventory_host_is_its_node_address():
    data = {**NFS, "storage_nfs_mounts": [{"server": HEAD, "export": "/srv/shared", "path": "/mnt/shared"}]}
    hosts = cluster("ubuntu22", data=data)
    run = run_deploy(hosts)
    for name, _data in hosts:
        text = (
            run[name].op("Install the NFS mount unit for /mnt/shared").uploads["/etc/systemd/system/mnt-shared.mount"]
        )
        assert unit(text)["Mount"]["What"] == "10.0.0.1:/srv/shared"
        assert (
            run[name]
            .op("Mount 10.0.0.1:/srv/shared")
            .commands[0]
            .startswith('timeout 10 bash -c \'</dev/tcp/"$1"/"$2"\' _ 10.0.0.1 2049 ')
        )
    assert run_deploy(cluster("ubuntu22", "converged", data=data)).changed_hosts == {}


def test_the_server_exports_before_any_host_mounts():
    run = run_deploy(reference_cluster("rocky9", data=NFS))
    exported = run[HEAD].op("Re-export the NFS exports").step
    started = run[HEAD].op("Enable and start the NFS server").step
    for name in HOSTS:
        assert run[name].op("Mount 10.0.0.1:/srv/shared").step > max(exported, started)


# --- S3 mounts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("os_name", ["ubuntu22", "ubuntu24", "debian12", "rocky9"])
def test_s3_mounts_through_s3fs_with_a_0600_credentials_file(os_name):
    run = run_deploy(reference_cluster(os_name, data=S3))
    for name in HOSTS:
        host = run[name]
        if FAMILY[os_name] == "apt":
            assert install_command(host).endswith(" install --no-install-recommends s3fs")
        else:
            epel = host.op(r"Add the EPEL repository").step
            assert host.op(r"Add the EPEL repository").commands == ["dnf install -y epel-release"]
            assert install_command(host) == "dnf install -y s3fs-fuse"
            assert host.op(r"Install the shared-storage packages").step > epel
        assert host.op("Create the S3 credentials directory").commands[-1] == "chmod 700 /etc/rayrig/s3"
        write = host.op(r"Write the S3 credentials for datasets")
        assert write.uploads == {"/etc/rayrig/s3/passwd-datasets": f"AKIAIOSFODNN7EXAMPLE:{SECRET}\n"}
        assert write.commands[-1] == "chmod 600 /etc/rayrig/s3/passwd-datasets"
        assert host.op(r"Write the S3 credentials for checkpoints").commands[-1].endswith("/passwd-checkpoints")

        datasets = unit(
            host.op("Install the S3 mount unit for /mnt/datasets").uploads["/etc/systemd/system/mnt-datasets.mount"]
        )
        assert dict(datasets["Mount"]) == {
            "What": "datasets:/imagenet",
            "Where": "/mnt/datasets",
            "Type": "fuse.s3fs",
            "Options": "_netdev,allow_other,umask=0022,passwd_file=/etc/rayrig/s3/passwd-datasets,"
            "url=http://10.0.0.5:9000,use_path_request_style,ro",
            "TimeoutSec": "90",
        }
        assert datasets["Install"]["WantedBy"] == "remote-fs.target"
        checkpoints = unit(host.uploads["/etc/systemd/system/mnt-checkpoints.mount"])["Mount"]
        assert checkpoints["What"] == "checkpoints"
        assert checkpoints["Options"] == (
            "_netdev,allow_other,umask=0000,passwd_file=/etc/rayrig/s3/passwd-checkpoints,url=http://10.0.0.5:9000"
        )
        mount = host.op("Mount s3://datasets/imagenet at /mnt/datasets").commands
        assert mount[1:3] == ["systemctl enable mnt-datasets.mount", mount[2]]
        assert mount[2].startswith("timeout 120 systemctl restart mnt-datasets.mount || ")
        assert mount[3].startswith("timeout -k 5 60 stat /mnt/datasets/. ")
        # The secret is in the uploaded file only: never in a command or an operation's name.
        assert not [c for c in host.raw_commands if SECRET in c]
        assert not [op.name for op in host.ops if SECRET in op.name or "AKIAIOSFODNN7EXAMPLE" in op.name]


def test_s3_without_credentials_uses_the_instance_profile():
    data = {"storage_s3_mounts": [{"bucket": "datasets", "path": "/mnt/datasets", "region": "us-west-2"}]}
    run = run_deploy(reference_cluster("ubuntu24", data=data))
    for name in HOSTS:
        assert not run[name].has_op("credentials")
        options = unit(run[name].uploads["/etc/systemd/system/mnt-datasets.mount"])["Mount"]["Options"]
        assert options == (
            "_netdev,allow_other,umask=0000,iam_role=auto,url=https://s3.us-west-2.amazonaws.com,endpoint=us-west-2"
        )
        assert not [p for p in run[name].uploads if p.startswith("/etc/rayrig/s3/")]


def test_s3_on_amazon_linux_uses_mountpoint():
    run = run_deploy(reference_cluster("al2023", data=S3))
    for name in HOSTS:
        host = run[name]
        (command,) = host.op("Install Mountpoint for Amazon S3").commands
        assert f'curl -fsSL --retry 3 -o "$d/mount-s3.rpm" {MOUNTPOINT}.rpm && ' in command
        assert f'echo "{"e" * 64}  $d/mount-s3.rpm" | sha256sum -c --quiet -' in command
        assert command.startswith("d=$(mktemp -d -t rayrig-mount-s3.XXXXXXXXXX) || exit 1; ")
        assert command.endswith(' && dnf install -y "$d/mount-s3.rpm"; rc=$?; rm -rf "$d"; exit $rc')
        assert not host.has_op("EPEL") and "s3fs" not in " ".join(host.commands)
        assert host.op(r"Write the S3 credentials for datasets").uploads == {
            "/etc/rayrig/s3/env-datasets": f"AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\nAWS_SECRET_ACCESS_KEY={SECRET}\n"
        }
        service = unit(host.uploads["/etc/systemd/system/rayrig-s3-mnt-datasets.service"])["Service"]
        assert service["EnvironmentFile"] == "/etc/rayrig/s3/env-datasets"
        assert service["ExecStart"] == (
            "/usr/bin/mount-s3 --allow-other --read-only --prefix imagenet/ --endpoint-url http://10.0.0.5:9000 "
            "--force-path-style datasets /mnt/datasets"
        )
        assert "timeout 120 systemctl restart rayrig-s3-mnt-datasets.service || " in " ".join(
            host.op("Mount s3://datasets/imagenet").commands
        )
        assert not [c for c in host.raw_commands if SECRET in c]


def test_s3fs_asked_for_on_amazon_linux_stops_the_deploy_naming_host_and_mount():
    data = {"storage_s3_mounts": [{"bucket": "datasets", "path": "/mnt/datasets", "driver": "s3fs"}]}
    expected = rf"host {CPU_WORKER}: storage_s3_mounts /mnt/datasets: driver 's3fs' is not available on amzn 2023"
    with pytest.raises(mount_units.StorageError, match=expected):
        run_deploy(reference_cluster("al2023", host_data={CPU_WORKER: data}))


def test_mountpoint_chosen_in_data_on_ubuntu_comes_from_aws_as_a_deb():
    data = {**S3, "storage_s3_mounts": [{**S3["storage_s3_mounts"][1], "driver": "mountpoint-s3"}]}
    run = run_deploy(reference_cluster("ubuntu22", data=data))
    (command,) = run[HEAD].op("Install Mountpoint for Amazon S3").commands
    assert f"{MOUNTPOINT}.deb" in command and f'echo "{"d" * 64}  $d/mount-s3.deb"' in command
    assert 'apt-get install -y "$d/mount-s3.deb"; rc=$?; rm -rf "$d"; exit $rc' in command
    assert "/tmp/" not in command  # a private mktemp directory, no fixed path


def test_mountpoint_without_a_checksum_for_the_host_stops_the_deploy_naming_host_key_and_package():
    data = {**S3, "storage_mountpoint_sha256": {"x86_64.deb": "d" * 64}}  # none for Amazon Linux's rpm (any host)
    expected = (
        r"host @fake/(head|worker-1|worker-2): storage_mountpoint_sha256 has no x86_64.rpm entry: "
        r"expected the sha256 of "
        rf"{re.escape(MOUNTPOINT)}.rpm \(Mountpoint for Amazon S3 1.24.0\)"
    )
    with pytest.raises(mount_units.StorageError, match=expected):
        run_deploy(reference_cluster("al2023", data=data))


def test_mountpoint_already_installed_needs_no_checksum():
    run = run_deploy(reference_cluster("al2023", "converged", data={**S3, "storage_mountpoint_sha256": {}}))
    assert run.changed_hosts == {}
    assert not any(h.has_op("Install Mountpoint") for h in run.hosts.values())


def test_s3_secret_is_never_printed_by_pyinfra(tmp_path):
    """Not in a command line, an operation name, nor the diff pyinfra shows with --diff."""
    inventory = tmp_path / "s3_inventory.py"
    inventory.write_text(
        f"from tests.plan.fakes.fakehosts import cluster\nhosts = cluster('debian12', 'fresh', data={S3!r})\n"
    )
    code, output = run_pyinfra(inventory=str(inventory), extra=["--diff"])
    assert code == 0, output[-3000:]
    assert "Write the S3 credentials for datasets" in output
    assert any("systemctl restart mnt-datasets.mount" in cmd for _h, cmd in command_lines(output))
    assert SECRET not in output
    assert SECRET.split("/")[0] not in output


# --- Re-runs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("os_name", OSES)
def test_converged_storage_plans_nothing(os_name):
    data = ALL if os_name != "al2023" else {**ALL, "storage_s3_mounts": S3["storage_s3_mounts"]}
    run = run_deploy(reference_cluster(os_name, "converged", data=data))
    assert run.changed_hosts == {}
    assert all(storage_ops(run[name]) for name in HOSTS)  # it did look


@pytest.mark.parametrize("os_name", OSES)
@pytest.mark.parametrize("state", ["fresh", "converged"])
def test_a_cluster_without_storage_data_has_no_storage_operation(os_name, state):
    run = run_deploy(reference_cluster(os_name, state))
    for name in HOSTS:
        assert storage_ops(run[name]) == []
        assert not run[name].commands_matching(r"nfs|s3fs|mount-s3|exportfs")


def test_changed_mount_options_remount_that_mount_only():
    hosts = reference_cluster("ubuntu22", "converged", data=ALL)
    mounts = [{**NFS["storage_nfs_mounts"][0], "options": "soft,timeo=100"}, NFS["storage_nfs_mounts"][1]]
    run = run_deploy(with_data(hosts, GPU_WORKER, storage_nfs_mounts=mounts))
    assert run.changed_hosts == {
        GPU_WORKER: [
            "Shared storage | Install the NFS mount unit for /mnt/shared",
            "Shared storage | Mount 10.0.0.1:/srv/shared at /mnt/shared",
        ]
    }
    text = run[GPU_WORKER].uploads["/etc/systemd/system/mnt-shared.mount"]
    assert unit(text)["Mount"]["Options"] == "vers=4.2,proto=tcp,soft,timeo=100,retrans=2"
    assert "timeout 120 systemctl restart mnt-shared.mount || " in " ".join(run[GPU_WORKER].commands)


def test_a_path_not_mounted_is_mounted_again_without_rewriting_its_unit():
    hosts = reference_cluster(
        "debian12", "converged", data=ALL, options={CPU_WORKER: {"storage": {"unmounted": ["/mnt/datasets"]}}}
    )
    run = run_deploy(hosts)
    assert run.changed_hosts == {CPU_WORKER: ["Shared storage | Mount s3://datasets/imagenet at /mnt/datasets"]}


def test_a_path_mounted_from_elsewhere_is_remounted():
    options = {HEAD: {"storage": {"mounted": {"/mnt/shared": ("10.0.0.99:/srv/shared", "nfs4")}}}}
    run = run_deploy(reference_cluster("rocky9", "converged", data=ALL, options=options))
    assert run.changed_hosts == {HEAD: ["Shared storage | Mount 10.0.0.1:/srv/shared at /mnt/shared"]}


def test_a_disabled_unit_is_enabled_and_mounted():
    options = {HEAD: {"storage": {"disabled": ["/mnt/ml-data"]}}}
    run = run_deploy(reference_cluster("ubuntu24", "converged", data=ALL, options=options))
    assert run.changed_hosts == {HEAD: ["Shared storage | Mount filer.lab:/vol/ml-data at /mnt/ml-data"]}
    assert "systemctl enable 'mnt-ml\\x2ddata.mount'" in run[HEAD].commands


def test_changed_credentials_rewrite_the_file_and_remount_the_s3_mounts():
    hosts = reference_cluster("ubuntu22", "converged", data=ALL)
    rotated = {"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": "rotated-Secret-Key"}
    run = run_deploy(with_data(hosts, CPU_WORKER, storage_s3_credentials=rotated))
    assert run.changed_hosts == {
        CPU_WORKER: [
            "Shared storage | Write the S3 credentials for datasets (/etc/rayrig/s3/passwd-datasets)",
            "Shared storage | Mount s3://datasets/imagenet at /mnt/datasets",
            "Shared storage | Write the S3 credentials for checkpoints (/etc/rayrig/s3/passwd-checkpoints)",
            "Shared storage | Mount s3://checkpoints at /mnt/checkpoints",
        ]
    }
    assert not [c for c in run[CPU_WORKER].raw_commands if "rotated-Secret" in c]


def test_a_mount_removed_from_the_data_is_unmounted_disabled_and_deleted():
    hosts = reference_cluster("ubuntu22", "converged", data=ALL)
    run = run_deploy(with_data(hosts, GPU_WORKER, storage_nfs_mounts=NFS["storage_nfs_mounts"][:1]))
    assert storage_changes(run) == {
        GPU_WORKER: ["Shared storage | Remove the storage unit mnt-ml\\x2ddata.mount (no longer in the data)"]
    }
    commands = run[GPU_WORKER].op("Remove the storage unit").commands
    assert commands[0].startswith("timeout 120 systemctl disable --now 'mnt-ml\\x2ddata.mount' || ")
    assert commands[1:] == ["rm -f '/etc/systemd/system/mnt-ml\\x2ddata.mount'", "systemctl daemon-reload"]


def test_removing_all_s3_data_removes_units_and_credentials():
    hosts = reference_cluster("debian12", "converged", data=ALL)
    run = run_deploy(with_data(hosts, HEAD, storage_s3_mounts=[], storage_s3_credentials=None))
    assert storage_changes(run) == {
        HEAD: [
            "Shared storage | Remove the storage unit mnt-checkpoints.mount (no longer in the data)",
            "Shared storage | Remove the storage unit mnt-datasets.mount (no longer in the data)",
            "Shared storage | Remove S3 credentials no mount uses",
        ]
    }
    assert run[HEAD].op("Remove S3 credentials").commands == [
        "rm -f /etc/rayrig/s3/passwd-checkpoints /etc/rayrig/s3/passwd-datasets"
    ]


def test_a_host_that_no_longer_serves_nfs_drops_rayrigs_exports():
    options = {HEAD: {"storage": {"exports": True, "stale_units": ["mnt-shared.mount"]}}}
    run = run_deploy(reference_cluster("ubuntu22", "converged", options=options))
    assert run.changed_hosts == {
        HEAD: [
            "Shared storage | Remove the storage unit mnt-shared.mount (no longer in the data)",
            "Shared storage | Remove rayrig's NFS exports (this host no longer serves NFS)",
        ]
    }
    assert run[HEAD].op("Remove rayrig's NFS exports").commands[0] == "rm -f /etc/exports.d/rayrig.exports"


def test_ray_node_bind_mounts_every_mount_and_its_unit_waits_for_them():
    data = {**NFS, **S3}
    paths = [m["path"] for m in data["storage_nfs_mounts"]] + [m["path"] for m in data["storage_s3_mounts"]]
    run = run_deploy(reference_cluster("ubuntu22", data=data))
    for name in HOSTS:
        create = run[name].docker_create()
        assert [a for a in create if a.startswith("--mount=type=bind,src=/mnt")] == [
            f"--mount=type=bind,src={p},dst={p}" for p in paths
        ]
        unit = run[name].uploads["/etc/systemd/system/ray-node.service"]
        # Wanted and waited for, not required: a late mount delays Ray instead of failing it for good.
        units = "mnt-shared.mount mnt-ml\\x2ddata.mount mnt-datasets.mount mnt-checkpoints.mount"
        for key in ("Wants", "After", "PartOf"):
            assert f"{key}={units}\n" in unit
        assert f"wait-for-mounts {' '.join(paths)}\n" in unit
        assert "RequiresMountsFor" not in unit


def test_adding_a_mount_replaces_each_ray_node_container_once():
    hosts = reference_cluster("debian12", "converged")
    changed = run_deploy([(n, {**d, **S3}) for n, d in hosts]).changed_hosts
    for name in HOSTS:
        assert any("Start the Ray" in op for op in changed[name]), changed[name]
