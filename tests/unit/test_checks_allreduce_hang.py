"""A collective that cannot complete, on a real local Ray (CPU, two gloo ranks).

After the first size, one rank actor's process is frozen with SIGSTOP (what ``docker pause`` does
to a whole node) or killed with SIGKILL (a node lost). The sweep must end at its deadline, not
at gloo's own timeout, naming that rank; the verdict must FAIL naming its host.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("torch")
ray = pytest.importorskip("ray")

from checks import allreduce, allreduce_plan, cluster_bench, verdict  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.real_ray]

FLOOR_S = 8.0  # the deadline of the frozen size (its peer rule gives less on two cores): a short test
SIZES = allreduce.size_sweep(2**16, 2**18)


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    # a fresh local Ray of its own ("local", its own temp dir): never another Ray running on this machine
    temp_dir = tempfile.mkdtemp(prefix="rr-ar-")  # short: Ray's socket paths must fit in 107 bytes
    cluster_bench.connect("local", num_cpus=4, include_dashboard=False, _temp_dir=temp_dir)
    try:
        [node] = cluster_bench.cluster_nodes()
        yield [{**node, "host": "node-one"}]
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _sweep_with(nodes: list[dict[str, Any]], sig: int, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:
    """The sweep over two ranks, rank 1 sent ``sig`` after the first size; the result and what happened."""
    monkeypatch.setattr(allreduce_plan, "FLOOR_S", FLOOR_S)
    seen: dict[str, Any] = {}

    def after_first_size(row: dict[str, Any], ranks: list[dict[str, Any]]) -> None:
        if "pid" not in seen:
            seen["pid"] = ranks[1]["pid"]
            os.kill(seen["pid"], sig)
            seen["sent"] = time.monotonic()

    try:
        config = allreduce.SweepConfig(sizes=SIZES, warmup=1, iters=2, cpu_workers_per_node=2, timeout_s=300)
        result = allreduce.run_allreduce(nodes, config, on_row=after_first_size)
        seen["after_s"] = time.monotonic() - seen["sent"]
    finally:
        if "pid" in seen and sig == signal.SIGSTOP:
            with contextlib.suppress(ProcessLookupError):  # gone already: Ray's kill took effect
                os.kill(seen["pid"], signal.SIGCONT)  # so that Ray's kill of it can take effect
    return result, seen


def test_a_frozen_rank_ends_the_sweep_at_its_deadline_naming_it(
    local_ray: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    result, seen = _sweep_with(local_ray, signal.SIGSTOP, monkeypatch)
    hung = result["hung"]
    assert [row["bytes"] for row in result["sweep"]] == SIZES[:1]  # the size before the freeze is kept
    assert hung["bytes"] == SIZES[1]
    first = result["deadlines"]["sizes"][0]
    assert hung["deadline_s"] == pytest.approx(max(FLOOR_S, 3 * 2 * first["took_s"]), abs=0.1)
    assert hung["source"] == "checks_peer_timeout_factor x twice the previous size's time (at least 8 s)"
    assert hung["deadline_s"] <= hung["waited_s"] <= hung["deadline_s"] + 1
    # the deadline, plus the few seconds the ranks are given to say how far they got
    assert seen["after_s"] <= hung["deadline_s"] + allreduce_plan.PROGRESS_TIMEOUT_S + 3
    assert [(r["rank"], r["host"], r["state"]) for r in hung["ranks"]] == [
        (0, "node-one", "waiting for peers"),
        (1, "node-one", "no answer"),
    ]
    ip = local_ray[0]["ip"]
    assert result["error"] == (
        f"all-reduce at 128 KiB did not finish in {hung['waited_s']:.0f} s: "
        f"node-one ({ip}) rank 1 did not answer; the other ranks waited for it"
    )
    [fail] = [r for r in verdict.evaluate({"mode": "cluster", "allreduce": result}).reasons if r.level == "FAIL"
              and "all-reduce" in r.message]  # fmt: skip
    assert (fail.message, fail.host, fail.source) == (result["error"], "node-one", hung["source"])


def test_a_lost_rank_is_named_as_lost(local_ray: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    result, seen = _sweep_with(local_ray, signal.SIGKILL, monkeypatch)
    assert "hung" not in result
    assert result["error"].startswith(f"rank 1 on node-one ({local_ray[0]['ip']}) was lost at {SIZES[1]} bytes: ")
    assert [r["rank"] for r in result["failed"]] == [1]
    assert seen["after_s"] < FLOOR_S  # noticed when it died, not at the deadline
    [fail] = [r for r in verdict.evaluate({"mode": "cluster", "allreduce": result}).reasons if r.level == "FAIL"
              and "all-reduce" in r.message]  # fmt: skip
    assert fail.host == "node-one" and "was lost" in fail.message
