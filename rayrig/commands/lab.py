"""``rayrig lab up|down|status``: the local lab (:mod:`cloud.lab`) from the command line."""

from __future__ import annotations

import argparse

from cloud import lab


def host_count(text: str) -> int:
    """``--hosts``: a whole number of hosts that a lab's /24 holds (argparse's usage error otherwise)."""
    try:
        hosts = int(text)
    except ValueError:
        hosts = 0
    if not 1 <= hosts <= lab.MAX_HOSTS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hosts from 1 to {lab.MAX_HOSTS}")
    return hosts


def lab_name(text: str) -> str:
    """``--name``: a lab name that makes a folder name (argparse's usage error otherwise)."""
    try:
        lab.lab_dir(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _cmd_up(args: argparse.Namespace) -> int:
    state = lab.up(args.hosts, args.name, progress=print)
    print(lab.status(state["name"]))
    print(f"\nNext: RAYRIG_LAB={state['name']} pyinfra inventories/lab.py deploy/cluster.py")
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    lab.down(args.name, progress=print)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    print(lab.status(args.name))
    return 0 if lab.load_state(args.name) else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig lab up|down|status`` to the CLI.

    Each leaf parser sets ``func``: a callable taking the parsed arguments and
    returning an exit status.
    """
    parser = subparsers.add_parser("lab", help="the local lab: containers that act as hosts")
    sub = parser.add_subparsers(dest="lab_command", required=True, metavar="COMMAND")
    p_up = sub.add_parser("up", help="start (or complete) the lab; builds its images the first time")
    p_up.add_argument("--hosts", type=host_count, default=3, help="number of hosts (default: %(default)s)")
    p_up.add_argument("--name", type=lab_name, default=lab.DEFAULT_NAME, help="lab name (default: %(default)s)")
    p_up.set_defaults(func=_cmd_up)
    p_down = sub.add_parser("down", help="remove every container, network and volume of the lab")
    p_down.add_argument("--name", type=lab_name, default=lab.DEFAULT_NAME, help="lab name (default: %(default)s)")
    p_down.set_defaults(func=_cmd_down)
    p_status = sub.add_parser("status", help="show the lab's hosts and whether they answer")
    p_status.add_argument("--name", type=lab_name, default=lab.DEFAULT_NAME, help="lab name (default: %(default)s)")
    p_status.set_defaults(func=_cmd_status)
