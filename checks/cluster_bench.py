"""The ``--cluster`` benchmark: every node of the running Ray cluster, driven from the head.

Runs inside the head's ray-node container and connects to the running cluster
(``ray.init(address="auto")``). Three phases, each logged to stderr as it starts
and ends:

1. devices: one GPU-holding actor per GPU (``num_gpus=1``, pinned to its node
   with a hard NodeAffinitySchedulingStrategy, one per GPU so every GPU is
   measured exactly once, all at the same time) running the kernels; on nodes
   without GPUs one task per node, holding all its CPUs, runs the fp32 matmul
   and the memory copy;
2. all-reduce (:mod:`checks.allreduce`): rayrig's own rank actors over torch.distributed,
   as Ray Train does underneath, one per GPU (NCCL) or per node on CPU-only clusters
   (gloo), sweeping the message size one size at a time, each with a deadline,
   checking the reduced values and computing the nccl-tests algbw/busbw (:mod:`checks.maths`);
3. sweep test: a hyperparameter-sweep-shaped burst of small tasks (64 by
   default, ``num_cpus=0.25``, ``num_gpus=0.25`` on GPU clusters,
   ``max_retries=3``, SPREAD) that must all finish and reach every node that
   has the resources they ask for.

GPUs and CPUs that other jobs hold when the benchmark starts (:func:`mark_busy`, after a short
wait for resources that are just being given back) are left out of all three phases and
reported (a WARN naming how many, per node), never waited for: a busy cluster is not a broken one.

The ``checks`` package travels to the workers as a Ray ``py_modules`` runtime
environment, so only the head needs it; every node needs torch. Ray and torch are
imported inside the functions that use them: :mod:`checks.benchmark` imports this
module, and its ``--local`` run has neither Ray nor, always, torch.

Example::

    connect("auto")
    result = run_cluster(quick=True, host_aliases={"10.0.0.2": "gpu-1"})
"""

from __future__ import annotations

import contextlib
import math
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import REPORT_SCHEMA, deadlines, specs, verdict
from .allreduce import run_allreduce
from .deadlines import Budget, PeerClock
from .progress import describe, log, phase, versions

DEFAULT_SWEEP_TASKS = 64
FREE_WAIT_S = 10  # how long the benchmark waits for busy GPUs and CPUs to come free before leaving them out


def connect(address: str | None = "auto", **init_kwargs: Any) -> None:
    """Connect to Ray (``address="auto"``: the cluster this node belongs to;
    ``None``: start a local one) and ship the ``checks`` package to every
    worker through a ``py_modules`` runtime environment."""
    import ray  # lazy: heavy, and absent where --local runs

    if ray.is_initialized():
        return
    runtime_env = {"py_modules": [str(Path(__file__).resolve().parent)]}
    init_kwargs.setdefault("log_to_driver", False)
    ray.init(address=address, runtime_env=runtime_env, **init_kwargs)


def _here() -> dict[str, Any]:
    """Where this Ray worker runs: host name, IP, Ray node id."""
    import ray  # lazy: heavy, and absent where --local runs

    return {
        "host": socket.gethostname(),
        "ip": ray.util.get_node_ip_address(),
        "node_id": ray.get_runtime_context().get_node_id(),
    }


def cluster_nodes() -> list[dict[str, Any]]:
    """The live Ray nodes with their host name, IP and CPU/GPU resources, head first."""
    import ray  # lazy: heavy, and absent where --local runs

    nodes = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        resources = node.get("Resources") or {}
        nodes.append(
            {
                "node_id": node["NodeID"],
                "host": node.get("NodeManagerHostname") or node.get("NodeManagerAddress"),
                "ip": node.get("NodeManagerAddress"),
                "num_cpus": resources.get("CPU", 0.0),
                "num_gpus": resources.get("GPU", 0.0),
                "is_head": "node:__internal_head__" in resources,
            }
        )
    nodes.sort(key=lambda n: (not n["is_head"], n["host"] or "", n["ip"] or ""))
    return nodes


def wait_for_nodes(expected_ips: list[str], timeout_s: float = 180) -> list[dict[str, Any]]:
    """Wait until the alive Ray nodes are exactly one per expected IP; return them.

    A node whose raylet restarted shows up twice for a while (the old entry is
    declared dead only after the health checks give up), and a node that is
    still joining is missing; the benchmark must not size its work on either.
    """
    wanted = sorted(expected_ips)
    deadline = time.monotonic() + timeout_s
    while True:
        nodes = cluster_nodes()
        ips = sorted(n["ip"] for n in nodes)
        if ips == wanted:
            return nodes
        if time.monotonic() >= deadline:
            raise RuntimeError(
                f"the cluster did not settle within {timeout_s:.0f} s: alive nodes at {', '.join(ips) or 'none'}, "
                f"expected one each at {', '.join(wanted)}"
            )
        time.sleep(2)


def busy_counts(node: dict[str, Any], free: dict[str, float] | None) -> tuple[int, float]:
    """(whole GPUs, CPUs) of ``node`` that are not ``free``, i.e. held by other jobs (none when
    Ray gave no reading for the node).

    >>> busy_counts({"num_gpus": 8.0, "num_cpus": 96.0}, {"GPU": 5.5, "CPU": 90.0})
    (3, 6.0)
    """
    if free is None:
        return 0, 0.0
    gpus = int(round(node["num_gpus"])) - math.floor(free.get("GPU", 0.0) + 1e-9)
    cpus = round(node["num_cpus"] - free.get("CPU", 0.0), 3)
    return max(0, gpus), max(0.0, cpus)


def mark_busy(nodes: list[dict[str, Any]], wait_s: float = FREE_WAIT_S) -> list[dict[str, Any]]:
    """Note on each node how many of its GPUs and CPUs other jobs hold (``busy_gpus``, ``busy_cpus``).

    Waits up to ``wait_s`` until every node's resources are free (a task that just ended gives
    them back a moment later); what is still held then is left out of the benchmark. Returns ``nodes``.
    """
    # lazy: Ray is absent where --local runs; the per-node reading is Ray's DeveloperAPI
    from ray._private.state import available_resources_per_node

    deadline = time.monotonic() + wait_s
    while True:
        free = available_resources_per_node()
        for node in nodes:
            node["busy_gpus"], node["busy_cpus"] = busy_counts(node, free.get(node["node_id"]))
        if not any(n["busy_gpus"] or n["busy_cpus"] for n in nodes) or time.monotonic() >= deadline:
            return nodes
        time.sleep(1)


def _free(node: dict[str, Any], resource: str) -> float:
    """How much of ``resource`` ("GPU" or "CPU") of ``node`` no other job holds."""
    if resource == "GPU":
        return node["num_gpus"] - node.get("busy_gpus", 0)
    return node["num_cpus"] - node.get("busy_cpus", 0.0)


def _node_label(node: dict[str, Any]) -> str:
    return verdict.host_label(node)


class GpuBench:
    """Holds one GPU for its lifetime (``num_gpus=1``) and measures it."""

    def run(self, quick: bool) -> dict[str, Any]:
        """The kernels on this actor's GPU, as a device entry."""
        import ray  # lazy: heavy, and absent where --local runs

        from . import kernels  # imports torch

        gpu_ids = ray.get_gpu_ids()
        entry = kernels.measure_device("cuda:0", quick=quick)
        entry.update(_here())
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
    entry.update(_here())
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


def _wait_with_peers(
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
    log(f"devices: {_node_label(node)} {device}: {deadlines.did_not_finish(entry['stopped'], what)}: stopped")
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
            for index in range(int(_free(node, "GPU"))):  # the GPUs other jobs hold are left out
                actor = gpu_actor.options(num_gpus=1, num_cpus=0, scheduling_strategy=pin).remote()
                gpus.append((actor, node, f"gpu #{index}"))
        elif node["num_cpus"] >= 1:
            if _free(node, "CPU") < 1:
                continue  # every CPU held by other jobs: left out, and reported
            task = cpu_task.options(num_cpus=math.floor(_free(node, "CPU")), scheduling_strategy=pin, max_retries=0)
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
    done, _late = _wait_with_peers(refs, clock, started, budget)
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
    done, _late = _wait_with_peers(refs, clock, started, budget)
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


def _trial(index: int, use_gpu: bool, sleep_s: float) -> dict[str, Any]:
    """One "trial" of the sweep: proves it got its share of the node, then sleeps."""
    import ray  # lazy: heavy, and absent where --local runs

    where = _here()
    if use_gpu:
        import torch  # lazy: heavy, needed only for GPU trials

        gpu_ids = ray.get_gpu_ids()
        if not gpu_ids or not torch.cuda.is_available():
            raise RuntimeError(f"trial {index} on {where['host']} was given no usable GPU (ids {gpu_ids})")
        value = torch.ones(1024, device="cuda").sum().item()
        if value != 1024:
            raise RuntimeError(f"trial {index} on {where['host']}: GPU arithmetic is wrong ({value})")
        where["gpu_ids"] = [str(g) for g in gpu_ids]
    time.sleep(sleep_s)
    return {"task": index, **where}


def run_sweep_test(
    nodes: list[dict[str, Any]],
    tasks: int = DEFAULT_SWEEP_TASKS,
    sleep_s: float = 0.5,
    timeout_s: float = 300,
    peer_factor: float = deadlines.DEFAULT_PEER_FACTOR,
    budget: Budget | None = None,
    only_these: bool = False,
) -> dict[str, Any]:
    """Phase 3: ``tasks`` small SPREAD tasks (at least two per eligible node)
    that must all finish, on every node that has the resources they need.

    ``only_these``: the cluster has other nodes (left out by an earlier phase) and the tasks must
    not go there: a label selector on Ray's node ids keeps them on ``nodes``. Tasks still running
    when the median task has finished ``2 x peer_factor`` times over are stopped (half the tasks
    finish by the median, so all of them should by twice that), or after ``timeout_s``.
    """
    import ray  # lazy: heavy, and absent where --local runs

    use_gpu = any(n["num_gpus"] > 0 for n in nodes)
    share = {"num_cpus": 0.25, "num_gpus": 0.25 if use_gpu else 0}
    fits = [n for n in nodes if n["num_cpus"] >= share["num_cpus"] and n["num_gpus"] >= share["num_gpus"]]
    eligible = [n for n in fits if _free(n, "CPU") >= share["num_cpus"] and _free(n, "GPU") >= share["num_gpus"]]
    if fits and not eligible:
        what = "GPUs" if use_gpu else "CPUs"
        return {"tasks": 0, "completed": 0, "skipped": f"every node's {what} are held by other jobs"}
    tasks = max(tasks, 2 * len(eligible))
    where: dict[str, Any] = {"scheduling_strategy": "SPREAD"}
    if only_these and eligible:  # ray.io/node-id: the label every Ray node carries
        where["label_selector"] = {"ray.io/node-id": f"in({','.join(n['node_id'] for n in eligible)})"}
    trial = ray.remote(_trial).options(**share, max_retries=3, **where)
    log(f"sweep_test: {tasks} tasks with {share}, expected on {len(eligible)} nodes")
    t0 = time.perf_counter()
    started = time.monotonic()
    refs = [trial.remote(i, use_gpu, sleep_s) for i in range(tasks)]
    clock = PeerClock(tasks, factor=2 * peer_factor, cap_s=timeout_s)
    finished, not_ready = _wait_with_peers(refs, clock, started, budget)
    done: list[dict[str, Any]] = []
    failures: list[str] = []
    for ref in refs:
        if ref not in finished:
            continue
        try:
            done.append(ray.get(ref))
        except Exception as exc:  # noqa: BLE001 - counted as a failed trial
            failures.append(describe(exc))
    for ref in not_ready:
        ray.cancel(ref, force=True)
    stopped = None
    if not_ready:
        stopped = clock.late(time.monotonic() - started)
        median = stopped["peers_median_s"]
        then = f"the median task took {median:g} s" if median is not None else "fewer than half finished"
        failures.append(f"{len(not_ready)} tasks did not finish in {stopped['elapsed_s']:g} s ({then})")
    labels = {n["node_id"]: _node_label(n) for n in nodes}
    per_node: dict[str, int] = {}
    seen = set()
    for item in done:
        label = labels.get(item["node_id"]) or verdict.host_label(item)
        per_node[label] = per_node.get(label, 0) + 1
        seen.add(item["node_id"])
    result = {
        "tasks": tasks,
        "completed": len(done),
        "failures": failures,
        "per_node": per_node,
        "expected_nodes": [_node_label(n) for n in eligible],
        "missing_nodes": [_node_label(n) for n in eligible if n["node_id"] not in seen],
        "use_gpu": use_gpu,
        "resources_per_task": share,
        "elapsed_s": round(time.perf_counter() - t0, 3),
    }
    if stopped:
        result["stopped"] = stopped
    return result


def rename_hosts(entries: list[dict[str, Any]], aliases: dict[str, str]) -> list[dict[str, Any]]:
    """Give each entry whose ``ip`` is in ``aliases`` that name as ``host``
    (keeping the reported one as ``hostname``); returns ``entries``."""
    for entry in entries:
        name = aliases.get(entry.get("ip") or "")
        if name and name != entry.get("host"):
            entry.setdefault("hostname", entry.get("host"))
            entry["host"] = name
    return entries


def left_out(devices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The nodes an earlier phase found unfit for the later ones, by Ray node id: those with a
    measurement stopped at its deadline (``{"host", "ip", "why"}``)."""
    found: dict[str, dict[str, Any]] = {}
    for entry in devices:
        if entry.get("stopped") and entry.get("node_id") not in found:
            why = deadlines.did_not_finish(entry["stopped"], entry["stopped"].get("what") or "its measurement")
            found[entry["node_id"]] = {"host": entry.get("host"), "ip": entry.get("ip"), "why": why}
    return found


def stuck_nodes(allreduce: dict[str, Any]) -> set[str]:
    """The Ray node ids of the all-reduce's stuck or lost ranks (not those that only waited for them)."""
    hung = [r for r in (allreduce.get("hung") or {}).get("ranks", []) if r.get("state") != "waiting for peers"]
    return {r.get("node_id") for r in hung + list(allreduce.get("failed") or [])}


def _not_run(budget: Budget | None) -> dict[str, Any] | None:
    """A phase's result when the run's budget is spent (None while time is left)."""
    if budget is None or not budget.spent():
        return None
    return {"error": f"not run: the checks' budget of {budget.total_s:g} s (checks_timeout_s) ran out"}


def run_cluster(
    quick: bool = False,
    allreduce_sizes: list[int] | None = None,
    allreduce_min_bytes: int | None = None,
    allreduce_max_bytes: int | None = None,
    allreduce_iters: int | None = None,
    cpu_workers_per_node: int = 1,
    sweep_tasks: int = DEFAULT_SWEEP_TASKS,
    sweep_sleep_s: float | None = None,
    timeout_s: int = deadlines.DEFAULT_NODE_TIMEOUT_S,
    host_aliases: dict[str, str] | None = None,
    expect_ips: list[str] | None = None,
    peer_factor: float = deadlines.DEFAULT_PEER_FACTOR,
    budget: Budget | None = None,
    on_phase: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """All three phases on the connected Ray cluster (call :func:`connect` first).

    ``host_aliases`` maps node IPs to the names the operator knows (the
    inventory's), which then name the nodes everywhere in the report.
    ``expect_ips``: wait until exactly these nodes are alive before measuring.
    ``timeout_s`` caps any one measurement, ``peer_factor`` stops one that its peers have long
    finished (:mod:`checks.deadlines`), and ``budget`` bounds the whole run: a phase with no time
    left is not run, and says so. A node whose device measurement was stopped is left out of the
    all-reduce and the sweep test (``"left_out"``). ``on_phase`` gets the report after each phase
    (the command line writes it, so a run stopped from outside still leaves what it found).
    """
    started = time.time()
    t0 = time.perf_counter()
    timing: dict[str, float] = {}
    aliases = host_aliases or {}
    settle_s = min(timeout_s, 180) if budget is None else budget.cap(min(timeout_s, 180))
    found = wait_for_nodes(expect_ips, timeout_s=settle_s) if expect_ips else cluster_nodes()
    nodes = rename_hosts(mark_busy(found), aliases)
    cpu_only = not any(n["num_gpus"] > 0 for n in nodes)
    log(
        f"cluster: {len(nodes)} nodes, {int(sum(n['num_gpus'] for n in nodes))} GPUs, "
        f"{sum(n['num_cpus'] for n in nodes):g} CPUs; held by other jobs: "
        f"{sum(n['busy_gpus'] for n in nodes)} GPUs, {sum(n['busy_cpus'] for n in nodes):g} CPUs"
    )
    result: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "mode": "cluster",
        "quick": quick,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "versions": versions(),
        "cpu_only": cpu_only,
        "nodes": nodes,
        "devices": [],
        "allreduce": None,
        "sweep_test": None,
        "left_out": {},
        "deadlines": {
            "node_timeout_s": timeout_s,
            "peer_factor": peer_factor,
            "peer_floor_s": deadlines.PEER_FLOOR_S,
            "budget_s": budget.total_s if budget else None,
        },  # fmt: skip
    }
    report = on_phase or (lambda _result: None)
    with phase("devices", timing):
        devices = run_devices(nodes, quick=quick, timeout_s=timeout_s, peer_factor=peer_factor, budget=budget)
        result["devices"] = rename_hosts(devices, aliases)
    result["left_out"] = left_out(result["devices"])
    usable = [n for n in nodes if n["node_id"] not in result["left_out"]]
    for gone in result["left_out"].values():
        log(f"left out of the later phases: {gone['host']}: {gone['why']}")
    report(result)
    with phase("allreduce", timing):
        result["allreduce"] = _not_run(budget) or run_allreduce(
            usable,
            sizes=allreduce_sizes,
            quick=quick,
            iters=allreduce_iters,
            cpu_workers_per_node=cpu_workers_per_node,
            timeout_s=timeout_s,
            min_bytes=allreduce_min_bytes,
            max_bytes=allreduce_max_bytes,
            peer_factor=peer_factor,
            budget=budget,
        )
    usable = [n for n in usable if n["node_id"] not in stuck_nodes(result["allreduce"])]
    report(result)
    with phase("sweep_test", timing):
        result["sweep_test"] = _not_run(budget) or run_sweep_test(
            usable,
            tasks=sweep_tasks,
            sleep_s=sweep_sleep_s if sweep_sleep_s is not None else (0.2 if quick else 0.5),
            timeout_s=timeout_s,
            peer_factor=peer_factor,
            budget=budget,
            only_these=len(usable) < len(nodes),
        )
    result["timing"] = {**timing, "total_s": round(time.perf_counter() - t0, 3)}
    report(result)
    return result
