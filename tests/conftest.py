"""Shared pytest set-up: instant fake hosts, and a per-tier timing summary when one pytest runs several tiers.

``make test`` (scripts/run_tests.py) runs one pytest per tier and prints its own table of the tiers;
this one is for a ``pytest tests/`` that spans tiers, so that the table is printed once either way.
"""

from __future__ import annotations

import os
from collections import defaultdict

os.environ.setdefault("PYINFRA_FAKE_DELAY", "0")
os.environ.setdefault("PYINFRA_FAKE_DELAY_JITTER", "0")

_TIER_SECONDS: dict[str, float] = defaultdict(float)
_TIER_COUNTS: dict[str, int] = defaultdict(int)


def _tier(nodeid: str) -> str:
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


def pytest_runtest_logreport(report):
    _TIER_SECONDS[_tier(report.nodeid)] += report.duration
    if report.when == "call":
        _TIER_COUNTS[_tier(report.nodeid)] += 1


def pytest_terminal_summary(terminalreporter):
    if len(_TIER_SECONDS) < 2:  # one tier: scripts/run_tests.py's table says it
        return
    terminalreporter.section("time per tier")
    for tier in sorted(_TIER_SECONDS):
        terminalreporter.write_line(
            f"{tier:8s} {_TIER_COUNTS[tier]:4d} tests {_TIER_SECONDS[tier]:8.1f} s (set-up and tear-down included)"
        )
