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

With monitoring on (``monitoring_enabled``) and Prometheus and Grafana on the head (the default
``monitoring_host``), the same ssh forwards them too (more ``-L`` options: Prometheus on
``monitoring_prometheus_port``, Grafana on ``monitoring_grafana_port`` when ``monitoring_grafana``),
and the banner names their URLs::

    Prometheus: http://127.0.0.1:9090
    Grafana: http://127.0.0.1:3000

Both listen on the monitoring host's loopback only, so with ``monitoring_host`` naming another
host the banner prints the ssh command that forwards them from there instead.

The tunnel is OpenSSH's own (``ssh -N -L``), so the user's agent applies, and
the head is reached the way pyinfra's ssh connector reaches it for a deploy:
its inventory data's ``ssh_hostname``, ``ssh_user``, ``ssh_port``, ``ssh_key``,
``ssh_known_hosts_file``, ``ssh_strict_host_key_checking`` and
``ssh_config_file`` (``-F``: where a bastion's ProxyJump lives, as
``rayrig cloud up`` writes it for EC2 clusters behind one). :func:`ssh_options`
turns any host's data into those options.

The tunnel counts as open only once ssh itself says it listens on every forward's local port
(``-v``: ``Local forwarding listening on 127.0.0.1 port P.``, which OpenSSH prints once its ``bind``
and ``listen`` succeeded), not once something answers there: OpenSSH binds its forwards only after it
authenticated, and another local user who binds the port first would otherwise receive the token
``rayrig submit`` sends. With ``ExitOnForwardFailure=yes`` an ssh whose port was taken exits, naming it.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.ray import auth
from rayrig.inventory import Inventory, SshSettings, local_path, ssh_argv

LOOPBACK_OR_ANY = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::")


class DashboardError(Exception):
    """The tunnel can't be opened or closed on its own; the message says why (exit status 1)."""

    status = 1


def ssh_options(name: str, data: dict[str, Any]) -> list[str]:
    """OpenSSH's options and destination for reaching host ``name`` with its inventory ``data``:
    ``[options..., "--", hostname]``, to follow ``ssh`` and any options of the caller's own.

    The same options as every day-to-day command's (:func:`rayrig.inventory.ssh_argv`), so
    that a bastion's ProxyJump in ``ssh_config_file`` applies here too.
    """
    return ssh_argv(SshSettings.from_data(name, data))[1:]


@dataclass(frozen=True)
class Forward:
    """One more service the tunnel forwards from the remote's loopback: its name and port there and here."""

    name: str  # "Prometheus", "Grafana": what the banner calls it
    remote_port: int
    local_port: int


@dataclass(frozen=True)
class TunnelPlan:
    """Where the tunnel goes: the head, how ssh reaches it, the dashboard's address there, the token file,
    and the monitoring services it forwards too."""

    head: str
    ssh: tuple[str, ...]  # ssh_options(head, data)
    destination: str  # user@hostname (or hostname), as the user reads it
    remote_host: str
    remote_port: int
    cluster: str
    token_file: Path | None  # None without token authentication (ray_auth = "none")
    forwards: tuple[Forward, ...] = ()  # Prometheus and Grafana, when they run on the head
    elsewhere: tuple[str, ...] = ()  # the ssh command that forwards them from another monitoring host


def monitoring_forwards(settings: Any, local_ports: dict[str, int | None] | None = None) -> tuple[Forward, ...]:
    """Prometheus, and Grafana when ``monitoring_grafana``, on the monitoring host's loopback (none with
    monitoring off); each forwarded to the same port here unless ``local_ports`` names another."""
    if not settings["monitoring_enabled"]:
        return ()
    ports = {"Prometheus": settings["monitoring_prometheus_port"]}
    if settings["monitoring_grafana"]:
        ports["Grafana"] = settings["monitoring_grafana_port"]
    chosen = local_ports or {}
    return tuple(Forward(name, port, chosen.get(name) or port) for name, port in ports.items())


def tunnel_plan(inventory: Inventory, local_ports: dict[str, int | None] | None = None,
                monitoring: bool = True) -> TunnelPlan:  # fmt: skip
    """The tunnel to the dashboard of the inventory's head (a checked inventory has exactly one), with
    Prometheus and Grafana when monitoring is on (``local_ports``: their ports here, by name, if not theirs);
    ``monitoring=False``: the dashboard alone (``rayrig submit``'s tunnel).

    The monitoring host (``monitoring_host``: a host's name or address, the head when None) is found in the
    inventory; one that is not there is an error naming it."""
    head = inventory.head
    settings = head.settings
    bind = settings["ray_dashboard_host"]
    ssh = ssh_argv(head)[1:]
    forwards, elsewhere = monitoring_forwards(settings, local_ports) if monitoring else (), ()
    if forwards and inventory.pick(settings["monitoring_host"]) is not head:
        where = inventory.pick(settings["monitoring_host"])
        elsewhere = ("ssh", "-N", *_forward_options(forwards), *ssh_argv(where)[1:])
        forwards = ()
    return TunnelPlan(
        head=head.name,
        ssh=tuple(ssh),
        destination=f"{head.ssh.user}@{head.ssh.hostname}" if head.ssh.user else head.ssh.hostname,
        remote_host="127.0.0.1" if bind in LOOPBACK_OR_ANY else bind,
        remote_port=settings["ray_ports"]["dashboard"],
        cluster=settings["ray_cluster_name"],
        token_file=Path(local_path(str(auth.token_path(settings)))) if settings["ray_auth"] == "token" else None,
        forwards=forwards,
        elsewhere=elsewhere,
    )


def _forward_options(forwards: tuple[Forward, ...]) -> list[str]:
    return [option for f in forwards for option in ("-L", f"127.0.0.1:{f.local_port}:127.0.0.1:{f.remote_port}")]


def ssh_command(plan: TunnelPlan, local_port: int) -> list[str]:
    """The ``ssh -v -N -L`` command line of the tunnel: the dashboard, then Prometheus and Grafana where they
    are forwarded too (it holds no secret). ``-v``: ssh says when each forward listens (:func:`open_tunnel`)."""
    args = ["ssh", "-v", "-N", "-o", "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=30"]
    args += ["-L", f"127.0.0.1:{local_port}:{plan.remote_host}:{plan.remote_port}"]
    return [*args, *_forward_options(plan.forwards), *plan.ssh]


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (for a tunnel of its own)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


#: What OpenSSH's ``-v`` prints once a local forward's socket listens (channels.c), a whole line.
SSH_LISTENING = re.compile(r"debug1: Local forwarding listening on 127\.0\.0\.1 port (\d+)\.")


def ssh_listens_on(messages: str) -> set[int]:
    """The local ports ssh said it listens on, in its ``-v`` messages."""
    return {int(m[1]) for line in messages.splitlines() if (m := SSH_LISTENING.fullmatch(line.strip()))}


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def stop(process: subprocess.Popen, wait_s: float = 10) -> None:
    """End ``process`` if it still runs: SIGTERM, then SIGKILL after ``wait_s``; it is reaped either way."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Tunnel:
    """A running ``ssh -N -L``; ssh's messages go to a temporary file (a pipe nobody reads would fill)."""

    def __init__(self, plan: TunnelPlan, local_port: int, process: subprocess.Popen, messages: Any):
        self.plan, self.local_port, self.process, self._messages = plan, local_port, process, messages

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}"

    def messages(self) -> str:
        """What ssh said on its standard error so far."""
        fd = self._messages.fileno()  # ssh writes at the offset it shares with this file: pread leaves it be
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace").strip()

    def failure(self, wait_s: float = 0) -> str:
        """Why the tunnel is gone, in ssh's words, and what to try; empty while it runs.

        ``wait_s``: how long to give an ssh whose connection just broke to finish exiting
        (its sockets close before its exit status is there to read).
        """
        try:
            self.process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return ""
        said = [line.strip() for line in self.messages().splitlines() if line.strip()]
        said = [line for line in said if not line.startswith("debug")]  # -v's progress, not ssh's reason
        detail = said[-1] if said else "(ssh said nothing)"  # ssh's reason comes last, after any warnings
        return (
            f"ssh to {self.plan.destination} exited with status {self.process.returncode}: {detail}. "
            f"Check that this works from here: {shlex.join(['ssh', *self.plan.ssh, 'true'])}"
        )

    def close(self) -> None:
        """Stop ssh (if it still runs) and forget its messages."""
        stop(self.process)
        self._messages.close()

    def __enter__(self) -> Tunnel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_tunnel(plan: TunnelPlan, local_port: int, wait_s: float = 30) -> Tunnel:
    """Start the tunnel and return once ssh says it listens on every local port of it (or raise with ssh's
    words): a port someone else bound first is never taken for the tunnel."""
    if _listening(local_port):
        raise DashboardError(f"127.0.0.1:{local_port} is already in use here: choose another with --local-port")
    for forward in plan.forwards:
        if _listening(forward.local_port):
            option = f"--local-{forward.name.lower()}-port"
            raise DashboardError(
                f"127.0.0.1:{forward.local_port} ({forward.name}) is already in use here: choose another with {option}"
            )
    messages = tempfile.TemporaryFile()  # noqa: SIM115 (the Tunnel closes it)
    process = subprocess.Popen(ssh_command(plan, local_port), stdin=subprocess.DEVNULL, stderr=messages)
    tunnel = Tunnel(plan, local_port, process, messages)
    ports = {local_port, *(forward.local_port for forward in plan.forwards)}
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise DashboardError(tunnel.failure())
            if ports <= ssh_listens_on(tunnel.messages()):
                return tunnel
            time.sleep(0.2)
        raise DashboardError(f"the tunnel to {plan.destination} did not open within {wait_s:.0f} s")
    except BaseException:  # an error, Ctrl-C or a kill while it opens: no ssh is left behind
        tunnel.close()
        raise


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """While a tunnel is open: SIGTERM and SIGHUP (a ``kill``, a closed terminal) end the command as
    Ctrl-C does, so that the code closing the tunnel runs and its ssh does not stay behind listening."""
    previous = {signum: signal.signal(signum, _interrupt) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


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
    lines += [f"{forward.name}: http://127.0.0.1:{forward.local_port}" for forward in plan.forwards]
    if plan.elsewhere:
        lines.append(f"Prometheus and Grafana run on another host; forward them with: {shlex.join(plan.elsewhere)}")
    lines.append(f"The tunnel runs over SSH to {plan.destination} until Ctrl-C.")
    lines.append("Ray's own clients (ray job submit, ray list nodes ...) in another shell, after:")
    return "\n".join(lines + export_lines(plan, local_port))
