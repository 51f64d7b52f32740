"""The ray-node container's pure helpers: the ``ray start`` and ``docker create`` command
lines, the configuration hash, sizes and limits, the GPU count, and the supervising unit."""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from deploy.contract import settings
from deploy.ray import ray_node
from deploy.run.templating import render


def ray_settings(**changes):
    return settings.merge({"ray_role": "worker", **changes})


def build(s=None, role="worker", node_ip="10.0.0.2", head="10.0.0.1", gpus=0, shm="16g", nofile=65536):
    s = s or ray_settings()
    start = ray_node.ray_start_args(s, role, node_ip, head, gpus)
    return ray_node.docker_run_args(s, role, start, gpus, shm, nofile)


def test_head_start_args():
    args = ray_node.ray_start_args(ray_settings(ray_num_cpus=8), "head", "10.0.0.1", "10.0.0.1", 0)
    assert args[:3] == ["ray", "start", "--block"]
    for flag in (
        "--head",
        "--port=6379",
        "--ray-client-server-port=10001",
        "--dashboard-host=127.0.0.1",
        "--dashboard-port=8265",
        "--num-gpus=0",
        "--num-cpus=8",
        "--node-ip-address=10.0.0.1",
        "--min-worker-port=10002",
        "--max-worker-port=10999",
    ):
        assert flag in args
    assert not [a for a in args if a.startswith("--address")]


def test_worker_start_args():
    s = ray_settings(ray_resources={"nvme": 1, "a100": 0.5}, ray_object_store_bytes=10 * 2**30)
    args = ray_node.ray_start_args(s, "worker", "10.0.0.2", "10.0.0.1", 8)
    assert "--address=10.0.0.1:6379" in args
    assert "--head" not in args
    assert "--num-gpus=8" in args
    assert '--resources={"a100":0.5,"nvme":1}' in args
    assert f"--object-store-memory={10 * 2**30}" in args
    assert not [a for a in args if a.startswith(("--num-cpus", "--dashboard-host", "--port="))]


def test_docker_args_pass_gpus_only_when_there_are_some():
    assert "--gpus=all" in build(gpus=8)
    assert "--gpus=all" not in build(gpus=0)
    args = build()
    assert args[:2] == ["docker", "create"]
    assert "--network=host" in args and "--shm-size=16g" in args and "--ulimit=nofile=65536:65536" in args
    assert not [a for a in build(nofile=None) if a.startswith("--ulimit")]


S3_RO = {"bucket": "datasets", "path": "/mnt/datasets", "read_only": True}
NFS = {"server": "10.0.0.5", "export": "/srv/shared", "path": "/mnt/shared"}


@pytest.mark.parametrize(
    "changes,expected",
    [
        ({}, None),  # no shared storage: no variable
        ({"storage_s3_mounts": [S3_RO]}, None),  # read-only data is no place for results
        ({"storage_s3_mounts": [S3_RO, {"bucket": "r", "path": "/mnt/results"}]}, "/mnt/results"),
        ({"storage_nfs_mounts": [NFS], "storage_s3_mounts": [{"bucket": "r", "path": "/mnt/r"}]}, "/mnt/shared"),
        ({"storage_nfs_mounts": [{**NFS, "options": "ro,hard"}, {**NFS, "path": "/mnt/rw"}]}, "/mnt/rw"),
        ({"storage_nfs_mounts": [NFS], "storage_shared_dir": "/mnt/shared/team-a"}, "/mnt/shared/team-a"),
        ({"storage_nfs_mounts": [NFS], "ray_env": {"RAYRIG_SHARED_DIR": "/mnt/shared/mine"}}, "/mnt/shared/mine"),
    ],
)  # fmt: skip
def test_jobs_find_the_first_writable_shared_mount_as_rayrig_shared_dir(changes, expected):
    args = build(ray_settings(**changes))
    found = [a.split("=", 2)[2] for a in args if a.startswith("--env=RAYRIG_SHARED_DIR=")]
    assert found == ([expected] if expected else [])
    mounted = [a for a in args if a.startswith("--mount=type=bind,src=/mnt/")]
    assert all(any(m == f"--mount=type=bind,src={p},dst={p}" for m in mounted) for p in ray_node.mount_points(
        ray_settings(**changes)))  # fmt: skip  # the folder is on a mount ray-node has


def test_ray_node_runs_without_new_privileges_and_with_only_the_capabilities_ray_uses():
    args = build()
    assert "--security-opt=no-new-privileges" in args and "--cap-drop=ALL" in args
    added = {a.removeprefix("--cap-add=") for a in args if a.startswith("--cap-add=")}
    assert added == {"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"}
    assert not {"NET_RAW", "NET_BIND_SERVICE", "MKNOD", "SYS_ADMIN"} & added
    assert args.index("--cap-drop=ALL") < args.index(next(a for a in args if a.startswith("--cap-add=")))
    loose = build(ray_settings(ray_container_hardened=False))
    assert not [a for a in loose if a.startswith(("--cap-", "--security-opt"))]


def test_config_hash_is_stable():
    a = build(ray_settings(ray_resources={"x": 1, "y": 2}))
    b = build(ray_settings(ray_resources={"y": 2, "x": 1}))
    assert ray_node.config_hash(a) == ray_node.config_hash(b) == ray_node.config_hash(list(a))
    assert len(ray_node.config_hash(a)) == 16
    int(ray_node.config_hash(a), 16)


@pytest.mark.parametrize(
    "change",
    [
        {"ray_num_cpus": 4},
        {"ray_resources": {"nvme": 1}},
        {"ray_object_store_bytes": 2**30},
        {"ray_image": "rayproject/ray:2.60.0-py311-cpu"},
        {"ray_container_name": "ray-node-2"},
        {"ray_dashboard_host": "0.0.0.0"},
        *(
            {"ray_ports": {name: 40000}}
            for name in (
                "gcs",
                "node_manager",
                "object_manager",
                "runtime_env_agent",
                "dashboard_agent_grpc",
                "dashboard_agent_http",
                "metrics_export",
                "worker_min",
                "worker_max",
            )
        ),
    ],
    ids=lambda c: next(iter(c)) + (f"-{next(iter(c['ray_ports']))}" if "ray_ports" in c else ""),
)
def test_config_hash_changes_with_any_setting(change):
    base = build(ray_settings(), role="head" if "ray_dashboard_host" in change else "worker")
    changed = build(ray_settings(**change), role="head" if "ray_dashboard_host" in change else "worker")
    assert ray_node.config_hash(changed) != ray_node.config_hash(base)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"role": "head"},
        {"node_ip": "10.0.0.9"},
        {"head": "10.0.0.99"},
        {"gpus": 8},
        {"shm": "8g"},
        {"nofile": 20000},
        {"nofile": None},
    ],
)
def test_config_hash_changes_with_any_input(kwargs):
    assert ray_node.config_hash(build(**kwargs)) != ray_node.config_hash(build())


@pytest.mark.parametrize("name", ["client_server", "dashboard"])
def test_head_only_ports_change_the_heads_hash(name):
    base = build(ray_settings(), role="head")
    changed = build(ray_settings(ray_ports={name: 40000}), role="head")
    assert ray_node.config_hash(changed) != ray_node.config_hash(base)


def test_hash_label_goes_before_the_image_and_matches_the_hash():
    args = build()
    labelled = ray_node.with_hash_label(args)
    label = f"--label={ray_node.HASH_LABEL}={ray_node.config_hash(args)}"
    assert labelled == args[:2] + [label] + args[2:]
    assert labelled.index(label) < labelled.index(settings.defaults()["ray_image"])


def test_is_current():
    args = build()
    labels = {ray_node.HASH_LABEL: ray_node.config_hash(args)}
    alive = {"running": True, "restarting": False, "labels": labels}
    assert ray_node.is_current(alive, args)
    assert ray_node.is_current({**alive, "running": False, "restarting": True}, args)
    assert not ray_node.is_current({**alive, "running": False}, args)
    assert not ray_node.is_current({**alive, "labels": {ray_node.HASH_LABEL: "0" * 16}}, args)
    assert not ray_node.is_current({**alive, "labels": {}}, args)
    assert not ray_node.is_current(None, args)


@pytest.mark.parametrize(
    "setting,mem,expected",
    [
        ("16g", 2**40, "16g"),
        ("auto", 64 * 2**30, f"{int(64 * 2**30 * 0.3) // 2**20}m"),
        ("auto", None, "2g"),
        ("auto", 2**20, "64m"),
    ],
)
def test_shm_size(setting, mem, expected):
    assert ray_node.shm_size(setting, mem) == expected


@pytest.mark.parametrize(
    "setting,hard,expected",
    [(65536, 20000, 20000), (65536, None, 65536), (None, 20000, None), (1024, 1048576, 1024), (65536, 65536, 65536)],
)
def test_nofile_limit(setting, hard, expected):
    assert ray_node.nofile_limit(setting, hard) == expected


def gpus_fact(pci: int, driver: int | None) -> dict:
    return {"pci_count": pci, "driver": None if driver is None else {"count": driver}}


@pytest.mark.parametrize(
    "declared,fact,expected",
    [
        ("auto", gpus_fact(8, 8), 8),
        ("auto", gpus_fact(8, None), 8),
        ("auto", gpus_fact(0, None), 0),
        (8, gpus_fact(8, 8), 8),
        (0, gpus_fact(0, None), 0),
        ("auto", gpus_fact(8, 7), 7),
    ],
)
def test_resolve_num_gpus(declared, fact, expected):
    assert ray_node.resolve_num_gpus(declared, fact, "h") == expected


@pytest.mark.parametrize(
    "declared,fact,detected", [(4, gpus_fact(8, 8), 8), (2, gpus_fact(0, None), 0), (0, gpus_fact(8, 8), 8)]
)
def test_resolve_num_gpus_mismatch_names_the_host(declared, fact, detected):
    with pytest.raises(ray_node.GpuCountError) as error:
        ray_node.resolve_num_gpus(declared, fact, "gpu-07")
    assert str(error.value).startswith(f"host gpu-07: ray_num_gpus = {declared}: expected {detected}")


def test_wait_for_port_command():
    command = ray_node.wait_for_port_command("10.0.0.1", 6379, 120)
    words = shlex.split(command)
    assert words[:4] == ["timeout", "120", "bash", "-c"]
    assert words[4:] == [ray_node.WAIT_FOR_PORT, "_", "10.0.0.1", "6379"]


@pytest.mark.parametrize("address", ["10.0.0.1%x/1);touch {marker};(true", "$(touch {marker})", "`touch {marker}`"])
def test_wait_for_port_passes_the_address_to_bash_as_an_argument_never_as_code(address, tmp_path):
    marker = tmp_path / "P"
    command = ray_node.wait_for_port_command(address.format(marker=marker), 1, 1)
    subprocess.run(["bash", "-c", command], capture_output=True, timeout=30)
    assert not marker.exists()


def test_wait_for_port_returns_once_the_port_answers():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        command = ray_node.wait_for_port_command("127.0.0.1", sock.getsockname()[1], 10)
        assert subprocess.run(["bash", "-c", command], capture_output=True, timeout=30).returncode == 0


def test_unit_supervises_the_named_container():
    unit = ray_node.unit_text("ray-node")
    assert "ExecStart=/usr/bin/env docker start --attach ray-node\n" in unit
    assert "Restart=always\n" in unit
    assert "Requires=docker.service\n" in unit


# --- The unit at boot: the firewall first, the mounts waited for --------------------------------------

UNITS = ["mnt-shared.mount", "rayrig-s3-mnt-datasets.service"]
MOUNTS = ["/mnt/shared", "/mnt/datasets"]


def unit_lines(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}=")]


def test_unit_waits_for_its_mounts_instead_of_requiring_them():
    unit = ray_node.unit_text("ray-node", MOUNTS, UNITS)
    assert "RequiresMountsFor" not in unit  # that fails the unit for good when a mount is late
    for key in ("Wants", "After", "PartOf"):
        assert " ".join(UNITS) in unit_lines(unit, key), key
    [wait] = unit_lines(unit, "ExecStartPre")
    assert "mountpoint -q" in wait and wait.endswith("wait-for-mounts /mnt/shared /mnt/datasets")
    assert "Restart=always\n" in unit
    timeout = int(unit_lines(unit, "TimeoutStartSec")[0])
    assert timeout > 2 * ray_node.UNIT_WAIT_S  # the waits end before systemd gives up on the start


def test_unit_without_mounts_or_firewall_waits_for_nothing():
    unit = ray_node.unit_text("ray-node")
    assert unit_lines(unit, "ExecStartPre") == []
    assert "rayrig-firewall" not in unit and "PartOf" not in unit


def test_unit_starts_ray_only_once_the_firewall_table_is_loaded():
    unit = ray_node.unit_text("ray-node", firewall_table="inet rayrig")
    assert unit_lines(unit, "Wants").count("rayrig-firewall.service") == 1
    assert "rayrig-firewall.service" in unit_lines(unit, "After")
    # Wants=, not Requires=: restarting the firewall with nftables.service leaves Ray running.
    assert "rayrig-firewall.service" not in " ".join(unit_lines(unit, "Requires") + unit_lines(unit, "PartOf"))
    [wait] = unit_lines(unit, "ExecStartPre")
    assert "/usr/sbin/nft list table inet rayrig" in wait


def exec_start_pre(unit: str) -> list[list[str]]:
    """The ExecStartPre command lines as systemd runs them ("$$" is a literal "$")."""
    return [shlex.split(line.replace("$$", "$")) for line in unit_lines(unit, "ExecStartPre")]


def test_mount_wait_passes_on_mounted_paths_and_fails_naming_a_missing_one(tmp_path):
    values = {**ray_node._unit_values("ray-node", ["/proc", str(tmp_path)], ["a.mount", "b.mount"], None), "wait_s": 2}
    [wait] = exec_start_pre(render(ray_node.UNIT_TEMPLATE, **values))
    started = time.monotonic()
    proc = subprocess.run(wait, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert 2 <= time.monotonic() - started < 15  # it waited, and not for ever
    assert f"{tmp_path} is not mounted after 2 s" in proc.stderr
    mounted = subprocess.run([*wait[:-1]], capture_output=True, text=True, timeout=30)  # /proc only
    assert mounted.returncode == 0, mounted.stderr


def test_firewall_wait_fails_with_a_message_when_the_table_is_missing():
    values = {**ray_node._unit_values("ray-node", [], [], "inet rayrig-absent"), "wait_s": 1}
    [wait] = exec_start_pre(render(ray_node.UNIT_TEMPLATE, **values))
    proc = subprocess.run(wait, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "the firewall table inet rayrig-absent is not loaded after 1 s" in proc.stderr


def test_unit_is_valid_for_systemd():
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed")
    unit = ray_node.unit_text("ray-node", MOUNTS, UNITS, "inet rayrig", "/var/lib/rayrig/ray")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ray-node.service"
        path.write_text(unit)
        proc = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    problems = [line for line in proc.stderr.splitlines() if "ray-node.service:" in line]
    assert problems == [], proc.stderr
