"""``rayrig dashboard INVENTORY``: open an SSH tunnel to the head's dashboard (and, with monitoring on,
Prometheus and Grafana) and say how to use it.

Exit codes: 0 closed with Ctrl-C (or a ``kill``: SIGTERM, SIGHUP; the tunnel's ssh ends
too), 1 the tunnel did not open or ssh ended it (the message has ssh's words), 2 bad usage (no
such inventory file).
"""

from __future__ import annotations

import argparse
import shlex

from rayrig import dashboard
from rayrig.inventory import load_inventory


def _cmd_dashboard(args: argparse.Namespace) -> int:
    """0 after Ctrl-C; 1 when the tunnel cannot be opened or ssh ends it (ssh's words); 2 no such inventory file."""
    local_ports = {"Prometheus": args.local_prometheus_port, "Grafana": args.local_grafana_port}
    plan = dashboard.tunnel_plan(load_inventory(args.inventory), local_ports)
    local_port = args.local_port or plan.remote_port
    if args.print_command:
        print(shlex.join(dashboard.ssh_command(plan, local_port)))
        return 0
    with dashboard.stopped_by_signals():  # a kill closes the tunnel too
        try:
            tunnel = dashboard.open_tunnel(plan, local_port)
        except dashboard.DashboardError as error:
            raise dashboard.DashboardError(f"cannot open the tunnel to the dashboard: {error}") from None
        with tunnel:
            try:  # once it is open, Ctrl-C or a kill is how it ends
                print(dashboard.banner(plan, local_port), flush=True)
                tunnel.process.wait()
            except KeyboardInterrupt:
                return 0
            raise dashboard.DashboardError(f"the tunnel closed: {tunnel.failure()}")


def port_number(text: str) -> int:
    """A port argument, 1-65535 (argparse's type for every port option of the commands)."""
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
        "--local-port", type=port_number, default=None, help="port on this machine (default: the dashboard's port)"
    )
    parser.add_argument(
        "--local-prometheus-port", type=port_number, default=None,
        help="port on this machine for Prometheus, with monitoring on (default: its own, monitoring_prometheus_port)",
    )  # fmt: skip
    parser.add_argument(
        "--local-grafana-port", type=port_number, default=None,
        help="port on this machine for Grafana, with monitoring on (default: its own, monitoring_grafana_port)",
    )  # fmt: skip
    parser.add_argument("--print-command", action="store_true", help="print the ssh command instead of running it")
    parser.set_defaults(func=_cmd_dashboard)
