"""The ``--cluster`` benchmark: every node of the running Ray cluster, driven from the head.

Runs inside the head's ray-node container and connects to the running cluster
(``ray.init(address="auto")``). Three phases, each logged to stderr as it starts
and ends:

1. devices (:mod:`checks.devices`): one actor per GPU, all at once, running the kernels; on
   nodes without GPUs one task per node runs the fp32 matmul and the memory copy. A
   measurement its peers have long finished is stopped, and its node is left out of the
   later phases (``"left_out"``);
2. all-reduce (:mod:`checks.allreduce`): rayrig's own rank actors over torch.distributed,
   as Ray Train does underneath, one per GPU (NCCL) or per node on CPU-only clusters
   (gloo), sweeping the message size one size at a time, each with a deadline,
   checking the reduced values and computing the nccl-tests algbw/busbw (:mod:`checks.maths`);
3. sweep test: a hyperparameter-sweep-shaped burst of small tasks (64 by
   default, ``num_cpus=0.25``, ``num_gpus=0.25`` on GPU clusters,
   ``max_retries=3``, SPREAD) that must all finish and reach every node that
   has the resources they ask for, stopped when the median task has finished
   ``2 x peer_factor`` times over.

Every phase stays within the run's ``budget`` (:mod:`checks.deadlines`): a phase with no
time left is not run, and says so.

GPUs and CPUs that other jobs hold when the benchmark starts (:func:`mark_busy`, after a short
wait for resources that are just being given back) are left out of all three phases and
reported (a WARN naming how many, per node), never waited for: a busy cluster is not a broken one.

The ``checks`` package travels to the workers as a Ray ``py_modules`` runtime
environment, so only the head needs it; every node needs torch. Ray and torch are
imported inside the functions that use them: :mod:`checks.benchmark` imports this
module, and its ``--local`` run has neither Ray nor, always, torch.

Example::

    connect("auto")
    result = run_cluster(BenchConfig(quick=True, host_aliases={"10.0.0.2": "gpu-1"}))
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import REPORT_SCHEMA, deadlines, verdict
from .allreduce import SweepConfig, run_allreduce
from .deadlines import Budget, PeerClock
from .devices import free_of, here, run_devices, wait_with_peers
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


def _node_label(node: dict[str, Any]) -> str:
    return verdict.host_label(node)


def _trial(index: int, use_gpu: bool, sleep_s: float) -> dict[str, Any]:
    """One "trial" of the sweep: proves it got its share of the node, then sleeps."""
    import ray  # lazy: heavy, and absent where --local runs

    where = here()
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
    eligible = [n for n in fits if free_of(n, "CPU") >= share["num_cpus"] and free_of(n, "GPU") >= share["num_gpus"]]
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
    finished, not_ready = wait_with_peers(refs, clock, started, budget)
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
        if stopped["peers_median_s"] is not None and clock.by_peers():
            floor = f"at least {clock.floor_s:g} s"
            stopped["source"] = f"2 x checks_peer_timeout_factor x the median task's time ({floor})"
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


@dataclass(frozen=True)
class BenchConfig:
    """The whole run, from the benchmark's command line.

    ``host_aliases`` maps node IPs to the names the operator knows (the inventory's), which then
    name the nodes everywhere in the report. ``expect_ips``: wait until exactly these nodes are
    alive before measuring. ``timeout_s`` caps any one measurement, ``peer_factor`` stops one that
    its peers have long finished (:mod:`checks.deadlines`), and ``budget`` bounds the whole run: a
    phase with no time left is not run, and says so. ``allreduce_*`` and ``cpu_workers_per_node``
    shape the all-reduce sweep (:meth:`sweep`), ``sweep_*`` the scheduling smoke test.
    """

    quick: bool = False
    allreduce_sizes: list[int] | None = None
    allreduce_min_bytes: int | None = None
    allreduce_max_bytes: int | None = None
    allreduce_iters: int | None = None
    cpu_workers_per_node: int = 1
    sweep_tasks: int = DEFAULT_SWEEP_TASKS
    sweep_sleep_s: float | None = None
    timeout_s: int = deadlines.DEFAULT_NODE_TIMEOUT_S
    host_aliases: dict[str, str] = field(default_factory=dict)
    expect_ips: list[str] | None = None
    peer_factor: float = deadlines.DEFAULT_PEER_FACTOR
    budget: Budget | None = None

    def sweep(self) -> SweepConfig:
        """The all-reduce sweep's own configuration."""
        return SweepConfig(
            quick=self.quick,
            sizes=self.allreduce_sizes,
            min_bytes=self.allreduce_min_bytes,
            max_bytes=self.allreduce_max_bytes,
            iters=self.allreduce_iters,
            cpu_workers_per_node=self.cpu_workers_per_node,
            timeout_s=self.timeout_s,
            peer_factor=self.peer_factor,
            budget=self.budget,
        )


def run_cluster(
    config: BenchConfig = BenchConfig(),  # noqa: B008 - frozen: one shared default is safe
    on_phase: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """All three phases on the connected Ray cluster (call :func:`connect` first), as ``config`` says.

    A node whose device measurement was stopped is left out of the all-reduce and the sweep test
    (``"left_out"``). ``on_phase`` gets the report after each phase (the command line writes it, so
    a run stopped from outside still leaves what it found).
    """
    quick, timeout_s, peer_factor, budget = config.quick, config.timeout_s, config.peer_factor, config.budget
    expect_ips, sweep_sleep_s = config.expect_ips, config.sweep_sleep_s
    started = time.time()
    t0 = time.perf_counter()
    timing: dict[str, float] = {}
    aliases = config.host_aliases
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
        result["allreduce"] = _not_run(budget) or run_allreduce(usable, config.sweep())
    usable = [n for n in usable if n["node_id"] not in stuck_nodes(result["allreduce"])]
    report(result)
    with phase("sweep_test", timing):
        result["sweep_test"] = _not_run(budget) or run_sweep_test(
            usable,
            tasks=config.sweep_tasks,
            sleep_s=sweep_sleep_s if sweep_sleep_s is not None else (0.2 if quick else 0.5),
            timeout_s=timeout_s,
            peer_factor=peer_factor,
            budget=budget,
            only_these=len(usable) < len(nodes),
        )
    result["timing"] = {**timing, "total_s": round(time.perf_counter() - t0, 3)}
    report(result)
    return result
