"""SSH to a host from the operator's machine: whether sshd answers, and running one command (paramiko)."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

import paramiko


def ssh_answers(host: str, port: int = 22, timeout: float = 5.0) -> bool:
    """Whether an SSH server answers at host:port: the connection opens and an ``SSH-`` banner arrives."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            banner = sock.recv(256)
    except OSError:
        return False
    return banner.startswith(b"SSH-")


@dataclass(frozen=True)
class SshTarget:
    """How to reach a host: address, user, private key and known_hosts file."""

    address: str
    user: str
    key: Path
    known_hosts: Path | None = None
    port: int = 22

    def ssh_command(self, *extra: str) -> list[str]:
        """The equivalent OpenSSH command line (for the user to copy)."""
        args = ["ssh", "-i", str(self.key)]
        if self.known_hosts:
            args += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        if self.port != 22:
            args += ["-p", str(self.port)]
        return [*args, *extra, f"{self.user}@{self.address}"]


def run(target: SshTarget, command: str, timeout: float = 300) -> tuple[int, str]:
    """Run ``command`` on ``target``; return (exit status, stdout and stderr together)."""
    return run_with_input(target, command, None, timeout)


def run_with_input(target: SshTarget, command: str, stdin: str | None, timeout: float = 300) -> tuple[int, str]:
    """Like ``run``, feeding ``stdin`` to the command (for scripts that must not be on a command line)."""
    client = paramiko.SSHClient()
    if target.known_hosts and target.known_hosts.exists():
        client.load_host_keys(str(target.known_hosts))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    else:
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    try:
        client.connect(
            target.address,
            port=target.port,
            username=target.user,
            key_filename=str(target.key),
            timeout=30,
            allow_agent=False,
            look_for_keys=False,
        )
        transport = client.get_transport()
        assert transport is not None
        channel = transport.open_session(timeout=30)
        channel.settimeout(timeout)
        channel.set_combine_stderr(True)
        channel.exec_command(command)
        if stdin is not None:
            channel.sendall(stdin.encode())
        channel.shutdown_write()
        chunks = []
        while chunk := channel.recv(65536):
            chunks.append(chunk)
        return channel.recv_exit_status(), b"".join(chunks).decode(errors="replace")
    finally:
        client.close()
