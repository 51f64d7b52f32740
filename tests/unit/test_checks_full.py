"""The checks across a cluster (checks/full.py): the commands the head runs, the programs they
start, and the order and the verdict of a whole run through in-memory nodes.

The nodes here are fakes because a real one needs a deployed cluster (the e2e tier runs the same
code through pyinfra's connections); everything on the operator's side of them is real.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

from checks import full, report, run_budget
from checks.deadlines import Budget
from checks.node import Node
from checks.verdict import FAIL, INFO, WARN, Reason
from deploy.contract.settings import merge

H = "/tmp/rayrig-checks.Ab3dE5gH7j"  # what mktemp -d made on the head ...
D = "/tmp/rayrig-checks.Zy9xW7vU5t"  # ... and in its container
DIRS = full.HeadDirs(H, D)

# --- the commands ---------------------------------------------------------------------------------


def test_benchmark_command_passes_thresholds_aliases_and_expected_nodes():
    settings = merge({"checks_profile": "quick", "checks_outlier_fraction": 0.8})
    command = full.benchmark_command("ray-node", settings, {"10.0.0.2": "w1"}, ["10.0.0.2", "10.0.0.1"], DIRS)
    run = next(part for part in command.split(" && ") if "checks.benchmark" in part)
    args = shlex.split(run.split("; status=")[0])
    # stopped on the head a margin after the budget, and inside the container at it
    assert args[:4] == ["timeout", "-k", "10", "920"]
    assert args[4:9] == ["docker", "exec", "--workdir", D, "ray-node"]
    assert args[9:14] == ["sh", "-c", full.BOUNDED, "_", "900"]
    assert args[14:17] == ["python", "-m", "checks.benchmark"]
    assert args[args.index("--budget") + 1] == "880"  # the benchmark aims to end before the kill
    assert args[args.index("--peer-factor") + 1] == "3"
    assert args[args.index("--timeout") + 1] == "300"  # checks_node_timeout_s, no longer the whole budget
    assert "--quick" in args
    assert args[args.index("--expect-nodes") + 1] == "10.0.0.1,10.0.0.2"
    assert args[args.index("--outlier-fraction") + 1] == "0.8"
    assert args[args.index("--matmul-min-fraction") + 1] == "0.65"
    assert args[args.index("--host-alias") + 1] == "10.0.0.2=w1"
    assert args[args.index("--out") + 1] == f"{D}/report.json"
    assert f"docker cp ray-node:{D}/report.json {H}/report.json" in command.split(" && ")
    assert "echo RAYRIG_BENCHMARK_EXIT=$status" in command.split(" && ")
    assert "--quick" not in full.benchmark_command("ray-node", merge({}), {}, ["10.0.0.1"], DIRS)


def test_the_benchmark_command_gets_what_is_left_of_the_budget_and_the_node_settings():
    settings = merge({"checks_peer_timeout_factor": 2.5, "checks_node_timeout_s": 60})
    command = full.benchmark_command("ray-node", settings, {}, ["10.0.0.1"], DIRS, left_s=400.7)
    args = shlex.split(command.split("; status=")[0])
    assert args[:4] == ["timeout", "-k", "10", "420"]
    assert args[args.index("--budget") + 1] == "380"
    assert (args[args.index("--peer-factor") + 1], args[args.index("--timeout") + 1]) == ("2.5", "60")


def test_package_tarball_holds_the_checks_package_with_its_programs():
    with tarfile.open(fileobj=full.package_tarball(), mode="r:gz") as tar:
        names = set(tar.getnames())
    assert {"checks/benchmark.py", "checks/kernels.py", "checks/verdict.py", "checks/__init__.py"} <= names
    assert {"checks/cluster_state.py", "checks/storage_probe.py"} <= names


def test_the_checks_go_through_fresh_private_directories_named_by_mktemp():
    assert full.workdir_command() == "d=$(mktemp -d -t rayrig-checks.XXXXXXXXXX) && echo RAYRIG_CHECKS_DIR=$d"
    steps = full.install_command("ray node", "/tmp/rayrig-checks.A b").split(" && ")
    assert steps == [
        "tar -xzf '/tmp/rayrig-checks.A b'/checks.tgz -C '/tmp/rayrig-checks.A b'",
        "d=$(docker exec 'ray node' mktemp -d -t rayrig-checks.XXXXXXXXXX)",
        '[ -n "$d" ]',  # never a copy into the container's root
        """docker cp '/tmp/rayrig-checks.A b'/checks 'ray node':"$d"/""",
        "echo RAYRIG_CHECKS_DIR=$d",
    ]
    assert full.cleanup_command("ray node", H, D) == (
        f"rm -rf -- {H}; docker exec --user root 'ray node' rm -rf -- {D}"
    )
    assert full.cleanup_command("ray-node", H, None) == f"rm -rf -- {H}"


@pytest.mark.parametrize(
    "lines,found",
    [
        (["RAYRIG_CHECKS_DIR=/tmp/rayrig-checks.Ab3dE5gH7j"], "/tmp/rayrig-checks.Ab3dE5gH7j"),
        (["noise", "RAYRIG_CHECKS_DIR=/var/tmp/x.1 "], "/var/tmp/x.1"),
        ([], None),
        (["RAYRIG_CHECKS_DIR="], None),
        (["RAYRIG_CHECKS_DIR=relative"], None),
        (["RAYRIG_CHECKS_DIR=/tmp/a;rm -rf /"], None),
        (["RAYRIG_CHECKS_DIR=/tmp/../etc"], None),
        (["RAYRIG_CHECKS_DIR=/"], None),
    ],
)
def test_only_a_plain_absolute_directory_is_taken_from_the_output(lines, found):
    assert full.made_dir(lines) == found


def test_no_command_uses_a_fixed_path_in_tmp():
    settings = merge({})
    commands = [
        full.workdir_command(),
        full.install_command("ray-node", H),
        full.cleanup_command("ray-node", H, D),
        full.cluster_state_command("ray-node", ["10.0.0.1"], workdir=D),
        full.storage_command("ray-node", [], workdir=D),
        full.benchmark_command("ray-node", settings, {}, ["10.0.0.1"], DIRS),
        full.monitoring_command("ray-node", {"url": "http://127.0.0.1:9090"}, workdir=D, limit_s=60),
    ]
    for command in commands:
        assert "/tmp" not in command.replace(H, "").replace(D, ""), command
    source = Path(full.__file__).read_text()
    assert "/tmp/" not in source


def test_combined_verdict_fails_on_preflight_even_when_the_benchmark_passes():
    bench = {"mode": "cluster", "cpu_only": True, "devices": [], "allreduce": None, "sweep_test": None}
    extra = [Reason(FAIL, "the ray-node container is not running", host="w1")]
    thresholds = {"matmul_min_fraction": 0.65, "membw_min_fraction": 0.8, "outlier_fraction": 0.9}
    verdict = full.combined_verdict(bench, extra, thresholds)
    assert verdict.status == FAIL
    assert verdict.reasons[0].host == "w1"


@pytest.mark.parametrize("expected", [["10.0.0.1"], ["10.0.0.2", "10.0.0.1"]])
def test_cluster_state_command_runs_the_module_from_the_copied_package(expected):
    args = shlex.split(full.cluster_state_command("ray-node", expected, wait_s=30, workdir=D))
    assert args[:4] == ["timeout", "-k", "10", "60"]  # the wait and Python's start
    assert args[4:12] == ["docker", "exec", "--workdir", D, "ray-node", "python", "-m", "checks.cluster_state"]
    assert args[12:] == ["--expect", ",".join(sorted(expected)), "--wait", "30"]
    bounded = shlex.split(full.cluster_state_command("ray-node", expected, wait_s=30, workdir=D, limit_s=40))
    assert bounded[:4] == ["timeout", "-k", "10", "40"]  # what is left of the budget


def test_the_storage_command_is_bounded_and_carries_the_mounts_as_json():
    mounts = [{"path": "/mnt/it's", "kind": "nfs", "nodes": ["10.0.0.1"], "writers": ["10.0.0.1"], "writable": True}]
    args = shlex.split(full.storage_command("ray-node", mounts, workdir=D, read_wait_s=5, task_timeout_s=10))
    assert args[:4] == ["timeout", "-k", "10", str(full.shared_storage.check_timeout(10, 5))]
    assert args[4:12] == ["docker", "exec", "--workdir", D, "ray-node", "python", "-m", "checks.storage_probe"]
    config = json.loads(args[12])  # the mounts travel intact, quotes and all
    assert config["mounts"] == mounts
    assert (config["read_wait_s"], config["task_timeout_s"], config["require_mount"]) == (5, 10, True)
    assert full.shared_storage.check_timeout() >= 4 * full.shared_storage.TASK_TIMEOUT_S
    bounded = shlex.split(full.storage_command("ray-node", mounts, workdir=D, limit_s=42))
    assert bounded[:4] == ["timeout", "-k", "10", "42"]  # what is left of the budget, when less


@pytest.mark.slow
def test_the_cluster_state_program_on_a_real_ray(local_ray):
    env = {**os.environ, "RAY_ADDRESS": local_ray["address"]}
    command = [sys.executable, "-m", "checks.cluster_state", "--expect", local_ray["ip"], "--wait", "30"]
    done = subprocess.run(command, cwd=full.PACKAGE_DIR.parent, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    state = json.loads(line[len("RESULT ") :])
    assert [n["ip"] for n in state["nodes"]] == [local_ray["ip"]]
    assert state["total"]["CPU"] == 1.0


# --- a whole run through in-memory nodes ----------------------------------------------------------


class FakeNode:
    """A :class:`checks.node.Node` that answers each kind of command from ``answers`` and records
    what it was asked; ``report`` is what the benchmark left behind (None: nothing)."""

    def __init__(self, name: str, address: str, answers: dict[str, tuple[bool, list[str]]] | None = None,
                 report: dict[str, Any] | None = None):  # fmt: skip
        self.name, self.address = name, address
        made = {"workdir": (True, [f"RAYRIG_CHECKS_DIR={H}"]), "install": (True, [f"RAYRIG_CHECKS_DIR={D}"])}
        self.answers = {**made, **(answers or {})}
        self.report = report
        self.calls: list[tuple[str, str]] = []  # (kind, command or path)
        self.printed: list[str] = []  # the kinds of command whose output the operator sees live
        self.files: dict[str, bytes] = {}

    @staticmethod
    def kind(command: str) -> str:
        for word, kind in (("checks.cluster_state", "cluster_state"), ("checks.storage_probe", "storage"),
                           ("checks.monitoring", "monitoring"),
                           ("checks.benchmark", "benchmark"), ("tar -xzf", "install"),
                           ("NVRM: Xid", "gpu_health"), ("sh -c", "probe"),
                           ("mktemp", "workdir"), ("rm -rf", "cleanup")):  # fmt: skip
            if word in command:
                return kind
        raise AssertionError(f"an unexpected command: {command}")

    def run(self, command: str, print_output: bool = False) -> tuple[bool, list[str]]:
        kind = self.kind(command)
        self.calls.append((kind, command))
        if print_output:
            self.printed.append(kind)
        return self.answers.get(kind, (True, []))

    def put_file(self, source: IO[bytes], remote_path: str) -> bool:
        self.calls.append(("put", remote_path))
        self.files[remote_path] = source.read()
        return True

    def get_file(self, remote_path: str, local_path: str) -> bool:
        self.calls.append(("get", remote_path))
        if self.report is None:
            return False
        Path(local_path).write_text(json.dumps(self.report))
        return True


HEAD_IP, WORKER_IP = "10.0.0.1", "10.0.0.2"
NO_GPUS = {"pci_count": 0, "nvswitches": 0, "driver": None}
RUNNING = (True, ["RUNNING=true", "RAY_VERSION=2.60.0", "SHM_KB=1048576"])
BENCH = {
    "mode": "cluster",
    "cpu_only": True,
    "devices": [{"host": n, "device": "cpu", "kind": "cpu", "model": "x", "matmul": {"tflops": 0.2}} for n in "hw"],
    "allreduce": {"backend": "gloo", "world_size": 2, "value_check": {"ok": True},
                  "sweep": [{"bytes": 2**20, "time_s": 0.01, "algbw_gbps": 0.1, "busbw_gbps": 0.1, "values_ok": True}]},
    "sweep_test": {"tasks": 4, "completed": 4, "failures": [], "missing_nodes": []},
}  # fmt: skip


def result_line(data: dict[str, Any]) -> tuple[bool, list[str]]:
    return True, ["2026 WARNING something from Ray", "RESULT " + json.dumps(data)]


def alive(*ips: str, **total: float) -> tuple[bool, list[str]]:
    return result_line({"nodes": [{"ip": ip, "resources": {}} for ip in ips], "total": total})


def settings(tmp_path: Path, **data: Any) -> dict[str, Any]:
    """Monitoring off unless a test turns it on: the runs with it on are below, its reading is
    tests/unit/test_checks_monitoring.py's."""
    return merge({"ray_num_gpus": 0, "checks_report_dir": str(tmp_path), "ray_cluster_name": "lab",
                  "monitoring_enabled": False, **data})  # fmt: skip


def watched(*rows: tuple[str, str, str]) -> tuple[bool, list[str]]:
    """What ``python -m checks.monitoring`` prints: targets (host, job, health), no finding but their own."""
    targets = [{"host": h, "job": j, "health": health, "instance": f"{h}:1", "error": None} for h, j, health in rows]
    found = [Reason(FAIL, f"{j} down", host=h).as_dict() for h, j, health in rows if health != "up"]
    return result_line({"prometheus": "http://127.0.0.1:9090", "host": "head", "window_s": 3600,
                        "targets": targets, "exported": None, "findings": found, "error": None})  # fmt: skip


def run(nodes: list[Node], settings_by_name: dict[str, Any], gpus: dict[str, Any]) -> tuple[Any, list[str]]:
    said: list[str] = []
    outcome = full.run_checks(nodes, nodes[0], settings_by_name, gpus, progress=said.append)
    return outcome, said


def test_a_healthy_cluster_passes_in_order_and_the_report_is_saved(tmp_path):
    share = {"storage_nfs_mounts": [{"server": "head", "export": "/srv", "path": "/mnt/shared"}]}
    mount = {"path": "/mnt/shared", "kind": "nfs", "writable": True, "nodes_with_mount": [HEAD_IP, WORKER_IP],
             "written_on": HEAD_IP, "read_on": [WORKER_IP], "listed_on": [], "seconds": 0.1, "errors": [],
             "ok": True, "error": None}  # fmt: skip
    answers = {
        "probe": RUNNING,
        "cluster_state": alive(HEAD_IP, WORKER_IP),
        "storage": result_line({"alive": [HEAD_IP, WORKER_IP], "mounts": [mount]}),
        "monitoring": watched(("head", "node", "up"), ("head", "ray", "up"), ("w1", "node", "up"), ("w1", "ray", "up")),
    }
    head = FakeNode("head", HEAD_IP, answers, report=BENCH)
    worker = FakeNode("w1", WORKER_IP, {"probe": RUNNING})
    every = {name: settings(tmp_path, **share, monitoring_enabled=True) for name in ("head", "w1")}

    outcome, said = run([head, worker], every, {"head": NO_GPUS, "w1": NO_GPUS})

    assert outcome.verdict.status == "PASS", outcome.verdict.as_dict()
    assert said == [
        "--> Running the post-deploy checks (preflight, cluster state, shared storage, monitoring, benchmark)",
        "--> Shared storage: a round trip through 1 mount(s) on every node",
        "--> Monitoring: Prometheus on head: every host's targets, GPU errors in the last 1 h",
    ]
    steps = [kind for kind, _ in head.calls]
    assert steps == ["probe", "workdir", "put", "install", "cluster_state", "storage", "monitoring", "benchmark",
                     "get", "cleanup"]  # fmt: skip
    assert [kind for kind, _ in worker.calls] == ["probe"]
    assert head.printed == ["benchmark"]  # its progress streams to the operator
    assert list(head.files) == [f"{H}/checks.tgz"]  # the package goes over once, into this run's directory
    assert f"--workdir {D} " in dict(head.calls)["cluster_state"]  # and runs from the container's own
    assert dict(head.calls)["cleanup"] == f"rm -rf -- {H}; docker exec --user root ray-node rm -rf -- {D}"
    benchmark = dict(head.calls)["benchmark"]
    assert "--host-alias 10.0.0.1=head --host-alias 10.0.0.2=w1" in benchmark
    assert f"--expect {HEAD_IP},{WORKER_IP}" in dict(head.calls)["cluster_state"]

    assert outcome.json_path.parent == tmp_path and outcome.json_path.name.startswith("checks-lab-")
    saved = json.loads(outcome.json_path.read_text())
    assert set(saved["preflight"]) == {"head", "w1"}
    assert saved["preflight"]["w1"]["gpus"] == NO_GPUS and saved["preflight"]["w1"]["running"] == "true"
    assert saved["storage"]["hosts"] == {HEAD_IP: "head", WORKER_IP: "w1"}
    assert saved["verdict"]["status"] == "PASS" and saved["verdict"]["thresholds"]["outlier_fraction"] == 0.9
    assert saved["devices"] == BENCH["devices"]
    assert saved["budget"]["total_s"] == 900 and 0 <= saved["budget"]["spent_s"] < 5
    assert set(saved["budget"]["by_part"]) == {"preflight", "cluster_state", "storage", "monitoring", "benchmark"}
    assert saved["monitoring"]["prometheus"] == "http://127.0.0.1:9090" and len(saved["monitoring"]["targets"]) == 4
    assert all(seconds is not None for seconds in saved["budget"]["by_part"].values())
    assert outcome.plot_path is None or outcome.plot_path.exists()
    assert report.latest_checks("lab", tmp_path).startswith("==> checks: PASS; report ")


def test_the_monitoring_command_is_bounded_and_carries_its_config_as_json():
    command = full.monitoring_command("ray node", {"url": "http://127.0.0.1:9090", "host": "it's"}, workdir=D,
                                         limit_s=165)  # fmt: skip
    args = shlex.split(command)
    assert args[:4] == ["timeout", "-k", "5", "165"]
    assert args[4:12] == ["docker", "exec", "--workdir", D, "ray node", "python", "-m", "checks.monitoring"]
    assert json.loads(args[12]) == {"url": "http://127.0.0.1:9090", "host": "it's"}


def test_a_node_exporter_prometheus_finds_down_fails_the_run_naming_the_host(tmp_path):
    answers = {"probe": RUNNING, "cluster_state": alive(HEAD_IP, WORKER_IP),
               "monitoring": watched(("head", "node", "up"), ("w1", "node", "down"))}  # fmt: skip
    head = FakeNode("head", HEAD_IP, answers, report=BENCH)
    worker = FakeNode("w1", WORKER_IP, {"probe": RUNNING})
    every = {name: settings(tmp_path, monitoring_enabled=True) for name in ("head", "w1")}

    outcome, _said = run([head, worker], every, {"head": NO_GPUS, "w1": NO_GPUS})

    assert outcome.verdict.status == FAIL
    assert [(r.host, r.message) for r in outcome.verdict.reasons if r.level == FAIL] == [("w1", "node down")]
    text = report.render(outcome.result, outcome.verdict)
    assert "Monitoring: Prometheus on head (http://127.0.0.1:9090): 1 of 2 targets up" in text
    assert "  FAIL  w1: node down" in text
    config = json.loads(shlex.split(dict(head.calls)["monitoring"])[12])
    assert config["hosts"] == [{"name": "head", "address": HEAD_IP, "jobs": ["node", "ray"]},
                               {"name": "w1", "address": WORKER_IP, "jobs": ["node", "ray"]}]  # fmt: skip
    assert config["url"] == "http://127.0.0.1:9090" and config["window_s"] == 3600


def test_prometheus_on_another_host_is_read_there_from_a_copy_of_its_own(tmp_path):
    head = FakeNode("head", HEAD_IP, {"probe": RUNNING, "cluster_state": alive(HEAD_IP, WORKER_IP)}, report=BENCH)
    worker = FakeNode("w1", WORKER_IP, {"probe": RUNNING, "monitoring": watched(("w1", "node", "up"))})
    data = {"monitoring_enabled": True, "monitoring_host": WORKER_IP, "monitoring_prometheus_port": 19090}
    every = {name: settings(tmp_path, **data) for name in ("head", "w1")}

    outcome, said = run([head, worker], every, {"head": NO_GPUS, "w1": NO_GPUS})

    assert outcome.verdict.status == "PASS", outcome.verdict.as_dict()
    assert "monitoring" not in [kind for kind, _ in head.calls]
    assert [kind for kind, _ in worker.calls] == ["probe", "workdir", "put", "install", "monitoring", "cleanup"]
    assert "http://127.0.0.1:19090" in dict(worker.calls)["monitoring"]
    assert "--> Monitoring: Prometheus on w1: every host's targets, GPU errors in the last 1 h" in said


@pytest.mark.parametrize(
    ("data", "why"),
    [({"monitoring_enabled": False}, "monitoring is off (monitoring_enabled = False)"),
     ({"monitoring_enabled": True, "checks_monitoring": False}, "checks_monitoring = False")],
)  # fmt: skip
def test_monitoring_off_is_not_read_and_the_report_says_so(tmp_path, data, why):
    head = FakeNode("head", HEAD_IP, {"probe": RUNNING, "cluster_state": alive(HEAD_IP)}, report=BENCH)
    outcome, _said = run([head], {"head": settings(tmp_path, **data)}, {"head": NO_GPUS})
    assert "monitoring" not in [kind for kind, _ in head.calls]
    assert outcome.result["monitoring"] == {"skipped": why}
    assert f"monitoring: not read: {why}" in report.render(outcome.result, outcome.verdict)
    assert outcome.verdict.status == "PASS"


def test_no_result_from_the_monitoring_program_fails_saying_so(tmp_path):
    head = FakeNode("head", HEAD_IP, {"probe": RUNNING, "cluster_state": alive(HEAD_IP), "monitoring": (False, [])},
                    report=BENCH)  # fmt: skip
    outcome, _said = run([head], {"head": settings(tmp_path, monitoring_enabled=True)}, {"head": NO_GPUS})
    [reason] = [r for r in outcome.verdict.reasons if r.level == FAIL]
    assert reason.message.startswith("monitoring: no result from head's ray-node container (timed out after ")


def test_a_monitoring_host_outside_the_inventory_fails_without_reading(tmp_path):
    head = FakeNode("head", HEAD_IP, {"probe": RUNNING, "cluster_state": alive(HEAD_IP)}, report=BENCH)
    every = {"head": settings(tmp_path, monitoring_enabled=True, monitoring_host="gone")}
    outcome, _said = run([head], every, {"head": NO_GPUS})
    assert "monitoring" not in [kind for kind, _ in head.calls]
    assert [r.message for r in outcome.verdict.reasons if r.level == FAIL] == [
        "monitoring_host = 'gone' is neither the name nor the address of a host of this inventory: Prometheus not read"
    ]


def test_a_host_outside_the_run_and_a_head_that_answers_nothing(tmp_path):
    head = FakeNode("head", HEAD_IP, {"probe": RUNNING, "cluster_state": (False, []), "benchmark": (False, [])})
    worker = FakeNode("w1", WORKER_IP)
    every = {"head": settings(tmp_path), "w1": settings(tmp_path)}

    outcome, said = run([head, worker], every, {"head": NO_GPUS})  # w1: outside --limit

    assert worker.calls == []  # not inspected ...
    assert f"--expect-nodes {HEAD_IP},{WORKER_IP}" in dict(head.calls)["benchmark"]  # ... but still expected
    assert "storage" not in dict(head.calls) and len(said) == 1  # no shared mount: no storage check
    found = [(r.level, r.message, r.host) for r in outcome.verdict.reasons]
    assert (WARN, "preflight skipped (not part of this run)", "w1") in found
    assert (FAIL, "could not read the cluster state from the head container", None) in found
    assert (FAIL, "the benchmark did not produce a report", None) in found
    assert outcome.verdict.status == FAIL
    assert ("get", f"{H}/report.json") in head.calls  # a failed run's report is looked for: there was none
    assert head.calls[-1][0] == "cleanup"  # a failed run's directories go too
    saved = json.loads(outcome.json_path.read_text())
    assert (saved["cluster_state"], saved["storage"]) == (None, None)
    assert saved["verdict"]["status"] == FAIL


def test_detected_gpus_stand_for_auto_in_the_cluster_totals(tmp_path):
    driver = {"count": 4, "models": ["NVIDIA L4"] * 4, "driver_version": "550", "memory_mib": [23034] * 4}
    four = {"pci_count": 4, "nvswitches": 0, "driver": driver}
    probe = (True, [*RUNNING[1], "CONTAINER_GPUS=4"])
    head = FakeNode("head", HEAD_IP, {"probe": RUNNING, "cluster_state": alive(HEAD_IP, WORKER_IP, GPU=0.0)},
                    report=BENCH)  # fmt: skip
    worker = FakeNode("w1", WORKER_IP, {"probe": probe})
    every = {"head": settings(tmp_path), "w1": settings(tmp_path, ray_num_gpus="auto")}

    outcome, _ = run([head, worker], every, {"head": NO_GPUS, "w1": four})

    found = [(r.level, r.message) for r in outcome.verdict.reasons]
    assert (INFO, "4 x NVIDIA L4, driver 550") in found
    assert (FAIL, "cluster total GPU is 0, the inventory declares 4") in found
    assert "_ ray-node 4 0 60;" in dict(worker.calls)["probe"]  # the container side knows the GPU count


@pytest.mark.parametrize(
    "answers,cleanup",
    [
        ({"workdir": (False, [])}, None),  # no directory on the head: nothing copied, nothing to remove
        ({"workdir": (True, ["RAYRIG_CHECKS_DIR=/tmp/x;reboot"])}, None),  # not a plain path: not used
        ({"install": (False, [])}, f"rm -rf -- {H}"),  # the head's directory goes, the container has none
    ],
)
def test_checks_that_cannot_be_copied_fail_and_leave_nothing_behind(tmp_path, answers, cleanup):
    head = FakeNode("head", HEAD_IP, {"probe": RUNNING, **answers}, report=BENCH)
    outcome, _ = run([head], {"head": settings(tmp_path)}, {"head": NO_GPUS})
    kinds = [kind for kind, _ in head.calls]
    assert not {"cluster_state", "storage", "benchmark", "get"} & set(kinds)
    assert (FAIL, "could not copy the checks into the head's container") in [
        (r.level, r.message) for r in outcome.verdict.reasons
    ]
    assert dict(head.calls).get("cleanup") == cleanup


def test_the_directories_are_removed_when_a_step_raises(tmp_path):
    class Broken(FakeNode):
        def get_file(self, remote_path: str, local_path: str) -> bool:
            raise ConnectionError("the connection dropped")

    head = Broken("head", HEAD_IP, {"probe": RUNNING}, report=BENCH)
    with pytest.raises(ConnectionError):
        run([head], {"head": settings(tmp_path)}, {"head": NO_GPUS})
    assert head.calls[-1] == ("cleanup", f"rm -rf -- {H}; docker exec --user root ray-node rm -rf -- {D}")


def test_the_head_commands_work_in_a_real_shell(tmp_path):
    """workdir, install and cleanup run by sh, with a docker whose container shares this machine's files."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(
        "#!/bin/sh\n"
        'if [ "$1" = exec ]; then shift\n'
        '  while [ "${1#--}" != "$1" ]; do shift 2; done\n'  # --user root, --workdir DIR
        '  shift; exec "$@"\n'  # the container's name, then the command
        "fi\n"
        '[ "$1" = cp ] && exec cp -r "${2#*:}" "${3#*:}"\n'
        "exit 2\n"
    )
    (bin_dir / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp_path)}

    def sh(command: str) -> list[str]:
        done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    host_dir = full.made_dir(sh(full.workdir_command()))
    assert host_dir and Path(host_dir).parent == tmp_path and Path(host_dir).stat().st_mode & 0o777 == 0o700
    Path(host_dir, "checks.tgz").write_bytes(full.package_tarball().read())
    container_dir = full.made_dir(sh(full.install_command("ray-node", host_dir)))
    assert container_dir and container_dir != host_dir
    assert Path(container_dir).stat().st_mode & 0o777 == 0o700
    assert Path(container_dir, "checks", "cluster_state.py").is_file()
    sh(full.cleanup_command("ray-node", host_dir, container_dir))
    assert not Path(host_dir).exists() and not Path(container_dir).exists()


# --- the run's budget ----------------------------------------------------------------------------


class SlowNode(FakeNode):
    """A FakeNode whose probe takes ``probe_s`` seconds (None: it answers only when ``release`` is set)."""

    def __init__(self, *args: Any, probe_s: float | None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.probe_s = probe_s
        self.release = threading.Event()

    def run(self, command: str, print_output: bool = False) -> tuple[bool, list[str]]:
        answer = super().run(command, print_output)
        if self.kind(command) == "probe":
            if self.probe_s is None:
                self.release.wait(30)
            else:
                time.sleep(self.probe_s)
        return answer


def test_the_preflight_reads_every_node_at_once_and_keeps_the_inventorys_order(tmp_path):
    probe = (True, ["RUNNING=true", "RAY_VERSION=2.59.0", "PROBE_EXIT=0"])  # every node on the wrong Ray
    nodes = [SlowNode(f"n{i}", f"10.0.0.{i}", {"probe": probe, "cluster_state": alive()}, report=BENCH,
                      probe_s=2.0 - 0.5 * i) for i in range(1, 4)]  # fmt: skip
    every = {n.name: settings(tmp_path) for n in nodes}

    started = time.monotonic()
    outcome, _ = run(nodes, every, {n.name: NO_GPUS for n in nodes})

    assert time.monotonic() - started < 3  # three probes of up to 2 s, not 4.5 s one after another
    saved = json.loads(outcome.json_path.read_text())
    assert saved["budget"]["by_part"]["preflight"] < 3
    assert list(saved["preflight"]) == ["n1", "n2", "n3"]  # n3 answered first, n1 last
    wrong_ray = [r.host for r in outcome.verdict.reasons if r.message.startswith("Ray 2.59.0")]
    assert wrong_ray == ["n1", "n2", "n3"]
    assert "probe_exit" not in saved["preflight"]["n1"]  # how the probe ended is not a reading


def test_a_node_whose_preflight_never_answers_is_named_and_the_run_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(full, "PROBE_GRACE_S", 0.5)
    head = FakeNode("head", HEAD_IP, {"probe": RUNNING, "cluster_state": alive(HEAD_IP, WORKER_IP)}, report=BENCH)
    worker = SlowNode("w1", WORKER_IP, {"probe": RUNNING}, probe_s=None)
    every = {"head": settings(tmp_path, checks_node_timeout_s=1), "w1": settings(tmp_path)}
    try:
        started = time.monotonic()
        outcome, _ = run([head, worker], every, {"head": NO_GPUS, "w1": NO_GPUS})
        took = time.monotonic() - started
    finally:
        worker.release.set()

    assert took < 5  # a node cap of 1 s, and the connection's grace: not a hang
    assert "timeout -k 5 1 sh -c" in dict(worker.calls)["probe"]  # the probe itself is bounded on the node
    [late] = [r for r in outcome.verdict.reasons if r.host == "w1"]
    assert late.level == FAIL and late.message.startswith("preflight did not answer in 1.")
    assert "benchmark" in dict(head.calls)  # the run went on without it
    saved = json.loads(outcome.json_path.read_text())
    assert saved["preflight"]["w1"]["error"].startswith("no answer in ")


def test_a_probe_that_timeout_stopped_is_one_fail_naming_the_node(tmp_path):
    stopped = (False, ["RUNNING=true", "PROBE_EXIT=124"])  # it got as far as the container's state
    head = FakeNode("head", HEAD_IP, {"probe": RUNNING, "cluster_state": alive(HEAD_IP, WORKER_IP)}, report=BENCH)
    worker = FakeNode("w1", WORKER_IP, {"probe": stopped})
    every = {"head": settings(tmp_path, checks_node_timeout_s=120), "w1": settings(tmp_path)}

    outcome, _ = run([head, worker], every, {"head": NO_GPUS, "w1": NO_GPUS})

    assert dict(worker.calls)["probe"].startswith("timeout -k 5 120 sh -c ")
    assert [(r.level, r.message) for r in outcome.verdict.reasons if r.host == "w1"] == [
        (FAIL, "preflight did not answer in 120 s")  # not "Ray no Ray in the container"
    ]


def test_the_gpu_health_probe_runs_within_the_nodes_cap(tmp_path):
    driver = {"count": 1, "models": ["NVIDIA L4"], "driver_version": "550", "memory_mib": [23034]}
    one = {"pci_count": 1, "nvswitches": 0, "driver": driver}
    head = FakeNode("head", HEAD_IP, {"probe": (True, [*RUNNING[1], "CONTAINER_GPUS=1"]),
                                      "cluster_state": alive(HEAD_IP, GPU=1.0)}, report=BENCH)  # fmt: skip
    outcome, _ = run([head], {"head": settings(tmp_path, ray_num_gpus=1, checks_node_timeout_s=90)}, {"head": one})
    health = dict(head.calls)["gpu_health"]
    limit = int(health.split()[3])
    assert health.startswith("timeout -k 5 ") and 85 <= limit <= 90  # what the probe left of the 90 s
    assert "gpu_health" in json.loads(outcome.json_path.read_text())["preflight"]["head"]


def _budget_spent_after(monkeypatch: pytest.MonkeyPatch, kind: str | None) -> None:
    """The checks' budget is all but spent at the start (``kind`` None) or once the head has run a
    command of that kind."""
    budgets: list[Budget] = []

    def budget(total_s: float) -> Budget:
        budgets.append(Budget(total_s, started=time.monotonic() - (total_s - 5 if kind is None else 0)))
        return budgets[-1]

    def run_head(self: FakeNode, command: str, print_output: bool = False) -> tuple[bool, list[str]]:
        answer = FakeNode.run(self, command, print_output)
        if self.kind(command) == kind:
            budgets[0].started -= budgets[0].total_s - 5  # it took all but 5 s of the budget
        return answer

    monkeypatch.setattr(full, "Budget", budget)
    monkeypatch.setattr(FakeNode, "run_head", run_head, raising=False)


@pytest.mark.parametrize(
    "spent_after,not_run,ran",
    [
        (None, ["cluster state", "shared storage", "benchmark"], []),
        ("cluster_state", ["shared storage", "benchmark"], ["cluster_state"]),
        ("storage", ["benchmark"], ["cluster_state", "storage"]),
    ],
)
def test_parts_with_no_budget_left_are_not_run_and_say_so(tmp_path, monkeypatch, spent_after, not_run, ran):
    _budget_spent_after(monkeypatch, spent_after)

    class Head(FakeNode):
        def run(self, command: str, print_output: bool = False) -> tuple[bool, list[str]]:
            return self.run_head(command, print_output)  # type: ignore[attr-defined]

    share = {"storage_nfs_mounts": [{"server": "head", "export": "/srv", "path": "/mnt/shared"}]}
    head = Head("head", HEAD_IP, {"probe": RUNNING, "cluster_state": alive(HEAD_IP)}, report=BENCH)
    outcome, _ = run([head], {"head": settings(tmp_path, **share)}, {"head": NO_GPUS})

    kinds = [kind for kind, _ in head.calls]
    assert [k for k in ("cluster_state", "storage", "benchmark") if k in kinds] == ran
    assert kinds[-1] == "cleanup"
    budget_fails = [r.message for r in outcome.verdict.reasons if "ran out" in r.message]
    assert [m.split(":")[0] for m in budget_fails] == not_run
    assert all(r.level == FAIL for r in outcome.verdict.reasons if "ran out" in r.message)
    first = budget_fails[0]
    assert ": not run: the checks' budget of 900 s (checks_timeout_s) ran out (preflight " in first
    assert first.endswith("; raise checks_timeout_s, or look at the slow part named above")
    saved = json.loads(outcome.json_path.read_text())
    assert saved["budget"]["by_part"]["benchmark"] is None
    assert saved["budget"]["spent_s"] >= 895
    assert outcome.verdict.status == FAIL


@pytest.mark.parametrize(
    ("spent_after", "not_run", "ran"),
    [("cluster_state", ["monitoring", "benchmark"], ["cluster_state"]),
     ("monitoring", ["benchmark"], ["cluster_state", "monitoring"])],
)  # fmt: skip
def test_monitoring_is_a_part_of_the_budget_like_the_others(tmp_path, monkeypatch, spent_after, not_run, ran):
    _budget_spent_after(monkeypatch, spent_after)

    class Head(FakeNode):
        def run(self, command: str, print_output: bool = False) -> tuple[bool, list[str]]:
            return self.run_head(command, print_output)  # type: ignore[attr-defined]

    answers = {"probe": RUNNING, "cluster_state": alive(HEAD_IP), "monitoring": watched(("head", "node", "up"))}
    head = Head("head", HEAD_IP, answers, report=BENCH)
    outcome, _ = run([head], {"head": settings(tmp_path, monitoring_enabled=True)}, {"head": NO_GPUS})

    kinds = [kind for kind, _ in head.calls]
    assert [k for k in ("cluster_state", "monitoring", "benchmark") if k in kinds] == ran
    budget_fails = [r.message for r in outcome.verdict.reasons if "ran out" in r.message]
    assert [m.split(":")[0] for m in budget_fails] == not_run
    by_part = json.loads(outcome.json_path.read_text())["budget"]["by_part"]
    assert (by_part["monitoring"] is None) == ("monitoring" in not_run)


@pytest.mark.parametrize("status", [124, 137])
def test_a_benchmark_stopped_at_the_budget_leaves_its_partial_report(tmp_path, status):
    partial = {key: BENCH[key] for key in ("mode", "cpu_only", "devices")}  # the devices phase only
    head = FakeNode("head", HEAD_IP, {"probe": RUNNING, "cluster_state": alive(HEAD_IP),
                                      "benchmark": (False, ["a line", f"RAYRIG_BENCHMARK_EXIT={status}"])},
                    report=partial)  # fmt: skip
    outcome, _ = run([head], {"head": settings(tmp_path)}, {"head": NO_GPUS})

    assert ("get", f"{H}/report.json") in head.calls  # fetched whatever the exit status
    found = [(r.level, r.message) for r in outcome.verdict.reasons]
    assert (FAIL, "the benchmark was stopped at the checks' budget (900 s, checks_timeout_s); "
                  "the report holds the phases it finished") in found  # fmt: skip
    assert (FAIL, "the benchmark did not produce a report") not in found
    saved = json.loads(outcome.json_path.read_text())
    assert saved["devices"] == BENCH["devices"]


def test_a_benchmark_that_fails_on_its_own_is_not_said_to_be_stopped(tmp_path):
    head = FakeNode("head", HEAD_IP, {"probe": RUNNING, "cluster_state": alive(HEAD_IP),
                                      "benchmark": (True, ["RAYRIG_BENCHMARK_EXIT=1"])}, report=BENCH)  # fmt: skip
    outcome, _ = run([head], {"head": settings(tmp_path)}, {"head": NO_GPUS})
    assert not [r for r in outcome.verdict.reasons if "stopped at the checks' budget" in r.message]


def test_the_benchmark_command_stops_a_hung_benchmark_and_still_copies_its_report(tmp_path):
    """The real command, run by sh, with a docker that runs the container's command here and a python
    that writes a partial report and then hangs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(
        "#!/bin/sh\n"
        'if [ "$1" = exec ]; then shift\n'
        '  while [ "${1#--}" != "$1" ]; do shift 2; done\n'
        '  shift; exec "$@"\n'
        "fi\n"
        '[ "$1" = cp ] && exec cp "${2#*:}" "${3#*:}"\n'
        "exit 2\n"
    )
    (bin_dir / "python").write_text(
        "#!/bin/sh\n"
        'while [ "$1" != --out ]; do shift; done\n'
        'echo \'{"devices": [], "phase": "devices"}\' > "$2"\n'
        "exec sleep 60\n"
    )
    for name in ("docker", "python"):
        (bin_dir / name).chmod(0o755)
    host_dir, container_dir = tmp_path / "host", tmp_path / "container"
    host_dir.mkdir()
    container_dir.mkdir()
    command = full.benchmark_command("ray-node", merge({}), {}, ["10.0.0.1"],
                                        full.HeadDirs(str(host_dir), str(container_dir)), left_s=2)  # fmt: skip
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    started = time.monotonic()
    done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 15  # stopped at 2 s inside the "container"
    assert done.returncode == 124
    assert run_budget.exit_status(done.stdout.splitlines()) == 124
    assert json.loads((host_dir / "report.json").read_text())["phase"] == "devices"
