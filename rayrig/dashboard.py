"""The head's dashboard on this machine, through SSH (``rayrig dashboard INVENTORY``).

The dashboard binds 127.0.0.1 on the head by default (``ray_dashboard_host``)
and the firewall keeps its port closed, so the way in is an SSH tunnel:

    $ rayrig dashboard inventories/prod.py
    Dashboard of cluster "cluster": http://127.0.0.1:8265
    It asks for the cluster's Ray token: it is in .rayrig/clusters/cluster/ray_auth_token
    The tunnel runs over SSH to root@10.0.0.1 until Ctrl-C.

The tunnel is OpenSSH's own (``ssh -N -L``), so the user's SSH config, agent
and known hosts apply, with the inventory's user, port and key on top.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from deploy import auth
from deploy.paths import repo_root
from deploy.settings import merge

LOOPBACK_OR_ANY = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::")


class DashboardError(Exception):
    """The tunnel can't be opened; the message says why."""


def load_inventory(path: str) -> list[dict[str, Any]]:
    """The hosts of an inventory file as pyinfra builds them (group data included): [{name, data}].

    pyinfra's own ``debug-inventory`` loads it, from the repository root, as a deploy would.
    """
    if not Path(path).is_file():
        raise DashboardError(f"{path}: no such inventory file")
    pyinfra = Path(sys.executable).with_name("pyinfra")
    command = [str(pyinfra) if pyinfra.exists() else "pyinfra", str(Path(path).resolve()), "debug-inventory", "--json"]
    result = subprocess.run(command, cwd=repo_root(), capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise DashboardError(f"{path}: the inventory does not load: {detail}")
    hosts = json.loads(result.stdout)
    if not hosts:
        raise DashboardError(f"{path}: the inventory yields no host (expected at least a head)")
    return hosts


def tunnel_plan(hosts: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the tunnel goes: the head's SSH settings, the dashboard's address and port, the token file."""
    heads = [h for h in hosts if merge(h["data"])["ray_role"] == "head"]
    if len(heads) != 1:
        raise DashboardError(f'the inventory has {len(heads)} hosts with ray_role = "head"; expected exactly one')
    data = heads[0]["data"]
    settings = merge(data)
    bind = settings["ray_dashboard_host"]
    return {
        "hostname": data.get("ssh_hostname") or heads[0]["name"],
        "user": data.get("ssh_user"),
        "port": data.get("ssh_port"),
        "key": data.get("ssh_key"),
        "known_hosts": data.get("ssh_known_hosts_file"),
        "remote_host": "127.0.0.1" if bind in LOOPBACK_OR_ANY else bind,
        "remote_port": settings["ray_ports"]["dashboard"],
        "cluster": settings["ray_cluster_name"],
        "token_file": auth.token_path(settings) if settings["ray_auth"] == "token" else None,
    }


def ssh_command(plan: dict[str, Any], local_port: int) -> list[str]:
    """The ``ssh -N -L`` command line of the tunnel."""
    args = ["ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=30"]
    args += ["-L", f"127.0.0.1:{local_port}:{plan['remote_host']}:{plan['remote_port']}"]
    if plan["key"]:
        args += ["-i", str(Path(plan["key"]).expanduser())]
    if plan["known_hosts"]:
        args += ["-o", f"UserKnownHostsFile={Path(plan['known_hosts']).expanduser()}"]
    if plan["port"]:
        args += ["-p", str(plan["port"])]
    target = f"{plan['user']}@{plan['hostname']}" if plan["user"] else plan["hostname"]
    return [*args, target]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def open_tunnel(plan: dict[str, Any], local_port: int, wait_s: float = 30) -> subprocess.Popen:
    """Start the tunnel and return once the local port answers (or raise with ssh's words)."""
    if _listening(local_port):
        raise DashboardError(f"127.0.0.1:{local_port} is already in use here: choose another with --local-port")
    process = subprocess.Popen(
        ssh_command(plan, local_port), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = (process.stderr.read() if process.stderr else "").strip().splitlines()
            detail = said[-1].strip() if said else "(no message)"
            raise DashboardError(f"ssh to {plan['hostname']} exited with status {process.returncode}: {detail}")
        if _listening(local_port):
            return process
        time.sleep(0.2)
    process.terminate()
    raise DashboardError(f"the tunnel to {plan['hostname']} did not open within {wait_s:.0f} s")


def banner(plan: dict[str, Any], local_port: int) -> str:
    """What the user reads once the tunnel is open (never the token itself)."""
    lines = [f'Dashboard of cluster "{plan["cluster"]}": http://127.0.0.1:{local_port}']
    if plan["token_file"]:
        lines.append(f"It asks for the cluster's Ray token: it is in {plan['token_file']}")
    user = f"{plan['user']}@" if plan["user"] else ""
    lines.append(f"The tunnel runs over SSH to {user}{plan['hostname']} until Ctrl-C.")
    return "\n".join(lines)
