"""The deploy's phase timings (deploy/run/timings.py): which row an operation counts in, the rows
computed from recorded intervals, the printed table, and the checks' JSON report.

No test reads the wall clock: intervals are given, and the clock's ``time.monotonic`` is a
counter the test moves.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from deploy import post_checks
from deploy.run import timings
from deploy.run.timings import CHECKS, PhaseRow, Span, phase_of, phase_rows, render, with_phases

DEPLOY_DIR = Path(__file__).resolve().parents[2] / "deploy"


def rows_by_phase(rows: list[PhaseRow]) -> dict[str, PhaseRow]:
    return {row.phase: row for row in rows}


def test_every_step_of_the_deploy_counts_in_a_named_row():
    declared = {
        name
        for path in DEPLOY_DIR.rglob("*.py")
        for name in re.findall(r'^@deploy\("([^"]+)"\)', path.read_text(), re.M)
    }
    assert declared, "no @deploy found"
    assert declared <= set(timings.DEPLOY_PHASES), (
        f"add to DEPLOY_PHASES: {sorted(declared - set(timings.DEPLOY_PHASES))}"
    )


@pytest.mark.parametrize(
    ("names", "phase"),
    [
        ({"Base | Install base packages"}, "base packages"),
        ({"Docker | Install the Docker engine"}, "Docker"),
        ({"Ray image | Pull rayproject/ray:2.60.0-py311-gpu"}, "image pull"),
        ({"NVIDIA | Install the NVIDIA Container Toolkit 1.17.8"}, "NVIDIA"),
        ({"Shared storage | Mount /shared"}, "storage"),
        ({"Firewall | Load rayrig's nftables ruleset"}, "firewall"),
        ({"Ray node | Start the Ray head container"}, "Ray start"),
        ({"Cluster membership | Record the cluster's members"}, "Ray start"),
        ({"Ray image | Image mirror | Enable and start the image mirror"}, "image pull"),  # nested: the outer step
        ({"Image mirror | Enable and start the image mirror"}, "image pull"),
        ({"Create the private upload directory"}, "other"),
        ({"Image cache | Warm it"}, "Image cache"),  # a step the table does not know: a row of its own
        ({"Ray node | Wait for the Ray head to answer", "Ray node | Wait for the Ray head to listen"}, "Ray start"),
    ],
)
def test_an_operation_counts_in_the_row_of_its_step(names, phase):
    assert phase_of(names) == phase


def test_a_phase_is_the_wall_time_any_host_spent_in_it_and_names_its_slowest_host():
    spans = [
        Span("base packages", "lab-1", 3.0, 10.0),
        Span("base packages", "lab-2", 3.0, 20.0),  # the slowest: 17 s
        Span("Docker", "lab-1", 20.5, 25.0),
        Span("Docker", "lab-2", 20.5, 22.0),
        Span("Docker", "lab-1", 25.5, 30.0),  # lab-1: 4.5 + 4.5 = 9 s in two operations
        Span("Docker", "lab-2", 25.5, 26.0),
    ]
    rows = phase_rows(1.0, spans, 40.0)
    assert [row.phase for row in rows] == ["facts and plan", "base packages", "Docker", "total"]
    got = rows_by_phase(rows)
    assert got["facts and plan"] == PhaseRow("facts and plan", 2.0)
    assert got["base packages"] == PhaseRow("base packages", 17.0, "lab-2", 17.0)
    # 20.5 to 25 and 25.5 to 30: the half second between the operations is no host's
    assert got["Docker"] == PhaseRow("Docker", 9.0, "lab-1", 9.0)
    assert got["total"] == PhaseRow("total", 39.0)


def test_a_phase_split_around_other_steps_counts_only_its_own_operations():
    # the pull starts in the background after Docker and is waited for before Ray starts
    spans = [
        Span("image pull", "a", 10.0, 11.0),
        Span("firewall", "a", 11.0, 30.0),
        Span("image pull", "a", 30.0, 32.0),
        Span("Ray start", "a", 32.0, 40.0),
    ]
    rows = rows_by_phase(phase_rows(10.0, spans, 40.0))
    assert rows["image pull"] == PhaseRow("image pull", 3.0, "a", 3.0)
    assert list(rows) == ["facts and plan", "image pull", "firewall", "Ray start", "total"]


def test_rows_keep_the_deploys_order_with_unknown_steps_other_and_the_checks_last():
    spans = [
        Span("Ray start", "a", 9.0, 10.0),
        Span("Image cache", "a", 1.0, 2.0),
        Span("other", "a", 0.5, 0.9),
        Span("firewall", "a", 5.0, 6.0),
        Span(CHECKS, None, 10.0, 14.0),
        Span("base packages", "a", 2.0, 3.0),
    ]
    rows = phase_rows(0.0, spans, 15.0)
    names = ["facts and plan", "base packages", "firewall", "Ray start", "Image cache", "other", "checks", "total"]
    assert [row.phase for row in rows] == names
    assert rows_by_phase(rows)["facts and plan"].seconds == 0.5  # up to the first operation, not the checks
    assert rows_by_phase(rows)[CHECKS] == PhaseRow(CHECKS, 4.0)  # the checks run once, on no host in particular


def test_other_shows_only_when_it_took_time():
    rows = phase_rows(0.0, [Span("other", "a", 1.0, 1.01), Span("Docker", "a", 1.1, 2.0)], 3.0)
    assert "other" not in rows_by_phase(rows)


def test_an_operation_nested_in_another_counts_once_for_its_host():
    spans = [Span("NVIDIA", "gpu-1", 0.0, 10.0), Span("NVIDIA", "gpu-1", 2.0, 4.0)]
    assert rows_by_phase(phase_rows(0.0, spans, 10.0))["NVIDIA"] == PhaseRow("NVIDIA", 10.0, "gpu-1", 10.0)


def test_a_duration_measured_on_the_host_replaces_its_operations_and_sets_the_row_at_least():
    # the pull ran in the background: its waiting operation was short, the pull itself was not
    spans = [Span("image pull", "lab-1", 50.0, 51.0), Span("image pull", "lab-2", 50.0, 50.5)]
    noted = {("image pull", "lab-1"): 30.0, ("image pull", "lab-2"): 42.0}
    row = rows_by_phase(phase_rows(0.0, spans, 60.0, noted))["image pull"]
    assert row == PhaseRow("image pull", 42.0, "lab-2", 42.0)
    # a phase noted without any operation of its own still shows
    only_noted = rows_by_phase(phase_rows(0.0, [], 60.0, {("image pull", "lab-3"): 7.0}))
    assert only_noted["image pull"] == PhaseRow("image pull", 7.0, "lab-3", 7.0)


def test_the_table_names_each_phase_its_seconds_and_slowest_host():
    rows = [
        PhaseRow("facts and plan", 4.04),
        PhaseRow("base packages", 17.0, "rayrig-lab-2", 16.94),
        PhaseRow(CHECKS, 30.0),
        PhaseRow("total", 51.04),
    ]
    lines = render(rows).splitlines()
    assert lines[0] == "--> Phase timings (wall seconds; slowest host)"
    assert re.fullmatch(r"facts and plan\s+4\.0", lines[3])
    assert re.fullmatch(r"base packages\s+17\.0\s+rayrig-lab-2\s+16\.9", lines[4])
    assert re.fullmatch(r"checks\s+30\.0", lines[5])
    assert re.fullmatch(r"total\s+51\.0", lines[6])
    assert "until the deploy stopped early" in render(rows, stopped_early=True).splitlines()[0]


def test_the_json_report_gets_the_rows_and_keeps_its_own_keys():
    report = {"verdict": {"status": "PASS"}}
    merged = with_phases(report, [PhaseRow("Docker", 9.04, "lab-1", 8.96), PhaseRow("total", 20.0)])
    assert merged["verdict"] == {"status": "PASS"}
    assert merged["phases"] == [
        {"phase": "Docker", "seconds": 9.0, "slowest_host": "lab-1", "slowest_host_seconds": 9.0},
        {"phase": "total", "seconds": 20.0, "slowest_host": None, "slowest_host_seconds": None},
    ]


# --- The clock as pyinfra drives it ----------------------------------------------------------


class FakeHost:
    def __init__(self, name: str):
        self.name = name


class FakeState:
    """What the clock reads of pyinfra's State: the operations' order, names and hosts."""

    def __init__(self, ops: dict[str, str], hosts: dict[str, list[str]]):
        self.order = list(ops)
        self.names = ops
        self.ops = {FakeHost(h): {op: True for op in h_ops} for h, h_ops in hosts.items()}
        self.hosts = {h.name: h for h in self.ops}
        self.callback_handlers: list = []

    def add_callback_handler(self, handler):
        self.callback_handlers.append(handler)

    def get_op_order(self):
        return self.order

    def get_op_meta(self, op_hash):
        return SimpleNamespace(names={self.names[op_hash]})

    def run(self, clock_time, schedule):
        """Drive the callbacks: ``schedule`` is [(op, [(host, start, end, ok)])], one operation at a time."""
        for op, runs in schedule:
            for handler in self.callback_handlers:
                handler.operation_start(self, op)
            for host, start, end, ok in runs:
                clock_time.now = start
                for handler in self.callback_handlers:
                    handler.operation_host_start(self, self.hosts[host], op)
                clock_time.now = end
                if op not in self.ops[self.hosts[host]]:
                    continue  # pyinfra reports the start of an operation a host skips, and nothing after
                for handler in self.callback_handlers:
                    if ok:
                        handler.operation_host_success(self, self.hosts[host], op)
                    else:
                        handler.operation_host_error(self, self.hosts[host], op)
            if not all(ok for *_, ok in runs):
                return  # pyinfra stops: no host remains
            for handler in self.callback_handlers:
                handler.operation_end(self, op)


@pytest.fixture
def clock_time(monkeypatch):
    clock_time = SimpleNamespace(now=0.0)
    monkeypatch.setattr(timings.time, "monotonic", lambda: clock_time.now)
    return clock_time


@pytest.fixture
def deploy_state():
    ops = {
        "o1": "Create the private upload directory",
        "o2": "Docker | Install the Docker engine",
        "o3": "Firewall | Install nftables",
        "o4": "Post-deploy checks (run after the last operation)",
    }
    # b skips the firewall's operation: pyinfra still reports its start there
    return FakeState(ops, {"a": ["o1", "o2", "o3", "o4"], "b": ["o1", "o2", "o4"]})


def test_the_table_prints_once_at_the_end_of_the_last_operation_when_no_checks_run(clock_time, deploy_state, capsys):
    timings.start_phase_clock(deploy_state)
    assert timings.start_phase_clock(deploy_state) is deploy_state.callback_handlers[0]  # one clock per run
    deploy_state.run(
        clock_time,
        [
            ("o1", [("a", 1.0, 1.2, True), ("b", 1.0, 1.1, True)]),
            ("o2", [("a", 2.0, 5.0, True), ("b", 2.0, 9.0, True)]),
            ("o3", [("a", 9.5, 10.0, True), ("b", 9.0, 9.0, True)]),  # skipped on b: a start, no end, not counted
            ("o4", [("a", 10.0, 10.0, True), ("b", 10.0, 10.0, True)]),
        ],
    )
    err = capsys.readouterr().err
    assert err.count("--> Phase timings") == 1
    assert "stopped early" not in err
    assert re.search(r"^Docker\s+7\.0\s+b\s+7\.0$", err, re.M)
    assert re.search(r"^firewall\s+0\.5\s+a\s+0\.5$", err, re.M)
    assert re.search(r"^other\s+0\.2\s+a\s+0\.2$", err, re.M)
    assert re.search(r"^total\s+10\.0$", err, re.M)
    timings._print_unfinished()  # at exit: printed already
    assert capsys.readouterr().err == ""


def test_with_checks_the_table_prints_after_them_with_their_row_and_goes_into_their_report(
    clock_time, deploy_state, tmp_path, capsys
):
    report = tmp_path / "checks-lab-1.json"
    report.write_text(json.dumps({"verdict": {"status": "FAIL"}}))

    class ChecksFailed(Exception):
        pass

    class RunChecks:  # post_checks' callback, registered after the clock
        def __getattr__(self, name):
            return lambda *args: None

        def operation_end(self, state, op):
            if op == "o4":
                with timings.checks_phase(state):
                    clock_time.now = 25.0
                    timings.report_phases(state, report)
                    print("VERDICT: FAIL", file=sys.stderr)
                    raise ChecksFailed

    timings.start_phase_clock(deploy_state)
    timings.table_after_checks(deploy_state)
    deploy_state.add_callback_handler(RunChecks())
    with pytest.raises(ChecksFailed):
        deploy_state.run(
            clock_time,
            [
                ("o2", [("a", 2.0, 5.0, True), ("b", 2.0, 9.0, True)]),
                ("o4", [("a", 10.0, 10.0, True), ("b", 10.0, 10.0, True)]),
            ],
        )
    err = capsys.readouterr().err
    assert err.index("VERDICT: FAIL") < err.index("--> Phase timings")
    assert err.count("--> Phase timings") == 1
    assert re.search(r"^checks\s+15\.0$", err, re.M)
    phases = {p["phase"]: p for p in json.loads(report.read_text())["phases"]}
    assert json.loads(report.read_text())["verdict"] == {"status": "FAIL"}
    assert phases["checks"] == {"phase": "checks", "seconds": 15.0, "slowest_host": None, "slowest_host_seconds": None}
    assert phases["Docker"]["slowest_host"] == "b"
    assert phases["total"]["seconds"] == 25.0


def test_a_deploy_that_stopped_early_prints_what_ran_at_exit_headed_as_such(clock_time, deploy_state, capsys):
    timings.start_phase_clock(deploy_state)
    timings.note_host_phase(deploy_state, deploy_state.hosts["a"], "image pull", 3.0)
    deploy_state.run(
        clock_time,
        [
            ("o2", [("a", 2.0, 5.0, True), ("b", 2.0, 9.0, True)]),
            ("o3", [("a", 9.5, 10.0, False)]),  # fails on every host left: later operations never end
        ],
    )
    assert capsys.readouterr().err == ""
    clock_time.now = 11.0
    timings._print_unfinished()
    err = capsys.readouterr().err
    assert "--> Phase timings (wall seconds; slowest host, until the deploy stopped early)" in err
    assert re.search(r"^firewall\s+0\.5\s+a\s+0\.5$", err, re.M)
    assert re.search(r"^image pull\s+3\.0\s+a\s+3\.0$", err, re.M)
    assert re.search(r"^total\s+11\.0$", err, re.M)
    timings._print_unfinished()
    assert capsys.readouterr().err == ""


def test_a_run_whose_operations_never_began_prints_nothing_at_exit(clock_time, deploy_state, capsys):
    timings.start_phase_clock(deploy_state)  # the inventory was refused, or --dry
    timings._print_unfinished()
    assert capsys.readouterr().err == ""


class CheckedState(FakeState):
    """A run whose hosts all finished (``failed``: those that did not), for post_checks' callback."""

    def __init__(self, failed: tuple[str, ...] = ()):
        super().__init__({"o1": "Docker | Install the Docker engine", "o2": "Post-deploy checks"}, {"a": ["o1", "o2"]})
        self.failed_hosts = {h for h in self.ops if h.name in failed}
        self.inventory = SimpleNamespace(iter_activated_hosts=lambda: list(self.ops))


def test_the_deploys_checks_print_the_table_after_their_fail_verdict(clock_time, tmp_path, monkeypatch, capsys):
    report = tmp_path / "checks.json"
    report.write_text("{}")

    def failing_checks(state, always=False):
        clock_time.now = 30.0
        timings.report_phases(state, report)
        print("VERDICT: FAIL", file=sys.stderr)
        raise post_checks.ChecksFailed("post-deploy checks (full): FAIL")

    monkeypatch.setattr(post_checks, "run_checks", failing_checks)
    state = CheckedState()
    timings.start_phase_clock(state)
    timings.table_after_checks(state)
    state.add_callback_handler(post_checks._RunChecks({"o2"}, always=False))
    with pytest.raises(post_checks.ChecksFailed):
        state.run(clock_time, [("o1", [("a", 1.0, 5.0, True)]), ("o2", [("a", 10.0, 10.0, True)])])
    err = capsys.readouterr().err
    assert err.count("--> Phase timings") == 1 and err.index("VERDICT: FAIL") < err.index("--> Phase timings")
    assert re.search(r"^checks\s+20\.0$", err, re.M)
    assert [p["phase"] for p in json.loads(report.read_text())["phases"]][-2:] == ["checks", "total"]


def test_checks_skipped_for_a_failed_host_still_print_the_table_without_their_row(clock_time, capsys):
    state = CheckedState(failed=("a",))
    timings.start_phase_clock(state)
    timings.table_after_checks(state)
    state.add_callback_handler(post_checks._RunChecks({"o2"}, always=False))
    state.run(clock_time, [("o1", [("a", 1.0, 5.0, True)]), ("o2", [("a", 10.0, 10.0, True)])])
    err = capsys.readouterr().err
    assert err.index("Post-deploy checks skipped: the deploy failed on a") < err.index("--> Phase timings")
    assert err.count("--> Phase timings") == 1
    assert not re.search(r"^checks\s", err, re.M)
