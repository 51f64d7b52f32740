"""What the checks judge before the benchmark: each node, then the Ray cluster against the inventory.

A node's preflight combines two readings:

- its GPU facts, read by the deploy side (``{"pci_count": 8, "nvswitches": 4,
  "driver": {"count": 8, "models": [...], "driver_version": "550.54.15",
  "memory_mib": [...]} or None}``; ``driver`` is None when nvidia-smi is missing
  or fails);
- the lines of :func:`probe_command` run on the node: whether the ray-node
  container runs, the Ray version and ``/dev/shm`` size inside it, the GPUs it
  sees, and nvidia-fabricmanager's state on NVSwitch systems.

Example::

    ok, lines = node.run(probe_command("ray-node", gpus))
    reasons = preflight_reasons("gpu-1", settings, gpus, parse_probe(lines))
    found, reasons = check_node(node, "ray-node", settings, gpus, cap_s=300)   # both, bounded
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterable, Mapping
from typing import Any

from . import gpu_health
from .node import Node
from .verdict import FAIL, INFO, WARN, Reason

MIN_SHM_BYTES = 512 * 2**20  # below this, Ray's object store spills to disk: worth a warning
MIN_HEALTH_S = 5  # the GPU health probe is not started with less of the node's preflight cap left

MAX_START_WAIT_S = 60  # how long the probe waits for a container its systemd unit is (re)starting

# $1 the container, $2 the GPUs on the PCI bus, $3 the NVSwitches, $4 the seconds to wait for a
# container that is not running while its unit (named like it) is starting it again: one KEY=VALUE
# line per reading. After a deploy that replaced the head, the workers' ray-node units restart
# their containers (Restart=always); such a container is coming back, not down. A unit that is
# stopped or failed is not waited for. A paused container counts as running (Ray judges it).
# Ray's version from its package metadata: importing Ray costs a CPU-second, 20 s on a starved node.
PROBE_SCRIPT = r"""
c="$1"
w="${4:-0}"
i=0
while [ "$(docker inspect --format '{{.State.Running}}' "$c" 2>/dev/null)" != true ] && [ "$i" -lt "$w" ]; do
    case "$(systemctl is-active "$c" 2>/dev/null)" in active|activating|reloading) ;; *) break ;; esac
    sleep 2
    i=$((i+2))
done
[ "$i" -gt 0 ] && echo "START_WAITED=$i"
echo "RUNNING=$(docker inspect --format '{{.State.Running}}' "$c" 2>/dev/null || echo missing)"
echo "RAY_VERSION=$(docker exec "$c" python -c 'import importlib.metadata as m; print(m.version("ray"))' 2>/dev/null)"
echo "SHM_KB=$(docker exec "$c" df -k /dev/shm 2>/dev/null | awk 'NR==2 {print $2}')"
if [ "$2" -gt 0 ]; then echo "CONTAINER_GPUS=$(docker exec "$c" nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"; fi
if [ "$3" -gt 0 ]; then echo "FABRICMANAGER=$(systemctl is-active nvidia-fabricmanager 2>/dev/null)"; fi
"""


def probe_command(
    container: str, gpus: Mapping[str, Any], timeout_s: float | None = None, start_wait_s: float = 0
) -> str:
    """The shell command that reads the container side of one node's preflight.

    With ``timeout_s``, ``timeout`` stops it after that many seconds, and its last line says how
    it ended (``PROBE_EXIT=124`` when stopped: :func:`probe_stopped`). ``start_wait_s``: how long
    to wait for a container whose unit is starting it again (see ``PROBE_SCRIPT``).

    >>> probe_command("ray-node", {"pci_count": 0, "nvswitches": 0, "driver": None})[-16:]
    '_ ray-node 0 0 0'
    >>> probe_command("ray-node", {"pci_count": 0, "nvswitches": 0}, timeout_s=60)[:17]
    'timeout -k 5 60 s'
    """
    args = [shlex.quote(container), str(int(gpus["pci_count"])), str(int(gpus["nvswitches"])), str(int(start_wait_s))]
    command = f"sh -c {shlex.quote(PROBE_SCRIPT)} _ {' '.join(args)}"
    if timeout_s is None:
        return command
    return f"timeout -k 5 {max(1, int(timeout_s))} {command}; echo PROBE_EXIT=$?"


def probe_stopped(probe: Mapping[str, str]) -> bool:
    """Whether ``timeout`` stopped the probe (:func:`parse_probe` of its lines).

    >>> probe_stopped({"running": "true", "probe_exit": "124"}), probe_stopped({"probe_exit": "0"})
    (True, False)
    """
    return probe.get("probe_exit") in ("124", "137")


def check_node(
    node: Node, container: str, settings: Mapping[str, Any], gpus: Mapping[str, Any], cap_s: float
) -> tuple[dict[str, Any], list[Reason]]:
    """One node's preflight within ``cap_s`` seconds: the probe, then on a node with GPUs its GPU
    health (:mod:`checks.gpu_health`) in what is left. What was read (for the report) and the reasons.

    A probe that ``timeout`` stopped is one FAIL naming the node, not the readings it did not finish.
    """
    started = time.monotonic()
    start_wait_s = max(0, min(MAX_START_WAIT_S, cap_s - 15))  # the readings after the wait need time too
    _ok, lines = node.run(probe_command(container, gpus, timeout_s=cap_s, start_wait_s=start_wait_s))
    probe = parse_probe(lines)
    stopped = probe_stopped(probe)
    probe.pop("probe_exit", None)
    waited = probe.pop("start_waited", None)
    found: dict[str, Any] = {"gpus": dict(gpus), **probe}
    if stopped:
        return found, [Reason(FAIL, f"preflight did not answer in {cap_s:g} s", host=node.name)]
    reasons = preflight_reasons(node.name, settings, gpus, probe)
    if waited and probe.get("running") == "true":
        found["start_waited_s"] = int(waited)
        reasons.append(Reason(INFO, f"the {container} container was being started again by its unit; "
                                    f"running after {waited} s", host=node.name))  # fmt: skip
    if int(gpus.get("pci_count") or 0) > 0:
        left = cap_s - (time.monotonic() - started)
        if left < MIN_HEALTH_S:
            reasons.append(Reason(WARN, f"GPU health not read: the preflight's {cap_s:g} s ran out", host=node.name))
            return found, reasons
        began = time.monotonic()
        found["gpu_health"], health = gpu_health.check_node(node, gpus, timeout_s=left)
        reasons += health
        if time.monotonic() - began >= left - 1:
            reasons.append(
                Reason(WARN, f"GPU health probe stopped after {left:.0f} s (checks_node_timeout_s, or the "
                             "checks' budget): the sections it did not finish are missing", host=node.name)
            )  # fmt: skip
    return found, reasons


def parse_probe(lines: Iterable[str]) -> dict[str, str]:
    """The probe's ``KEY=VALUE`` lines as a dict with lower-case keys.

    >>> parse_probe(["RUNNING=true", "RAY_VERSION=2.60.0", "noise"])
    {'running': 'true', 'ray_version': '2.60.0'}
    """
    found: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if sep:
            found[key.lower()] = value.strip()
    return found


def detected_gpus(gpus: Mapping[str, Any]) -> int:
    """The GPUs a node has: as many as the driver reports, else as many as are on the PCI bus."""
    driver = gpus.get("driver")
    return int(driver["count"]) if driver else int(gpus.get("pci_count") or 0)


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def preflight_reasons(
    host: str,
    settings: Mapping[str, Any],
    gpus: Mapping[str, Any],
    probe: Mapping[str, str],
    min_shm_bytes: int = MIN_SHM_BYTES,
) -> list[Reason]:
    """What is wrong (or worth knowing) about one node before the benchmark.

    ``gpus``: the node's GPU facts (see the module); ``probe``: :func:`parse_probe` of its probe.
    """
    reasons: list[Reason] = []
    if probe.get("running") != "true":
        reasons.append(Reason(FAIL, f"the {settings['ray_container_name']} container is not running", host=host))
        return reasons
    pci = int(gpus.get("pci_count") or 0)
    driver = gpus.get("driver")
    declared = settings["ray_num_gpus"]
    if pci and not driver:
        reasons.append(Reason(FAIL, f"{pci} NVIDIA GPUs on the PCI bus but no working driver (nvidia-smi)", host=host))
    seen = detected_gpus(gpus)
    if declared != "auto" and int(declared) != seen:
        reasons.append(Reason(FAIL, f"ray_num_gpus = {declared} but the host has {seen} GPUs", host=host))
    if driver:
        models = sorted(set(driver["models"]))
        reasons.append(
            Reason(INFO, f"{driver['count']} x {', '.join(models)}, driver {driver['driver_version']}", host=host)
        )
    container_gpus = _int(probe.get("container_gpus"))
    if pci and container_gpus is not None and container_gpus != seen:
        reasons.append(Reason(FAIL, f"the ray-node container sees {container_gpus} GPUs, the host {seen}", host=host))
    version = probe.get("ray_version", "")
    if version != settings["ray_version"]:
        found = version or "no Ray"
        reasons.append(
            Reason(FAIL, f"Ray {found} in the container, expected ray_version {settings['ray_version']}", host=host)
        )
    shm_kb = _int(probe.get("shm_kb"))
    if shm_kb is not None and shm_kb * 1024 < min_shm_bytes:
        reasons.append(
            Reason(
                WARN,
                f"/dev/shm in the container is {shm_kb // 1024} MiB (Ray's object store falls back to disk)",
                host=host,
            )  # fmt: skip
        )
    if gpus.get("nvswitches") and probe.get("fabricmanager") != "active":
        reasons.append(
            Reason(
                FAIL, f"NVSwitch system but nvidia-fabricmanager is {probe.get('fabricmanager') or 'absent'}", host=host
            )  # fmt: skip
        )
    return reasons


def expected_totals(declarations: list[dict[str, Any]]) -> dict[str, float]:
    """The cluster totals the inventory declares.

    CPUs only when every host declares a number; GPUs only when every count is
    known (declared, or detected on a host that this run inspected).
    """
    totals: dict[str, float] = {}
    if all(d["num_cpus"] != "auto" for d in declarations):
        totals["CPU"] = float(sum(d["num_cpus"] for d in declarations))
    if all(d["num_gpus"] is not None for d in declarations):
        totals["GPU"] = float(sum(d["num_gpus"] for d in declarations))
    for d in declarations:
        for name, amount in d["resources"].items():
            totals[name] = totals.get(name, 0.0) + float(amount)
    return totals


def cluster_reasons(declarations: list[dict[str, Any]], state: dict[str, Any]) -> list[Reason]:
    """Every inventory host alive in Ray, and the totals equal to the declarations."""
    reasons: list[Reason] = []
    alive = {n["ip"] for n in state["nodes"]}
    for d in declarations:
        if d["address"] not in alive:
            reasons.append(Reason(FAIL, f"not an alive Ray node (expected at {d['address']})", host=d["name"]))
    extra = alive - {d["address"] for d in declarations}
    if extra:
        reasons.append(Reason(WARN, f"alive Ray nodes not in the inventory: {', '.join(sorted(extra))}"))
    for resource, wanted in expected_totals(declarations).items():
        got = float(state["total"].get(resource, 0.0))
        if abs(got - wanted) > 1e-6:
            reasons.append(Reason(FAIL, f"cluster total {resource} is {got:g}, the inventory declares {wanted:g}"))
    if not reasons:
        reasons.append(Reason(INFO, f"{len(alive)} Ray nodes alive with the declared resources"))
    return reasons
