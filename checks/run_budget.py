"""The full checks' run under one budget (``checks_timeout_s``): what each part spent, and what was
not started because nothing was left.

:class:`checks.deadlines.Budget` counts the seconds; :class:`Parts` adds what the report and the
verdict need: each part's seconds (``"budget"`` in the JSON report) and, for a part that found
no time left, a FAIL that says so and what to do. The benchmark also gets the words for a run that
``timeout`` stopped (:func:`benchmark_stopped`), and the line its command prints so that the
operator's side knows its exit status (:data:`EXIT_MARKER`).

Example::

    parts = Parts(Budget(settings["checks_timeout_s"]))
    with parts.part("preflight"):
        ...
    if parts.left() < MIN_PART_S:
        reasons.append(parts.not_run("storage"))
    report["budget"] = parts.as_dict()
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .deadlines import Budget
from .reasons import FAIL, Reason

PARTS = {"preflight": "preflight", "cluster_state": "cluster state", "storage": "shared storage",
         "monitoring": "monitoring", "benchmark": "benchmark"}  # fmt: skip
MIN_PART_S = 10  # a part with less of the budget left is not started
BENCHMARK_MARGIN_S = 20  # the benchmark aims to end this long before the budget; `timeout` kills it this long after
PROBE_GRACE_S = 15  # beyond a node's preflight cap: `timeout -k 5` and the connection's own seconds
EXIT_MARKER = "RAYRIG_BENCHMARK_EXIT="  # the line by which the benchmark's command reports its exit status
STOPPED = {124, 137}  # what `timeout` exits with when it stopped the command (TERM, then KILL)


@dataclass
class Parts:
    """Each part's seconds under ``budget``, by part (None: not run)."""

    budget: Budget
    seconds: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(PARTS))

    def left(self) -> float:
        """Seconds left of the budget."""
        return self.budget.left()

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Count the seconds of the block as part ``name``'s."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(time.monotonic() - started, 1)

    def not_run(self, name: str) -> Reason:
        """The FAIL for part ``name``, not started because the budget ran out; it says where the time went."""
        spent = [f"{PARTS[part]} {seconds:g} s" for part, seconds in self.seconds.items() if seconds is not None]
        where = f" ({', '.join(spent)})" if spent else ""
        return Reason(
            FAIL,
            f"{PARTS[name]}: not run: the checks' budget of {self.budget.total_s:g} s (checks_timeout_s) ran out"
            f"{where}; raise checks_timeout_s, or look at the slow part named above",
        )

    def as_dict(self) -> dict[str, Any]:
        """``{"total_s", "spent_s", "by_part": {part: seconds or None}}`` for the JSON report."""
        spent = self.budget.total_s - self.budget.left()
        return {"total_s": self.budget.total_s, "spent_s": round(spent, 1), "by_part": dict(self.seconds)}


def benchmark_stopped(total_s: float) -> Reason:
    """The FAIL for a benchmark that ``timeout`` stopped at the budget."""
    return Reason(
        FAIL,
        f"the benchmark was stopped at the checks' budget ({total_s:g} s, checks_timeout_s); "
        "the report holds the phases it finished",
    )


def exit_status(lines: list[str]) -> int | None:
    """The exit status the benchmark's command printed after :data:`EXIT_MARKER` (None without one).

    >>> exit_status(["progress", "RAYRIG_BENCHMARK_EXIT=124"])
    124
    """
    for line in reversed(lines):
        text = line.strip()
        if text.startswith(EXIT_MARKER) and text[len(EXIT_MARKER) :].isdigit():
            return int(text[len(EXIT_MARKER) :])
    return None
