"""The quick checks: every inventory host an alive Ray node with its declared resources, one Ray version.

What a re-run that created or replaced no ray-node needs to know, in one command on the
head and in seconds: the cluster-state program (:mod:`checks.cluster_state`) runs in the
head's ray-node container from its source (``docker exec CONTAINER python -c SOURCE``), so
nothing is copied, no other node is asked anything, and nothing waits for GPUs or CPUs that
jobs hold. The per-node preflight, the shared-storage round trip and the benchmark are the
full checks' (:mod:`checks.full`, ``rayrig check``).

Judged per host (:func:`quick_reasons`): alive in Ray at its address; its node's CPUs, GPUs
and custom resources equal to ``ray_num_cpus``, ``ray_num_gpus`` and ``ray_resources``
(``"auto"`` counts are not compared, except GPUs whose detected count is known); its Ray
version equal to ``ray_version``.

Example (what ``deploy/post_checks.py`` does when it chose the quick checks)::

    run = run_quick_checks(nodes, head, settings, gpus, progress=print,
                           why="no ray-node was created or replaced in this run")
    print(report.render(run.result, run.verdict))
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import preflight
from . import report as report_mod
from .full import PACKAGE_DIR, ChecksRun, declaration
from .node import Node
from .verdict import FAIL, INFO, WARN, Reason, Verdict

STATE_PROGRAM = PACKAGE_DIR / "cluster_state.py"  # standard library and Ray only: it runs from its source
QUICK_WAIT_S = 30  # how long the quick checks wait for every expected node to be alive


def quick_command(container: str, expected_ips: Sequence[str], wait_s: int = QUICK_WAIT_S) -> str:
    """The shell command that prints the cluster state from the head's ``container``, copying nothing."""
    source = STATE_PROGRAM.read_text()
    expect = ",".join(sorted(expected_ips))
    return shlex.join(["docker", "exec", container, "python", "-c", source, "--expect", expect, "--wait", str(wait_s)])


def result_of(lines: Sequence[str]) -> dict[str, Any] | None:
    """The JSON of the last ``RESULT`` line (None without one)."""
    results = [line[len("RESULT ") :] for line in lines if line.startswith("RESULT ")]
    return json.loads(results[-1]) if results else None


def _resource_reasons(decl: Mapping[str, Any], resources: Mapping[str, Any]) -> list[Reason]:
    """What differs between one host's declared resources and its Ray node's."""
    wanted: dict[str, tuple[str, Any]] = {}
    if decl["num_cpus"] != "auto":
        wanted["CPU"] = ("ray_num_cpus", decl["num_cpus"])
    if decl["num_gpus"] is not None:
        wanted["GPU"] = ("ray_num_gpus", decl["num_gpus"])
    for name, amount in decl["resources"].items():
        wanted[name] = (f"ray_resources {name!r}", amount)
    reasons = []
    for resource, (key, amount) in wanted.items():
        got = float(resources.get(resource, 0.0))
        if abs(got - float(amount)) > 1e-6:
            reasons.append(Reason(FAIL, f"{key} = {amount} but its Ray node has {got:g} {resource}", host=decl["name"]))
    return reasons


def quick_reasons(declarations: Sequence[Mapping[str, Any]], state: Mapping[str, Any]) -> list[Reason]:
    """Every declared host alive in Ray with its resources and its ``ray_version``; INFO when all are.

    ``declarations``: :func:`checks.full.declaration` of each host, with its ``ray_version``;
    ``state``: what :mod:`checks.cluster_state` printed.
    """
    reasons: list[Reason] = []
    by_ip: dict[str, Mapping[str, Any]] = {}
    for node in state["nodes"]:
        by_ip.setdefault(node["ip"], node)
    for decl in declarations:
        node = by_ip.get(decl["address"])
        if node is None:
            reasons.append(Reason(FAIL, f"not an alive Ray node (expected at {decl['address']})", host=decl["name"]))
            continue
        reasons += _resource_reasons(decl, node.get("resources") or {})
        version = node.get("ray_version") or "unknown"
        if version != decl["ray_version"]:
            reasons.append(
                Reason(
                    FAIL,
                    f"its Ray node runs Ray {version}, expected ray_version {decl['ray_version']}",
                    host=decl["name"],
                )  # fmt: skip
            )
    extra = sorted(set(by_ip) - {d["address"] for d in declarations})
    if extra:
        reasons.append(Reason(WARN, f"alive Ray nodes not in the inventory: {', '.join(extra)}"))
    versions = sorted({str(n.get("ray_version")) for n in state["nodes"]})
    if len(versions) > 1:
        reasons.append(Reason(FAIL, f"the cluster's nodes run more than one Ray version: {', '.join(versions)}"))
    if not reasons:
        on = f", all on Ray {versions[0]}" if versions else ""
        reasons.append(Reason(INFO, f"{len(by_ip)} Ray nodes alive with their declared resources{on}"))
    return reasons


def run_quick_checks(
    nodes: Sequence[Node],
    head: Node,
    settings: Mapping[str, Mapping[str, Any]],
    gpus: Mapping[str, Mapping[str, Any]],
    progress: Callable[[str], None],
    why: str,
) -> ChecksRun:
    """The quick checks (one command on ``head``); the verdict and the saved report.

    + nodes: every inventory host, in the inventory's order (``head`` among them)
    + settings: each node's settings (the data contract's keys), by node name
    + gpus: GPU facts of the nodes whose ``ray_num_gpus`` is ``"auto"``, by node name (a node
      without them: its GPU count is not compared)
    + why: why the quick checks run, for the report (``"no ray-node was created or replaced ..."``)
    """
    head_settings = settings[head.name]
    progress("--> Running the quick checks (every host an alive Ray node with its resources, one Ray version)")
    declarations = []
    for node in nodes:
        node_gpus = gpus.get(node.name)
        detected = preflight.detected_gpus(node_gpus) if node_gpus is not None else None
        declarations.append({**declaration(node, settings[node.name], detected),
                             "ray_version": settings[node.name]["ray_version"]})  # fmt: skip
    expected = [d["address"] for d in declarations]
    ok, lines = head.run(quick_command(head_settings["ray_container_name"], expected))
    state = result_of(lines) if ok else None
    if state is None:
        reasons = [Reason(FAIL, "could not read the cluster state from the head container")]
    else:
        reasons = quick_reasons(declarations, state)
        state["hosts"] = {d["address"]: d["name"] for d in declarations}
    verdict = Verdict(reasons)
    result = {
        "checks": {"mode": "quick", "why": why},
        "cluster_state": state,
        "verdict": verdict.as_dict(),
    }
    report_dir = Path(head_settings["checks_report_dir"]).expanduser()
    json_path, plot_path = report_mod.save_report(result, report_dir, head_settings["ray_cluster_name"])
    return ChecksRun(verdict, result, json_path, plot_path)
