"""GPUs and CPUs that other jobs hold: left out of the benchmark and reported as WARN, never a FAIL.

A cluster busy with jobs is not a broken one: the benchmark measures what is free, says how
many GPUs (or CPUs) were held on which node, and the verdict is WARN.
"""

from __future__ import annotations

from typing import Any

import pytest

from checks import allreduce, cluster_bench, report, verdict
from checks.verdict import FAIL, WARN
from tests.unit.test_checks_verdict import allreduce as allreduce_section
from tests.unit.test_checks_verdict import cluster, gpu


def gpu_node(host: str, ip: str, busy_gpus: int = 0, busy_cpus: float = 0.0, num_gpus: float = 8.0) -> dict[str, Any]:
    return {"node_id": f"id-{host}", "host": host, "ip": ip, "num_cpus": 96.0, "num_gpus": num_gpus,
            "busy_gpus": busy_gpus, "busy_cpus": busy_cpus}  # fmt: skip


def found(v: verdict.Verdict) -> list[tuple[str, str, str | None]]:
    return [(r.level, r.message, r.host) for r in v.reasons]


def test_gpus_held_by_other_jobs_warn_naming_the_node_and_how_many():
    devices = [gpu("gpu-a", i, tflops=800.0 + i) for i in range(8)] + [gpu("gpu-b", i, tflops=800.0) for i in range(5)]
    nodes = [gpu_node("gpu-a", "10.0.0.1"), gpu_node("gpu-b", "10.0.0.2", busy_gpus=3)]
    judged = verdict.evaluate({**cluster(devices, allreduce=allreduce_section(world=13)), "nodes": nodes})
    assert judged.status == WARN, found(judged)
    assert (WARN, "gpu-b (10.0.0.2): 3 of 8 GPUs held by other jobs; the benchmark left them out", "gpu-b") in found(
        judged
    )


def test_an_allreduce_or_smoke_test_without_free_gpus_warns_instead_of_failing():
    busy = "needs 16 free GPUs, only 12 were free after 60 s: other jobs hold 4"
    report_data = cluster(
        [gpu("gpu-a", i) for i in range(8)],
        allreduce={"backend": "nccl", "world_size": 16, "sweep": [], "skipped": busy},
        sweep_test={"tasks": 0, "completed": 0, "skipped": "every node's GPUs are held by other jobs"},
    )
    judged = verdict.evaluate(report_data)
    assert judged.status == WARN, found(judged)
    assert (WARN, f"all-reduce test not run: {busy}", None) in found(judged)
    assert (WARN, "scheduling smoke test not run: every node's GPUs are held by other jobs", None) in found(judged)
    text = report.render(report_data, judged)
    assert f"all-reduce: not run: {busy}" in text
    assert "scheduling smoke test: not run: every node's GPUs are held by other jobs" in text


def test_a_cluster_whose_every_gpu_is_busy_warns_and_nothing_fails():
    nodes = [gpu_node("gpu-a", "10.0.0.1", busy_gpus=8), gpu_node("gpu-b", "10.0.0.2", busy_gpus=8, busy_cpus=8)]
    report_data = {
        **cluster([], allreduce={"backend": "nccl", "world_size": 0, "sweep": [], "skipped": "no GPU free"},
                  sweep_test={"tasks": 0, "completed": 0, "skipped": "every node's GPUs are held by other jobs"}),
        "nodes": nodes,
    }  # fmt: skip
    judged = verdict.evaluate(report_data)
    assert judged.status == WARN, found(judged)
    assert (WARN, "gpu-b (10.0.0.2): 8 of 8 GPUs and 8 of 96 CPUs held by other jobs; the benchmark left them out",
            "gpu-b") in found(judged)  # fmt: skip
    assert (WARN, "no device was measured", None) in found(judged)


def test_nothing_measured_on_an_idle_cluster_still_fails():
    judged = verdict.evaluate({**cluster([]), "nodes": [gpu_node("gpu-a", "10.0.0.1")]})
    assert (FAIL, "no device was measured", None) in found(judged)


@pytest.mark.parametrize(
    "free,busy",
    [
        ({"GPU": 8.0, "CPU": 96.0}, (0, 0.0)),
        ({"GPU": 5.0, "CPU": 96.0}, (3, 0.0)),
        ({"GPU": 7.75, "CPU": 95.75}, (1, 0.25)),  # a fractional GPU task holds a whole GPU for the benchmark
        ({"CPU": 0.0}, (8, 96.0)),  # Ray leaves out what is all taken
        (None, (0, 0.0)),  # no reading for the node: nothing is assumed held
    ],
)
def test_busy_counts_from_rays_free_resources(free, busy):
    assert cluster_bench.busy_counts(gpu_node("gpu-a", "10.0.0.1"), free) == busy


def test_mark_busy_waits_briefly_for_resources_then_marks_what_is_still_held(monkeypatch):
    state = pytest.importorskip("ray._private.state")
    readings = iter([{"id-gpu-a": {"GPU": 6.0, "CPU": 96.0}}, {"id-gpu-a": {"GPU": 7.0, "CPU": 96.0}}])
    last = {"id-gpu-a": {"GPU": 7.0, "CPU": 96.0}}
    monkeypatch.setattr(state, "available_resources_per_node", lambda: next(readings, last))
    monkeypatch.setattr(cluster_bench.time, "sleep", lambda _s: None)
    [node] = cluster_bench.mark_busy([gpu_node("gpu-a", "10.0.0.1")], wait_s=0.05)
    assert (node["busy_gpus"], node["busy_cpus"]) == (1, 0.0)

    monkeypatch.setattr(state, "available_resources_per_node", lambda: {"id-gpu-a": {"GPU": 8.0, "CPU": 96.0}})
    [node] = cluster_bench.mark_busy([gpu_node("gpu-a", "10.0.0.1", busy_gpus=5)], wait_s=3600)  # free: no wait
    assert (node["busy_gpus"], node["busy_cpus"]) == (0, 0.0)


def test_the_smoke_test_is_skipped_when_every_gpu_is_held():
    pytest.importorskip("ray")
    nodes = [gpu_node("gpu-a", "10.0.0.1", busy_gpus=8), gpu_node("gpu-b", "10.0.0.2", busy_gpus=8)]
    result = cluster_bench.run_sweep_test(nodes)  # returns before asking Ray for anything
    assert result == {"tasks": 0, "completed": 0, "skipped": "every node's GPUs are held by other jobs"}


@pytest.mark.slow
def test_the_allreduce_over_busy_gpus_is_skipped_naming_how_many_were_held(monkeypatch):
    pytest.importorskip("ray")
    nodes = [gpu_node("gpu-a", "10.0.0.1", busy_gpus=8), gpu_node("gpu-b", "10.0.0.2", busy_gpus=8)]
    result = allreduce.run_allreduce(nodes)
    assert result["skipped"] == "other jobs hold 16 GPUs: no node has one free"
    nodes = [gpu_node("gpu-a", "10.0.0.1", busy_gpus=2), gpu_node("gpu-b", "10.0.0.2")]
    monkeypatch.setattr(allreduce, "_wait_for_free", lambda resource, amount, timeout_s: 11.0)
    result = allreduce.run_allreduce(nodes, allreduce.SweepConfig(timeout_s=30))
    assert result["world_size"] == 14  # the free GPUs only
    assert result["skipped"] == "needs 14 free GPUs, only 11 were free after 30 s: other jobs hold 3"
