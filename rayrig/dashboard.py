"""The head's dashboard on this machine, through SSH (``rayrig dashboard INVENTORY``, ``rayrig submit``).

The dashboard binds 127.0.0.1 on the head by default (``ray_dashboard_host``)
and the firewall keeps its port closed, so the way in is an SSH tunnel:

    $ rayrig dashboard inventories/prod.py
    Dashboard of cluster "cluster": http://127.0.0.1:8265
    It asks for the cluster's Ray token: it is in /home/me/rayrig/.rayrig/clusters/cluster/ray_auth_token
    The tunnel runs over SSH to root@10.0.0.1 until Ctrl-C.
    Ray's own clients (ray job submit, ray list nodes ...) in another shell, after:
    export RAY_ADDRESS=http://127.0.0.1:8265
    export RAY_AUTH_MODE=token
    export RAY_AUTH_TOKEN_PATH=/home/me/rayrig/.rayrig/clusters/cluster/ray_auth_token

The tunnel is OpenSSH's own (``ssh -N -L``), so the user's agent applies, and
the head is reached the way pyinfra's ssh connector reaches it for a deploy:
its inventory data's ``ssh_hostname``, ``ssh_user``, ``ssh_port``, ``ssh_key``,
``ssh_known_hosts_file``, ``ssh_strict_host_key_checking`` and
``ssh_config_file`` (``-F``: where a bastion's ProxyJump lives, as
``rayrig cloud up`` writes it for EC2 clusters behind one). :func:`ssh_options`
turns any host's data into those options.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy import auth
from deploy.paths import repo_root
from deploy.settings import merge

LOOPBACK_OR_ANY = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::")

#: pyinfra's ``ssh_strict_host_key_checking`` values, and OpenSSH's ``StrictHostKeyChecking`` for each.
STRICT_HOST_KEY_CHECKING = {"yes": "yes", "no": "no", "off": "no", "accept-new": "accept-new", "ask": "ask"}
#: What pyinfra's ssh connector does when the inventory does not say.
PYINFRA_STRICT_DEFAULT = "accept-new"
#: Inventory data keys that name a file on this machine, and the ssh option each becomes.
SSH_FILE_KEYS = {"ssh_key": "-i", "ssh_config_file": "-F", "ssh_known_hosts_file": "UserKnownHostsFile"}

EXIT_FAILED, EXIT_USAGE = 1, 2


class DashboardError(Exception):
    """The tunnel can't be opened; the message says why, ``status`` is the exit status to end with."""

    def __init__(self, message: str, status: int = EXIT_FAILED):
        super().__init__(message)
        self.status = status


def load_inventory(path: str) -> list[dict[str, Any]]:
    """The hosts of an inventory file as pyinfra builds them (group data included): [{name, data}].

    pyinfra's own ``debug-inventory`` loads it, from the repository root, as a deploy would.
    A file that does not exist is a usage error (exit status 2).
    """
    if not Path(path).is_file():
        raise DashboardError(f"{path}: no such inventory file", EXIT_USAGE)
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


def _local_path(value: Any) -> Path:
    """A path from inventory data, as the deploy (which runs from the repository root) reads it."""
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else repo_root() / path


def ssh_options(name: str, data: dict[str, Any]) -> list[str]:
    """OpenSSH's options and destination for reaching host ``name`` with its inventory ``data``:
    ``[options..., "--", hostname]``, to follow ``ssh`` and any options of the caller's own.

        ssh_options("10.0.0.5", {"ssh_user": "ubuntu", "ssh_config_file": ".rayrig/ec2/c.ssh_config"})
        # ['-o', 'StrictHostKeyChecking=accept-new', '-F', '/repo/.rayrig/ec2/c.ssh_config',
        #  '-l', 'ubuntu', '--', '10.0.0.5']

    Relative file names are the repository root's, as for a deploy. Secrets are never passed:
    ssh asks for a password (``ssh_password``) or a key's passphrase (``ssh_key_password``) on
    the terminal, unless the agent holds the key. ``ssh_paramiko_connect_kwargs`` is paramiko's
    alone. A value ssh cannot take is an error naming the host, the key and what is expected.
    """

    def bad(key: str, expected: str) -> DashboardError:
        return DashboardError(f"host {name}: {key} = {data[key]!r}: expected {expected}")

    strict = data.get("ssh_strict_host_key_checking") or PYINFRA_STRICT_DEFAULT
    if not isinstance(strict, str) or strict not in STRICT_HOST_KEY_CHECKING:
        raise bad("ssh_strict_host_key_checking", "one of " + ", ".join(map(repr, STRICT_HOST_KEY_CHECKING)))
    options = ["-o", f"StrictHostKeyChecking={STRICT_HOST_KEY_CHECKING[strict]}"]
    for key, option in SSH_FILE_KEYS.items():
        value = data.get(key)
        if not value:
            continue
        if not isinstance(value, (str, Path)) or '"' in str(value) or "\n" in str(value):
            raise bad(key, "the path of a file on this machine")
        path = str(_local_path(value))
        if option.startswith("-"):
            options += [option, path]
        else:  # an ssh_config line: a path with spaces must be quoted in it
            options += ["-o", f'{option}="{path}"' if any(c.isspace() for c in path) else f"{option}={path}"]
    if data.get("ssh_allow_agent") is False:
        options += ["-o", "IdentityAgent=none"]
    if data.get("ssh_look_for_keys") is False:
        options += ["-o", "IdentitiesOnly=yes"]
    port = data.get("ssh_port")
    if port:
        if isinstance(port, bool) or not str(port).isdigit() or not 1 <= int(port) <= 65535:
            raise bad("ssh_port", "a port number 1-65535")
        options += ["-p", str(int(port))]
    user = data.get("ssh_user")
    if user:
        if not isinstance(user, str) or not user.strip() or any(c.isspace() for c in user):
            raise bad("ssh_user", "a user name")
        options += ["-l", user]
    hostname = data.get("ssh_hostname") or name
    if not isinstance(hostname, str) or not hostname.strip() or any(c.isspace() for c in hostname):
        key = "ssh_hostname" if data.get("ssh_hostname") else "the host's name"
        raise DashboardError(f"host {name}: {key} = {hostname!r}: expected a host name or address")
    return [*options, "--", hostname]


@dataclass(frozen=True)
class TunnelPlan:
    """Where the tunnel goes: the head, how ssh reaches it, the dashboard's address there, the token file."""

    head: str
    ssh: tuple[str, ...]  # ssh_options(head, data)
    destination: str  # user@hostname (or hostname), as the user reads it
    remote_host: str
    remote_port: int
    cluster: str
    token_file: Path | None  # None without token authentication (ray_auth = "none")


def tunnel_plan(hosts: list[dict[str, Any]]) -> TunnelPlan:
    """The tunnel to the dashboard of the inventory's one head."""
    heads = [h for h in hosts if merge(h["data"])["ray_role"] == "head"]
    if len(heads) != 1:
        raise DashboardError(f'the inventory has {len(heads)} hosts with ray_role = "head"; expected exactly one')
    name, data = heads[0]["name"], heads[0]["data"]
    settings = merge(data)
    bind = settings["ray_dashboard_host"]
    ssh = ssh_options(name, data)
    return TunnelPlan(
        head=name,
        ssh=tuple(ssh),
        destination=f"{data['ssh_user']}@{ssh[-1]}" if data.get("ssh_user") else ssh[-1],
        remote_host="127.0.0.1" if bind in LOOPBACK_OR_ANY else bind,
        remote_port=settings["ray_ports"]["dashboard"],
        cluster=settings["ray_cluster_name"],
        token_file=_local_path(auth.token_path(settings)) if settings["ray_auth"] == "token" else None,
    )


def ssh_command(plan: TunnelPlan, local_port: int) -> list[str]:
    """The ``ssh -N -L`` command line of the tunnel (it holds no secret)."""
    args = ["ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=30"]
    args += ["-L", f"127.0.0.1:{local_port}:{plan.remote_host}:{plan.remote_port}"]
    return [*args, *plan.ssh]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (for a tunnel of its own)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


class Tunnel:
    """A running ``ssh -N -L``; ssh's messages go to a temporary file (a pipe nobody reads would fill)."""

    def __init__(self, plan: TunnelPlan, local_port: int, process: subprocess.Popen, messages: Any):
        self.plan, self.local_port, self.process, self._messages = plan, local_port, process, messages

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}"

    def messages(self) -> str:
        """What ssh said on its standard error so far."""
        self._messages.seek(0)
        return self._messages.read().strip()

    def failure(self, wait_s: float = 0) -> str:
        """Why the tunnel is gone, in ssh's words, and what to try; empty while it runs.

        ``wait_s``: how long to give an ssh whose connection just broke to finish exiting
        (its sockets close before its exit status is there to read).
        """
        try:
            self.process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return ""
        detail = self.messages() or "(ssh said nothing)"
        return (
            f"ssh to {self.plan.destination} exited with status {self.process.returncode}: {detail}. "
            f"Check that this works from here: {shlex.join(['ssh', *self.plan.ssh, 'true'])}"
        )

    def close(self) -> None:
        """Stop ssh (if it still runs) and forget its messages."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._messages.close()

    def __enter__(self) -> Tunnel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_tunnel(plan: TunnelPlan, local_port: int, wait_s: float = 30) -> Tunnel:
    """Start the tunnel and return once the local port answers (or raise with ssh's words)."""
    if _listening(local_port):
        raise DashboardError(f"127.0.0.1:{local_port} is already in use here: choose another with --local-port")
    messages = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (the Tunnel closes it)
    process = subprocess.Popen(ssh_command(plan, local_port), stdin=subprocess.DEVNULL, stderr=messages, text=True)
    tunnel = Tunnel(plan, local_port, process, messages)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            failure = tunnel.failure()
            tunnel.close()
            raise DashboardError(failure)
        if _listening(local_port):
            return tunnel
        time.sleep(0.2)
    tunnel.close()
    raise DashboardError(f"the tunnel to {plan.destination} did not open within {wait_s:.0f} s")


def export_lines(plan: TunnelPlan, local_port: int) -> list[str]:
    """The shell lines that point Ray's own clients (``ray job submit``, ``ray list``, the Python SDK) at
    the tunnel: its address and, with token authentication, the token's file (never the token)."""
    lines = [f"export RAY_ADDRESS=http://127.0.0.1:{local_port}"]
    if plan.token_file:
        lines += ["export RAY_AUTH_MODE=token", f"export RAY_AUTH_TOKEN_PATH={shlex.quote(str(plan.token_file))}"]
    return lines


def banner(plan: TunnelPlan, local_port: int) -> str:
    """What the user reads once the tunnel is open (never the token itself)."""
    lines = [f'Dashboard of cluster "{plan.cluster}": http://127.0.0.1:{local_port}']
    if plan.token_file and plan.token_file.is_file():
        lines.append(f"It asks for the cluster's Ray token: it is in {plan.token_file}")
    elif plan.token_file:
        lines.append(
            f"It asks for the cluster's Ray token, which this machine has no copy of yet ({plan.token_file}): "
            "a deploy from here fetches it from the head (`rayrig deploy INVENTORY`)"
        )
    lines.append(f"The tunnel runs over SSH to {plan.destination} until Ctrl-C.")
    lines.append("Ray's own clients (ray job submit, ray list nodes ...) in another shell, after:")
    return "\n".join(lines + export_lines(plan, local_port))
