"""The all-reduce's bookkeeping (checks/allreduce_plan.py), without Ray or torch: the GPUs each rank
sees, the deadline rules, the ranks a hung collective waits for, and how the verdict words them."""

from __future__ import annotations

from typing import Any

import pytest

from checks import allreduce, verdict
from checks import allreduce_plan as plan
from checks.deadlines import BUDGET_SOURCE, Budget

MiB = 2**20


def test_ranks_of_one_node_see_every_gpu_their_node_holds_and_use_their_own() -> None:
    # two nodes; node-a's ranks hold GPUs 5, 2 and 7 (another job holds the rest), node-b's hold 0 and 1
    placement = [("node-a", 5), ("node-a", 2), ("node-a", 7), ("node-b", 1), ("node-b", 0)]
    assert plan.visible_devices(placement) == [("2,5,7", 1), ("2,5,7", 0), ("2,5,7", 2), ("0,1", 1), ("0,1", 0)]


def test_a_lone_gpu_sees_only_itself() -> None:
    assert plan.visible_devices([("node-a", 3)]) == [("3", 0)]


def test_setup_is_bounded_by_the_cap_or_the_budget_left() -> None:
    assert plan.setup_deadline(600, None) == (600.0, plan.SETUP_SOURCE)
    assert plan.setup_deadline(600, 900.0) == (600.0, plan.SETUP_SOURCE)
    assert plan.setup_deadline(600, 42.0) == (42.0, BUDGET_SOURCE)


@pytest.mark.parametrize(
    ("basis_s", "first", "budget_left", "expected"),
    [
        (4.0, True, None, (30.0, plan.FIRST_SOURCE.format(floor=30))),  # 3 x 4 s setup: the floor
        (20.0, True, None, (60.0, plan.FIRST_SOURCE.format(floor=30))),  # 3 x 20 s setup
        (20.0, False, None, (120.0, plan.NEXT_SOURCE.format(floor=30))),  # 3 x twice 20 s
        (2.0, False, None, (30.0, plan.NEXT_SOURCE.format(floor=30))),  # the floor
        (150.0, False, None, (600.0, plan.CAP_SOURCE)),  # 900 s by the peer rule: the cap
        (20.0, False, 50.0, (50.0, BUDGET_SOURCE)),  # the run's budget has 50 s left
        (20.0, False, 500.0, (120.0, plan.NEXT_SOURCE.format(floor=30))),  # budget not binding
    ],
)
def test_size_deadlines(basis_s: float, first: bool, budget_left: float | None, expected: tuple) -> None:
    assert plan.size_deadline(basis_s, first, 3.0, 600, budget_left) == expected


def test_the_peer_factor_scales_the_deadline() -> None:
    assert plan.size_deadline(10.0, False, 5.0, 600, None)[0] == 100.0


RANKS = [{"rank": i, "host": f"lab-{i // 2 + 1}", "ip": f"10.0.0.{i // 2 + 1}", "node_id": f"n{i // 2}"}
         for i in range(4)]  # fmt: skip


def at(total: int, entered: int, calls: int = 12) -> dict[str, Any]:
    return {"bytes": 4 * MiB, "entered": entered, "completed": entered - 1, "calls": calls, "total": total}


def states(answers: list[dict[str, Any] | None]) -> list[str]:
    return [r["state"] for r in plan.stuck_ranks(RANKS, answers)]


def test_a_rank_that_does_not_answer_is_the_stuck_one() -> None:
    assert states([at(40, 3), at(40, 3), None, at(40, 3)]) == [
        "waiting for peers", "waiting for peers", "no answer", "waiting for peers"
    ]  # fmt: skip


def test_when_all_answer_the_rank_furthest_behind_is_the_stuck_one() -> None:
    assert states([at(41, 4), at(38, 1), at(41, 4), at(41, 4)]) == [
        "waiting for peers", "behind: entered 1 of 12 calls", "waiting for peers", "waiting for peers"
    ]  # fmt: skip


def test_when_every_rank_stands_at_the_same_call_all_are_named() -> None:
    assert set(states([at(41, 4)] * 4)) == {"stuck: entered 4 of 12 calls, as did every rank"}


def test_stuck_ranks_keep_where_they_run() -> None:
    [entry, *_] = plan.stuck_ranks(RANKS, [None, at(1, 1), at(1, 1), at(1, 1)])
    assert entry == {"rank": 0, "host": "lab-1", "ip": "10.0.0.1", "node_id": "n0", "state": "no answer"}


def hung(ranks: list[dict[str, Any]], nbytes: int | None = 4 * MiB) -> dict[str, Any]:
    return {"bytes": nbytes, "deadline_s": 31.0, "waited_s": 31.2, "source": plan.NEXT_SOURCE.format(floor=30),
            "ranks": ranks}  # fmt: skip


def test_a_hung_sweep_fails_naming_the_host_that_did_not_answer() -> None:
    ranks = plan.stuck_ranks(RANKS, [at(9, 2), at(9, 2), None, at(9, 2)])
    report = {"mode": "cluster", "allreduce": {"backend": "gloo", "world_size": 4, "sweep": [],
                                               "error": "...", "hung": hung(ranks)}}  # fmt: skip
    v = verdict.evaluate(report)
    [fail] = [r for r in v.reasons if "all-reduce" in r.message]
    assert fail.level == "FAIL" and v.status == "FAIL"
    assert fail.message == (
        "all-reduce at 4 MiB did not finish in 31 s: lab-2 (10.0.0.2) rank 2 did not answer; "
        "the other ranks waited for it"
    )
    assert fail.host == "lab-2"
    assert fail.source == "checks_peer_timeout_factor x twice the previous size's time (at least 30 s)"


def test_a_rank_behind_is_named_with_how_far_it_got() -> None:
    ranks = plan.stuck_ranks(RANKS, [at(9, 2), at(9, 2), at(9, 2), at(7, 0)])
    [(host, message)] = plan.hung_summary(hung(ranks, 64 * 2**10))
    assert (host, message) == (
        "lab-2",
        "all-reduce at 64 KiB did not finish in 31 s: lab-2 (10.0.0.2) rank 3 was behind "
        "(entered 0 of 12 calls); the other ranks waited for it",
    )


def test_two_stuck_hosts_each_get_a_reason() -> None:
    ranks = plan.stuck_ranks(RANKS, [None, at(9, 2), None, None])
    assert plan.hung_summary(hung(ranks, None)) == [
        ("lab-1", "all-reduce setup (starting the ranks and their process group) did not finish in 31 s: "
                  "lab-1 (10.0.0.1) rank 0 did not answer; the other ranks waited for them"),
        ("lab-2", "all-reduce setup (starting the ranks and their process group) did not finish in 31 s: "
                  "lab-2 (10.0.0.2) rank 2 did not answer, rank 3 did not answer; the other ranks waited for them"),
    ]  # fmt: skip


def test_a_lost_rank_fails_counting_for_its_host() -> None:
    data = {"backend": "nccl", "world_size": 16, "sweep": [], "error": "rank 9 on gpu-b (10.0.0.2) was lost ...",
            "failed": [{"rank": 9, "host": "gpu-b", "ip": "10.0.0.2", "node_id": "n1"}]}  # fmt: skip
    [fail] = [r for r in verdict.evaluate({"mode": "cluster", "allreduce": data}).reasons if "all-reduce" in r.message]
    assert (fail.level, fail.host) == ("FAIL", "gpu-b")
    assert fail.message == "all-reduce test failed: rank 9 on gpu-b (10.0.0.2) was lost ..."


def test_no_sweep_starts_when_the_run_budget_is_spent() -> None:
    pytest.importorskip("ray")
    nodes = [{"node_id": "n0", "host": "lab-1", "ip": "10.0.0.1", "num_cpus": 4.0, "num_gpus": 0.0}]
    result = allreduce.run_allreduce(nodes, allreduce.SweepConfig(budget=Budget(0)))
    assert result["error"] == "not started: no time left of checks_timeout_s, the budget of the whole run"
    assert (result["backend"], result["world_size"], result["sweep"]) == ("gloo", 1, [])
