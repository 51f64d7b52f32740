"""The health gate's judgement (checks/health_judge.py): findings, and the decisions of a round."""

from __future__ import annotations

import pytest

from checks import health_judge as judge
from checks.reasons import FAIL

ROLES = {"head": "head", "w1": "worker", "w2": "worker", "w3": "worker", "w4": "worker"}
LIMITS = judge.Limits(fail_after=2, pass_after=3, max_quarantined=1)
SICK = [{"level": FAIL, "message": "the probe missed its deadline of 20 s", "host": "w1"}]


def no_marker(hosts=ROLES):
    return {h: None for h in hosts}


def run(states, fails, markers=None, limits=LIMITS, now=100.0):
    return judge.decide(states, fails, no_marker() if markers is None else markers, ROLES, limits, now)


def test_a_worker_failing_two_rounds_in_a_row_is_quarantined_by_the_gate():
    states, actions = run({}, {"w1": SICK})
    assert states["w1"].status == judge.FAILING and states["w1"].fails == 1 and not actions
    states, actions = run(states, {"w1": SICK}, now=160.0)
    assert [(a.action, a.host, a.by) for a in actions] == [(judge.QUARANTINE, "w1", judge.GATE)]
    assert "missed its deadline" in actions[0].reason
    assert states["w1"].status == judge.QUARANTINED and states["w1"].since == 160.0


def test_a_pass_between_two_fails_starts_the_count_again():
    states, _ = run({}, {"w1": SICK})
    states, _ = run(states, {"w1": []})
    states, actions = run(states, {"w1": SICK})
    assert states["w1"].fails == 1 and not actions


def test_the_head_is_reported_once_never_quarantined():
    sick = [{"level": FAIL, "message": "its node exporter is down", "host": "head"}]
    states, _ = run({}, {"head": sick})
    states, actions = run(states, {"head": sick})
    assert [(a.action, a.host) for a in actions] == [(judge.REPORT, "head")]
    assert states["head"].status == judge.FAILING
    states, actions = run(states, {"head": sick})
    assert not actions  # said once per episode


def test_past_the_limit_the_gate_reports_instead_of_acting():
    both = {"w1": SICK, "w2": [{**SICK[0], "host": "w2"}]}
    states, _ = run({}, both)
    states, actions = run(states, both)
    assert sorted((a.host, a.action) for a in actions) == [("w1", judge.QUARANTINE), ("w2", judge.HELD)]
    held = next(a for a in actions if a.action == judge.HELD)
    assert held.reason.startswith("quarantine limit (1 of 1 out, health_max_quarantined)")
    assert sum(s.status == judge.QUARANTINED for s in states.values()) == 1


def test_a_quarantined_worker_is_admitted_after_three_passed_rechecks_in_a_row():
    states = {"w1": judge.HostState(judge.QUARANTINED, since=1.0, by=judge.GATE, reason="x")}
    markers = {**no_marker(), "w1": {"by": "gate", "since": 1.0, "reason": "x"}}
    for expected in (1, 2):
        states, actions = run(states, {"w1": []}, markers)
        assert states["w1"].passes == expected and not actions
    states, actions = run(states, {"w1": SICK}, markers)  # a failed recheck starts the count again
    assert states["w1"].passes == 0
    for _ in range(2):
        states, actions = run(states, {"w1": []}, markers)
    states, actions = run(states, {"w1": []}, markers)
    assert [(a.action, a.host) for a in actions] == [(judge.ADMIT, "w1")]
    assert states["w1"].status == judge.OK


def test_an_operators_quarantine_is_seen_and_never_lifted_by_the_gate():
    markers = {**no_marker(), "w2": {"by": "operator", "since": 50.0, "reason": "new DIMM"}}
    states, actions = run({}, {"w2": []}, markers)
    assert [(a.action, a.by, a.observed) for a in actions] == [(judge.QUARANTINE, judge.OPERATOR, True)]
    for _ in range(5):
        states, actions = run(states, {"w2": []}, markers)
        assert not actions and states["w2"].status == judge.QUARANTINED
    states, actions = run(states, {"w2": []})  # the operator admitted it: the marker is gone
    assert [(a.action, a.by) for a in actions] == [(judge.ADMIT, judge.OPERATOR)]
    assert states["w2"].status == judge.OK


def test_a_host_not_reached_keeps_its_counts():
    states, _ = run({}, {"w1": SICK})
    states, actions = run(states, {}, markers={})
    assert states["w1"].fails == 1 and not actions


@pytest.mark.parametrize(("setting", "workers", "limit"), [("25%", 4, 1), ("25%", 12, 3), ("50%", 3, 1), (2, 10, 2)])
def test_the_quarantine_limit_is_a_number_or_a_share_of_the_workers_at_least_one(setting, workers, limit):
    assert judge.quarantine_limit(setting, workers) == limit


def test_a_probe_far_slower_than_its_peers_fails_naming_both_times():
    probes = {"w1": {"seconds": 30.0}, "w2": {"seconds": 0.4}, "w3": {"seconds": 0.5}}
    medians = judge.peer_median(probes)
    assert medians["w1"] == pytest.approx(0.45)
    [reason] = judge.probe_findings("w1", probes["w1"], medians["w1"], 0.5, 20)
    assert reason.level == FAIL and "took 30.00 s, its peers' median 0.45 s" in reason.message
    assert judge.probe_findings("w2", probes["w2"], medians["w2"], 0.5, 20) == []


def test_a_small_probe_twice_as_slow_as_its_peers_on_a_busy_machine_is_not_a_finding():
    assert judge.probe_findings("w1", {"seconds": 0.3}, 0.1, 0.5, 20) == []


def test_a_missed_deadline_fails_and_names_the_peers_median():
    [reason] = judge.probe_findings("w1", {"seconds": None, "error": "missed its deadline of 20 s"}, 0.4, 0.5, 20)
    assert "missed its deadline of 20 s (its peers' median: 0.40 s)" in reason.message


def test_a_folder_below_the_free_fraction_fails_naming_it():
    disks = [{"what": "Ray's temp folder", "path": "/var/lib/rayrig/ray/tmp", "free": 10 * 2**20, "size": 1000 * 2**20},
             {"what": "Docker's data root", "path": "/var/lib/docker", "free": 500 * 2**20,
              "size": 1000 * 2**20}]  # fmt: skip
    [reason] = judge.disk_findings("w1", disks, 0.05)
    assert reason.flag == "disk" and reason.message.startswith(
        "Ray's temp folder (/var/lib/rayrig/ray/tmp) has 1.0% free"
    )


def test_a_node_not_alive_or_missing_a_declared_resource_fails():
    assert judge.ray_findings("w1", None, {"CPU": 2})[0].message == "not an alive Ray node"
    [reason] = judge.ray_findings("w1", {"resources": {"CPU": 2.0}}, {"CPU": 2, "GPU": None, "w1": 1})
    assert reason.message == "its Ray node has 0 w1, the inventory declares 1"
    assert judge.ray_findings("w1", {"resources": {"CPU": 2.0}}, {"CPU": "auto"}) == []


def test_a_state_survives_its_json_form():
    state = judge.HostState(judge.QUARANTINED, since=3.0, by=judge.GATE, reason="r", findings=({"message": "m"},))
    assert judge.HostState.from_dict(state.as_dict()) == state


def test_a_node_whose_container_just_started_is_not_yet_a_failure():
    [reason] = judge.ray_findings("w1", None, {"CPU": 2}, starting_s=12.0)
    assert reason.level == "INFO" and "started 12 s ago" in reason.message
