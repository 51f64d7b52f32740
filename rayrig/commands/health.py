"""The health gate from the operator's machine: ``rayrig health``, ``health quarantine``, ``health admit``.

    rayrig health inventories/lab.py [--json] [--since 2h]        # each host's state, and the gate's timeline
    rayrig health quarantine inventories/lab.py HOST --reason TEXT  # drain HOST and keep it out of the cluster
    rayrig health admit inventories/lab.py HOST                     # let HOST back in

``rayrig health INVENTORY`` is short for ``rayrig health show INVENTORY``. The gate
(docs/design/health-gate.md) runs on the monitoring host (``monitoring_host``, the head by default):
``show`` reads its state and its timeline there, as root over SSH. ``quarantine`` and ``admit`` run
the gate's own command on HOST (``rayrig-health-node``), so that an operator's quarantine is kept
as the gate keeps its own (the node drained, its unit held stopped across restarts and reboots);
the gate never lifts an operator's quarantine, only ``admit`` does. Arguments are checked before
anything runs on any host.

Exit codes: 0 success; 1 failure (``health_gate`` is off, the gate has not finished a round yet, a
host did not answer or its command failed, an admitted node's unit did not start); 2 bad usage (no
such inventory or host, a bad ``--reason`` or ``--since``, the head given to ``quarantine``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from checks.health_node import MAX_REASON
from checks.report import format_table
from rayrig import operate
from rayrig.inventory import EXIT_USAGE, Host, Inventory, OperateError, inventory_file, load_inventory, unreachable

READ_TIMEOUT_S = 45  # how long the monitoring host may take to print the gate's files
NODE_TIMEOUT_S = 300  # rayrig-health-node on a host: it starts the drain, but a failed one stops the unit (120 s)
REASON_MAX = MAX_REASON  # the most characters of a --reason, as rayrig-health-node takes it
STALE_ROUNDS = 3  # a state older than this many rounds is named stale
#: ``--since``'s durations: a number and its unit.
DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DEFAULT_COMMAND = "show"  # what ``rayrig health INVENTORY`` runs


# --- the arguments -----------------------------------------------------------------------------


def parse_since(text: str, now: float) -> float:
    """The moment ``--since`` names, in epoch seconds: a duration before ``now`` (``30m``, ``2h``, ``1d``;
    also ``s`` and ``w``) or an ISO date or time (``2026-12-01``, ``2026-12-01T09:30``; local time
    unless it has an offset). ``ValueError`` says what is expected.

    >>> parse_since("2h", now=10_000.0)
    2800.0
    """
    words = text.strip()
    duration = DURATION.fullmatch(words.lower())
    if duration:
        return now - float(duration[1]) * UNITS[duration[2]]
    try:
        when = dt.datetime.fromisoformat(words[:-1] + "+00:00" if words.endswith(("Z", "z")) else words)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a duration (30m, 2h, 1d) nor an ISO date or time (2026-12-01, 2026-12-01T09:30)"
        ) from None
    return when.timestamp()  # a naive one is this machine's local time


def _since(text: str) -> float:
    try:
        return parse_since(text, time.time())
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def check_reason(text: str | None) -> str:
    """An operator's ``--reason``: 1 to :data:`REASON_MAX` printable characters on one line; else
    ``OperateError`` (2) saying what is wrong with it."""
    expected = f"expected 1-{REASON_MAX} printable characters on one line, e.g. --reason 'fans failing'"
    if text is None:
        raise OperateError(f"--reason is required: say why the host is taken out; {expected}", EXIT_USAGE)
    if not text.strip():
        raise OperateError(f"--reason is blank; {expected}", EXIT_USAGE)
    if len(text) > REASON_MAX:
        raise OperateError(f"--reason has {len(text)} characters; {expected}", EXIT_USAGE)
    bad = next((i for i, c in enumerate(text) if not c.isprintable()), None)
    if bad is not None:
        what = "a newline" if text[bad] in "\r\n" else f"the character {text[bad]!r}"
        raise OperateError(f"--reason holds {what} (character {bad + 1}); {expected}", EXIT_USAGE)
    return text


def gate_on(inventory: Inventory) -> None:
    """Nothing when the inventory's ``health_gate`` is on; else ``OperateError`` (1) naming the setting."""
    if not inventory.head.settings["health_gate"]:
        raise OperateError(
            f"{inventory.path}: the health gate is off (health_gate = False): there is no gate to ask or to "
            f"act through; set health_gate = True in the inventory's data and run rayrig deploy {inventory.path}"
        )


# --- rayrig health (show) ----------------------------------------------------------------------


def _file_text(inventory: Inventory, where: Host, path: str, answer: operate.Answer) -> str | None:
    """The text of one of the gate's files from ``answer``; None when there is no such file."""
    if not answer.reached:
        said = unreachable(where, inventory.path, answer.last_words or "no message")
        raise OperateError(f"the monitoring host {where.name}: {said}")
    if answer.status == operate.ABSENT:
        return None
    if answer.status != 0:
        said = answer.last_words or "no message"
        raise OperateError(f"{where.name}: cannot read {path} as root (exit status {answer.status}: {said})")
    return answer.stdout


def parse_state(text: str, where: str) -> dict[str, Any]:
    """The gate's ``state.json``: ``{"updated", "round", "hosts": {NAME: {...}}}``; else ``OperateError`` (1)."""
    try:
        state = json.loads(text)
    except ValueError:
        state = None
    if not isinstance(state, dict) or not isinstance(state.get("hosts"), dict):
        raise OperateError(f'{where}:{operate.HEALTH_STATE}: expected the gate\'s state (a JSON object with "hosts")')
    return state


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_events(text: str) -> tuple[list[dict[str, Any]], int]:
    """The gate's ``events.jsonl``, oldest first, and how many of its lines are no event (not a JSON object
    with a ``time``: a line being written as it was read)."""
    events, skipped = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict) and _number(event.get("time")):
            events.append(event)
        else:
            skipped += 1
    return sorted(events, key=lambda e: e["time"]), skipped


def read_gate(inventory: Inventory, where: Host) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """The gate's state, its events (oldest first) and the number of unreadable event lines, from the
    monitoring host ``where``; ``OperateError`` (1) when it cannot tell them."""
    paths = (operate.HEALTH_STATE, operate.HEALTH_EVENTS)
    jobs = {path: (where, operate.read_file_command(where, path)) for path in paths}
    answers = operate.run_all(jobs, READ_TIMEOUT_S)
    state_text = _file_text(inventory, where, operate.HEALTH_STATE, answers[operate.HEALTH_STATE])
    events_text = _file_text(inventory, where, operate.HEALTH_EVENTS, answers[operate.HEALTH_EVENTS])
    if state_text is None:
        interval = inventory.head.settings["health_interval_s"]
        raise OperateError(
            f"the health gate on {where.name} has not finished a round yet (no {operate.HEALTH_STATE}; it writes it "
            f"every health_interval_s = {interval} s); if that lasts, see its journal: rayrig exec {inventory.path} "
            f"--host {where.name} --on-host -- journalctl -u rayrig-health -n 50"
        )
    events, skipped = parse_events(events_text or "")
    return parse_state(state_text, where.name), events, skipped


def _age(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3 h``, ``2 d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size:.0f} {unit}"
    return f"{max(seconds, 0):.0f} s"


def _when(value: Any) -> str:
    return operate.local_time(value) if _number(value) else "-"


def _findings(name: str, entry: Mapping[str, Any]) -> list[str]:
    """The FAIL findings of a host's round, one line each."""
    lines = []
    for finding in entry.get("findings") or []:
        if isinstance(finding, dict) and finding.get("level") == "FAIL":
            device = f" ({finding['device']})" if finding.get("device") else ""
            lines.append(f"  - {name}: {finding.get('message', '?')}{device}")
    return lines


def render_health(
    inventory: Inventory,
    where: Host,
    state: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    since: float | None,
    now: float,
    total: int | None = None,
    skipped: int = 0,
) -> str:
    """``rayrig health``'s text: the round, a row per host (status, since, by, reason), the round's FAIL
    findings, then the timeline of ``events`` (already filtered by ``since``; ``total`` before it), newest last."""
    hosts: Mapping[str, Any] = state["hosts"]
    updated = state.get("updated")
    at = f" at {_when(updated)} ({_age(now - updated)} ago)" if _number(updated) else ""
    lines = [f"Health gate on {where.name} ({inventory.path}): round {state.get('round', '?')}{at}"]
    interval = inventory.head.settings["health_interval_s"]
    if _number(updated) and now - updated > STALE_ROUNDS * interval:
        lines.append(
            f"WARNING: the state is {_age(now - updated)} old, the gate's rounds are every {interval} s: is "
            f"rayrig-health.service running on {where.name}?"
        )
    known = [h.name for h in inventory.hosts if h.name in hosts]
    names = known + [n for n in hosts if n not in known]
    rows = []
    for name in names:
        entry = hosts[name] if isinstance(hosts[name], dict) else {}
        row = [entry.get("status", "?"), _when(entry.get("since")), entry.get("by") or "-"]
        rows.append([name, *row, entry.get("fails", "-"), entry.get("passes", "-"), entry.get("reason") or "-"])
    lines.append(format_table(["HOST", "STATUS", "SINCE", "BY", "FAILS", "PASSES", "REASON"], rows, right=(4, 5)))
    findings = [line for name in names if isinstance(hosts[name], dict) for line in _findings(name, hosts[name])]
    if findings:
        lines += ["FAIL findings of the last round:", *findings]
    errors = [str(e) for e in state.get("errors") or []]  # what the gate could not ask (Prometheus, the head)
    if errors:
        lines += ["What the last round could not ask:", *(f"  - {error}" for error in errors)]
    unjudged = [h.name for h in inventory.hosts if h.name not in hosts]
    if unjudged:
        lines.append(f"Not judged by the gate: {', '.join(unjudged)} (it judges the hosts of the last deploy)")
    lines.append(_timeline_title(events, since, total, skipped))
    if events:
        rows = [[_when(e["time"]), e.get("host", "?"), e.get("action", "?"), e.get("by") or "-", e.get("reason") or "-"]
                for e in events]  # fmt: skip
        lines.append(format_table(["TIME", "HOST", "ACTION", "BY", "REASON"], rows))
    return "\n".join(lines)


def _timeline_title(events: Sequence[Mapping[str, Any]], since: float | None, total: int | None, skipped: int) -> str:
    after = f" since {operate.local_time(since)}" if since is not None else ""
    unread = f"; {skipped} line(s) of {operate.HEALTH_EVENTS} are not events, skipped" if skipped else ""
    if not events:
        what = "no event" + (after or " yet (one is written at each quarantine, admission and report)")
        return f"Timeline: {what}{unread}"
    of = total if total is not None and total != len(events) else None
    shown = f"{len(events)} of {of}" if of is not None else f"{len(events)}"
    noun = "event" if (of if of is not None else len(events)) == 1 else "events"
    return f"Timeline{after}, newest last ({shown} {noun}{unread}):"


def _cmd_show(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    gate_on(inventory)
    where = operate.monitoring_host(inventory)
    print(f"==> Reading the health gate's state on {where.name}", file=sys.stderr, flush=True)
    state, events, skipped = read_gate(inventory, where)
    shown = [e for e in events if args.since is None or e["time"] >= args.since]
    if args.json:
        print(json.dumps({"state": state, "events": shown}, indent=2))
    else:
        print(render_health(inventory, where, state, shown, args.since, time.time(), len(events), skipped))
    return 0


# --- rayrig health quarantine / admit ----------------------------------------------------------


def last_json_object(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object (what ``rayrig-health-node`` answers), or None."""
    for line in reversed(text.splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return None


def run_node_verb(inventory: Inventory, host: Host, verb: str, *options: str) -> dict[str, Any]:
    """``rayrig-health-node VERB OPTIONS`` on ``host`` as root; its answer, or ``OperateError`` (1) with
    its last words."""
    command = f"{operate.HEALTH_NODE} {verb}"
    answer = operate.run(host, operate.health_node_command(host, verb, *options), NODE_TIMEOUT_S)
    if not answer.reached:
        raise OperateError(f"{host.name}: {unreachable(host, inventory.path, answer.last_words or 'no message')}")
    if answer.status != 0:
        hint = ""
        if answer.status == 127:
            hint = f"; is the health gate deployed there? (health_gate = True, then rayrig deploy {inventory.path})"
        said = answer.last_words or "no message"
        raise OperateError(f"{host.name}: {command} failed with exit status {answer.status}: {said}{hint}")
    found = last_json_object(answer.stdout)
    if found is None:
        printed = operate.shorten(answer.stdout, 200) or "nothing"
        raise OperateError(f"{host.name}: {command} answered no JSON object (it printed: {printed})")
    return found


def said_by_node(host: Host, answer: Mapping[str, Any]) -> str:
    """``192.0.2.11: quarantined (drained): MESSAGE``: a node's answer, one line."""
    message = answer.get("message")
    if answer.get("already"):  # the marker was there already, and stays as it was
        return f"{host.name}: {message or 'already ' + str(answer.get('action', '?'))}"
    drained = {True: " (drained)", False: " (not drained)"}.get(answer.get("drained"), "")
    return f"{host.name}: {answer.get('action', '?')}{drained}" + (f": {message}" if message else "")


def _cmd_quarantine(args: argparse.Namespace) -> int:
    inventory_file(args.inventory)
    reason = check_reason(args.reason)
    inventory = load_inventory(args.inventory)
    host = inventory.pick(args.host)
    if host.name == inventory.head.name:
        raise OperateError(
            f"{host.name} is the head of {inventory.path}: the head is never quarantined (the gate reports its "
            "findings instead); give a worker",
            EXIT_USAGE,
        )
    gate_on(inventory)
    drain_s = str(host.settings["health_drain_timeout_s"])
    # --reason=TEXT, one word: a reason that starts with "-" is not taken for an option there
    options = ["--container", host.container, "--by", "operator", f"--reason={reason}", "--drain-s", drain_s]
    print(said_by_node(host, run_node_verb(inventory, host, "quarantine", *options)))
    print(f"It stays out until: rayrig health admit {inventory.path} {host.name}")
    return 0


def _cmd_admit(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    host = inventory.pick(args.host)  # the head too: a marker left there by hand must be removable
    gate_on(inventory)
    answer = run_node_verb(inventory, host, "admit", "--container", host.container)
    print(said_by_node(host, answer))
    if answer.get("started") is False:  # the marker is gone, but the unit did not start
        print(f"Its ray-node did not start: see rayrig logs {inventory.path} {host.name}")
        return 1
    print(f"rayrig status {inventory.path} shows when it is an alive Ray node again")
    return 0


# --- the parsers -------------------------------------------------------------------------------


class _AnyWord(Mapping):
    """The subcommands by name, as argparse checks a first word against them: any word is accepted
    (one that names none of them is ``show``'s INVENTORY)."""

    def __init__(self, parsers: dict[str, argparse.ArgumentParser]) -> None:
        self.parsers = parsers

    def __getitem__(self, name: str) -> argparse.ArgumentParser:
        return self.parsers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.parsers)

    def __len__(self) -> int:
        return len(self.parsers)

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str)


class _ShowByDefault(argparse._SubParsersAction):
    """``rayrig health``'s subcommands; a first word that names none of them is the INVENTORY of
    ``show``: ``rayrig health inventories/lab.py`` runs ``rayrig health show inventories/lab.py``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.choices = _AnyWord(self._name_parser_map)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        if values[0] not in self._name_parser_map:
            values = [DEFAULT_COMMAND, *values]
        super().__call__(parser, namespace, values, option_string)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig health`` (``show``, the default), ``rayrig health quarantine`` and ``rayrig health admit``."""
    inventory_help = "pyinfra inventory file, e.g. inventories/prod.py"
    health = subparsers.add_parser(
        "health",
        help="the health gate: each host's state and its timeline; quarantine or admit a host",
        description="The health gate (health_gate = True): rayrig health INVENTORY is short for "
        "rayrig health show INVENTORY.",
    )
    commands = health.add_subparsers(
        dest="health_command", metavar="INVENTORY|COMMAND", required=True, action=_ShowByDefault
    )

    show = commands.add_parser(
        DEFAULT_COMMAND,
        help="each host's state as the gate judged it last, and the gate's timeline (read on the monitoring host)",
        description="What the health gate says: each host's status (ok, failing, quarantined), since when, by "
        "whom and why, the last round's FAIL findings, and the timeline of quarantines and admissions, newest last.",
    )
    show.add_argument("inventory", help=inventory_help)
    show.add_argument("--json", action="store_true", help='print {"state": ..., "events": [...]} instead of text')
    show.add_argument(
        "--since", type=_since, default=None, metavar="WHEN",
        help="only the events since WHEN: a duration before now (30m, 2h, 1d) or an ISO date or time "
        "(2026-12-01, 2026-12-01T09:30, local time)",
    )  # fmt: skip
    show.set_defaults(func=_cmd_show)

    quarantine = commands.add_parser(
        "quarantine",
        help="drain a worker and keep it out of the cluster until rayrig health admit",
        description="Quarantine a worker as the gate does (drained, its ray-node stopped at health_drain_timeout_s "
        "at the latest and kept stopped across restarts and reboots); the gate never lifts it.",
    )
    quarantine.add_argument("inventory", help=inventory_help)
    quarantine.add_argument("host", help="the worker (its inventory name or address; never the head)")
    quarantine.add_argument(
        "--reason", default=None, help=f"why, for the timeline and rayrig status (required; 1-{REASON_MAX} characters)"
    )
    quarantine.set_defaults(func=_cmd_quarantine)

    admit = commands.add_parser(
        "admit",
        help="let a quarantined host back in: its marker removed, its ray-node started",
        description="Let a quarantined host back into the cluster, whoever quarantined it.",
    )
    admit.add_argument("inventory", help=inventory_help)
    admit.add_argument("host", help="the host (its inventory name or address)")
    admit.set_defaults(func=_cmd_admit)
