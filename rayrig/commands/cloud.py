"""``rayrig cloud up|down|ls|reap|extend``: EC2 clusters for a sprint (the work is done by ``cloud.ec2``).

Each command prints progress on stdout and one-line errors on stderr, and
returns 0 on success, 1 on failure, 2 for a bad spec or a region it cannot know
(``rayrig.errors`` prints what a command raises).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import sys
from collections.abc import Sequence
from pathlib import Path

from checks.report import latest_checks, latest_report
from cloud.ec2 import (
    WAIT_TIMEOUT_S,
    CloudError,
    ClusterInfo,
    ClusterSpec,
    connect,
    down,
    list_clusters,
    load_spec,
    reap,
    up,
)
from cloud.ec2.aws import default_region, utc_now
from cloud.ec2.expiry import CHECK_EVERY, extend, name_problem, parse_duration
from cloud.ec2.pricing import PriceBook, sources_text, span, usd
from cloud.ec2.state import load_state, recorded_regions, state_path
from deploy.contract.paths import repo_root
from rayrig.errors import UsageError
from rayrig.run import DEPLOY_FILE, InventoryFileError, run_pyinfra


def ask(question: str, doing: str = "create") -> bool:
    """Ask ``question`` on the terminal; True for yes. Without a terminal, a ``CloudError`` that asks for --yes
    (to do ``doing`` without asking)."""
    if not sys.stdin.isatty():
        raise CloudError(f"not confirmed: stdin is not a terminal; pass --yes to {doing} without asking")
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _span(delta: dt.timedelta) -> str:
    seconds = int(abs(delta.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    text = f"{days}d{hours:02d}h" if days else f"{hours}h{rest // 60:02d}m"
    return f"-{text}" if delta.total_seconds() < 0 else text


def format_clusters(clusters: list[ClusterInfo], now: dt.datetime, notices: Sequence[str] = ()) -> list[str]:
    """``rayrig cloud ls`` lines: name, owner, launch, run time, expiry, instance types, hourly rate and cost
    so far; then where the prices come from, and ``notices`` (a price lookup that failed)."""
    rows = [("NAME", "OWNER", "LAUNCHED (UTC)", "UP", "EXPIRES (UTC)", "LEFT", "RUNNING", "$/H", "COST")]
    sources: list[str] = []
    for c in clusters:
        running = ", ".join(f"{n} x {t}" for t, n in sorted(c.running.items())) or "-"
        if c.spot:
            running += f" ({c.spot} spot)"
        unknown = "+?" if c.cost and c.cost.unpriced else ""
        sources += c.cost.sources if c.cost else []
        rows.append(
            (
                c.name,
                c.owner or "?",
                f"{c.created_at:%Y-%m-%d %H:%M}" if c.created_at else "?",
                span(now - c.created_at) if c.created_at else "?",
                f"{c.expires_at:%Y-%m-%d %H:%M}" if c.expires_at else f"unreadable: {c.expiry_text!r}",
                ("EXPIRED" if c.expired(now) else _span(c.expires_at - now)) if c.expires_at else "never",
                running,
                f"{c.cost.hourly_usd:,.2f}{unknown}" if c.cost else "?",
                f"{usd(c.cost.so_far_usd)}{unknown}" if c.cost else "?",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.append(
        "$/H and COST in USD, instances only; COST: each instance's hours since its launch x its rate "
        f"(prices: {sources_text(sources)})"
    )
    return lines + list(notices)


def up_cmd(args: argparse.Namespace) -> int:
    """``rayrig cloud up SPEC [--deploy]``: 0 once the cluster runs and SSH answers (with ``--deploy``: and the
    deploy and its checks passed), 1 on failure, 2 for a bad spec (``SpecError``, which ``rayrig.errors`` prints
    with every problem) or ``--deploy`` with ``--no-wait-ssh``."""
    if args.deploy and args.no_wait_ssh:
        raise UsageError("--deploy and --no-wait-ssh: the deploy needs SSH", "drop --no-wait-ssh")
    spec = load_spec(args.spec)
    try:
        result = up(
            spec, assume_yes=args.yes, confirm=ask, wait_ssh=not args.no_wait_ssh, timeout_s=args.timeout, say=print
        )
    except CloudError as exc:
        print(f"rayrig cloud up: {exc}", file=sys.stderr)
        return 1
    if args.deploy:
        return deploy_after_up(spec, args.spec, result.ssh_pending, args.timeout)
    if result.ssh_pending:
        print(
            f"rayrig cloud up: SSH did not answer within {args.timeout:.0f}s on {', '.join(result.ssh_pending)}; "
            f"check that admin_cidrs holds your address. The cluster stays up; "
            f"'rayrig cloud down {spec.name}' removes it.",
            file=sys.stderr,
        )
        return 1
    return 0


#: The inventory of the clusters ``rayrig cloud up`` makes.
EC2_INVENTORY = "inventories/ec2.py"


def deploy_after_up(spec: ClusterSpec, spec_arg: Path, ssh_pending: list[str], timeout_s: float) -> int:
    """``rayrig cloud up SPEC --deploy`` once the instances run: the deploy (and its checks) through
    ``inventories/ec2.py`` as ``rayrig deploy`` runs it, then the next commands. 0 when it passed; 1, naming
    the step that failed (SSH, the deploy or the checks) and how to retry or tear down, with the cluster kept."""
    name, env = spec.name, f"RAYRIG_CLUSTER={spec.name}"
    retry = (
        f"The cluster stays up. Retry: 'rayrig cloud up {spec_arg} --deploy' (it creates nothing more), or "
        f"'{env} rayrig deploy {EC2_INVENTORY}'; tear down: 'rayrig cloud down {name}'."
    )
    if ssh_pending:
        print(
            f"rayrig cloud up --deploy: stopped before the deploy: SSH did not answer within {timeout_s:.0f}s on "
            f"{', '.join(ssh_pending)}; check that admin_cidrs in {spec_arg} holds your address and that the "
            f"instances booted (EC2's console output of each). {retry}",
            file=sys.stderr,
        )
        return 1
    print(f"==> deploying to cluster {name}: {env} rayrig deploy {EC2_INVENTORY}", flush=True)
    report_dir = Path(spec.host_data.get("checks_report_dir", "reports")).expanduser()
    report_dir = report_dir if report_dir.is_absolute() else repo_root() / report_dir
    before = latest_report(name, report_dir)
    try:
        status = run_pyinfra(
            repo_root() / EC2_INVENTORY, DEPLOY_FILE, env={"RAYRIG_CLUSTER": name, "RAYRIG_REGION": spec.region}
        )
    except InventoryFileError as exc:
        print(f"rayrig cloud up --deploy: the deploy did not run: {exc}. {retry}", file=sys.stderr)
        return 1
    after = latest_report(name, report_dir)
    if status != 0:
        checks_failed = after is not None and after != before and after["verdict"] == "FAIL"
        step = (
            f"the checks failed (verdict FAIL, report {after['report']})"
            if checks_failed and after
            else f"the deploy failed (pyinfra exit status {status}; its output above names the host and operation)"
        )
        print(f"rayrig cloud up --deploy: {step}. {retry}", file=sys.stderr)
        return 1
    if after is not None and after != before:
        print(latest_checks(name, report_dir))
    for line in next_commands(name):
        print(line)
    return 0


def next_commands(name: str) -> list[str]:
    """What to run on a deployed EC2 cluster, each command naming the cluster."""
    env = f"RAYRIG_CLUSTER={name}"
    return [
        f"==> cluster {name} is deployed. Next:",
        f"  status:     {env} rayrig status {EC2_INVENTORY}",
        f"  a job:      {env} rayrig submit {EC2_INVENTORY} --working-dir . -- python your_job.py",
        f"  dashboard:  {env} rayrig dashboard {EC2_INVENTORY}   (an SSH tunnel; it prints the URL)",
        f"  re-deploy:  {env} rayrig deploy {EC2_INVENTORY}",
        f"  tear down:  rayrig cloud down {name}",
    ]


def down_cmd(args: argparse.Namespace) -> int:
    """``rayrig cloud down NAME``: 0 when nothing carries the cluster's tag any more.

    The region is --region, else the one ``up`` recorded here, else boto3's; with none of them, a
    ``UsageError`` that asks for --region. It says the run time and cost, then asks on a terminal
    (--yes: does not ask); without a terminal and without --yes it refuses (1), deleting nothing.
    """
    if not (args.region or load_state(args.name).get("region") or default_region()):
        raise UsageError(
            f"no AWS region known for cluster {args.name}: this machine has no record of it "
            f"({state_path(args.name)}) and boto3 has no default region",
            "pass --region REGION (the region it runs in), or set AWS_REGION",
        )
    try:
        confirm = functools.partial(ask, doing=f"take cluster {args.name} down")
        return down(args.name, args.region, assume_yes=args.yes, confirm=confirm, timeout_s=args.timeout, say=print)
    except CloudError as exc:
        print(f"rayrig cloud down: {exc}", file=sys.stderr)
        return 1


def ls_regions(region: str | None) -> list[str]:
    """Where ``rayrig cloud ls`` looks: ``region``, else the regions of the clusters recorded here and
    boto3's default region; a ``UsageError`` asking for --region when none is known."""
    if region:
        return [region]
    regions = set(recorded_regions())
    regions.update(r for r in [default_region()] if r)
    if not regions:
        raise UsageError(
            "no AWS region known: this machine records no cluster and boto3 has no default region",
            "pass --region REGION, or set AWS_REGION",
        )
    return sorted(regions)


def ls_cmd(args: argparse.Namespace) -> int:
    """``rayrig cloud ls``: the clusters as a table, one per region when it looks in several."""
    regions = ls_regions(args.region)
    for region in regions:
        try:
            aws = connect(region)
            book = PriceBook(aws)
            clusters = list_clusters(aws, book, utc_now())
        except CloudError as exc:
            print(f"rayrig cloud ls: {exc}", file=sys.stderr)
            return 1
        if len(regions) > 1:
            print(f"==> {aws.region}")
        if not clusters:
            print(f"No rayrig cluster in {aws.region}.")
            continue
        for line in format_clusters(clusters, utc_now(), book.notices):
            print(line)
    return 0


def reap_cmd(args: argparse.Namespace) -> int:
    """``rayrig cloud reap``: take down the expired clusters (asks on a terminal, a dry run without one)."""
    try:
        confirm = ask if sys.stdin.isatty() else None
        return reap(args.region, assume_yes=args.yes, confirm=confirm, timeout_s=args.timeout, say=print)
    except CloudError as exc:
        print(f"rayrig cloud reap: {exc}", file=sys.stderr)
        return 1


def extend_cmd(args: argparse.Namespace) -> int:
    """``rayrig cloud extend NAME DURATION``: move the cluster's expiry to max(now, its expiry) + DURATION.

    A bad DURATION, or no region known (see ``down_cmd``), is a ``UsageError`` before AWS is asked.
    """
    if name_problem(args.name):
        raise UsageError(str(name_problem(args.name)), "'rayrig cloud ls' lists the clusters")
    try:
        duration = parse_duration(args.duration)
    except ValueError as exc:
        raise UsageError(str(exc), "e.g. 'rayrig cloud extend sprint42 12h'") from None
    if not (args.region or load_state(args.name).get("region") or default_region()):
        raise UsageError(
            f"no AWS region known for cluster {args.name}: this machine has no record of it "
            f"({state_path(args.name)}) and boto3 has no default region",
            "pass --region REGION (the region it runs in), or set AWS_REGION",
        )
    try:
        result = extend(args.name, duration, args.region, say=print)
    except CloudError as exc:
        print(f"rayrig cloud extend: {exc}", file=sys.stderr)
        return 1
    old = f"{result.old:%Y-%m-%d %H:%M} UTC" if result.old else f"unreadable ({result.old_text!r})"
    print(f"Cluster {result.name} in {result.region}: expiry {old} -> {result.new:%Y-%m-%d %H:%M} UTC.")
    if result.instances:
        print(f"The timers of its {result.instances} running instance(s) follow within {CHECK_EVERY}.")
    else:
        print("No instance of it is running; 'rayrig cloud up' launches new ones with the new expiry.")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig cloud up|down|ls|reap|extend`` to the CLI; each leaf sets ``func`` (args -> exit status)."""
    cloud = subparsers.add_parser("cloud", help="EC2 clusters for a sprint: up, down, ls, reap, extend")
    sub = cloud.add_subparsers(dest="cloud_command", required=True, metavar="COMMAND")

    def timeout(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--timeout", type=float, default=WAIT_TIMEOUT_S, metavar="S",
            help="limit of each wait in seconds (default: %(default).0f)",
        )  # fmt: skip

    up_ = sub.add_parser("up", help="create (or complete) the cluster a spec describes")
    up_.add_argument("spec", type=Path, help="cluster spec (TOML), e.g. examples/sprint42.toml")
    up_.add_argument("--yes", "-y", action="store_true", help="create without asking")
    up_.add_argument("--no-wait-ssh", action="store_true", help="do not wait for SSH to answer")
    up_.add_argument(
        "--deploy", action="store_true", help="then deploy the Ray cluster to it and run the checks (rayrig deploy)"
    )
    timeout(up_)
    up_.set_defaults(func=up_cmd)

    down_ = sub.add_parser("down", help="delete everything rayrig created for a cluster")
    down_.add_argument("name", help="the cluster's name")
    down_.add_argument("--yes", "-y", action="store_true", help="take it down without asking")
    down_.add_argument("--region", help="the cluster's AWS region (default: the one up recorded here, else boto3's)")
    timeout(down_)
    down_.set_defaults(func=down_cmd)

    ls = sub.add_parser("ls", help="list clusters with launch, run time, expiry, instances, $/h and cost so far")
    ls.add_argument("--region", help="the AWS region to list (default: the regions up recorded here, and boto3's)")
    ls.set_defaults(func=ls_cmd)

    reap_ = sub.add_parser(
        "reap", help="take down the expired clusters this machine brought up, as it recorded them (for cron: --yes)"
    )
    reap_.add_argument("--region", help="the AWS region to reap (default: boto3's)")
    reap_.add_argument("--yes", "-y", action="store_true", help="take them down without asking")
    timeout(reap_)
    reap_.set_defaults(func=reap_cmd)

    extend_ = sub.add_parser("extend", help="move a cluster's expiry later; its instances follow within a minute")
    extend_.add_argument("name", help="the cluster's name")
    extend_.add_argument("duration", help="added to the later of now and the expiry: 12h, 1d, 30m, 1d12h")
    extend_.add_argument("--region", help="the cluster's AWS region (default: the one up recorded here, else boto3's)")
    extend_.set_defaults(func=extend_cmd)
