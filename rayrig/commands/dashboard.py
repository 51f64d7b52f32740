"""``rayrig dashboard INVENTORY``: open an SSH tunnel to the head's dashboard and say how to use it."""

from __future__ import annotations

import argparse
import shlex

from rayrig import dashboard
from rayrig.errors import RayrigError, UsageError


def _cmd_dashboard(args: argparse.Namespace) -> int:
    """0 when the tunnel closes; 2 (``UsageError``) when the inventory is unusable, 1 when the tunnel is."""
    try:
        plan = dashboard.tunnel_plan(dashboard.load_inventory(args.inventory))
    except dashboard.DashboardError as error:
        raise UsageError(str(error)) from None
    local_port = args.local_port or plan["remote_port"]
    if args.print_command:
        print(shlex.join(dashboard.ssh_command(plan, local_port)))
        return 0
    try:
        process = dashboard.open_tunnel(plan, local_port)
    except dashboard.DashboardError as error:
        raise RayrigError(
            f"cannot open the tunnel to the dashboard: {error}",
            "check that the ssh command of `rayrig dashboard INVENTORY --print-command` works from here",
        ) from None
    print(dashboard.banner(plan, local_port), flush=True)
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.terminate()
        process.wait(timeout=10)
        return 0


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number 1-65535")
    return port


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig dashboard``."""
    parser = subparsers.add_parser("dashboard", help="open an SSH tunnel to the head's dashboard and print its URL")
    parser.add_argument("inventory", help="pyinfra inventory file, e.g. inventories/prod.py")
    parser.add_argument(
        "--local-port", type=_port, default=None, help="port on this machine (default: the dashboard's port)"
    )
    parser.add_argument("--print-command", action="store_true", help="print the ssh command instead of running it")
    parser.set_defaults(func=_cmd_dashboard)
