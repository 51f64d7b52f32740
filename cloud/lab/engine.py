"""The lab on the Docker engine: the ``docker`` command, labels, free subnets and what this machine's Docker allows.

Everything the lab creates carries the label ``rayrig.lab=NAME`` (:data:`LAB_LABEL`),
which is how ``rayrig lab down`` finds exactly what to remove.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import ipaddress
import json
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from cloud.lab.state import LAB_LABEL, PREFERRED_SUBNET, LabError
from deploy.contract.paths import state_dir
from images.stream import Progress

#: What Docker says when its daemon does not answer (or this user may not use it).
_DAEMON_DOWN = ("Cannot connect to the Docker daemon", "permission denied while trying to connect")


def docker(*args: str, check: bool = True, input_text: str | None = None) -> subprocess.CompletedProcess:
    """Run ``docker ARGS`` and return its result.

    ``LabError`` with the command and its stderr when it fails (with ``check``), and always when the
    Docker daemon does not answer (nothing of the lab can work then), saying how to start it.
    """
    cmd = ["docker", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, input=input_text)
    if out.returncode != 0 and any(words in out.stderr for words in _DAEMON_DOWN):
        raise LabError(
            f"Docker does not answer (`{' '.join(cmd[:3])}`: {out.stderr.strip().splitlines()[-1]}); "
            "start it with `make docker` (or `sudo systemctl start docker`), or add yourself to the docker group"
        )
    if check and out.returncode != 0:
        raise LabError(f"`{' '.join(cmd)}` failed ({out.returncode}): {out.stderr.strip()}")
    return out


def inspect(kind: str, ref: str) -> dict[str, Any] | None:
    """Return ``docker KIND inspect REF`` (kind: image, container, network, volume), or None when absent."""
    out = docker(kind, "inspect", ref, check=False)
    if out.returncode != 0:
        return None
    data = json.loads(out.stdout)
    return data[0] if data else None


def labelled(kind: str, name: str) -> list[str]:
    """Return the names of the containers, networks or volumes labelled for lab ``name``."""
    fmt = "{{.Names}}" if kind == "container" else "{{.Name}}"
    args = [kind, "ls", "--filter", f"label={LAB_LABEL}={name}", "--format", fmt]
    if kind == "container":
        args.insert(2, "--all")
    return [line for line in docker(*args).stdout.split() if line]


def ensure_volume(volume: str, name: str) -> None:
    """Create ``volume``, labelled for lab ``name``, unless it exists."""
    if not inspect("volume", volume):
        docker("volume", "create", "--label", f"{LAB_LABEL}={name}", volume)


def ensure_running(container: str, create: list[str], log: Progress) -> None:
    """Start ``container`` if stopped, create it with ``docker run -d <create>`` if absent."""
    info = inspect("container", container)
    if info is None:
        docker("run", "--detach", "--name", container, *create)
        log(f"container {container}: created")
    elif not info["State"]["Running"]:
        docker("start", container)
        log(f"container {container}: started")


@contextlib.contextmanager
def image_lock() -> Iterator[None]:
    """Serialise image builds between labs brought up at the same time."""
    state_dir().mkdir(parents=True, exist_ok=True)
    with open(state_dir() / "images.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@functools.cache
def privileged_works(image: str) -> bool:
    """Return whether ``docker run --privileged`` of ``image`` works on this machine (checked once)."""
    return docker("run", "--rm", "--privileged", "--entrypoint", "true", image, check=False).returncode == 0


def cgroup_version() -> str:
    """Return the cgroup version Docker runs containers under ("1" or "2")."""
    return docker("info", "--format", "{{.CgroupVersion}}").stdout.strip() or "1"


# --------------------------------------------------------------------------
# Subnets: a lab's /24 must overlap no Docker network and no route of this machine


def parse_proc_net_route(text: str) -> list[str]:
    """Return the IPv4 networks (CIDR) routed on this machine, from ``/proc/net/route``.

    The default route is left out.
    """
    networks = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        dest = ipaddress.IPv4Address(int(fields[1], 16).to_bytes(4, "little"))
        mask = ipaddress.IPv4Address(int(fields[7], 16).to_bytes(4, "little"))
        net = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
        if net.prefixlen:
            networks.append(str(net))
    return networks


def candidate_subnets(preferred: str = PREFERRED_SUBNET) -> list[str]:
    """Return the /24s a lab may use, best first: ``preferred``, then 10.213-10.250.x.0/24."""
    out = [preferred]
    for second in range(213, 251):
        for third in (0, 1, 2, 3):
            net = f"10.{second}.{third}.0/24"
            if net not in out:
                out.append(net)
    return out


def choose_subnet(taken: Iterable[str], preferred: str = PREFERRED_SUBNET) -> str:
    """Return the first candidate /24 that overlaps none of the ``taken`` networks."""
    used = [ipaddress.ip_network(t, strict=False) for t in taken]
    for cand in candidate_subnets(preferred):
        net = ipaddress.ip_network(cand)
        if not any(net.version == u.version and net.overlaps(u) for u in used):
            return cand
    raise LabError("no free /24 left in 10.213.0.0-10.250.3.0 for a lab network")


def taken_subnets() -> list[str]:
    """Return the subnets of every Docker network and every route on this machine."""
    subnets = []
    ids = docker("network", "ls", "--quiet").stdout.split()
    if ids:
        nets = json.loads(docker("network", "inspect", *ids).stdout)
        subnets = [
            cfg["Subnet"] for net in nets for cfg in (net.get("IPAM") or {}).get("Config") or [] if "Subnet" in cfg
        ]
    try:
        routes = parse_proc_net_route(Path("/proc/net/route").read_text())
    except OSError:
        routes = []
    return subnets + routes
