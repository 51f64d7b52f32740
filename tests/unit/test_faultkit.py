"""The fault campaign's plan and table (tests/e2e/faultkit.py; the rounds themselves run on the lab)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.e2e import faultkit


class FakeLab:
    hosts = [{"name": "lab-1"}, {"name": "lab-2"}, {"name": "lab-3"}]


def plan(rounds: int, seed: int = 7, kinds=faultkit.KINDS, scenarios=faultkit.SCENARIOS):
    return faultkit.Campaign(FakeLab(), None, seed).plan(rounds, kinds, scenarios)


@pytest.mark.parametrize("seed", [1, 7, 1234])
def test_every_run_of_six_rounds_has_each_kind_once_and_every_pair_comes_up_within_kinds_times_scenarios(seed):
    rounds = plan(30, seed)
    for start in range(0, 30, len(faultkit.KINDS)):
        window = rounds[start : start + len(faultkit.KINDS)]
        assert sorted(r.kind for r in window) == sorted(faultkit.KINDS)
    pairs = Counter((r.scenario, r.kind) for r in rounds[: len(faultkit.KINDS) * len(faultkit.SCENARIOS)])
    assert len(pairs) == len(faultkit.KINDS) * len(faultkit.SCENARIOS)
    assert [r.number for r in rounds] == list(range(1, 31))


def test_the_same_seed_plans_the_same_campaign_and_another_seed_another():
    def key(rounds):
        return [(r.scenario, r.kind, r.host, r.cut_at) for r in rounds]

    assert key(plan(12, 99)) == key(plan(12, 99))
    assert key(plan(12, 99)) != key(plan(12, 100))


def test_cut_points_fall_within_the_deploys_operations_and_only_host_faults_name_a_host():
    for r in plan(60):
        assert 1 <= r.cut_at <= faultkit.EXPECTED_OPERATIONS[r.scenario]
        assert (r.host == "") == (r.kind in ("kill", "interrupt"))
        joining = f"{faultkit.LAB}-{faultkit.HOSTS + 1}"  # the fourth host, as the lab names it
        assert r.host in ("", "lab-1", "lab-2", "lab-3") or (r.scenario == "grown" and r.host == joining), r
    assert any(r.host == joining for r in plan(60)), "a grown round never hits the joining host"


def test_the_table_has_one_row_per_round_and_says_what_was_wrong():
    done = faultkit.Round(1, "image", "reboot", "lab-2", 12, 40, "Ray node | Start the Ray head container", 0,
                          converged=True, converge_s=61.25)  # fmt: skip
    stuck = faultkit.Round(2, "first", "kill", "", 30, 61, "Ray image | Wait for the pull", -9,
                           problems=["the run after it changed operations: {'lab-1': 1}"])  # fmt: skip
    lines = faultkit.table([done, stuck]).splitlines()
    assert lines[0].startswith("| round | scenario | fault | host | cut at |") and len(lines) == 4
    assert (
        "| 1 | image | reboot | lab-2 | 12/40 Ray node \\| Start the Ray head container | 0 | yes | 61.2 | - |" in lines
    )
    assert lines[3].endswith(
        "| 30/61 Ray image \\| Wait for the pull | -9 | NO | 0.0 | the run after it changed operations: {'lab-1': 1} |"
    )
