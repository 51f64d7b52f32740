"""The checks on a sick cluster, end to end on the lab: they finish, and they name the sick node.

A worker starved of CPU (``docker update --cpus 0.025``: 1/40 of a CPU) must be named slow, and
the checks must end within twice the healthy lab's time (median of two each, alternating). A
worker frozen with ``docker pause`` while the all-reduce runs must end the checks with FAIL
naming it, at the all-reduce's deadline, not hang them. Each scenario gives the worker back
and waits until every node is alive again.
"""

from __future__ import annotations

import json
import statistics
import threading
import time

import pytest

from tests.e2e.labkit import HOSTS, LAB_INVENTORY, Lab, rayrig, rayrig_background, report_paths, wait_for_alive

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STARVED_CPUS = 0.025  # 1/40 of a CPU for the worker's whole ray-node container


def rayrig_check(timeout: float = 900):
    """``rayrig check`` on the lab; its result and its wall seconds."""
    started = time.monotonic()
    result = rayrig("check", LAB_INVENTORY, timeout=timeout)
    return result, time.monotonic() - started


def give_back_cpus(lab: Lab, h: dict) -> None:
    """Every CPU of the machine for the host's ray-node again (``--cpus 0`` would leave the quota)."""
    lab.sh(h, 'sudo docker update --cpus "$(nproc)" ray-node')
    nano = lab.sh(h, "sudo docker inspect --format '{{.HostConfig.NanoCpus}}' ray-node").strip()
    assert int(nano) == int(lab.sh(h, "nproc")) * 10**9, nano


def test_a_starved_worker_is_named_slow_and_the_checks_end_within_twice_the_healthy_time(lab, baseline):
    slow = lab.workers[0]
    healthy, starved = [], []
    try:
        for _ in range(2):  # alternating, so a burst of load on this machine hits both kinds alike
            result, took = rayrig_check()
            output = result.stdout + result.stderr
            assert result.returncode == 0, output[-3000:]
            healthy.append(took)

            lab.sh(slow, f"sudo docker update --cpus {STARVED_CPUS} ray-node")
            try:
                result, took = rayrig_check()
            finally:
                give_back_cpus(lab, slow)
            starved.append(took)
            output = result.stdout + result.stderr
            assert result.returncode == 1, output[-3000:]
            report = json.loads(report_paths(output)[0].read_text())
            assert report["verdict"]["status"] == "FAIL"
            assert report["verdict"]["slow_hosts"] == [slow["name"]], report["verdict"]
            slow_reasons = [r for r in report["verdict"]["reasons"] if r.get("flag") == "SLOW"]
            assert slow_reasons and all(r["host"] == slow["name"] for r in slow_reasons), slow_reasons
            assert all(r.get("source") for r in slow_reasons), "a slow node's reason says where its threshold is from"
            print(f"starved run: {[r['message'] for r in slow_reasons]}")
    finally:
        wait_for_alive(lab, HOSTS)
    print(f"rayrig check on the lab, healthy {[round(t, 1) for t in healthy]} s, "
          f"one worker at 1/40 CPU {[round(t, 1) for t in starved]} s")  # fmt: skip
    assert statistics.median(starved) <= 2 * statistics.median(healthy), (healthy, starved)


def test_a_worker_paused_during_the_all_reduce_fails_naming_it_at_the_deadline(lab, baseline):
    victim = lab.workers[1]
    # the full sweep: seconds of sizes left after the first
    process = rayrig_background("check", LAB_INVENTORY, "--data", "checks_profile=full")
    watchdog = threading.Timer(900, process.kill)  # a hang fails the test instead of holding the tier
    watchdog.start()
    lines: list[str] = []
    paused_at = ended_at = None
    try:
        for line in process.stdout:
            lines.append(line)
            if paused_at is None and "allreduce: " in line and " bytes in " in line:  # a size is done
                lab.sh(victim, "sudo docker pause ray-node")
                paused_at = time.monotonic()
        process.wait(timeout=60)
        ended_at = time.monotonic()
    finally:
        watchdog.cancel()
        if paused_at is not None:
            lab.sh(victim, "sudo docker unpause ray-node")
        wait_for_alive(lab, HOSTS)
    output = "".join(lines)
    assert paused_at is not None, f"the all-reduce sweep never started: {output[-3000:]}"
    assert process.returncode == 1, output[-3000:]
    report = json.loads(report_paths(output)[0].read_text())
    allreduce = report["allreduce"]
    # Frozen, the worker stops answering: either the step's deadline comes first (its rank "did not
    # answer", the others waited for it) or Ray declares its node dead first (its rank "was lost").
    hung = allreduce.get("hung")
    stuck = [r for r in hung["ranks"] if r["state"] != "waiting for peers"] if hung else allreduce.get("failed")
    assert stuck and {rank["host"] for rank in stuck} == {victim["name"]}, allreduce
    named = [r for r in report["verdict"]["reasons"] if r["level"] == "FAIL" and "all-reduce" in r["message"]]
    assert named and all(r.get("host") == victim["name"] for r in named), report["verdict"]
    after_pause = ended_at - paused_at
    deadline = max(step["deadline_s"] for step in allreduce["deadlines"]["sizes"] + [hung or {"deadline_s": 0}])
    print(f"paused {victim['name']}: the checks ended {after_pause:.1f} s later (all-reduce step deadline "
          f"{deadline} s; {'hung' if hung else 'lost'})")  # fmt: skip
    assert after_pause <= deadline + 120, (after_pause, allreduce)
