"""``scripts/run_tests.py``: the tiers in their order, the real-Ray tests alone, the background lab only when
the e2e tier waits for it, one table at the end."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from deploy.contract.paths import repo_root

_spec = importlib.util.spec_from_file_location("run_tests", repo_root() / "scripts" / "run_tests.py")
run_tests = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("run_tests", run_tests)  # dataclasses look their module up
_spec.loader.exec_module(run_tests)


@pytest.mark.parametrize(
    ("argv", "tiers", "extra"),
    [
        ([], ["unit", "plan", "cloud", "e2e"], []),
        (["e2e", "plan"], ["plan", "e2e"], []),
        (["cloud", "-x", "unit"], ["unit", "cloud"], ["-x"]),
        (["e2e", "-k", "token"], ["e2e"], ["-k", "token"]),
    ],
)
def test_the_tiers_run_in_their_order_whatever_order_argv_names_them(argv, tiers, extra):
    assert run_tests.ordered(argv) == (tiers, extra)


@pytest.mark.parametrize(
    ("tiers", "meanwhile"),
    [
        (["unit", "plan", "cloud", "e2e"], ("unit", "not real_ray")),  # once the timing tests are done
        (["e2e", "cloud"], ("cloud", None)),
        (["e2e"], ("e2e", "no_lab")),  # beside the e2e tests that need Docker alone
        (["plan", "cloud"], None),  # no e2e tier to wait for it: no lab at all
    ],
)
def test_the_background_lab_starts_only_when_the_e2e_tier_will_wait_for_it(tiers, meanwhile):
    step = run_tests.lab_comes_up_meanwhile(run_tests.ordered(tiers)[0])
    assert (step and (step.tier, step.marker)) == meanwhile


def test_the_real_ray_tests_run_first_and_alone_and_the_rest_of_the_cpu_tiers_on_every_core(tmp_path):
    junit = tmp_path / "j.xml"
    steps = run_tests.passes(["unit", "plan", "cloud", "e2e"])
    assert [(s.tier, s.marker) for s in steps] == [
        ("unit", "real_ray"), ("unit", "not real_ray"), ("plan", None), ("cloud", None), ("e2e", "no_lab"),
        ("e2e", "not no_lab"),
    ]  # fmt: skip
    assert [s.needs_lab for s in steps] == [False] * 5 + [True]  # the lab is waited for by the pass that uses it
    # the cloud tier and no_lab beside the lab's scenarios; without them, in the foreground
    assert [run_tests.in_background(s, steps) for s in steps] == [False] * 3 + [True, True, False]
    alone = run_tests.passes(["unit", "cloud"])
    assert not any(run_tests.in_background(s, alone) for s in alone)
    assert run_tests.pytest_command(steps[3], junit, [], background=True)[3:] == ["tests/cloud", f"--junitxml={junit}"]
    commands = [run_tests.pytest_command(s, junit, ["-x"]) for s in steps]
    assert commands[0][3:] == ["tests/unit", f"--junitxml={junit}", "-m", "real_ray", "-x"]  # one at a time
    assert commands[1][3:] == ["tests/unit", f"--junitxml={junit}", "-m", "not real_ray", "-n", "2", "-x"]
    assert commands[3][3:] == ["tests/cloud", f"--junitxml={junit}", "-n", "2", "-x"]
    assert steps[2].shards == 2 and not steps[2].parallel  # the plan tier: gevent stalls xdist's workers
    assert commands[4][3:] == ["tests/e2e", f"--junitxml={junit}", "-m", "no_lab", "-x"]
    labs = run_tests.LAB_WORKERS  # one lab per worker, RAYRIG_E2E_WORKERS of them
    e2e_lab = ["tests/e2e", f"--junitxml={junit}", "-m", "not no_lab", "-n", labs, "--dist", "loadfile",
               "--no-loadscope-reorder", "-x"]  # fmt: skip
    assert commands[5][3:] == e2e_lab  # one lab per worker, a module on one of them
    assert run_tests.pytest_command(steps[3], junit, ["-n", "0"]).count("-n") == 1  # argv decides
    assert "-n" not in run_tests.pytest_command(steps[3], junit, ["-p", "no:xdist"])


def test_the_plan_tiers_shards_hold_each_file_once_in_two_lists_of_about_the_same_size():
    shards = run_tests.shard_files("plan", 2)
    files = sorted(str(f.relative_to(repo_root())) for f in (repo_root() / "tests" / "plan").glob("test_*.py"))
    assert len(shards) == 2 and sorted(shards[0] + shards[1]) == files
    sizes = [sum((repo_root() / f).stat().st_size for f in shard) for shard in shards]
    assert max(sizes) <= 1.25 * min(sizes), sizes


@pytest.mark.parametrize(("extra", "labs"), [([], None), (["-n", "2"], 2), (["-n", "0"], 0), (["-p", "no:xdist"], 0)])
def test_one_background_lab_per_e2e_worker(extra, labs):
    assert run_tests.lab_workers(extra) == (int(run_tests.LAB_WORKERS) if labs is None else labs)


def test_the_summary_is_one_table_the_slowest_tests_and_the_closing_line(tmp_path: Path):
    report = tmp_path / "unit.xml"
    report.write_text(
        '<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
        '<testcase classname="tests.unit.test_a" name="test_fast" time="0.5"/>'
        '<testcase classname="tests.unit.test_a" name="test_slow" time="9.25"><failure/></testcase>'
        '<testcase classname="tests.unit.test_b" name="test_skipped" time="0"><skipped/></testcase>'
        "</testsuite></testsuites>"
    )
    unit = run_tests.read_junit(report, run_tests.TierResult("unit", 1, 12.0))
    run_tests.read_junit(report, unit)  # a second pass of the same tier adds up
    assert (unit.passed, unit.failed, unit.skipped, len(unit.times)) == (2, 2, 2, 6)
    missing = run_tests.read_junit(tmp_path / "none.xml", run_tests.TierResult("e2e", 4, 1.0))
    lines = run_tests.summary([unit, missing])
    assert sum("==> time per tier" in line for line in lines) == 1
    assert "     2 passed    2 failed    0 errors    2 skipped  FAILED (pytest exit 1)" in lines[2]
    assert lines[lines.index("==> the 6 slowest tests") + 1] == "       9.2 s  unit: tests.unit.test_a::test_slow"
    assert lines[-1] == "2 passed, 3 failed, 2 skipped"  # the e2e tier wrote no report: one error


def test_a_background_pass_counts_the_seconds_pytest_took_not_the_wait_for_it(tmp_path: Path):
    report = tmp_path / "cloud.xml"
    report.write_text('<testsuites><testsuite tests="1" time="156.97"><testcase name="t" time="1"/></testsuite>'
                      '<testsuite tests="0" time="0.5"/></testsuites>')  # fmt: skip
    assert run_tests.junit_seconds(report) == pytest.approx(157.47)
    assert run_tests.junit_seconds(tmp_path / "none.xml") == 0.0
