"""The local lab: containers on this machine that behave like fresh hosts.

``rayrig lab up`` ensures, idempotently:

1. the host image ``rayrig/lab-base:bookworm`` (Debian 12 with systemd as PID 1,
   sshd, sudo and python3, but not Docker, curl or CA certificates: the
   deploy installs those as on a fresh cloud host). It is built from
   ``debian:bookworm`` or, when that cannot be pulled, from a rootfs made with
   debootstrap and ``docker import``ed (cached as ``rayrig/lab-rootfs:bookworm``);
2. a Docker network ``NAME-net`` with a fixed /24 (10.213.0.0/24 unless taken);
3. an ed25519 key pair for the lab and a ``known_hosts`` that pins each host's key;
4. the hosts ``NAME-host-1..N`` (hostnames ``NAME-1..N``, addresses .10, .11, ...)
   with their own dockerd storage volume, reachable over SSH as ``rayrig``
   (passwordless sudo);
5. a registry ``NAME-registry`` at .2:5000 (Debian's docker-registry, no auth),
   also published on 127.0.0.1 so this machine can push to it;
6. the lab's Ray image (Ray with the default and train extras plus CPU torch),
   built offline from a wheelhouse made on this machine, and the lab's Prometheus
   (Debian's package), pushed to the registry;
7. ``state.json`` in the lab's directory, which ``inventories/lab.py`` reads.

Everything the lab creates carries the label ``rayrig.lab=NAME``; ``rayrig lab
down`` removes exactly that and the lab's directory. Images and the wheelhouse
are cached artefacts, shared by labs, and are left alone.

The steps live in :mod:`cloud.lab.build` (1, 6), :mod:`cloud.lab.hosts` (2-4),
:mod:`cloud.lab.registry` (5, 6) and :mod:`cloud.lab.state` (7); the image
folders are ``images/lab-base``, ``images/lab-registry``, ``images/lab-prometheus`` and ``images/ray``.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cloud.lab.build import ensure_images
from cloud.lab.engine import docker, inspect, labelled
from cloud.lab.hosts import ensure_hosts, ensure_key, ensure_network
from cloud.lab.registry import ensure_pushed, ensure_registry
from cloud.lab.state import (
    BASE_IMAGE,
    DEFAULT_NAME,
    MAX_HOSTS,
    LabError,
    inventory_groups,
    lab_dir,
    load_state,
    make_state,
    state_path,
    write_if_changed,
)
from cloud.ssh import SshTarget, run, ssh_answers
from images import RAY_VERSION
from images.stream import Progress

__all__ = [
    "BASE_IMAGE",
    "DEFAULT_NAME",
    "MAX_HOSTS",
    "LabError",
    "down",
    "inventory_groups",
    "lab_dir",
    "load_state",
    "make_state",
    "state_path",
    "status",
    "summary",
    "up",
]


class _Clock:
    """Prefix progress lines with the seconds since ``up`` started."""

    def __init__(self, progress: Progress) -> None:
        self.start = time.monotonic()
        self.progress = progress

    def __call__(self, message: str) -> None:
        self.progress(f"[{time.monotonic() - self.start:6.1f}s] {message}")


def up(hosts: int = 3, name: str = DEFAULT_NAME, progress: Progress = print) -> dict[str, Any]:
    """Bring lab ``name`` up with ``hosts`` hosts (idempotent) and return its state.

    A second call with everything in place changes nothing and takes seconds.
    The first call on a machine builds the lab's images (minutes). Progress
    lines, each with the seconds since the start, go to ``progress``.
    """
    if not 1 <= hosts <= MAX_HOSTS:
        raise ValueError(f"a lab has 1 to {MAX_HOSTS} hosts (as many as its /24 holds), got hosts={hosts}")
    lab_dir(name)  # validates the name
    log = _Clock(progress)
    log(f"lab {name}: up with {hosts} hosts")
    ensure_images(log, RAY_VERSION)
    subnet = ensure_network(name, log)
    directory = lab_dir(name)
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    key = ensure_key(directory, name, log)
    state = make_state(name, subnet, hosts, key, directory / "known_hosts", RAY_VERSION)
    state["registry_local"] = ensure_registry(state, log)
    ensure_hosts(state, key, log)
    ensure_pushed(state, RAY_VERSION, log)
    if write_if_changed(state_path(name), json.dumps(state, indent=2) + "\n", 0o600):
        log(f"state: wrote {state_path(name)}")
    log(f"lab {name}: ready; head {state['hosts'][0]['address']}, image {state['image']}")
    return state


def each_at_once(remove: Callable[[str], object], items: list[str]) -> None:
    """``remove`` every item, all at once: Docker deletes one host's layers and its inner Docker's
    images while it deletes another's. The first failure is raised once every removal has ended."""
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        for future in [pool.submit(remove, item) for item in items]:
            future.result()


def down(name: str = DEFAULT_NAME, progress: Progress = print) -> None:
    """Remove everything lab ``name`` made: containers, network, volumes and its directory.

    Cached images and wheelhouses are left alone. What was removed is reported to ``progress``.
    """
    lab_dir(name)  # validates the name
    containers = labelled("container", name)
    if containers:
        each_at_once(lambda container: docker("rm", "--force", "--volumes", container), containers)
        progress(f"removed containers: {' '.join(sorted(containers))}")
    networks = labelled("network", name)
    for network in networks:
        docker("network", "rm", network)
    if networks:
        progress(f"removed networks: {' '.join(networks)}")
    volumes = labelled("volume", name)
    if volumes:
        each_at_once(lambda volume: docker("volume", "rm", volume), volumes)
        progress(f"removed volumes: {' '.join(sorted(volumes))}")
    if lab_dir(name).exists():
        shutil.rmtree(lab_dir(name))
        progress(f"removed {lab_dir(name)}")
    progress(f"lab {name}: down")


def status(name: str = DEFAULT_NAME) -> str:
    """Return a short report: each host with its address, role, container state and whether sshd answers."""
    state = load_state(name)
    if state is None:
        leftovers = labelled("container", name)
        extra = f" (but containers labelled for it exist: {' '.join(leftovers)})" if leftovers else ""
        return f"lab {name}: not up (no {state_path(name)}){extra}"
    lines = [f"lab {name}: subnet {state['subnet']}, image {state['image']}"]
    registry = inspect("container", state["registry_container"])
    reg_state = registry["State"]["Status"] if registry else "missing"
    lines.append(f"  {'registry':<22} {state['registry']:<18} {'':<7} {reg_state:<10} {state.get('registry_local')}")
    for host in state["hosts"]:
        info = inspect("container", host["container"])
        cstate = info["State"]["Status"] if info else "missing"
        sshd = "sshd answers" if info and ssh_answers(host["address"], timeout=2.0) else "sshd does not answer"
        lines.append(f"  {host['name']:<22} {host['address']:<18} {host['role']:<7} {cstate:<10} {sshd}")
    return "\n".join(lines)


def summary(name: str, checks: str) -> str:
    """Return what a user wants after the demo: the head, ``ray status`` on it, ``checks`` and the next commands.

    ``checks`` is a line on the newest checks report of the lab's cluster.
    """
    state = load_state(name)
    if state is None:
        return f"no lab named {name!r}: run `rayrig lab up --name {name}`"
    head = next(h for h in state["hosts"] if h["role"] == "head")
    target = SshTarget(head["address"], state["ssh_user"], Path(state["ssh_key"]), Path(state["known_hosts"]))
    exit_status, output = run(target, "sudo docker exec ray-node ray status", timeout=120)
    lab_env = "" if name == DEFAULT_NAME else f"RAYRIG_LAB={name} "
    lines = [
        "",
        f"==> Ray cluster on lab {name}: head {head['address']} ({len(state['hosts'])} hosts)",
        "==> ray status (inside the head's ray-node container):",
        output.rstrip() if exit_status == 0 else f"ray status failed ({exit_status}):\n{output.rstrip()}",
        checks,
        "",
        "Next (each takes the inventory, as for your own cluster):",
        f"  status:     {lab_env}rayrig status inventories/lab.py",
        f"  a job:      {lab_env}rayrig submit inventories/lab.py --working-dir . -- python your_job.py",
        f"  a command:  {lab_env}rayrig exec inventories/lab.py --all -- ray --version",
        f"  logs:       {lab_env}rayrig logs inventories/lab.py [HOST]",
        f"  a shell:    {lab_env}rayrig ssh inventories/lab.py   (or: {' '.join(target.ssh_command())})",
        f"  dashboard:  {lab_env}rayrig dashboard inventories/lab.py   (an SSH tunnel; it prints the URL)",
        f"  tear down:  make lab-down   (or: rayrig lab down --name {name})",
    ]
    return "\n".join(lines)
