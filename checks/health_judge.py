"""The health gate's judgement: findings from one round's signals, and what to do about them. No I/O.

The gate (:mod:`checks.health_gate`) gathers a round's signals and calls, for every host:

- :func:`ray_findings`: not an alive Ray node, or its resources differ from the inventory's;
- :func:`disk_findings`: Ray's temp folder or Docker's data root below ``health_min_free_fraction``;
- :func:`probe_findings`: the functional probe missed its deadline or is slower than
  ``health_probe_fraction`` of its peers' median speed;
- the GPU findings of :func:`checks.monitoring.gpu_reasons` and the targets of
  :func:`checks.monitoring.target_reasons` (Prometheus).

Then :func:`decide` turns every host's FAIL findings and its quarantine marker into the next
state and the actions: quarantine a worker after ``fail_after`` failed rounds in a row (within
``max_quarantined``), report the head instead, admit a quarantined worker after ``pass_after``
passed rechecks in a row; a quarantine by an operator is never lifted here.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from .reasons import FAIL, INFO, Reason

OK, FAILING, QUARANTINED = "ok", "failing", "quarantined"
GATE, OPERATOR = "gate", "operator"
QUARANTINE, ADMIT, REPORT, HELD = "quarantined", "admitted", "reported", "not acted on"
#: A probe is judged slow only when it is also this many seconds over the peers' median: on a
#: busy machine a 0.1 s probe can take 0.3 s without anything being wrong.
PROBE_FLOOR_S = 1.0
SOURCE_RAY = "Ray's view of the cluster (ray.nodes() on the head)"
SOURCE_DECLARED = "the inventory's ray_num_cpus, ray_num_gpus and ray_resources"
SOURCE_DISK = "statvfs of the folder on the host; health_min_free_fraction"
SOURCE_PROBE = "the functional probe against the peers' median; health_probe_fraction"
SOURCE_DEADLINE = "the functional probe's deadline, health_probe_deadline_s"


@dataclass(frozen=True)
class HostState:
    """One host's standing between rounds."""

    status: str = OK
    fails: int = 0  # failed rounds in a row (in the cluster)
    passes: int = 0  # passed rechecks in a row (quarantined)
    since: float | None = None  # quarantined since
    by: str | None = None  # who quarantined it
    reason: str | None = None
    held: bool = False  # its quarantine was not acted on (the limit, or the head): said once
    findings: tuple[dict[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["findings"] = list(self.findings)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HostState:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["findings"] = tuple(known.get("findings") or ())
        return cls(**known)


@dataclass(frozen=True)
class Action:
    """What the gate does (``quarantined``, ``admitted``) or says (``reported``, ``not acted on``) of a host."""

    action: str
    host: str
    reason: str
    by: str = GATE
    findings: tuple[dict[str, Any], ...] = ()
    observed: bool = False  # already done by someone else: only recorded

    def event(self, now: float) -> dict[str, Any]:
        return {"time": now, "host": self.host, "action": self.action, "by": self.by, "reason": self.reason,
                "findings": list(self.findings)}  # fmt: skip


@dataclass(frozen=True)
class Limits:
    """The gate's thresholds (the ``health_*`` settings)."""

    fail_after: int = 2
    pass_after: int = 3
    max_quarantined: int | str = "25%"
    min_free_fraction: float = 0.05
    probe_fraction: float = 0.5


# --- findings ----------------------------------------------------------------------------------


def ray_findings(
    host: str, node: Mapping[str, Any] | None, declared: Mapping[str, Any], starting_s: float | None = None
) -> list[Reason]:
    """``node``: the host's alive Ray node (``{"resources": {...}}``) or None; ``declared``: Ray's names to amounts
    (an ``"auto"`` or None amount is not compared). ``starting_s``: its container started that many seconds
    ago and has not had the time to join yet (a deploy's replacement, a restart): an INFO, not a FAIL."""
    if node is None and starting_s is not None:
        return [Reason(INFO, f"not an alive Ray node yet: its container started {starting_s:.0f} s ago", host=host,
                       source=SOURCE_RAY)]  # fmt: skip
    if node is None:
        return [Reason(FAIL, "not an alive Ray node", host=host, source=SOURCE_RAY)]
    reasons = []
    resources = node.get("resources") or {}
    for name, amount in declared.items():
        if amount in (None, "auto"):
            continue
        got = float(resources.get(name, 0.0))
        if abs(got - float(amount)) > 1e-6:
            reasons.append(Reason(FAIL, f"its Ray node has {got:g} {name}, the inventory declares {amount}",
                                  host=host, source=SOURCE_DECLARED))  # fmt: skip
    return reasons


def disk_findings(host: str, disks: Sequence[Mapping[str, Any]], min_free_fraction: float) -> list[Reason]:
    """A FAIL for each folder with less than ``min_free_fraction`` of its filesystem free."""
    reasons = []
    for disk in disks:
        free, size = disk.get("free"), disk.get("size")
        if not size or free is None:
            continue
        fraction = free / size
        if fraction < min_free_fraction:
            what, path, mib = disk.get("what", "a folder"), disk.get("path"), 2**20
            message = (f"{what} ({path}) has {fraction:.1%} free ({free / mib:.0f} MiB of {size / mib:.0f} MiB), "
                       f"below {min_free_fraction:.0%}")  # fmt: skip
            reasons.append(Reason(FAIL, message, host=host, flag="disk", source=SOURCE_DISK))
    return reasons


def peer_median(probes: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    """Each host's peers' median probe seconds (the others that came back); None with no peer."""
    times = {h: p["seconds"] for h, p in probes.items() if p.get("seconds") is not None}
    return {h: statistics.median([t for o, t in times.items() if o != h]) if len(times) - (h in times) else None
            for h in probes}  # fmt: skip


def probe_findings(host: str, probe: Mapping[str, Any] | None, median_s: float | None, fraction: float,
                   deadline_s: float) -> list[Reason]:  # fmt: skip
    """The probe's finding: an error or a missed deadline, or slower than ``fraction`` of the peers' speed."""
    if probe is None:
        return []
    seconds = probe.get("seconds")
    if seconds is None:
        error = probe.get("error") or f"missed its deadline of {deadline_s:g} s"
        peers = f" (its peers' median: {median_s:.2f} s)" if median_s is not None else ""
        return [Reason(FAIL, f"the probe {error}{peers}", host=host, flag="probe", source=SOURCE_DEADLINE)]
    if median_s is None or median_s <= 0:
        return []
    if seconds > median_s / fraction and seconds - median_s > PROBE_FLOOR_S:
        speed = median_s / seconds
        message = (f"the probe took {seconds:.2f} s, its peers' median {median_s:.2f} s: {speed:.0%} of their "
                   f"speed, below {fraction:.0%}")  # fmt: skip
        return [Reason(FAIL, message, host=host, flag="probe", source=SOURCE_PROBE)]
    return []


# --- decisions ---------------------------------------------------------------------------------


def quarantine_limit(max_quarantined: int | str, workers: int) -> int:
    """How many workers may be out at once: the number, or the percentage of ``workers`` (at least 1).

    >>> quarantine_limit("25%", 10), quarantine_limit("25%", 2), quarantine_limit(3, 10)
    (2, 1, 3)
    """
    if isinstance(max_quarantined, str) and max_quarantined.endswith("%"):
        return max(1, math.floor(workers * int(max_quarantined[:-1]) / 100))
    return max(1, int(max_quarantined))


def summary(findings: Sequence[Mapping[str, Any]]) -> str:
    """One line of a host's FAIL findings, for events and the marker."""
    messages = [f["message"] + (f" ({f['device']})" if f.get("device") else "") for f in findings]
    return "; ".join(messages) or "no finding"


def decide(
    states: Mapping[str, HostState],
    fails: Mapping[str, Sequence[Mapping[str, Any]]],
    markers: Mapping[str, Mapping[str, Any] | None],
    roles: Mapping[str, str],
    limits: Limits,
    now: float,
) -> tuple[dict[str, HostState], list[Action]]:
    """The next state of every host and the round's actions.

    ``fails``: each host's FAIL findings this round (as dicts), judged in the cluster or, for a
    quarantined host, on its recheck; a host missing from it was not judged (unreachable): it
    keeps its counts. ``markers``: each host's quarantine marker as its host says (None: none;
    a host missing from it was not reached). ``roles``: "head" or "worker" by host.
    """
    new: dict[str, HostState] = {}
    actions: list[Action] = []
    for host in roles:
        state = states.get(host, HostState())
        marker = markers.get(host, "unknown")
        if marker not in (None, "unknown") and (state.status != QUARANTINED or state.by != marker.get("by")):
            # Quarantined by someone else (an operator), or by this gate before its state was lost.
            by = marker.get("by") or OPERATOR
            state = HostState(QUARANTINED, since=marker.get("since") or now, by=by, reason=marker.get("reason"),
                              findings=tuple(marker.get("findings") or ()))  # fmt: skip
            actions.append(Action(QUARANTINE, host, state.reason or "", by, state.findings, observed=True))
        elif marker is None and state.status == QUARANTINED:
            actions.append(Action(ADMIT, host, "its quarantine marker was removed", OPERATOR, observed=True))
            state = HostState()
        new[host] = state

    out = sum(1 for s in new.values() if s.status == QUARANTINED)
    workers = sum(1 for r in roles.values() if r != "head")
    limit = quarantine_limit(limits.max_quarantined, workers)
    candidates = []
    for host, state in new.items():
        if host not in fails:
            continue
        found = tuple(fails[host])
        if state.status == QUARANTINED:
            passes = 0 if found else state.passes + 1
            new[host] = replace(state, passes=passes, findings=found or state.findings)
            if state.by == GATE and passes >= limits.pass_after:
                actions.append(Action(ADMIT, host, f"passed {passes} rechecks in a row"))
                new[host] = HostState()
            continue
        if not found:
            new[host] = HostState()
            continue
        count = state.fails + 1
        new[host] = replace(state, status=FAILING, fails=count, findings=found)
        if count >= limits.fail_after:
            candidates.append(host)
    for host in sorted(candidates, key=lambda h: (-new[h].fails, h)):
        state = new[host]
        reason = summary(state.findings)
        if roles[host] == "head":
            if not state.held:
                actions.append(
                    Action(REPORT, host, f"the head is never quarantined: {reason}", findings=state.findings)
                )
                new[host] = replace(state, held=True)
        elif out >= limit:
            if not state.held:
                why = f"quarantine limit ({out} of {limit} out, health_max_quarantined): {reason}"
                actions.append(Action(HELD, host, why, findings=state.findings))
                new[host] = replace(state, held=True)
        else:
            out += 1
            actions.append(Action(QUARANTINE, host, reason, findings=state.findings))
            new[host] = HostState(QUARANTINED, since=now, by=GATE, reason=reason, findings=state.findings)
    return new, actions


def reason_dicts(reasons: Sequence[Reason]) -> list[dict[str, Any]]:
    """The FAIL findings as dicts (what states, events and markers keep)."""
    return [r.as_dict() for r in reasons if r.level == FAIL]
