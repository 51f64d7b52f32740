"""What the checks judge before the benchmark (checks/preflight.py): each node's GPUs and
container, and the Ray cluster's state against the inventory's declarations."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time

from checks import preflight
from checks.verdict import FAIL, INFO, WARN
from deploy.contract.settings import merge

H100 = "NVIDIA H100 80GB HBM3"


def gpus(count: int = 0, *, driver: bool = True, nvswitches: int = 0) -> dict:
    """A node's GPU facts as the deploy side reads them."""
    found = {"count": count, "models": [H100] * count, "driver_version": "550.54.15", "memory_mib": [81559] * count}
    return {"pci_count": count, "nvswitches": nvswitches, "driver": found if count and driver else None}


def probe(*extra: str, gpus: int = 0, container_gpus: int | None = None, version: str = "2.60.0") -> dict:
    """The container side of the preflight, as :func:`preflight.parse_probe` reads the probe's lines."""
    lines = ["RUNNING=true", f"RAY_VERSION={version}", "SHM_KB=1048576"]
    if gpus:
        lines.append(f"CONTAINER_GPUS={gpus if container_gpus is None else container_gpus}")
    return preflight.parse_probe([*lines, *extra])


def levels(reasons) -> list[tuple[str, str]]:
    return [(r.level, r.message) for r in reasons]


def test_parse_probe_reads_the_keys():
    found = probe(gpus=2)
    assert found == {"running": "true", "ray_version": "2.60.0", "shm_kb": "1048576", "container_gpus": "2"}


def test_the_probe_takes_the_container_and_the_counts_as_arguments(tmp_path):
    command = preflight.probe_command("ray node;x", gpus(8, nvswitches=4))
    args = shlex.split(command)
    assert args[:2] == ["sh", "-c"] and args[3:] == ["_", "ray node;x", "8", "4", "0"]
    # a docker that shows its arguments and sees one GPU, a systemctl that says "active"
    calls = tmp_path / "calls"
    stubs = {"docker": f"printf '%s|' docker \"$@\" >> {calls}; echo >> {calls}; echo 'GPU 0: stub'",
             "systemctl": "echo active"}  # fmt: skip
    for name, body in stubs.items():
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    done = subprocess.run(command, shell=True, capture_output=True, text=True, env=env)
    found = preflight.parse_probe(done.stdout.splitlines())
    assert (found["container_gpus"], found["fabricmanager"]) == ("1", "active")
    assert "docker|exec|ray node;x|nvidia-smi|-L|" in calls.read_text().splitlines()
    plain = subprocess.run(preflight.probe_command("c", gpus()), shell=True, capture_output=True, text=True, env=env)
    assert set(preflight.parse_probe(plain.stdout.splitlines())) == {"running", "ray_version", "shm_kb"}


def test_healthy_gpu_node_has_only_information():
    reasons = preflight.preflight_reasons("gpu-1", merge({"ray_num_gpus": 2}), gpus(2), probe(gpus=2), 2**20)
    assert [r.level for r in reasons] == [INFO]
    assert "2 x NVIDIA H100 80GB HBM3, driver 550.54.15" in reasons[0].message


def test_declared_gpus_differ_from_the_host():
    reasons = preflight.preflight_reasons("gpu-1", merge({"ray_num_gpus": 8}), gpus(4), probe(gpus=4), 2**20)
    assert (FAIL, "ray_num_gpus = 8 but the host has 4 GPUs") in levels(reasons)
    assert all(r.host == "gpu-1" for r in reasons)


def test_container_sees_fewer_gpus_than_the_host():
    reasons = preflight.preflight_reasons("gpu-1", merge({}), gpus(8), probe(gpus=8, container_gpus=0), 2**20)
    assert (FAIL, "the ray-node container sees 0 GPUs, the host 8") in levels(reasons)


def test_gpus_without_a_working_driver():
    reasons = preflight.preflight_reasons("gpu-1", merge({}), gpus(4, driver=False), probe(), 2**20)
    assert (FAIL, "4 NVIDIA GPUs on the PCI bus but no working driver (nvidia-smi)") in levels(reasons)
    assert preflight.detected_gpus(gpus(4, driver=False)) == 4


def test_ray_version_mismatch_and_missing_container():
    reasons = preflight.preflight_reasons("w1", merge({"ray_num_gpus": 0}), gpus(), probe(version="2.59.0"), 2**20)
    assert (FAIL, "Ray 2.59.0 in the container, expected ray_version 2.60.0") in levels(reasons)
    stopped = preflight.parse_probe(["RUNNING=false"])
    assert levels(preflight.preflight_reasons("w1", merge({}), gpus(), stopped, 2**20)) == [
        (FAIL, "the ray-node container is not running")
    ]


def test_small_shm_warns_and_nvswitch_needs_fabricmanager():
    hgx = gpus(8, nvswitches=4)
    facts = probe("FABRICMANAGER=inactive", gpus=8)
    reasons = preflight.preflight_reasons("hgx", merge({"ray_num_gpus": 8}), hgx, facts, 2 * 2**30)
    assert (WARN, "/dev/shm in the container is 1024 MiB (Ray's object store falls back to disk)") in levels(reasons)
    assert (FAIL, "NVSwitch system but nvidia-fabricmanager is inactive") in levels(reasons)
    healthy = probe("FABRICMANAGER=active", gpus=8)
    reasons = preflight.preflight_reasons("hgx", merge({"ray_num_gpus": 8}), hgx, healthy, 1)
    assert FAIL not in {r.level for r in reasons}


DECLARED = [
    {"name": "head", "address": "10.0.0.1", "num_cpus": 2, "num_gpus": 0, "resources": {"a": 1}},
    {"name": "w1", "address": "10.0.0.2", "num_cpus": 4, "num_gpus": 8, "resources": {"b": 1}},
]


def test_expected_totals():
    assert preflight.expected_totals(DECLARED) == {"CPU": 6.0, "GPU": 8.0, "a": 1.0, "b": 1.0}
    auto = [{**DECLARED[0], "num_cpus": "auto", "num_gpus": None}, DECLARED[1]]
    assert preflight.expected_totals(auto) == {"a": 1.0, "b": 1.0}


def test_cluster_state_matches_the_declarations():
    state = {
        "nodes": [{"ip": "10.0.0.1", "resources": {}}, {"ip": "10.0.0.2", "resources": {}}],
        "total": {"CPU": 6.0, "GPU": 8.0, "a": 1.0, "b": 1.0, "memory": 1e9},
    }
    assert [r.level for r in preflight.cluster_reasons(DECLARED, state)] == [INFO]


def test_cluster_state_names_a_missing_node_and_a_wrong_total():
    state = {"nodes": [{"ip": "10.0.0.1", "resources": {}}], "total": {"CPU": 2.0, "GPU": 0.0, "a": 1.0}}
    found = levels(preflight.cluster_reasons(DECLARED, state))
    assert (FAIL, "not an alive Ray node (expected at 10.0.0.2)") in found
    assert (FAIL, "cluster total CPU is 2, the inventory declares 6") in found
    assert (FAIL, "cluster total GPU is 0, the inventory declares 8") in found
    assert (FAIL, "cluster total b is 0, the inventory declares 1") in found
    missing = next(r for r in preflight.cluster_reasons(DECLARED, state) if "alive" in r.message)
    assert missing.host == "w1"


def test_the_probe_reads_rays_version_from_its_metadata_without_importing_ray(tmp_path):
    """Importing Ray costs about a CPU-second: 20 s on a node starved of CPU. Here importing it fails."""
    site = tmp_path / "site"
    (site / "ray").mkdir(parents=True)
    (site / "ray" / "__init__.py").write_text("raise SystemExit('imported ray')\n")
    (site / "ray-2.60.0.dist-info").mkdir()
    (site / "ray-2.60.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: ray\nVersion: 2.60.0\n")
    (tmp_path / "python").symlink_to(sys.executable)
    # a docker whose "container" is this machine: docker exec NAME CMD... runs CMD
    (tmp_path / "docker").write_text('#!/bin/sh\n[ "$1" = exec ] && { shift 2; exec "$@"; }\necho true\n')
    (tmp_path / "docker").chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "PYTHONPATH": str(site)}
    done = subprocess.run(preflight.probe_command("c", gpus()), shell=True, capture_output=True, text=True, env=env)
    assert preflight.parse_probe(done.stdout.splitlines())["ray_version"] == "2.60.0"
    assert "import ray" not in preflight.PROBE_SCRIPT


def restarting_node(tmp_path, unit: str, running_after: int) -> dict:
    """A docker whose container runs from its ``running_after``-th inspection on, and a systemctl
    that says ``unit`` for the container's unit: the probe's lines, and how long it took."""
    count = tmp_path / "inspections"
    docker = (f'if [ "$1" = inspect ]; then n=$(($(cat {count} 2>/dev/null || echo 0)+1)); echo $n > {count}; '
              f'[ $n -ge {running_after} ] && echo true || echo false; else echo 2.60.0; fi')  # fmt: skip
    for name, body in {"docker": docker, "systemctl": f"echo {unit}", "sleep": "exit 0"}.items():
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    command = preflight.probe_command("ray-node", gpus(), timeout_s=60, start_wait_s=30)
    done = subprocess.run(
        command, shell=True, capture_output=True, text=True, env={"PATH": f"{tmp_path}:/usr/bin:/bin"}
    )
    return preflight.parse_probe(done.stdout.splitlines())


def test_a_container_its_unit_is_starting_again_is_waited_for(tmp_path):
    found = restarting_node(tmp_path, "activating", running_after=3)  # after a head replacement, say
    assert (found["running"], found["start_waited"]) == ("true", "4")


def test_a_container_whose_unit_is_stopped_is_not_waited_for(tmp_path):
    found = restarting_node(tmp_path, "inactive", running_after=3)
    assert found["running"] == "false" and "start_waited" not in found


def test_a_container_that_does_not_come_back_is_waited_for_only_so_long(tmp_path):
    found = restarting_node(tmp_path, "activating", running_after=1000)
    assert (found["running"], found["start_waited"]) == ("false", "30")


def test_check_node_says_the_container_was_started_again():
    node = Node(["START_WAITED=6", "RUNNING=true", "RAY_VERSION=2.60.0", "SHM_KB=1048576", "PROBE_EXIT=0"])
    found, reasons = preflight.check_node(node, "ray-node", merge({}), gpus(), cap_s=120)
    assert found["start_waited_s"] == 6 and "start_waited" not in found
    assert (INFO, "the ray-node container was being started again by its unit; running after 6 s") in levels(reasons)
    assert node.commands[0].endswith(f" _ ray-node 0 0 {preflight.MAX_START_WAIT_S}; echo PROBE_EXIT=$?")


def test_a_probe_that_hangs_is_stopped_and_says_so(tmp_path):
    (tmp_path / "docker").write_text("#!/bin/sh\nexec sleep 30\n")  # a container that never answers
    (tmp_path / "docker").chmod(0o755)
    command = preflight.probe_command("c", gpus(), timeout_s=1)
    assert command.startswith("timeout -k 5 1 sh -c ")
    started = time.monotonic()
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    done = subprocess.run(command, shell=True, capture_output=True, text=True, env=env, timeout=30)
    assert time.monotonic() - started < 8
    found = preflight.parse_probe(done.stdout.splitlines())
    assert preflight.probe_stopped(found)
    (tmp_path / "quick").mkdir()  # a docker that fails at once, not the machine's: a busy engine may take seconds
    (tmp_path / "quick" / "docker").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "quick" / "docker").chmod(0o755)
    plain = subprocess.run(preflight.probe_command("c", gpus(), timeout_s=5), shell=True, capture_output=True,
                           text=True, env={"PATH": f"{tmp_path / 'quick'}:/usr/bin:/bin"})  # fmt: skip
    assert not preflight.probe_stopped(preflight.parse_probe(plain.stdout.splitlines()))


class Node:
    """A node that answers the probe with ``probe`` and records the commands."""

    name, address = "gpu-1", "10.0.0.2"

    def __init__(self, probe: list[str]):
        self.probe = probe
        self.commands: list[str] = []

    def run(self, command: str, print_output: bool = False) -> tuple[bool, list[str]]:
        self.commands.append(command)
        return True, self.probe if "RUNNING=" in command else []


def test_check_node_bounds_the_probe_and_the_gpu_health_probe_by_the_cap():
    node = Node(["RUNNING=true", "RAY_VERSION=2.60.0", "CONTAINER_GPUS=8", "PROBE_EXIT=0"])
    found, reasons = preflight.check_node(node, "ray-node", merge({"ray_num_gpus": 8}), gpus(8), cap_s=120)
    probe, health = node.commands
    assert probe.startswith("timeout -k 5 120 sh -c ") and probe.endswith("; echo PROBE_EXIT=$?")
    assert health.startswith("timeout -k 5 ") and 115 <= int(health.split()[3]) <= 120
    assert "gpu_health" in found and "probe_exit" not in found
    assert (INFO, "8 x NVIDIA H100 80GB HBM3, driver 550.54.15") in levels(reasons)


def test_a_stopped_probe_is_one_fail_and_no_gpu_health_probe_follows():
    node = Node(["RUNNING=true", "PROBE_EXIT=124"])
    found, reasons = preflight.check_node(node, "ray-node", merge({"ray_num_gpus": 8}), gpus(8), cap_s=30)
    assert levels(reasons) == [(FAIL, "preflight did not answer in 30 s")]
    assert len(node.commands) == 1 and found["running"] == "true"


def test_with_no_time_left_for_it_the_gpu_health_probe_is_not_started():
    node = Node(["RUNNING=true", "RAY_VERSION=2.60.0", "CONTAINER_GPUS=8", "PROBE_EXIT=0"])
    _found, reasons = preflight.check_node(node, "ray-node", merge({"ray_num_gpus": 8}), gpus(8), cap_s=3)
    assert len(node.commands) == 1
    assert (WARN, "GPU health not read: the preflight's 3 s ran out") in levels(reasons)
