"""``scripts/run_tests.py``: the tiers in their order, the background lab only when the e2e tier waits for it,
one table at the end."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from deploy.paths import repo_root

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
        (["unit", "plan", "cloud", "e2e"], "plan"),
        (["cloud", "e2e"], "cloud"),
        (["unit", "e2e"], None),  # not beside the unit tier's timing tests: the e2e tier brings it up itself
        (["e2e"], None),
        (["plan", "cloud"], None),  # no e2e tier to wait for it: no lab at all
    ],
)
def test_the_background_lab_starts_only_when_the_e2e_tier_will_wait_for_it(tiers, meanwhile):
    assert run_tests.lab_comes_up_meanwhile(tiers) == meanwhile


def test_xdist_workers_for_the_cpu_tiers_unless_argv_says_otherwise(tmp_path):
    junit = tmp_path / "j.xml"
    assert run_tests.pytest_command("plan", junit, [])[3:5] == ["-n", "2"]
    assert "-n" not in run_tests.pytest_command("e2e", junit, [])
    assert run_tests.pytest_command("unit", junit, ["-n", "0"]).count("-n") == 1
    assert "-n" not in run_tests.pytest_command("unit", junit, ["-p", "no:xdist"])


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
    missing = run_tests.read_junit(tmp_path / "none.xml", run_tests.TierResult("e2e", 4, 1.0))
    lines = run_tests.summary([unit, missing])
    assert sum("==> time per tier" in line for line in lines) == 1
    assert "     1 passed    1 failed    0 errors    1 skipped  FAILED (pytest exit 1)" in lines[2]
    assert lines[lines.index("==> the 3 slowest tests") + 1] == "       9.2 s  unit: tests.unit.test_a::test_slow"
    assert lines[-1] == "1 passed, 2 failed, 1 skipped"  # the e2e tier wrote no report: one error
