"""Bounded phases against a real two-node Ray cluster on this machine, one node frozen.

``ray.cluster_utils.Cluster`` starts a second raylet beside the head: two real Ray nodes.
Freezing the second one's raylet (SIGSTOP, what ``docker pause`` does to a whole container)
makes any work sent there stall: the devices phase must stop it when its peer has long
finished, name it, and the sweep test must keep its tasks on the node left.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("torch")
ray = pytest.importorskip("ray")

from checks import cluster_bench, deadlines, devices, verdict  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.real_ray]


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[dict[str, Any]]:
    from ray.cluster_utils import Cluster  # Ray's own multi-node harness: imported only where it runs

    with pytest.MonkeyPatch.context() as env:
        env.delenv("RAY_ADDRESS", raising=False)
        # The GCS must not declare the frozen node dead while a test waits on it (about 15-30 s by
        # default, sooner than a loaded machine's first tasks may end): that would fail its tasks
        # instead of leaving them late, which is what these tests are about.
        system_config = {"health_check_failure_threshold": 1000}
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 2, "include_dashboard": False, "_system_config": system_config},
        )
        worker = cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        cluster_bench.connect(cluster.address)
    raylet = worker.all_processes["raylet"][0].process.pid
    try:
        yield {"nodes": cluster_bench.mark_busy(cluster_bench.cluster_nodes()), "frozen": worker.node_id,
               "raylet": raylet}  # fmt: skip
    finally:
        os.kill(raylet, signal.SIGCONT)
        ray.shutdown()
        cluster.shutdown()


def test_tasks_stuck_on_a_frozen_node_are_late_by_the_clock_of_those_that_finished(two_nodes):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # Ray's, where Ray runs

    os.kill(two_nodes["raylet"], signal.SIGSTOP)
    head = next(n["node_id"] for n in two_nodes["nodes"] if n["node_id"] != two_nodes["frozen"])
    task = ray.remote(lambda: time.sleep(0.05))
    refs = [task.options(num_cpus=0.25, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
            for node in [head] * 6 + [two_nodes["frozen"]] * 2]  # fmt: skip
    clock = deadlines.PeerClock(len(refs), factor=3, floor_s=5, cap_s=120)
    started = time.monotonic()
    done, late = devices.wait_with_peers(refs, clock, started, budget=None)
    took = time.monotonic() - started
    assert late == refs[6:] and set(done) == set(refs[:6])
    assert clock.median_s() is not None and took < clock.deadline_s() + 5
    for ref in late:
        ray.cancel(ref, force=True)


def test_a_frozen_node_is_stopped_by_its_peers_clock_and_named(two_nodes):
    os.kill(two_nodes["raylet"], signal.SIGSTOP)
    started = time.monotonic()
    entries = cluster_bench.run_devices(two_nodes["nodes"], quick=True, timeout_s=120, peer_factor=3)
    took = time.monotonic() - started
    by_node = {e["node_id"]: e for e in entries}
    stopped = by_node[two_nodes["frozen"]]["stopped"]
    healthy = next(e for node_id, e in by_node.items() if node_id != two_nodes["frozen"])
    assert healthy["matmul"]["tflops"] > 0 and "stopped" not in healthy
    median = stopped["peers_median_s"]
    # both rounded to 0.1 s in the report: the deadline from the exact median, the median itself
    assert median is not None and stopped["deadline_s"] == pytest.approx(max(10.0, 3 * median), abs=0.2)
    assert took < stopped["deadline_s"] + 15, f"the phase took {took:.0f} s, past its deadline"
    assert cluster_bench.left_out(entries).keys() == {two_nodes["frozen"]}

    judged = verdict.evaluate({"mode": "cluster", "cpu_only": True, "devices": entries,
                               "nodes": two_nodes["nodes"]})  # fmt: skip
    [slow] = [r for r in judged.reasons if r.flag == verdict.FLAG_SLOW]
    assert slow.level == "FAIL" and "did not finish its CPU measurement in" in slow.message
    assert f"(peers' median {median:g} s)" in slow.message and "left out of the later phases" in slow.message
    assert slow.source.startswith("the peers' median x checks_peer_timeout_factor")


def test_the_sweep_keeps_off_a_node_left_out(two_nodes):
    os.kill(two_nodes["raylet"], signal.SIGSTOP)  # still frozen: a task sent there would never finish
    usable = [n for n in two_nodes["nodes"] if n["node_id"] != two_nodes["frozen"]]
    result = cluster_bench.run_sweep_test(usable, tasks=8, sleep_s=0.05, timeout_s=60, only_these=True)
    assert result["completed"] == result["tasks"] == 8 and result["missing_nodes"] == []
    assert "stopped" not in result
