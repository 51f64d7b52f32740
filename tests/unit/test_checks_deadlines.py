"""The checks' clocks (checks/deadlines.py): the run's budget and deadlines judged against peers."""

from __future__ import annotations

import pytest

from checks import deadlines
from checks.deadlines import Budget, PeerClock


def test_no_deadline_from_peers_until_the_median_node_has_finished():
    clock = PeerClock(4, factor=3, floor_s=10, cap_s=300)
    clock.finished(5.0)
    assert clock.median_s() is None and clock.deadline_s() == 300 and not clock.by_peers()
    clock.finished(7.0)  # 2 of 4: the median node (the 2nd to finish) is in
    assert clock.median_s() == 7.0 and clock.deadline_s() == 21.0 and clock.by_peers()


def test_the_peer_deadline_has_a_floor_and_a_cap():
    fast = PeerClock(2, factor=3, floor_s=10, cap_s=300)
    fast.finished(0.5)
    assert fast.deadline_s() == 10  # 3 x 0.5 s would stop a node after 1.5 s of jitter
    slow = PeerClock(2, factor=3, floor_s=10, cap_s=60)
    slow.finished(50.0)
    assert slow.deadline_s() == 60 and not slow.by_peers()


def test_a_lone_node_has_no_peers_only_the_cap():
    clock = PeerClock(1, factor=3, floor_s=10, cap_s=120)
    clock.finished(1.0)
    assert clock.median_s() is None and clock.deadline_s() == 120


@pytest.mark.parametrize("count,finished,median", [(3, [9.0, 2.0], 9.0), (5, [1.0, 2.0, 3.0], 3.0), (2, [4.0], 4.0)])
def test_the_median_is_the_middle_finisher(count, finished, median):
    clock = PeerClock(count)
    for seconds in finished:
        clock.finished(seconds)
    assert clock.median_s() == median


def test_a_late_measurement_is_reported_with_its_peers_and_the_source_of_its_deadline():
    clock = PeerClock(3, factor=3, floor_s=10, cap_s=300)
    clock.finished(4.0), clock.finished(6.0)
    late = clock.late(18.04)
    assert late == {"elapsed_s": 18.0, "peers_median_s": 6.0, "deadline_s": 18.0,
                    "source": "the peers' median x checks_peer_timeout_factor (at least 10 s)"}  # fmt: skip
    assert deadlines.did_not_finish(late, "its CPU measurement") == (
        "did not finish its CPU measurement in 18 s (peers' median 6 s)"
    )
    alone = PeerClock(1, cap_s=300).late(300)
    assert alone["source"].startswith("checks_node_timeout_s")
    assert deadlines.did_not_finish(alone, "x") == "did not finish x in 300 s (no peers to compare with)"


def test_the_budget_caps_what_is_asked_and_runs_out(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(deadlines.time, "monotonic", lambda: now[0])
    budget = Budget(100)
    assert budget.cap(300) == 100 and budget.cap(30) == 30 and not budget.spent()
    now[0] += 99.5
    assert budget.left() == pytest.approx(0.5) and budget.spent()
    now[0] += 50
    assert budget.left() == 0.0
