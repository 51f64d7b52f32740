"""How long a part of the checks may take: the run's budget, and deadlines judged against peers.

Two rules bound every measurement, so that one sick node cannot hold the checks hostage:

- **the run's budget** (``checks_timeout_s``): the whole run ends with a verdict by then; a part
  that has no time left is not started, and says so (:class:`Budget`);
- **peers** (``checks_peer_timeout_factor``): a node still running when the median node has
  finished ``factor`` times over is stopped and named, and the run goes on without it
  (:class:`PeerClock`); with no peers to judge by (a lone node, or most of them late), the
  absolute cap (``checks_node_timeout_s``) stops it.

No Ray and no torch here: the clocks are plain arithmetic, and the benchmark's phases
(:mod:`checks.cluster_bench`, :mod:`checks.allreduce`) wait on Ray with them.

Example::

    budget = Budget(600)
    clock = PeerClock(len(refs), factor=3, floor_s=10, cap_s=budget.cap(300))
    clock.finished(4.2)             # as each measurement comes back, its seconds
    clock.deadline_s()              # seconds from the start after which the rest are late
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

DEFAULT_PEER_FACTOR = 3.0  # checks_peer_timeout_factor
DEFAULT_NODE_TIMEOUT_S = 300  # checks_node_timeout_s: the cap when peers cannot judge
DEFAULT_BUDGET_S = 900  # checks_timeout_s: the whole run
PEER_FLOOR_S = 10.0  # the shortest peer deadline: a 1 s median must not stop a node after 3 s of jitter
PEER_SOURCE = "the peers' median x checks_peer_timeout_factor (at least {floor:g} s)"
CAP_SOURCE = "checks_node_timeout_s, the longest any one measurement may take"
BUDGET_SOURCE = "checks_timeout_s, the budget of the whole run"


@dataclass
class Budget:
    """The seconds a run may still spend, from its start (``total_s``) and the monotonic clock."""

    total_s: float
    started: float = field(default_factory=lambda: time.monotonic())

    def left(self) -> float:
        """Seconds left (never below 0)."""
        return max(0.0, self.total_s - (time.monotonic() - self.started))

    def cap(self, seconds: float) -> float:
        """``seconds``, or what is left of the budget when that is less."""
        return min(float(seconds), self.left())

    def spent(self) -> bool:
        """Whether less than a second is left."""
        return self.left() < 1.0


@dataclass
class PeerClock:
    """When ``count`` measurements that started together are late.

    + count: how many measurements run (each node's, or each GPU's)
    + factor: a measurement is late once the median one has finished ``factor`` times over
    + floor_s: the peer deadline is never shorter than this
    + cap_s: nor longer than this (the absolute cap, or what is left of the run's budget)

    >>> clock = PeerClock(3, factor=3, floor_s=10, cap_s=300)
    >>> clock.deadline_s()          # nobody has finished: only the cap
    300.0
    >>> clock.finished(4.0); clock.deadline_s()  # 1 of 3: the median node is still running
    300.0
    >>> clock.finished(6.0); clock.deadline_s()  # 2 of 3: the median took 6 s
    18.0
    """

    count: int
    factor: float = DEFAULT_PEER_FACTOR
    floor_s: float = PEER_FLOOR_S
    cap_s: float = DEFAULT_NODE_TIMEOUT_S
    durations: list[float] = field(default_factory=list)

    def finished(self, seconds: float) -> None:
        """Record one measurement's seconds."""
        self.durations.append(float(seconds))

    def median_s(self) -> float | None:
        """The median measurement's seconds, once at least half of them have finished (None before).

        The median of ``count`` is the ``ceil(count / 2)``-th to finish: the ones still running take
        longer, so that one is the median whatever they end up taking.
        """
        needed = math.ceil(self.count / 2)
        if self.count < 2 or len(self.durations) < needed:
            return None
        return sorted(self.durations)[needed - 1]

    def deadline_s(self) -> float:
        """Seconds from the start after which a measurement still running is late."""
        median = self.median_s()
        if median is None:
            return float(self.cap_s)
        return min(float(self.cap_s), max(self.floor_s, self.factor * median))

    def by_peers(self) -> bool:
        """Whether the deadline now comes from the peers (rather than from the cap)."""
        median = self.median_s()
        return median is not None and max(self.floor_s, self.factor * median) < self.cap_s

    def late(self, elapsed_s: float) -> dict[str, float | str | None]:
        """How to report a measurement stopped after ``elapsed_s``: its seconds, the peers' median,
        the deadline, and where that deadline comes from."""
        median = self.median_s()
        by_peers = self.by_peers()
        return {
            "elapsed_s": round(elapsed_s, 1),
            "peers_median_s": round(median, 1) if median is not None else None,
            "deadline_s": round(self.deadline_s(), 1),
            "source": PEER_SOURCE.format(floor=self.floor_s) if by_peers else CAP_SOURCE,
        }


def did_not_finish(stopped: dict[str, float | str | None], what: str) -> str:
    """The words for a stopped measurement: "did not finish the devices measurement in 18 s (peers' median 6 s)".

    >>> did_not_finish({"elapsed_s": 18.0, "peers_median_s": 6.0, "deadline_s": 18.0}, "its CPU measurement")
    "did not finish its CPU measurement in 18 s (peers' median 6 s)"
    >>> did_not_finish({"elapsed_s": 300.0, "peers_median_s": None, "deadline_s": 300.0}, "its CPU measurement")
    'did not finish its CPU measurement in 300 s (no peers to compare with)'
    """
    median = stopped.get("peers_median_s")
    peers = f"peers' median {median:g} s" if isinstance(median, (int, float)) else "no peers to compare with"
    return f"did not finish {what} in {stopped['elapsed_s']:g} s ({peers})"
