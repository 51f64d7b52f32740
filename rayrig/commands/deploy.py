"""``rayrig deploy``, ``rayrig check`` and ``rayrig demo``: pyinfra runs from the repository root."""

from __future__ import annotations

import argparse
import os
import sys
import time

from checks import report
from cloud import lab
from deploy.contract.paths import repo_root
from rayrig.commands.lab import host_count, lab_name
from rayrig.errors import RayrigError
from rayrig.run import CHECKS_FILE, DEPLOY_FILE, EXIT_USAGE, InventoryFileError, run_pyinfra


def _run(command: str, inventory: str, deploy_file: str, extra: list[str]) -> int:
    """pyinfra's exit status; an inventory mistake (``InventoryFileError``) printed as one line, with its own status."""
    try:
        return run_pyinfra(inventory, deploy_file=deploy_file, extra=extra)
    except InventoryFileError as error:
        print(f"rayrig {command}: {error}", file=sys.stderr)
        return error.status


def deploy_cmd(args: argparse.Namespace) -> int:
    """Run deploy/cluster.py on the inventory; pyinfra's exit status (2: no such inventory file,
    1: the inventory yields no host)."""
    return _run("deploy", args.inventory, DEPLOY_FILE, args.pyinfra_args)


def check_cmd(args: argparse.Namespace) -> int:
    """Run the post-deploy checks alone: 0 on PASS or WARN, 1 on FAIL or when they could not run,
    2 when the inventory file does not exist."""
    status = _run("check", args.inventory, CHECKS_FILE, args.pyinfra_args)
    return status if status in (0, EXIT_USAGE) else 1


def demo_cmd(args: argparse.Namespace) -> int:
    """Bring up the local lab, deploy to it, and print the cluster's state and the next commands."""
    started = time.monotonic()
    lab.up(hosts=args.hosts, name=args.name)
    print(f"==> lab ready in {time.monotonic() - started:.0f} s; deploying with pyinfra", flush=True)
    status = run_pyinfra("inventories/lab.py", env={"RAYRIG_LAB": args.name})
    if status != 0:
        raise RayrigError(
            f"the deploy to lab {args.name} failed (pyinfra exit status {status})",
            "see pyinfra's output above; the lab stays up, and `make demo` again deploys to it",
        )
    print(lab.summary(args.name, report.latest_checks(args.name, repo_root() / "reports")))
    print(f"==> demo finished in {time.monotonic() - started:.0f} s")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig deploy``, ``rayrig check`` and ``rayrig demo``."""
    deploy = subparsers.add_parser("deploy", help="run deploy/cluster.py on an inventory (pyinfra ... -y)")
    deploy.add_argument("inventory", help="pyinfra inventory file, e.g. inventories/prod.py")
    deploy.add_argument("pyinfra_args", nargs=argparse.REMAINDER, help="more pyinfra arguments (--dry, --limit ...)")
    deploy.set_defaults(func=deploy_cmd)

    check = subparsers.add_parser(
        "check", help="run the post-deploy checks on a deployed cluster (exit 0 PASS/WARN, 1 FAIL)"
    )
    check.add_argument("inventory", help="pyinfra inventory file")
    check.add_argument("pyinfra_args", nargs=argparse.REMAINDER, help="more pyinfra arguments")
    check.set_defaults(func=check_cmd)

    demo = subparsers.add_parser("demo", help="bring up the local lab and deploy a Ray cluster to it")
    demo.add_argument("--hosts", type=host_count, default=3, help="hosts in the lab (default: %(default)s)")
    demo.add_argument("--name", type=lab_name, default=os.environ.get("RAYRIG_LAB", lab.DEFAULT_NAME), help="lab name")
    demo.set_defaults(func=demo_cmd)
