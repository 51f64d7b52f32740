"""``rayrig deploy``, ``rayrig check`` and ``rayrig demo``: thin wrappers that run pyinfra from the repository root."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from checks import report
from deploy.paths import repo_root

DEPLOY_FILE = "deploy/cluster.py"
CHECKS_FILE = "deploy/check.py"


def pyinfra_command(inventory: str | Path, deploy_file: str = DEPLOY_FILE, extra: Sequence[str] = ()) -> list[str]:
    """The pyinfra command line that runs ``deploy_file`` on ``inventory`` without prompting."""
    return [sys.executable, "-m", "pyinfra", str(inventory), deploy_file, "-y", *extra]


def run_pyinfra(inventory: str | Path, deploy_file: str = DEPLOY_FILE, extra: Sequence[str] = (),
                env: dict[str, str] | None = None) -> int:  # fmt: skip
    """Run pyinfra from the repository root (deploy files import ``deploy.*`` from there)."""
    inventory = Path(inventory).resolve() if Path(inventory).exists() else inventory
    command = pyinfra_command(inventory, deploy_file, extra)
    return subprocess.call(command, cwd=repo_root(), env={**os.environ, **(env or {})})


def lab_summary(name: str) -> str:
    """What a user wants after the demo: the head, ``ray status``, and the next commands."""
    from cloud import local
    from cloud import ssh as remote

    state = local.load_state(name)
    if state is None:
        return f"no lab named {name!r}: run `rayrig lab up --name {name}`"
    head = next(h for h in state["hosts"] if h["role"] == "head")
    target = remote.SshTarget(head["address"], state["ssh_user"], Path(state["ssh_key"]), Path(state["known_hosts"]))
    status, output = remote.run(target, "sudo docker exec ray-node ray status", timeout=120)
    lab_env = "" if name == local.DEFAULT_NAME else f"RAYRIG_LAB={name} "
    checks = report.latest_checks(name, repo_root() / "reports")
    lines = [
        "",
        f"==> Ray cluster on lab {name}: head {head['address']} ({len(state['hosts'])} hosts)",
        "==> ray status (inside the head's ray-node container):",
        output.rstrip() if status == 0 else f"ray status failed ({status}):\n{output.rstrip()}",
        checks,
        "",
        "Next:",
        f"  dashboard:  {lab_env}rayrig dashboard inventories/lab.py   (an SSH tunnel; it prints the URL)",
        f"  a shell:    {' '.join(target.ssh_command())}",
        f"  tear down:  make lab-down   (or: rayrig lab down --name {name})",
    ]
    return "\n".join(lines)


def _cmd_deploy(args: argparse.Namespace) -> int:
    return run_pyinfra(args.inventory, extra=args.pyinfra_args)


def _cmd_check(args: argparse.Namespace) -> int:
    status = run_pyinfra(args.inventory, deploy_file=CHECKS_FILE, extra=args.pyinfra_args)
    return 0 if status == 0 else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    from cloud import local

    started = time.monotonic()
    local.up(hosts=args.hosts, name=args.name)
    print(f"==> lab ready in {time.monotonic() - started:.0f} s; deploying with pyinfra", flush=True)
    status = run_pyinfra("inventories/lab.py", env={"RAYRIG_LAB": args.name})
    if status != 0:
        print(f"==> the deploy failed (pyinfra exit status {status})", file=sys.stderr)
        return 1
    print(lab_summary(args.name))
    print(f"==> demo finished in {time.monotonic() - started:.0f} s")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig deploy``, ``rayrig check`` and ``rayrig demo``."""
    deploy = subparsers.add_parser("deploy", help="run deploy/cluster.py on an inventory (pyinfra ... -y)")
    deploy.add_argument("inventory", help="pyinfra inventory file, e.g. inventories/prod.py")
    deploy.add_argument("pyinfra_args", nargs=argparse.REMAINDER, help="more pyinfra arguments (--dry, --limit ...)")
    deploy.set_defaults(func=_cmd_deploy)

    check = subparsers.add_parser(
        "check", help="run the post-deploy checks on a deployed cluster (exit 0 PASS/WARN, 1 FAIL)"
    )
    check.add_argument("inventory", help="pyinfra inventory file")
    check.add_argument("pyinfra_args", nargs=argparse.REMAINDER, help="more pyinfra arguments")
    check.set_defaults(func=_cmd_check)

    demo = subparsers.add_parser("demo", help="bring up the local lab and deploy a Ray cluster to it")
    demo.add_argument("--hosts", type=int, default=3, help="hosts in the lab (default: %(default)s)")
    demo.add_argument("--name", default=os.environ.get("RAYRIG_LAB", "rayrig-lab"), help="lab name")
    demo.set_defaults(func=_cmd_demo)
