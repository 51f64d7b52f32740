"""Wall time per phase of a deploy, and the slowest host of each, printed at its end.

A phase is a step of ``deploy/cluster.py`` (base packages, Docker, image pull, NVIDIA,
storage, firewall, Ray start, monitoring) and the post-deploy checks. A pyinfra callback
(:class:`PhaseClock`) notes when each operation starts and ends on each host; an
operation's phase is the name of the ``@deploy`` it belongs to, which pyinfra puts in
front of its name ("Docker | Install the Docker engine"). "facts and plan" is the time
from loading the deploy file (facts are read while it loads) to the first operation.

The table prints once per run: after the checks' verdict when they run, else at the
end of the last operation, and from an exit handler, headed as such, when the deploy
stopped early. The checks' JSON report gets the same rows under ``"phases"``.

Example::

    start_phase_clock(host.state)   # at the top of the deploy file
    note_host_phase(state, host, "image pull", 42.0)   # a duration measured on the host itself
"""

from __future__ import annotations

import atexit
import json
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click
from pyinfra.api import BaseStateCallback

from checks.report import format_table, write_json
from deploy.run.memo import run_memo

FACTS = "facts and plan"
CHECKS = "checks"
OTHER = "other"
TOTAL = "total"

# The @deploy names of deploy/*.py, and the row each one's operations count in. A @deploy
# called inside another counts in the outer one's ("Ray image | Image mirror | ...").
DEPLOY_PHASES = {
    "Base": "base packages",
    "Docker": "Docker",
    "Ray image": "image pull",
    "Image mirror": "image pull",  # the head's registry mirror, for the image
    "NVIDIA": "NVIDIA",
    "Shared storage": "storage",
    "Firewall": "firewall",
    "Ray node": "Ray start",
    "Cluster membership": "Ray start",
    "Monitoring server": "monitoring",
    "Monitoring exporters": "monitoring",
    "Health gate (on every host)": "Ray start",  # the drop-in that keeps a quarantined node stopped
    "Health gate (the service)": "monitoring",
    "Remove the host from the cluster": "absent hosts",
}
# Rows in the order they print; a @deploy not named above gets a row of its own after them.
PHASE_ORDER = [FACTS, *dict.fromkeys(DEPLOY_PHASES.values())]


@dataclass(frozen=True)
class Span:
    """One operation on one host (``host`` None: the checks, which run once for the cluster)."""

    phase: str
    host: str | None
    start: float
    end: float


@dataclass(frozen=True)
class PhaseRow:
    phase: str
    seconds: float
    slowest_host: str | None = None
    slowest_host_seconds: float | None = None


def phase_of(names: Sequence[str] | set[str]) -> str:
    """The row an operation counts in, from its names (pyinfra's ``op_meta.names``).

    >>> phase_of({"Docker | Install the Docker engine"})
    'Docker'
    >>> phase_of({"Create the private upload directory"})
    'other'
    """
    for name in sorted(names):
        deploy_name, bar, _op = name.partition(" | ")
        if bar:
            return DEPLOY_PHASES.get(deploy_name, deploy_name)
    return OTHER


def _covered(spans: Sequence[Span]) -> float:
    """Seconds during which at least one of ``spans`` ran (overlaps count once)."""
    covered, reach = 0.0, float("-inf")
    for span in sorted(spans, key=lambda s: s.start):
        if span.end > reach:
            covered += span.end - max(span.start, reach)
            reach = span.end
    return covered


def _hosts(spans: Sequence[Span]) -> list[str]:
    return list(dict.fromkeys(s.host for s in spans if s.host is not None))


def phase_rows(
    started: float, spans: Sequence[Span], now: float, noted: Mapping[tuple[str, str], float] | None = None
) -> list[PhaseRow]:
    """The table's rows, from what was recorded: one per phase that ran, then the total.

    + started: when the clock started (the deploy file began to load)
    + spans: the operations as they ran on each host, and the checks
    + now: the end of the total
    + noted: seconds measured by other means, per (phase, host) (:func:`note_host_phase`);
      they replace that host's operations' seconds and the phase shows at least the longest

    A phase's seconds are the wall time during which any host ran one of its operations;
    its slowest host is the one whose own operations in it took longest in total (an operation
    nested in another counts once). "other" (operations outside any step) shows only
    when it took 0.05 s or more.

    >>> [(r.phase, r.seconds, r.slowest_host) for r in phase_rows(0.0, [Span("Docker", "b", 2.0, 6.0)], 7.0)]
    [('facts and plan', 2.0, None), ('Docker', 4.0, 'b'), ('total', 7.0, None)]
    """
    noted = noted or {}
    by_phase: dict[str, list[Span]] = {}
    for span in sorted(spans, key=lambda s: s.start):
        by_phase.setdefault(span.phase, []).append(span)
    for phase, _host in noted:
        by_phase.setdefault(phase, [])
    op_starts = [s.start for s in spans if s.phase != CHECKS]
    rows = [PhaseRow(FACTS, (min(op_starts) if op_starts else now) - started)]
    known = [p for p in PHASE_ORDER if p in by_phase]
    unknown = [p for p in by_phase if p not in PHASE_ORDER and p not in (OTHER, CHECKS)]
    for phase in [*known, *unknown, *[p for p in (OTHER, CHECKS) if p in by_phase]]:
        phase_spans = by_phase[phase]
        per_host = {host: _covered([s for s in phase_spans if s.host == host]) for host in _hosts(phase_spans)}
        mine = {host: seconds for (p, host), seconds in noted.items() if p == phase}
        per_host.update(mine)
        seconds = max([_covered(phase_spans), *mine.values()])
        if phase == OTHER and round(seconds, 1) == 0:  # a few quick operations outside any step
            continue
        if per_host:
            slowest = max(per_host, key=lambda h: (per_host[h], h))
            rows.append(PhaseRow(phase, seconds, slowest, per_host[slowest]))
        else:
            rows.append(PhaseRow(phase, seconds))
    rows.append(PhaseRow(TOTAL, now - started))
    return rows


def render(rows: Sequence[PhaseRow], stopped_early: bool = False) -> str:
    """The table as printed, under its header line."""
    when = ", until the deploy stopped early" if stopped_early else ""
    table = format_table(
        ["phase", "seconds", "slowest host", "its seconds"],
        [
            [
                row.phase,
                f"{row.seconds:.1f}",
                row.slowest_host or "",
                "" if row.slowest_host_seconds is None else f"{row.slowest_host_seconds:.1f}",
            ]
            for row in rows
        ],
        right=[1, 3],
    )
    return f"--> Phase timings (wall seconds; slowest host{when})\n{table}"


def with_phases(report: dict[str, Any], rows: Sequence[PhaseRow]) -> dict[str, Any]:
    """``report`` with the rows under ``"phases"``: a list of
    ``{"phase", "seconds", "slowest_host", "slowest_host_seconds"}``, seconds rounded to 0.1."""
    phases = []
    for row in rows:
        entry = asdict(row)
        entry["seconds"] = round(row.seconds, 1)
        if row.slowest_host_seconds is not None:
            entry["slowest_host_seconds"] = round(row.slowest_host_seconds, 1)
        phases.append(entry)
    return {**report, "phases": phases}


@dataclass(eq=False)
class PhaseClock(BaseStateCallback):
    """Notes when each operation starts and ends on each host, and prints the table once.

    It keeps host names and times, never the State (a run's memo is dropped with its State).
    """

    started: float = field(default_factory=lambda: time.monotonic())
    spans: list[Span] = field(default_factory=list)
    noted: dict[tuple[str, str], float] = field(default_factory=dict)
    after_checks: bool = False  # the checks print the table (post_checks), not the last operation
    printed: bool = False
    last_op: str | None = None
    last_op_ended: bool = False
    checks_started: float | None = None
    _open: dict[tuple[str, str], float] = field(default_factory=dict)
    _phases: dict[str, str] = field(default_factory=dict)

    def operation_host_start(self, state: Any, host: Any, op_hash: str) -> None:  # type: ignore[override]
        if self.last_op is None:
            self.last_op = state.get_op_order()[-1]
        if op_hash not in state.ops[host]:  # pyinfra reports a start for an operation the host skips
            return
        if op_hash not in self._phases:
            self._phases[op_hash] = phase_of(state.get_op_meta(op_hash).names)
        self._open[(host.name, op_hash)] = time.monotonic()

    def operation_host_success(self, state: Any, host: Any, op_hash: str, retry_count: int = 0) -> None:  # type: ignore[override]
        self._close(host.name, op_hash)

    def operation_host_error(  # type: ignore[override]
        self, state: Any, host: Any, op_hash: str, retry_count: int = 0, max_retries: int = 0
    ) -> None:
        self._close(host.name, op_hash)

    def operation_end(self, state: Any, op_hash: str) -> None:  # type: ignore[override]
        if op_hash == self.last_op and not self.after_checks:
            self.print_table()

    def _close(self, host_name: str, op_hash: str) -> None:
        start = self._open.pop((host_name, op_hash), None)
        if start is not None:
            self.spans.append(Span(self._phases[op_hash], host_name, start, time.monotonic()))
            self.last_op_ended = self.last_op_ended or op_hash == self.last_op

    def end_checks(self) -> None:
        """The checks' row ends now (once)."""
        if self.checks_started is not None:
            self.spans.append(Span(CHECKS, None, self.checks_started, time.monotonic()))
            self.checks_started = None

    def rows(self) -> list[PhaseRow]:
        """The rows as known now; an operation still running counts up to now."""
        now = time.monotonic()
        running = [Span(self._phases[op], host, start, now) for (host, op), start in self._open.items()]
        return phase_rows(self.started, [*self.spans, *running], now, self.noted)

    def print_table(self, stopped_early: bool = False) -> None:
        if not self.printed:
            self.printed = True
            click.echo(render(self.rows(), stopped_early), err=True)


_CLOCKS: weakref.WeakSet[PhaseClock] = weakref.WeakSet()


def _print_unfinished() -> None:
    """At exit: the table of a run whose operations began but which printed none (it stopped early)."""
    for clock in list(_CLOCKS):
        if clock.last_op is not None and not clock.printed:
            clock.print_table(stopped_early=not clock.last_op_ended)


atexit.register(_print_unfinished)


def start_phase_clock(state: Any) -> PhaseClock:
    """Start timing this run's phases (once per run; later calls return the same clock)."""
    memo = run_memo(state, "timings")
    if "clock" not in memo:
        memo["clock"] = PhaseClock()
        _CLOCKS.add(memo["clock"])
        state.add_callback_handler(memo["clock"])
    return memo["clock"]


def note_host_phase(state: Any, host: Any, phase: str, seconds: float) -> None:
    """Count ``seconds`` as ``host``'s time in ``phase`` (a row's name, like ``"image pull"``),
    in place of its operations' own: for work measured on the host itself, like a pull
    that ran in the background while other steps went on."""
    start_phase_clock(state).noted[(phase, getattr(host, "name", host))] = seconds


def table_after_checks(state: Any) -> None:
    """The post-deploy checks will print the table (after their verdict), not the last operation."""
    start_phase_clock(state).after_checks = True


@contextmanager
def checks_phase(state: Any) -> Iterator[None]:
    """Time the post-deploy checks as the "checks" row, then print the table, whatever happens.

    The row ends at :func:`report_phases` (the checks wrote their report) or when the checks
    raise before it; checks that were skipped add no row.
    """
    clock = start_phase_clock(state)
    clock.checks_started = time.monotonic()
    try:
        yield
    except BaseException:
        clock.end_checks()
        raise
    finally:
        clock.checks_started = None
        clock.print_table()


def report_phases(state: Any, json_path: str | Path) -> None:
    """End the checks' row and add the rows to the checks' JSON report at ``json_path``."""
    clock = start_phase_clock(state)
    clock.end_checks()
    path = Path(json_path)
    write_json(with_phases(json.loads(path.read_text()), clock.rows()), path)
