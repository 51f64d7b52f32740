"""The lab's hosts: its network, its SSH key, the host containers and the host keys pinned in ``known_hosts``.

A host is a container of ``images/lab-base`` (systemd as PID 1, sshd, sudo) with
its own dockerd storage volume, reachable over SSH as the lab user.
"""

from __future__ import annotations

import ipaddress
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from cloud.lab.engine import (
    cgroup_version,
    choose_subnet,
    docker,
    ensure_running,
    ensure_volume,
    inspect,
    labelled,
    privileged_works,
    taken_subnets,
)
from cloud.lab.state import BASE_IMAGE, LAB_LABEL, SSH_USER, LabError, write_if_changed
from cloud.ssh import SshTarget, run, ssh_answers
from images.stream import Progress

SSH_WAIT_S = 180.0


def host_run_flags(privileged: bool, cgroup_version: str) -> list[str]:
    """Return the ``docker run`` flags that let systemd, sshd, dockerd and FUSE run in a host container.

    ``--privileged`` where Docker allows it; otherwise (machines without
    CAP_SYS_RESOURCE, where ``--privileged`` fails with "unable to apply
    caps") every capability but SYS_RESOURCE, no seccomp or AppArmor
    confinement, and the cgroup tree mounted read-write.
    """
    flags = ["--tmpfs", "/run", "--tmpfs", "/run/lock", "--device", "/dev/fuse"]
    if privileged:
        flags.append("--privileged")
    else:
        flags += [
            "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
            "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
        ]  # fmt: skip
    if str(cgroup_version) == "2":
        flags.append("--cgroupns=private")
    else:
        flags += ["--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"]
    return flags


def known_hosts_text(entries: Iterable[tuple[str, str]]) -> str:
    """Return a known_hosts file for ``(address, public key line)`` pairs, sorted."""
    lines = []
    for address, key_line in entries:
        fields = key_line.split()
        if len(fields) >= 2:
            lines.append(f"{address} {fields[0]} {fields[1]}")
    return "".join(f"{line}\n" for line in sorted(set(lines)))


def ssh_check(address: str, user: str, key: Path | str, known_hosts: Path | str, command: str = "sudo -n true") -> str:
    """Run ``command`` on ``address`` over SSH like pyinfra does (paramiko, pinned host key); return its output.

    Raises ``LabError`` with the command, the address, the exit status and the output when it fails.
    """
    status, output = run(SshTarget(address, user, Path(key), Path(known_hosts)), command, timeout=30)
    if status != 0:
        raise LabError(f"`{command}` on {address} exited {status}: {output.strip()}")
    return output


def ensure_network(name: str, log: Progress) -> str:
    """Ensure the lab network exists; return its subnet."""
    net_name = f"{name}-net"
    info = inspect("network", net_name)
    if info:
        if (info.get("Labels") or {}).get(LAB_LABEL) != name:
            raise LabError(f"network {net_name} exists but was not made by lab {name!r} (label {LAB_LABEL})")
        subnet = info["IPAM"]["Config"][0]["Subnet"]
        log(f"network {net_name}: exists ({subnet})")
        return subnet
    taken = taken_subnets()
    for _attempt in range(10):
        subnet = choose_subnet(taken)
        gateway = str(ipaddress.ip_network(subnet).network_address + 1)
        out = docker(
            "network", "create", "--driver", "bridge", "--subnet", subnet, "--gateway", gateway,
            "--label", f"{LAB_LABEL}={name}", net_name, check=False,
        )  # fmt: skip
        if out.returncode == 0:
            log(f"network {net_name}: created ({subnet})")
            return subnet
        if "overlap" not in out.stderr.lower():
            raise LabError(f"docker network create {net_name} failed: {out.stderr.strip()}")
        taken.append(subnet)  # someone took it meanwhile: try the next one
    raise LabError(f"could not create network {net_name}: every subnet tried overlapped")


def ensure_key(directory: Path, name: str, log: Progress) -> Path:
    """Ensure the lab's ed25519 key pair exists in ``directory``; return the private key's path."""
    key = directory / "id_ed25519"
    if key.exists() and key.with_suffix(".pub").exists():
        return key
    key.unlink(missing_ok=True)
    key.with_suffix(".pub").unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"rayrig lab {name}", "-f", str(key)],
        check=True,
    )
    key.chmod(0o600)
    log(f"ssh key: generated {key}")
    return key


def _install_authorized_key(container: str, public_key: str) -> None:
    """Make ``public_key`` the only authorized key of the lab user in ``container`` (left alone if it is)."""
    script = (
        'set -e; home=$(getent passwd "$1" | cut -d: -f6); '
        'install -d -m 700 -o "$1" -g "$1" "$home/.ssh"; '
        'cat > "$home/.ssh/authorized_keys.new"; '
        'if cmp -s "$home/.ssh/authorized_keys.new" "$home/.ssh/authorized_keys"; '
        'then rm "$home/.ssh/authorized_keys.new"; exit 0; fi; '
        'chown "$1:$1" "$home/.ssh/authorized_keys.new"; chmod 600 "$home/.ssh/authorized_keys.new"; '
        'mv "$home/.ssh/authorized_keys.new" "$home/.ssh/authorized_keys"'
    )
    docker("exec", "-i", container, "sh", "-c", script, "sh", SSH_USER, input_text=public_key)


def _wait(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def _host_keys(container: str) -> list[str]:
    out = docker("exec", container, "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub")
    return [line for line in out.stdout.splitlines() if line.strip()]


def _remove_extra_hosts(name: str, wanted: set[str], log: Progress) -> None:
    """Remove host containers (and their volumes) beyond the requested count."""
    for container in labelled("container", name):
        if container.startswith(f"{name}-host-") and container not in wanted:
            docker("rm", "--force", "--volumes", container)
            docker("volume", "rm", f"{container}-docker", check=False)
            log(f"container {container}: removed (lab now has {len(wanted)} hosts)")


def ensure_hosts(state: dict[str, Any], key: Path, log: Progress) -> None:
    """Ensure the lab's host containers run and answer over SSH with ``key`` and passwordless sudo.

    Hosts beyond the state's count are removed; each host's key is pinned in
    the state's ``known_hosts``.
    """
    name = state["name"]
    wanted = {h["container"] for h in state["hosts"]}
    _remove_extra_hosts(name, wanted, log)
    existing = {h["container"]: inspect("container", h["container"]) for h in state["hosts"]}
    missing = [c for c, info in existing.items() if info is None]
    base_id = (inspect("image", BASE_IMAGE) or {}).get("Id")
    stale = sorted(c for c, info in existing.items() if info is not None and info.get("Image") != base_id)
    if stale:
        log(
            f"warning: {', '.join(stale)} run an older {BASE_IMAGE}; they are kept as they are "
            f"(`rayrig lab down --name {name}` then `up` recreates them)"
        )
    flags = host_run_flags(privileged_works(BASE_IMAGE), cgroup_version()) if missing else []
    for host in state["hosts"]:
        volume = f"{host['container']}-docker"
        ensure_volume(volume, name)
        ensure_running(
            host["container"],
            [
                "--label", f"{LAB_LABEL}={name}", "--hostname", host["name"], "--restart", "unless-stopped",
                "--network", state["network"], "--ip", host["address"], "--network-alias", host["name"],
                *flags,
                "--volume", f"{volume}:/var/lib/docker",
                BASE_IMAGE,
            ],
            log,
        )  # fmt: skip
    public_key = key.with_suffix(".pub").read_text()
    for host in state["hosts"]:
        _install_authorized_key(host["container"], public_key)
    for host in state["hosts"]:
        address = host["address"]
        _wait(f"sshd on {host['name']} ({address})", lambda a=address: ssh_answers(a, timeout=2.0), SSH_WAIT_S)
    entries = [(h["address"], line) for h in state["hosts"] for line in _host_keys(h["container"])]
    if write_if_changed(Path(state["known_hosts"]), known_hosts_text(entries)):
        log(f"known_hosts: pinned {len(entries)} host keys in {state['known_hosts']}")
    for host in state["hosts"]:
        ssh_check(host["address"], state["ssh_user"], key, state["known_hosts"])
    log(f"hosts: {len(state['hosts'])} answer over SSH as {state['ssh_user']} with passwordless sudo")
