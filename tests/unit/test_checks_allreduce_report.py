"""How the report shows an all-reduce sweep that stopped: why, each rank's state, the sizes measured
before it stopped, and the deadlines it ran under."""

from __future__ import annotations

from typing import Any

from checks import report

ROW = {"bytes": 2**20, "time_s": 0.002, "algbw_gbps": 0.52, "busbw_gbps": 0.79, "values_ok": True,
       "wrong_values": 0, "iters": 5}  # fmt: skip
DEADLINES = {"peer_factor": 3.0, "floor_s": 30.0, "cap_s": 600, "setup_deadline_s": 600.0, "setup_s": 6.2,
             "sizes": [{"bytes": 2**20, "took_s": 0.4, "deadline_s": 30.0, "source": "..."}]}  # fmt: skip


def hung_sweep() -> dict[str, Any]:
    return {
        "backend": "gloo",
        "world_size": 3,
        "ranks": [],
        "sweep": [ROW],
        "deadlines": DEADLINES,
        "error": "all-reduce at 2 MiB did not finish in 30 s: lab-3 (10.0.0.3) rank 2 did not answer; ...",
        "hung": {
            "bytes": 2**21,
            "deadline_s": 30.0,
            "waited_s": 30.1,
            "source": "...",
            "ranks": [
                {"rank": 0, "host": "lab-1", "ip": "10.0.0.1", "state": "waiting for peers"},
                {"rank": 1, "host": "lab-2", "ip": "10.0.0.2", "state": "waiting for peers"},
                {"rank": 2, "host": "lab-3", "ip": "10.0.0.3", "state": "no answer"},
            ],
        },
    }


def test_a_hung_sweep_shows_why_each_rank_and_the_sizes_measured_before() -> None:
    lines = report.render_allreduce({"allreduce": hung_sweep()}).splitlines()
    assert lines[0] == (
        "all-reduce: 3 ranks, gloo: FAILED: all-reduce at 2 MiB did not finish in 30 s: "
        "lab-3 (10.0.0.3) rank 2 did not answer; ..."
    )
    assert lines[1:4] == [
        "  rank 0 on lab-1 (10.0.0.1): waiting for peers",
        "  rank 1 on lab-2 (10.0.0.2): waiting for peers",
        "  rank 2 on lab-3 (10.0.0.3): no answer",
    ]
    assert lines[4] == (
        "  deadlines: setup 600 s (took 6.2 s); each size 3 x the time it should take, at least 30 s, at most 600 s"
    )
    assert lines[5].split() == ["size", "time", "ms", "algbw", "GB/s", "busbw", "GB/s", "values"]
    assert lines[-1].split() == ["1", "MiB", "2.000", "0.52", "0.79", "ok"]


def test_a_sweep_that_failed_before_any_size_shows_no_empty_table() -> None:
    data = {"backend": "nccl", "world_size": 2, "sweep": [], "error": "rank 1 on gpu-b was lost while starting: ..."}
    assert report.render_allreduce({"allreduce": data}) == (
        "all-reduce: 2 ranks, nccl: FAILED: rank 1 on gpu-b was lost while starting: ..."
    )
