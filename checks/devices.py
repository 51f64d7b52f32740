"""Phase 1 of the ``--cluster`` benchmark: every GPU, and every GPU-less node's CPU, measured through Ray.

One GPU-holding actor per GPU (``num_gpus=1``, pinned to its node with a hard
NodeAffinitySchedulingStrategy, one per GPU so every GPU is measured exactly once, all at the
same time) runs the kernels (:mod:`checks.kernels`); on nodes without GPUs one task per node,
holding all its free CPUs, runs the fp32 matmul and the memory copy. A measurement still
running when the median one has finished ``peer_factor`` times over is stopped
(:mod:`checks.deadlines`): its entry says so under ``"stopped"``, and the later phases go on
without its node.

Ray and torch are imported inside the functions that use them, as in :mod:`checks.cluster_bench`.

Example::

    entries = run_devices(nodes, quick=True, timeout_s=300, peer_factor=3, budget=Budget(600))
"""

from __future__ import annotations

import contextlib
import math
import socket
import time
from typing import Any

from . import deadlines, specs, verdict
from .deadlines import Budget, PeerClock
from .progress import describe, log


def here() -> dict[str, Any]:
    """Where this Ray worker runs: host name, IP, Ray node id."""
    import ray  # lazy: heavy, and absent where --local runs

    return {
        "host": socket.gethostname(),
        "ip": ray.util.get_node_ip_address(),
        "node_id": ray.get_runtime_context().get_node_id(),
    }


def free_of(node: dict[str, Any], resource: str) -> float:
    """How much of ``resource`` ("GPU" or "CPU") of ``node`` no other job holds."""
    if resource == "GPU":
        return node["num_gpus"] - node.get("busy_gpus", 0)
    return node["num_cpus"] - node.get("busy_cpus", 0.0)


class GpuBench:
    """Holds one GPU for its lifetime (``num_gpus=1``) and measures it."""

    def run(self, quick: bool) -> dict[str, Any]:
        """The kernels on this actor's GPU, as a device entry."""
        import ray  # lazy: heavy, and absent where --local runs

        from . import kernels  # imports torch

        gpu_ids = ray.get_gpu_ids()
        entry = kernels.measure_device("cuda:0", quick=quick)
        entry.update(here())
        if gpu_ids:
            entry["device"] = f"cuda:{gpu_ids[0]}"  # the node's numbering, as nvidia-smi shows it
        return entry


def _cpu_bench(quick: bool) -> dict[str, Any]:
    """The CPU kernels using every CPU this task holds, as a device entry."""
    import ray  # lazy: heavy, and absent where --local runs
    import torch

    from . import kernels  # imports torch

    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
    torch.set_num_threads(max(1, int(cpus)))
    entry = kernels.measure_device("cpu", quick=quick)
    entry.update(here())
    return entry


#: Rounds of CPU measurements per node (plus the last one); each node keeps its best.
CPU_ROUNDS = 2


def _best_round(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the highest matmul rate, with every round's rate recorded."""
    rates = [(e.get("matmul") or {}).get("tflops") or 0.0 for e in entries]
    best = dict(entries[max(range(len(entries)), key=rates.__getitem__)])
    best["matmul"] = {**best["matmul"], "rounds_tflops": rates}
    return best


def _error_entry(node: dict[str, Any], device: str, kind: str, error: str) -> dict[str, Any]:
    return {
        "host": node["host"],
        "ip": node["ip"],
        "node_id": node["node_id"],
        "device": device,
        "kind": kind,
        "model": "unknown",
        "error": error,
    }


def wait_with_peers(
    refs: list[Any], clock: PeerClock, started: float, budget: Budget | None
) -> tuple[dict[Any, float], list[Any]]:
    """Wait for ``refs`` (measurements that started together at ``started``) until each is done or
    late by ``clock``; their seconds by ref, and the refs still running at the deadline."""
    import ray  # lazy: heavy, and absent where --local runs

    done: dict[Any, float] = {}
    running = list(refs)
    while running:
        elapsed = time.monotonic() - started
        deadline = clock.deadline_s() if budget is None else min(clock.deadline_s(), elapsed + budget.left())
        if elapsed >= deadline:
            break
        ready, running = ray.wait(running, num_returns=1, timeout=min(1.0, deadline - elapsed))
        for ref in ready:
            done[ref] = time.monotonic() - started
            clock.finished(done[ref])
    return done, running


def _stopped_entry(node: dict[str, Any], device: str, kind: str, clock: PeerClock, started: float,
                   what: str) -> dict[str, Any]:  # fmt: skip
    """The device entry of a measurement stopped at its deadline: no figures, and why it stopped."""
    entry = _error_entry(node, device, kind, "")
    del entry["error"]
    entry["stopped"] = {**clock.late(time.monotonic() - started), "what": what}
    log(f"devices: {verdict.host_label(node)} {device}: {deadlines.did_not_finish(entry['stopped'], what)}: stopped")
    return entry


def run_devices(
    nodes: list[dict[str, Any]],
    quick: bool = False,
    timeout_s: float = 600,
    peer_factor: float = deadlines.DEFAULT_PEER_FACTOR,
    budget: Budget | None = None,
) -> list[dict[str, Any]]:
    """Phase 1: every GPU measured by its own actor (all at once), every GPU-less node by one task.

    A measurement still running when the median one has finished ``peer_factor`` times over (or
    after ``timeout_s`` when peers cannot judge, or when ``budget`` runs out) is stopped: its
    entry says so under ``"stopped"``, and :func:`run_cluster` leaves its node out of the later phases.
    """
    import ray  # lazy: heavy, and absent where --local runs
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    gpu_actor = ray.remote(GpuBench)
    cpu_task = ray.remote(_cpu_bench)
    gpus: list[tuple[Any, dict[str, Any], str]] = []  # (actor, node, device)
    cpu_nodes: list[tuple[Any, dict[str, Any]]] = []  # (task, node)
    entries: list[dict[str, Any]] = []
    for node in nodes:
        pin = NodeAffinitySchedulingStrategy(node_id=node["node_id"], soft=False)
        if node["num_gpus"]:
            for index in range(int(free_of(node, "GPU"))):  # the GPUs other jobs hold are left out
                actor = gpu_actor.options(num_gpus=1, num_cpus=0, scheduling_strategy=pin).remote()
                gpus.append((actor, node, f"gpu #{index}"))
        elif node["num_cpus"] >= 1:
            if free_of(node, "CPU") < 1:
                continue  # every CPU held by other jobs: left out, and reported
            task = cpu_task.options(num_cpus=math.floor(free_of(node, "CPU")), scheduling_strategy=pin, max_retries=0)
            cpu_nodes.append((task, node))
        else:
            entry = _error_entry(node, "cpu", "cpu", "")
            del entry["error"]
            entry["skipped"] = "the node offers Ray no CPU and no GPU (num_cpus=0), so nothing can run there"
            entries.append(entry)
    log(f"devices: {len(gpus)} GPUs, {len(cpu_nodes)} CPU-only nodes")
    if gpus:
        entries += _gpu_round(gpus, quick, timeout_s, peer_factor, budget)
    if cpu_nodes:
        entries += _cpu_rounds(cpu_nodes, quick, timeout_s, peer_factor, budget)
    for entry in entries:
        if "matmul" in entry:
            log(
                f"devices: {verdict.host_label(entry)} {entry['device']} {entry.get('model')}: "
                f"{(entry.get('matmul') or {}).get('tflops', float('nan')):.3g} TFLOPS"
            )
    specs.annotate(entries)
    return entries


def _gpu_round(gpus: list[tuple[Any, dict[str, Any], str]], quick: bool, timeout_s: float, peer_factor: float,
               budget: Budget | None) -> list[dict[str, Any]]:  # fmt: skip
    """Every GPU at once, each on its own actor; late ones stopped by their peers' clock."""
    import ray  # lazy: heavy, and absent where --local runs

    started = time.monotonic()
    refs = [actor.run.remote(quick) for actor, _node, _device in gpus]
    clock = PeerClock(len(refs), factor=peer_factor, cap_s=timeout_s)
    done, _late = wait_with_peers(refs, clock, started, budget)
    entries = []
    for ref, (actor, node, device) in zip(refs, gpus, strict=True):
        if ref not in done:
            entries.append(_stopped_entry(node, device, "gpu", clock, started, f"the measurement of its {device}"))
        else:
            try:
                entries.append(ray.get(ref))
            except Exception as exc:  # noqa: BLE001 - a failed device is reported, not fatal
                entries.append(_error_entry(node, device, "gpu", describe(exc)))
        ray.kill(actor)
    return entries


def _cpu_rounds(cpu_nodes: list[tuple[Any, dict[str, Any]]], quick: bool, timeout_s: float, peer_factor: float,
                budget: Budget | None) -> list[dict[str, Any]]:  # fmt: skip
    """Every GPU-less node measured in 1 + ``CPU_ROUNDS`` rounds, each keeping its best.

    The first round runs on every node at once, judged against the peers: it also starts each
    node's worker and imports torch there, where a starved node shows at once. The later rounds run
    one node after another: hosts that share cores (VMs on one hypervisor, the local lab) would
    otherwise measure their contention, and a burst of load elsewhere would single out whichever
    node it happened to hit. A node that is really slow is slow in every round.
    """
    import ray  # lazy: heavy, and absent where --local runs

    started = time.monotonic()
    refs = [task.remote(quick) for task, _node in cpu_nodes]
    clock = PeerClock(len(refs), factor=peer_factor, cap_s=timeout_s)
    done, _late = wait_with_peers(refs, clock, started, budget)
    rounds: dict[str, list[dict[str, Any]]] = {}
    found: dict[str, dict[str, Any]] = {}  # by node id: a stopped or failed node's entry
    measured = []
    for ref, (task, node) in zip(refs, cpu_nodes, strict=True):
        if ref not in done:
            ray.cancel(ref, force=True)
            found[node["node_id"]] = _stopped_entry(node, "cpu", "cpu", clock, started, "its CPU measurement")
            continue
        try:
            rounds[node["node_id"]] = [ray.get(ref)]
            measured.append((task, node))
        except Exception as exc:  # noqa: BLE001 - a failed node is reported, not fatal
            found[node["node_id"]] = _error_entry(node, "cpu", "cpu", describe(exc))
    # the later rounds: each run bounded by the first round's peers (a warm worker is faster still)
    for _ in range(CPU_ROUNDS):
        for task, node in measured:
            if budget is not None and budget.spent():
                break
            ref = task.remote(quick)
            limit = clock.deadline_s() if budget is None else budget.cap(clock.deadline_s())
            if ray.wait([ref], timeout=limit)[0]:
                with contextlib.suppress(Exception):  # a failed later round is just not counted
                    rounds[node["node_id"]].append(ray.get(ref))
            else:
                ray.cancel(ref, force=True)
    for node_id, tried in rounds.items():
        found[node_id] = _best_round(tried)
    return [found[node["node_id"]] for _task, node in cpu_nodes]
