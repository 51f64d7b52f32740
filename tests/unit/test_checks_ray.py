"""The --cluster benchmark against a real, local, single-node Ray (CPU only).

Same code path as on a cluster: the checks package shipped as a py_modules
runtime environment, a pinned CPU task, two gloo rank actors sweeping the
all-reduce one size at a time, and a SPREAD burst of fractional tasks. Sizes are
small; the whole module takes under a minute on two cores, most of it Ray start-up.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
ray = pytest.importorskip("ray")

from checks import allreduce, cluster_bench, maths, report, verdict  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.real_ray]

SWEEP_TASKS = 32


@pytest.fixture(scope="module")
def cluster_report() -> dict[str, Any]:
    t0 = time.perf_counter()
    with pytest.MonkeyPatch.context() as env:
        env.delenv("RAY_ADDRESS", raising=False)  # a fresh local Ray, never someone's cluster
        cluster_bench.connect("local", num_cpus=4, include_dashboard=False)  # a new one, never a neighbour
    try:
        ip = cluster_bench.cluster_nodes()[0]["ip"]
        config = cluster_bench.BenchConfig(
            host_aliases={ip: "node-one"},
            quick=True,
            allreduce_sizes=allreduce.size_sweep(64 * 2**10, 2**20),
            allreduce_iters=3,
            cpu_workers_per_node=2,
            sweep_tasks=SWEEP_TASKS,
            sweep_sleep_s=0.05,
            timeout_s=120,
        )
        result = cluster_bench.run_cluster(config)
    finally:
        ray.shutdown()
    result["timing"]["test_wall_s"] = round(time.perf_counter() - t0, 1)
    return result


def test_one_cpu_node_measured(cluster_report: dict[str, Any]) -> None:
    assert cluster_report["mode"] == "cluster" and cluster_report["cpu_only"] is True
    [node] = cluster_report["nodes"]
    assert node["is_head"] and node["num_cpus"] == 4 and node["num_gpus"] == 0
    assert (node["busy_gpus"], node["busy_cpus"]) == (0, 0.0)  # Ray's free-resource reading: nothing held
    [entry] = cluster_report["devices"]
    assert entry["kind"] == "cpu" and entry["node_id"] == node["node_id"]
    assert entry["ip"] == node["ip"]
    assert node["host"] == entry["host"] == "node-one"  # --host-alias names it everywhere
    assert entry["matmul"]["tflops"] > 0 and entry["matmul"]["threads"] == 4
    assert entry["copy"]["gbps"] > 0


def test_gloo_allreduce_values_and_bandwidth(cluster_report: dict[str, Any]) -> None:
    data = cluster_report["allreduce"]
    assert "error" not in data, data.get("error")
    assert (data["backend"], data["world_size"]) == ("gloo", 2)
    assert [(r["rank"], r["host"], r["device"]) for r in data["ranks"]] == [
        (0, "node-one", "cpu"),
        (1, "node-one", "cpu"),
    ]
    limits = data["deadlines"]
    assert (limits["peer_factor"], limits["floor_s"], limits["cap_s"]) == (3.0, 30.0, 120)
    assert 0 < limits["setup_s"] < limits["setup_deadline_s"] <= 120
    assert [s["bytes"] for s in limits["sizes"]] == [row["bytes"] for row in data["sweep"]]
    for size in limits["sizes"]:
        assert 30.0 <= size["deadline_s"] <= 120 and size["took_s"] < size["deadline_s"]
    assert data["value_check"] == {"ok": True, "expected": 3.0, "detail": "every element equals 3 at every size"}
    assert [row["bytes"] for row in data["sweep"]] == [2**16, 2**17, 2**18, 2**19, 2**20]
    for row in data["sweep"]:
        assert row["values_ok"] and row["wrong_values"] == 0
        assert row["algbw_gbps"] == pytest.approx(maths.algbw(row["bytes"], row["time_s"]))
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * maths.busbw_factor("all_reduce", 2))


def test_sweep_test_finished_everywhere(cluster_report: dict[str, Any]) -> None:
    data = cluster_report["sweep_test"]
    assert data["tasks"] == data["completed"] == SWEEP_TASKS
    assert data["failures"] == [] and data["missing_nodes"] == []
    assert data["per_node"] == {f"node-one ({cluster_report['nodes'][0]['ip']})": SWEEP_TASKS}
    assert data["resources_per_task"] == {"num_cpus": 0.25, "num_gpus": 0}


def test_verdict_report_and_timing(cluster_report: dict[str, Any], tmp_path: Path) -> None:
    v = verdict.evaluate(cluster_report)
    assert v.status == "PASS", [str(r) for r in v.reasons]
    text = report.render(cluster_report, v)
    assert "all-reduce: 2 ranks, gloo" in text and "VERDICT: PASS" in text
    path = report.write_json(cluster_report, tmp_path / "bench.json")
    assert json.loads(path.read_text())["allreduce"]["world_size"] == 2
    assert report.plot_busbw(cluster_report, tmp_path / "busbw.png") is not None
    timing = cluster_report["timing"]
    assert set(timing) >= {"devices_s", "allreduce_s", "sweep_test_s", "total_s"}
    print(f"\nlocal Ray benchmark took {timing['test_wall_s']} s: {timing}")
