"""The quick checks (checks/quick.py) and which checks a run chooses (deploy/post_checks.py).

The quick checks are one command on the head; everything on the operator's side of it is real
here, with in-memory nodes standing in for the cluster (the e2e tier runs them on the lab).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

from checks import quick, report
from checks.verdict import FAIL, INFO, PASS, WARN
from deploy.contract.settings import merge
from deploy.post_checks import choose_mode

HEAD_IP, W1_IP, W2_IP = "10.0.0.1", "10.0.0.2", "10.0.0.3"
L4_DRIVER = {"count": 4, "models": ["NVIDIA L4"] * 4, "driver_version": "550", "memory_mib": [23034] * 4}
FOUR_L4 = {"pci_count": 4, "nvswitches": 0, "driver": L4_DRIVER}


def declared(name: str, address: str, cpus: Any = 2, gpus: Any = 0, version: str = "2.60.0", **resources: int):
    return {"name": name, "address": address, "num_cpus": cpus, "num_gpus": gpus, "resources": resources,
            "ray_version": version}  # fmt: skip


def node(ip: str, cpus: float = 2.0, gpus: float = 0.0, version: str = "2.60.0", **custom: float) -> dict[str, Any]:
    resources = {"CPU": cpus, "memory": 4e9, f"node:{ip}": 1.0, **custom}
    if gpus:
        resources["GPU"] = gpus
    return {"ip": ip, "resources": resources, "ray_version": version}


def state(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"nodes": list(nodes), "total": {}, "ray_version": "2.60.0"}


LAB = [declared("head", HEAD_IP, head=1), declared("w1", W1_IP, w1=1), declared("w2", W2_IP, w2=1)]


def found(reasons) -> list[tuple[str, str, str | None]]:
    return [(r.level, r.message, r.host) for r in reasons]


# --- the verdict ---------------------------------------------------------------------------------


def test_every_host_alive_with_its_resources_and_version_passes():
    reasons = quick.quick_reasons(LAB, state(node(HEAD_IP, head=1), node(W1_IP, w1=1), node(W2_IP, w2=1)))
    assert found(reasons) == [(INFO, "3 Ray nodes alive with their declared resources, all on Ray 2.60.0", None)]


def test_a_missing_node_fails_naming_its_host():
    reasons = quick.quick_reasons(LAB, state(node(HEAD_IP, head=1), node(W2_IP, w2=1)))
    assert found(reasons) == [(FAIL, f"not an alive Ray node (expected at {W1_IP})", "w1")]


def test_wrong_cpus_gpus_or_custom_resources_fail_naming_the_host():
    hosts = [declared("head", HEAD_IP, head=1), declared("gpu-1", W1_IP, cpus=16, gpus=4, nvme=2)]
    reasons = quick.quick_reasons(hosts, state(node(HEAD_IP, head=1), node(W1_IP, cpus=8, gpus=3, nvme=1)))
    assert found(reasons) == [
        (FAIL, "ray_num_cpus = 16 but its Ray node has 8 CPU", "gpu-1"),
        (FAIL, "ray_num_gpus = 4 but its Ray node has 3 GPU", "gpu-1"),
        (FAIL, "ray_resources 'nvme' = 2 but its Ray node has 1 nvme", "gpu-1"),
    ]


def test_auto_counts_are_compared_only_when_known():
    hosts = [declared("head", HEAD_IP, cpus="auto", gpus=None), declared("gpu-1", W1_IP, cpus="auto", gpus=4)]
    assert quick.quick_reasons(hosts, state(node(HEAD_IP, cpus=64), node(W1_IP, cpus=8, gpus=4)))[0].level == INFO
    reasons = quick.quick_reasons(hosts, state(node(HEAD_IP, cpus=64), node(W1_IP, cpus=8)))
    assert found(reasons) == [(FAIL, "ray_num_gpus = 4 but its Ray node has 0 GPU", "gpu-1")]


def test_mixed_ray_versions_fail_naming_the_host_that_differs():
    nodes = state(node(HEAD_IP, head=1), node(W1_IP, w1=1, version="2.59.0"), node(W2_IP, w2=1))
    reasons = found(quick.quick_reasons(LAB, nodes))
    assert (FAIL, "its Ray node runs Ray 2.59.0, expected ray_version 2.60.0", "w1") in reasons
    assert (FAIL, "the cluster's nodes run more than one Ray version: 2.59.0, 2.60.0", None) in reasons
    assert [r for r in reasons if r[2] in ("head", "w2")] == []


def test_a_cluster_on_another_version_than_declared_fails_on_every_host():
    hosts = [declared("head", HEAD_IP, version="2.61.0"), declared("w1", W1_IP, version="2.61.0")]
    reasons = found(quick.quick_reasons(hosts, state(node(HEAD_IP), node(W1_IP))))
    assert [(level, host) for level, _message, host in reasons] == [(FAIL, "head"), (FAIL, "w1")]


def test_a_node_outside_the_inventory_warns():
    reasons = quick.quick_reasons(LAB[:1], state(node(HEAD_IP, head=1), node("10.0.0.9")))
    assert found(reasons) == [(WARN, "alive Ray nodes not in the inventory: 10.0.0.9", None)]


# --- one command on the head ----------------------------------------------------------------------


class FakeNode:
    """A :class:`checks.node.Node` that answers every command with ``answer`` and records them."""

    def __init__(self, name: str, address: str, answer: tuple[bool, list[str]] = (True, [])):
        self.name, self.address, self.answer = name, address, answer
        self.calls: list[str] = []

    def run(self, command: str, print_output: bool = False) -> tuple[bool, list[str]]:
        self.calls.append(command)
        return self.answer

    def put_file(self, source: IO[bytes], remote_path: str) -> bool:
        raise AssertionError("the quick checks copy nothing")

    def get_file(self, remote_path: str, local_path: str) -> bool:
        raise AssertionError("the quick checks fetch nothing")


def settings(tmp_path: Path, **data: Any) -> dict[str, Any]:
    return merge({"ray_num_gpus": 0, "checks_report_dir": str(tmp_path), "ray_cluster_name": "lab", **data})


def answer(data: dict[str, Any]) -> tuple[bool, list[str]]:
    return True, ["2026 WARNING something from Ray", "RESULT " + json.dumps(data)]


WHY = "no ray-node was created or replaced in this run; run `rayrig check` for the benchmark"


def test_one_command_on_the_head_and_a_report_that_says_quick_and_why(tmp_path):
    head = FakeNode("head", HEAD_IP, answer(state(node(HEAD_IP, head=1), node(W1_IP, w1=1))))
    worker = FakeNode("w1", W1_IP)
    every = {"head": settings(tmp_path, ray_resources={"head": 1}), "w1": settings(tmp_path, ray_resources={"w1": 1})}
    said: list[str] = []

    run = quick.run_quick_checks([head, worker], head, every, {}, said.append, WHY)

    assert run.verdict.status == PASS, run.verdict.as_dict()
    assert worker.calls == [] and len(head.calls) == 1
    words = shlex.split(head.calls[0])
    assert words[:5] == ["docker", "exec", "ray-node", "python", "-c"]
    assert words[5] == quick.STATE_PROGRAM.read_text()  # the program itself, nothing copied first
    assert words[6:] == ["--expect", f"{HEAD_IP},{W1_IP}", "--wait", str(quick.QUICK_WAIT_S)]
    assert said == ["--> Running the quick checks (every host an alive Ray node with its resources, one Ray version)"]
    saved = json.loads(run.json_path.read_text())
    assert saved["checks"] == {"mode": "quick", "why": WHY}
    assert saved["verdict"]["status"] == PASS and run.plot_path is None
    text = report.render(run.result, run.verdict)
    assert f"checks: quick: {WHY}" in text
    assert "head  10.0.0.1     2     0  2.60.0" in text and "w1    10.0.0.2     2     0  2.60.0" in text
    assert "matmul" not in text and "all-reduce" not in text
    assert text.endswith("VERDICT: PASS\n  INFO  2 Ray nodes alive with their declared resources, all on Ray 2.60.0")


def test_detected_gpus_stand_for_auto_and_a_silent_head_fails(tmp_path):
    head = FakeNode("head", HEAD_IP, answer(state(node(HEAD_IP), node(W1_IP, gpus=2))))
    worker = FakeNode("gpu-1", W1_IP)
    every = {"head": settings(tmp_path), "gpu-1": settings(tmp_path, ray_num_gpus="auto")}
    run = quick.run_quick_checks([head, worker], head, every, {"gpu-1": FOUR_L4}, lambda _line: None, WHY)
    assert found(run.verdict.reasons) == [(FAIL, "ray_num_gpus = 4 but its Ray node has 2 GPU", "gpu-1")]
    assert "VERDICT: FAIL\n  FAIL  gpu-1: ray_num_gpus = 4 but its Ray node has 2 GPU" in report.render(
        run.result, run.verdict
    )  # the text names the host too

    silent = FakeNode("head", HEAD_IP, (False, []))
    run = quick.run_quick_checks([silent, worker], silent, every, {}, lambda _line: None, WHY)
    assert found(run.verdict.reasons) == [(FAIL, "could not read the cluster state from the head container", None)]
    assert "Ray nodes: the cluster state could not be read" in report.render(run.result, run.verdict)


def test_the_program_runs_from_its_source_without_the_package(tmp_path):
    words = shlex.split(quick.quick_command("ray-node", [W1_IP, HEAD_IP], wait_s=5))
    python = [sys.executable, *words[4:6], "--help"]  # as the container runs it, from a folder without checks/
    done = subprocess.run(python, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--expect IP,IP,..." in done.stdout
    assert words[-4:] == ["--expect", f"{HEAD_IP},{W1_IP}", "--wait", "5"]


@pytest.mark.slow
def test_the_program_from_its_source_on_a_real_ray(local_ray, tmp_path):
    ray = pytest.importorskip("ray")
    words = shlex.split(quick.quick_command("ray-node", [local_ray["ip"]], wait_s=10))
    env = {**os.environ, "RAY_ADDRESS": local_ray["address"]}
    done = subprocess.run([sys.executable, *words[4:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    found_state = quick.result_of(done.stdout.splitlines())
    assert found_state is not None, done.stderr[-2000:]
    [alive] = found_state["nodes"]
    assert alive["ip"] == local_ray["ip"] and alive["resources"]["CPU"] == 1.0
    assert alive["ray_version"] == found_state["ray_version"] == ray.__version__


# --- which checks run ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting,alone,replaced,mode,why",
    [
        ("auto", False, [], "quick", WHY),
        ("auto", False, ["w1"], "full", "a ray-node was created or replaced in this run (on w1)"),
        ("auto", False, [f"w{i}" for i in range(7)], "full",
         "a ray-node was created or replaced in this run (on w0, w1, w2, w3, w4 and 2 more)"),
        ("auto", True, [], "full", "`rayrig check` runs the full checks"),
        ("full", False, [], "full", 'checks_mode = "full"'),
        ("quick", False, ["w1"], "quick",
         'checks_mode = "quick"; run `rayrig check INVENTORY --data checks_mode=full` for the benchmark'),
        ("quick", True, [], "quick",
         'checks_mode = "quick"; run `rayrig check INVENTORY --data checks_mode=full` for the benchmark'),
    ],
)  # fmt: skip
def test_the_mode_and_why(setting, alone, replaced, mode, why):
    assert choose_mode(setting, alone, replaced) == (mode, why)
