"""Day to day on a running cluster, from any inventory: ``rayrig status``, ``ssh``, ``exec``, ``logs``.

    rayrig status inventories/lab.py [--json]         # every host an alive Ray node, none quarantined? (0, else 1)
    rayrig ssh inventories/lab.py [HOST]              # a shell on the head (or HOST)
    rayrig exec inventories/lab.py [--host H | --all] [--on-host] -- ray --version
    rayrig logs inventories/lab.py [HOST] [-f] [--ray] [-n N]

Hosts are reached with the system's ``ssh`` and each host's SSH settings from the
inventory (:mod:`rayrig.inventory`). Exit codes: 0 success, 1 failure, 2 bad usage; ``exec``
and ``logs`` end with the remote command's status (255 when ssh could not reach the host,
as ssh itself).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from checks.report import format_table, latest_report
from deploy.contract.paths import repo_root
from rayrig import operate
from rayrig.inventory import Host, Inventory, OperateError, load_inventory, ssh_argv, unreachable

HOST_HELP = "an inventory host (its name or address; default: the head)"
STATUS_TIMEOUT_S = 45  # how long one host (and the head's cluster state) may take to answer ``status``
REASON_WIDTH = 60  # the most of a quarantine's reason the status table shows (--json has all of it)


# --- rayrig status -----------------------------------------------------------------------------


def _cmd_status(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    print(f"==> Asking the {len(inventory.hosts)} hosts of {args.inventory} (each within {args.timeout:g} s)",
          file=sys.stderr, flush=True)  # fmt: skip
    answers = operate.ask_cluster(inventory, timeout=args.timeout)
    head = inventory.head.settings
    report_dir = Path(head["checks_report_dir"]).expanduser()
    report_dir = report_dir if report_dir.is_absolute() else repo_root() / report_dir
    report = operate.build_status(inventory, answers, latest_report(head["ray_cluster_name"], report_dir))
    print(json.dumps(report, indent=2) if args.json else render_status(inventory, report))
    return operate.exit_status(report)


def _resources(host: Mapping[str, Any]) -> str:
    """``CPU 2/2, GPU 0/0, name 1/1``: registered/declared for each declared resource."""
    registered = host["registered"]
    cells = []
    for name, wanted in host["declared"].items():
        got = "-" if registered is None else f"{registered.get(name, 0):g}"  # Ray lists no resource it has 0 of
        cells.append(f"{name} {got}/{wanted}")
    return ", ".join(cells)


def _health(host: Mapping[str, Any]) -> str:
    """``ok``, ``?`` (the host did not say), or ``quarantined since <local time> by <gate|operator>: <reason>``."""
    health = host["health"]
    if health["status"] != "quarantined":
        return "ok" if health["status"] == "ok" else "?"
    since = f" since {operate.local_time(health['since'])}" if health["since"] is not None else ""
    by = f" by {health['by']}" if health["by"] else ""
    reason = f": {operate.shorten(health['reason'], REASON_WIDTH)}" if health["reason"] else ""
    return f"quarantined{since}{by}{reason}"


def _quarantine_line(inventory: Inventory, report: Mapping[str, Any]) -> str:
    """The line under the table that names the quarantined members and how to let one back in."""
    by_name = {h["name"]: h for h in report["hosts"]}
    named = ", ".join(f"{n} (by {by_name[n]['health']['by'] or '?'})" for n in report["quarantined"])
    one = len(report["quarantined"]) == 1
    return (
        f"Quarantined, kept out of the cluster: {named}. Let {'it' if one else 'one'} back in: "
        f"rayrig health admit {inventory.path} {report['quarantined'][0] if one else 'HOST'} "
        f"(why and since when: rayrig health {inventory.path})"
    )


def render_status(inventory: Inventory, report: Mapping[str, Any]) -> str:
    """``rayrig status``'s text: a line on the cluster, a row per host, the quarantined hosts, Ray's own
    status, the checks."""
    cluster = report["cluster"]
    members = [h for h in report["hosts"] if h["member"]]
    alive = sum(h["alive"] for h in members)
    on = f", Ray {cluster['ray_version']}" if cluster["ray_version"] else ""
    lines = [f'Cluster "{cluster["name"]}" ({inventory.path}): {alive} of {len(members)} hosts are alive Ray nodes{on}']
    rows = [
        [
            h["name"],
            h["role"] if h["member"] else f"{h['role']} (absent)",
            h["unit"] or "?",
            h["container"] or "?",
            h["ray_version"] or "-",
            "yes" if h["alive"] else "no",
            _resources(h),
            _health(h),
        ]
        for h in report["hosts"]
    ]
    headers = ["HOST", "ROLE", "UNIT", "CONTAINER", "RAY", "ALIVE", "RESOURCES (registered/declared)", "HEALTH"]
    lines.append(format_table(headers, rows))
    if report["quarantined"]:
        lines.append(_quarantine_line(inventory, report))
    errors = [f"  - {h['name']}: {h['error']}" for h in report["hosts"] if h["error"]]
    if cluster["error"]:
        errors.insert(0, f"  - the cluster: {cluster['error']}")
    # a member that is not alive is named in the last line; the others' problems are resources or versions
    errors += [f"  - {p['host'] or 'the cluster'}: {p['message']}" for p in cluster["problems"]
               if p["host"] not in report["not_alive"]]  # fmt: skip
    if errors:
        lines += ["Problems:", *errors]
    if cluster["ray_status"]:
        lines += ["==> ray status (on the head):", *(f"  {line}" for line in cluster["ray_status"].splitlines())]
    checks = report["checks"]
    if checks["verdict"]:
        plot = f", plot {checks['plot']}" if checks["plot"] else ""
        lines.append(f"==> last checks: {checks['verdict']}; report {checks['report']}{plot}")
    else:
        lines.append(f"==> last checks: none on this machine yet (rayrig check {inventory.path})")
    if report["ok"]:
        lines.append(f"OK: every host of {inventory.path} is an alive Ray node")
        return "\n".join(lines)
    by_name = {h["name"]: h for h in report["hosts"]}
    said = []
    if report["not_alive"]:
        named = "; ".join(f"{n} ({operate.why_not_alive(by_name[n])})" for n in report["not_alive"])
        said.append(f"not alive Ray nodes: {named}")
    draining = [n for n in report["quarantined"] if n not in report["not_alive"]]
    if draining:  # still alive, until its drain ends
        said.append(f"quarantined, still draining: {', '.join(draining)}")
    lines.append("NOT OK: " + ". ".join([said[0], *(part[0].upper() + part[1:] for part in said[1:])]))
    return "\n".join(lines)


# --- rayrig ssh --------------------------------------------------------------------------------


def _cmd_ssh(args: argparse.Namespace) -> int:
    host = load_inventory(args.inventory).pick(args.host)
    argv = ssh_argv(host)
    if args.print_command:
        print(shlex.join(argv))
        return 0
    os.execvp(argv[0], argv)  # the ssh client takes this process's place; a missing ssh raises
    return 1  # not reached: execvp returns only by raising


# --- rayrig exec -------------------------------------------------------------------------------


def _exec_options(parser: argparse.ArgumentParser) -> None:
    """``rayrig exec``'s options: on the subcommand (before INVENTORY, and for --help) and after it."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--host", action="append", metavar="HOST", help=f"{HOST_HELP}; repeat for more hosts")
    which.add_argument("--all", action="store_true", help="every host of the cluster, at once")
    parser.add_argument("--on-host", action="store_true", help="run on the host itself, not in its ray-node container")
    parser.add_argument("--timeout", type=_seconds, default=None, help="seconds each host may take (several hosts)")


def exec_arguments(args: argparse.Namespace) -> tuple[argparse.Namespace, list[str]]:
    """The options and the command of ``rayrig exec INVENTORY [OPTIONS] -- COMMAND...``.

    Everything after INVENTORY reaches here as one list (argparse would otherwise take the
    command's own options for rayrig's), less the ``--`` that follows INVENTORY at once, which
    argparse drops. A list that starts with an option holds rayrig's options up to the first
    ``--`` and the command after it; any other list is the command, its own ``--`` included.
    """
    rest = list(args.command)
    if rest[:1] == ["--"]:
        options, command = [], rest[1:]
    elif rest[:1] and rest[0].startswith("-"):
        cut = rest.index("--") if "--" in rest else len(rest)
        options, command = rest[:cut], rest[cut + 1 :]
    else:
        options, command = [], rest
    parser = argparse.ArgumentParser(prog="rayrig exec", add_help=False)
    _exec_options(parser)
    later, unknown = parser.parse_known_args(options)  # a bad option value is argparse's usage error
    if unknown:  # rayrig's options, then the command without the -- between them
        raise OperateError(f"put the command after --, e.g. rayrig exec {args.inventory} {rest[0]} -- ray --version", 2)
    merged = argparse.Namespace(**vars(args))
    if later.host or later.all:
        if args.host or args.all:
            parser.error("give --host or --all once")
        merged.host, merged.all = later.host, later.all
    merged.on_host = args.on_host or later.on_host
    merged.timeout = later.timeout if later.timeout is not None else args.timeout
    return merged, command


def _cmd_exec(args: argparse.Namespace) -> int:
    args, command = exec_arguments(args)
    inventory = load_inventory(args.inventory)
    picked = inventory.members if args.all else [inventory.pick(name) for name in args.host or [None]]
    hosts = list({h.name: h for h in picked}.values())  # a host named twice runs the command once
    if not command:
        raise OperateError("no command to run: give it after --, e.g. -- ray --version", 2)
    if len(hosts) == 1 and not args.all:
        return _exec_one(inventory, hosts[0], command, args.on_host)
    return _exec_many(inventory, hosts, command, args.on_host, args.timeout)


def _terminal() -> bool:
    """Whether this process talks to a terminal both ways (else a remote terminal would garble a pipe)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def _exec_one(inventory: Inventory, host: Host, command: list[str], on_host: bool) -> int:
    """One host, with this process's terminal: a terminal there when this process has one, else its
    input passed on to the command."""
    tty = _terminal()
    remote = operate.exec_command(host, command, on_host=on_host, stdin="tty" if tty else "pipe")
    return _call(inventory, host, ssh_argv(host, remote, tty=tty, batch=not tty), "exec")


def _exec_many(
    inventory: Inventory, hosts: list[Host], command: list[str], on_host: bool, timeout: float | None
) -> int:
    """Every host at once; one block of output per host in inventory order, each line prefixed by its name."""
    jobs = {h.name: (h, operate.exec_command(h, command, on_host=on_host)) for h in hosts}
    answers = operate.run_all(jobs, timeout)
    worst = 0
    for host in hosts:
        answer = answers[host.name]
        for line in answer.stdout.splitlines():
            print(f"{host.name}: {line}")
        sys.stdout.flush()
        if not answer.reached:
            print(f"{host.name}: {unreachable(host, inventory.path, answer.last_words)}", file=sys.stderr)
            worst = max(worst, operate.SSH_FAILED)
            continue
        for line in answer.stderr.splitlines():
            print(f"{host.name}: {line}", file=sys.stderr)
        if answer.status:
            print(f"{host.name}: exit status {answer.status}", file=sys.stderr)
        worst = max(worst, answer.status or 0)
    return worst


def _call(inventory: Inventory, host: Host, argv: list[str], command: str) -> int:
    """Run ssh with this terminal; its exit status, with a line on what to check when ssh failed."""
    status = subprocess.call(argv)  # a missing ssh raises, and the error handler names the package
    if status == operate.SSH_FAILED:
        said = unreachable(host, inventory.path, "ssh exited with status 255")
        print(f"rayrig {command}: {host.name}: {said}", file=sys.stderr)
    return status


# --- rayrig logs -------------------------------------------------------------------------------


def _cmd_logs(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    host = inventory.pick(args.host)
    build = operate.ray_logs_command if args.ray else operate.journal_command
    remote = build(host, args.lines, args.follow)
    tty = args.follow and _terminal()  # a terminal there, so that Ctrl-C ends the remote follower too
    return _call(inventory, host, ssh_argv(host, remote, tty=tty, batch=True, stdin=tty), "logs")


# --- the parsers -------------------------------------------------------------------------------


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig status``, ``rayrig ssh``, ``rayrig exec`` and ``rayrig logs``."""
    inventory_help = "pyinfra inventory file, e.g. inventories/prod.py"
    host_help = HOST_HELP

    status = subparsers.add_parser(
        "status",
        help="every host's ray-node, the cluster as Ray sees it, the last checks "
        "(exit 1: a node is down or quarantined)",
    )
    status.add_argument("inventory", help=inventory_help)
    status.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    status.add_argument(
        "--timeout",
        type=_seconds,
        default=STATUS_TIMEOUT_S,
        help=f"seconds each host may take (default {STATUS_TIMEOUT_S})",
    )
    status.set_defaults(func=_cmd_status)

    ssh = subparsers.add_parser("ssh", help="a shell on a host of the cluster (default: the head)")
    ssh.add_argument("inventory", help=inventory_help)
    ssh.add_argument("host", nargs="?", help=host_help)
    ssh.add_argument("--print-command", action="store_true", help="print the ssh command instead of running it")
    ssh.set_defaults(func=_cmd_ssh)

    run = subparsers.add_parser(
        "exec",
        help="run a command in the ray-node container of the head, of a host or of every host",
        description="Run a command in ray-node (or, with --on-host, on the host). Several words run as given; "
        "one word with blanks is a shell command line. Exit status: the command's, the highest one with --all.",
    )
    run.add_argument("inventory", help=inventory_help)
    _exec_options(run)
    run.add_argument("command", nargs=argparse.REMAINDER, help="[--host HOST | --all] [--on-host] -- COMMAND...")
    run.set_defaults(func=_cmd_exec)

    logs = subparsers.add_parser("logs", help="the ray-node unit's journal on a host, or with --ray Ray's own logs")
    logs.add_argument("inventory", help=inventory_help)
    logs.add_argument("host", nargs="?", help=host_help)
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C")
    logs.add_argument(
        "--ray", action="store_true", help=f"Ray's own logs in ray-node ({operate.RAY_LOGS}: raylet, GCS server)"
    )
    logs.add_argument("-n", "--lines", type=_positive, default=100, help="how many of the last lines (default 100)")
    logs.set_defaults(func=_cmd_logs)
