"""``rayrig submit INVENTORY [--working-dir DIR] [--env NAME=VALUE] [--no-wait] -- COMMAND ...``

Runs COMMAND as a Ray job on the inventory's cluster, from this machine:

    $ rayrig submit inventories/prod.py --working-dir . -- python train.py --epochs 3
    rayrig submit: job raysubmit_8bWq3T1xXj2c7LPt on cluster "cluster" (via ubuntu@192.0.2.10)
    ... the job's output, as it comes ...
    rayrig submit: job raysubmit_8bWq3T1xXj2c7LPt SUCCEEDED

It opens its own SSH tunnel to the head's dashboard (on a free local port), submits
through Ray's Jobs API with the cluster's token, streams the job's logs to standard output
and closes the tunnel whatever happens. rayrig's own lines go to standard error.
``--no-wait`` prints the job's ID alone on standard output and returns.

The job belongs to the cluster, not to this command: Ctrl-C stops following it, and says
how to follow or stop it. Exit codes: 0 the job SUCCEEDED (or was submitted, with
``--no-wait``); 1 it FAILED or was STOPPED (its error line is printed), or it could not be
submitted or followed; 2 bad usage; 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from rayrig import dashboard, jobs
from rayrig.errors import UsageError
from rayrig.inventory import inventory_file, load_inventory

EXIT_INTERRUPTED = 130


def how_to_reach(inventory: str, job_id: str) -> str:
    """How to follow or stop a job this command does not follow."""
    return (
        f"`rayrig dashboard {shlex.quote(inventory)}` in another shell, then with its export lines "
        f"`ray job logs -f {job_id}` follows it and `ray job stop {job_id}` stops it"
    )


def _usage(args: argparse.Namespace) -> tuple[list[str], Path | None, dict[str, str]]:
    """The job's command, working directory and environment, or ValueError for bad usage."""
    inventory_file(args.inventory)  # the inputs first, then the command
    command = args.command
    working_dir = None
    if args.working_dir is not None:
        working_dir = Path(args.working_dir).expanduser().resolve()
        if not working_dir.is_dir():
            raise ValueError(f"--working-dir {args.working_dir}: no such directory")
    if not command:
        raise ValueError("no command to run: give it after --, e.g. rayrig submit INVENTORY -- python train.py")
    return command, working_dir, jobs.environment(args.env, os.environ)


def _cmd_submit(args: argparse.Namespace) -> int:
    try:
        args = _after_inventory(args)
        command, working_dir, env = _usage(args)
    except ValueError as error:
        raise UsageError(str(error)) from None
    # A kill is a Ctrl-C: the tunnel is closed and the user told about the job. The error handler
    # reports a DashboardError or a JobError as one line, exit 1.
    with dashboard.stopped_by_signals():
        return _submit(args, command, jobs.runtime_env(working_dir, env))


def _submit(args: argparse.Namespace, command: list[str], runtime: dict) -> int:
    plan = dashboard.tunnel_plan(load_inventory(args.inventory), monitoring=False)  # the job API only
    headers = jobs.auth_headers(plan.token_file)
    with dashboard.open_tunnel(plan, dashboard.free_port()) as tunnel:
        try:
            client = jobs.connect(tunnel.url, headers)
            job_id = jobs.submit(client, command, runtime)
        except jobs.JobError as error:
            raise jobs.JobError(f"{error}{_tunnel_note(tunnel)}") from None
        if args.no_wait:
            print(job_id, flush=True)
            print(f'rayrig submit: submitted job {job_id} to cluster "{plan.cluster}".', file=sys.stderr)
            print(f"rayrig submit: to follow or stop it: {how_to_reach(args.inventory, job_id)}", file=sys.stderr)
            return 0
        print(f'rayrig submit: job {job_id} on cluster "{plan.cluster}" (via {plan.destination})', file=sys.stderr)
        try:
            jobs.follow(client, job_id, _write)
            outcome = jobs.outcome(client, job_id)
        except KeyboardInterrupt:
            print(
                f"\nrayrig submit: stopped following job {job_id}; it keeps running on the cluster "
                f"(rayrig submit does not stop it). To follow or stop it: {how_to_reach(args.inventory, job_id)}",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
        except jobs.JobError as error:
            raise jobs.JobError(
                f"job {job_id}: {error}{_tunnel_note(tunnel)}. The job may still run; to follow or stop it: "
                f"{how_to_reach(args.inventory, job_id)}"
            ) from None
    if outcome.exit_status == 0:
        print(f"rayrig submit: job {job_id} {outcome.status}", file=sys.stderr)
    else:
        print(f"rayrig submit: job {job_id} {outcome.status}: {outcome.error}", file=sys.stderr)
    return outcome.exit_status


def _write(chunk: str) -> None:
    sys.stdout.write(chunk)
    sys.stdout.flush()


def _tunnel_note(tunnel: dashboard.Tunnel) -> str:
    failure = tunnel.failure(wait_s=2)  # the dashboard's connection broke: is ssh on its way out?
    return f" (the tunnel closed: {failure})" if failure else ""


def _add_options(parser: argparse.ArgumentParser, defaults: bool = True) -> None:
    """``--working-dir``, ``--env`` and ``--no-wait``, before or after the inventory."""
    unset = {} if defaults else {"default": argparse.SUPPRESS}
    parser.add_argument(
        "--working-dir",
        metavar="DIR",
        help="folder uploaded as the job's working directory (honours .gitignore)",
        **unset,
    )
    parser.add_argument(
        "--env",
        metavar="NAME=VALUE",
        action="append",
        help="an environment variable of the job (repeatable); NAME alone takes this shell's value, which keeps "
        "a secret off the command line",
        **({"default": []} if defaults else unset),
    )
    parser.add_argument(
        "--no-wait", action="store_true", help="print the job's ID and return once it is submitted", **unset
    )


def _after_inventory(args: argparse.Namespace) -> argparse.Namespace:
    """The options given after the inventory, and the command: everything after ``--`` (or from the first
    word that is not one of our options), the command's own options included."""
    parser = argparse.ArgumentParser(prog="rayrig submit INVENTORY", add_help=False, exit_on_error=False)
    _add_options(parser, defaults=False)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    try:
        later, unknown = parser.parse_known_args(args.rest)
    except argparse.ArgumentError as error:
        raise ValueError(str(error)) from None
    if unknown:
        raise ValueError(f"{unknown[0]}: not an option of rayrig submit (the job's command goes after --)")
    return argparse.Namespace(
        inventory=args.inventory,
        working_dir=getattr(later, "working_dir", args.working_dir),
        env=[*(args.env or []), *getattr(later, "env", [])],
        no_wait=args.no_wait or getattr(later, "no_wait", False),
        command=later.command[1:] if later.command[:1] == ["--"] else later.command,
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig submit``."""
    parser = subparsers.add_parser(
        "submit",
        usage="rayrig submit INVENTORY [--working-dir DIR] [--env NAME=VALUE ...] [--no-wait] -- COMMAND ...",
        help="run a command as a Ray job on the cluster, through the dashboard's tunnel, and stream its logs",
        description="Run COMMAND as a Ray job on the inventory's cluster (Ray's Jobs API, through an SSH "
        "tunnel to the head's dashboard, with the cluster's token) and stream its logs. Exit 0 when the job "
        "SUCCEEDED, 1 when it FAILED or was STOPPED or could not be submitted, 2 bad usage.",
    )
    parser.add_argument("inventory", help="pyinfra inventory file, e.g. inventories/prod.py")
    _add_options(parser)
    # Everything after the inventory, our options first: argparse would give the command's own options to us.
    parser.add_argument(
        "rest", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command, e.g. python train.py"
    )
    parser.set_defaults(func=_cmd_submit)
