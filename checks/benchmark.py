"""The post-deploy benchmark: on this machine (``--local``) or across the Ray cluster (``--cluster``).

``--local`` needs torch only (no Ray, no Docker): it measures every visible
GPU, or the CPU when there is none, with :mod:`checks.kernels`.

``--cluster`` runs inside the head's ray-node container and connects to the
running cluster (``ray.init(address="auto")``). Three phases, each logged to
stderr as it starts and ends:

1. devices: one GPU-holding actor per GPU (``num_gpus=1``, pinned to its node
   with a hard NodeAffinitySchedulingStrategy, one per GPU so every GPU is
   measured exactly once, all at the same time) running the kernels; on nodes
   without GPUs one task per node, holding all its CPUs, runs the fp32 matmul
   and the memory copy;
2. all-reduce: Ray Train's TorchTrainer over every GPU (NCCL), or over one
   worker per node on CPU-only clusters (gloo, STRICT_SPREAD), sweeping the
   message size, checking the reduced values and computing the nccl-tests
   algbw/busbw (:mod:`checks.maths`);
3. sweep test: a hyperparameter-sweep-shaped burst of small tasks (64 by
   default, ``num_cpus=0.25``, ``num_gpus=0.25`` on GPU clusters,
   ``max_retries=3``, SPREAD) that must all finish and reach every node that
   has the resources they ask for.

The ``checks`` package travels to the workers as a Ray ``py_modules`` runtime
environment, so only the head needs it; every node needs torch.

Report schema (JSON, ``"schema": "rayrig.checks.benchmark/1"``)::

    mode         "local" | "cluster"
    quick        bool
    started_at   ISO 8601 time
    versions     {"torch", "cuda", "ray", "python"}
    cpu_only     true when the cluster (or machine) has no GPU
    nodes        [{"node_id", "host", "ip", "num_cpus", "num_gpus", "is_head"}]
    devices      [{"host", "ip", "node_id", "hostname"? (when --host-alias renamed it),
                   "device" ("cuda:N", N as the node numbers its GPUs | "cpu"),
                   "kind" ("gpu" | "cpu"), "model", "spec" (datasheet dict | null),
                   "info"   {model, memory_bytes, driver_version, cuda_version, uuid, ...},
                   "matmul" {"tflops", "n", "dtype", "median_s", "min_s", "max_s", "iters",
                             "sustained_tflops"? (GPU), "threads"? (CPU)},
                   "copy"   {"gbps", "nbytes", "median_s", ...},
                   "h2d"    {"gbps" | null, "skipped"?},
                   "error"? / "skipped"? , "elapsed_s"}]
    allreduce    null (local) | {"backend", "world_size", "ranks": [{"rank", "host", "device"}],
                   "sweep": [{"bytes", "time_s", "algbw_gbps", "busbw_gbps", "values_ok",
                              "wrong_values", "iters"}],
                   "value_check": {"ok", "expected", "detail"}, "error"?}
    sweep_test   null (local) | {"tasks", "completed", "failures": [...], "per_node": {"host (ip)": count},
                   "expected_nodes", "missing_nodes", "use_gpu", "resources_per_task", "elapsed_s"}
    timing       {"devices_s", "allreduce_s", "sweep_test_s", "total_s"}
    verdict      {"status", "slow_hosts", "reasons": [{"level", "message", "host"?, "device"?, "flag"?}],
                  "thresholds": {...}}

Exit status: 0 PASS or WARN, 1 FAIL, 2 usage error.

Example::

    python -m checks.benchmark --local --json /tmp/bench.json
    python -m checks.benchmark --cluster --out /tmp/rayrig-bench.json --plot /tmp/busbw.png
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import platform
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import REPORT_SCHEMA, maths, report, specs, verdict

MiB = 2**20
GiB = 2**30

TRAIN_STORAGE_PATH = "/tmp/rayrig-train"
DEFAULT_SWEEP_TASKS = 64


def log(message: str) -> None:
    """A progress line on stderr (stdout is kept for the table)."""
    print(f"[rayrig-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def phase(name: str, timing: dict[str, float]) -> Iterator[None]:
    """Log the start and end of a phase and record its duration in ``timing``."""
    log(f"{name}: start")
    t0 = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - t0
        timing[f"{name}_s"] = round(elapsed, 3)
        log(f"{name}: done in {elapsed:.1f} s")


def size_sweep(min_bytes: int, max_bytes: int) -> list[int]:
    """Powers of two from ``min_bytes`` to ``max_bytes`` (both rounded to a
    multiple of 4 bytes, the size of the float32 elements reduced).

    >>> [s // MiB for s in size_sweep(MiB, 8 * MiB)]
    [1, 2, 4, 8]
    """
    if min_bytes < 4 or max_bytes < min_bytes:
        raise ValueError(f"need 4 <= min_bytes <= max_bytes, got {min_bytes} and {max_bytes}")
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size - size % 4)
        size *= 2
    return sizes


def default_allreduce_sizes(
    use_gpu: bool, quick: bool, min_bytes: int | None = None, max_bytes: int | None = None
) -> list[int]:
    """From ``min_bytes`` (1 MiB) to ``max_bytes``: 1 GiB on GPUs (256 MiB
    with --quick), 64 MiB on CPUs (16 MiB with --quick)."""
    if max_bytes is None:
        max_bytes = (256 * MiB if quick else GiB) if use_gpu else (16 * MiB if quick else 64 * MiB)
    return size_sweep(min_bytes or MiB, max_bytes)


def _versions() -> dict[str, Any]:
    found: dict[str, Any] = {"python": platform.python_version(), "torch": None, "cuda": None, "ray": None}
    try:
        import torch

        found["torch"], found["cuda"] = torch.__version__, torch.version.cuda
    except ImportError:
        pass
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):  # without paying for importing Ray
        found["ray"] = importlib.metadata.version("ray")
    return found


def _add_specs(entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        spec = specs.lookup(entry.get("model")) if entry.get("kind") == "gpu" else None
        entry["spec"] = spec.as_dict() if spec else None


# --- local -------------------------------------------------------------------


def run_local(quick: bool = False) -> dict[str, Any]:
    """Benchmark this machine's GPUs (or CPU) with torch only; see the schema above."""
    from . import kernels

    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    with phase("devices", timing):
        result = kernels.run_local(quick=quick)
    _add_specs(result["devices"])
    result["versions"] = _versions()
    result["timing"] = {**timing, "total_s": round(time.perf_counter() - t0, 3)}
    return result


# --- cluster: Ray helpers ------------------------------------------------------


def connect(address: str | None = "auto", **init_kwargs: Any) -> None:
    """Connect to Ray (``address="auto"``: the cluster this node belongs to;
    ``None``: start a local one) and ship the ``checks`` package to every
    worker through a ``py_modules`` runtime environment."""
    import ray

    if ray.is_initialized():
        return
    runtime_env = {"py_modules": [str(Path(__file__).resolve().parent)]}
    init_kwargs.setdefault("log_to_driver", False)
    ray.init(address=address, runtime_env=runtime_env, **init_kwargs)


def _here() -> dict[str, Any]:
    """Where this Ray worker runs: host name, IP, Ray node id."""
    import ray

    return {
        "host": socket.gethostname(),
        "ip": ray.util.get_node_ip_address(),
        "node_id": ray.get_runtime_context().get_node_id(),
    }


def cluster_nodes() -> list[dict[str, Any]]:
    """The live Ray nodes with their host name, IP and CPU/GPU resources, head first."""
    import ray

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


def _node_label(node: dict[str, Any]) -> str:
    return verdict.host_label(node)


class GpuBench:
    """Holds one GPU for its lifetime (``num_gpus=1``) and measures it."""

    def run(self, quick: bool) -> dict[str, Any]:
        """The kernels on this actor's GPU, as a device entry."""
        import ray

        from . import kernels

        gpu_ids = ray.get_gpu_ids()
        entry = kernels.measure_device("cuda:0", quick=quick)
        entry.update(_here())
        if gpu_ids:
            entry["device"] = f"cuda:{gpu_ids[0]}"  # the node's numbering, as nvidia-smi shows it
        return entry


def _cpu_bench(quick: bool) -> dict[str, Any]:
    """The CPU kernels using every CPU this task holds, as a device entry."""
    import ray
    import torch

    from . import kernels

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


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    last = text[-1] if text else ""
    return f"{type(exc).__name__}: {last}"[:500]


def run_devices(nodes: list[dict[str, Any]], quick: bool = False, timeout_s: float = 600) -> list[dict[str, Any]]:
    """Phase 1: every GPU measured by its own actor (all at once), every GPU-less node by one task (in turn)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    gpu_actor = ray.remote(GpuBench)
    cpu_task = ray.remote(_cpu_bench)
    pending: list[tuple[Any, dict[str, Any], str, str]] = []  # (ref, node, device, kind)
    cpu_nodes: list[tuple[Any, dict[str, Any]]] = []  # (task, node), run one at a time
    actors = []
    entries: list[dict[str, Any]] = []
    for node in nodes:
        pin = NodeAffinitySchedulingStrategy(node_id=node["node_id"], soft=False)
        gpus = int(node["num_gpus"])
        if gpus:
            for index in range(gpus):
                actor = gpu_actor.options(num_gpus=1, num_cpus=0, scheduling_strategy=pin).remote()
                actors.append(actor)
                pending.append((actor.run.remote(quick), node, f"gpu #{index}", "gpu"))
        elif node["num_cpus"] >= 1:
            task = cpu_task.options(num_cpus=node["num_cpus"], scheduling_strategy=pin, max_retries=0)
            cpu_nodes.append((task, node))
        else:
            entry = _error_entry(node, "cpu", "cpu", "")
            del entry["error"]
            entry["skipped"] = "the node offers Ray no CPU and no GPU (num_cpus=0), so nothing can run there"
            entries.append(entry)
    log(f"devices: {len(pending)} GPUs, {len(cpu_nodes)} CPU-only nodes")
    # GPUs are independent hardware and run at once. CPU-only nodes run one after
    # another, in CPU_ROUNDS rounds, each node keeping its best round: hosts that
    # share cores (VMs on one hypervisor, the local lab) would otherwise measure
    # their contention, and a burst of load elsewhere would single out whichever
    # node it happened to hit. A node that is really slow is slow in every round.
    gpu_refs = [p[0] for p in pending]
    ready: list[Any] = []
    rounds: dict[str, list[dict[str, Any]]] = {}
    for _ in range(CPU_ROUNDS if cpu_nodes else 0):
        for task, node in cpu_nodes:
            ref = task.remote(quick)
            if ray.wait([ref], timeout=timeout_s)[0]:
                with contextlib.suppress(Exception):  # a failed round is just not counted
                    rounds.setdefault(node["node_id"], []).append(ray.get(ref))
            else:
                ray.cancel(ref, force=True)
    for task, node in cpu_nodes:
        ref = task.remote(quick)  # the last round, collected below with its errors
        pending.append((ref, node, "cpu", "cpu"))
        ready += ray.wait([ref], timeout=timeout_s)[0]
    if gpu_refs:
        ready += ray.wait(gpu_refs, num_returns=len(gpu_refs), timeout=timeout_s)[0]
    ready_set = set(ready)
    for ref, node, device, kind in pending:
        if ref not in ready_set:
            entries.append(_error_entry(node, device, kind, f"no result within {timeout_s:.0f} s (resources busy?)"))
            if kind == "cpu":
                ray.cancel(ref, force=True)
            continue
        try:
            entry = ray.get(ref)
            if kind == "cpu":
                entry = _best_round([entry, *rounds.get(node["node_id"], [])])
            log(
                f"devices: {verdict.host_label(entry)} {entry['device']} {entry.get('model')}: "
                f"{(entry.get('matmul') or {}).get('tflops', float('nan')):.3g} TFLOPS"
            )
            entries.append(entry)
        except Exception as exc:  # noqa: BLE001 - a failed device is reported, not fatal
            entries.append(_error_entry(node, device, kind, _describe(exc)))
    for actor in actors:
        ray.kill(actor)
    _add_specs(entries)
    return entries


# --- cluster: all-reduce through Ray Train ---------------------------------------


def allreduce_sweep(
    sizes: list[int],
    warmup: int,
    iters: int,
    device: Any,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Time ``dist.all_reduce`` over ``sizes`` in the current process group.

    torch.distributed only (the process group must be initialised): Ray Train
    runs it in :func:`allreduce_loop`, a test can run it in a one-rank group.
    Each rank fills its float32 buffer with ``rank + 1``; after one
    all-reduce every element must equal ``n(n+1)/2``. The timed calls run on a
    zeroed buffer (values stay finite), and the time of a size is the slowest
    rank's mean time per call. ``on_row`` is called on every rank after each
    size.
    """
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    ranks: list[Any] = [None] * world
    dist.all_gather_object(ranks, {"rank": rank, "host": socket.gethostname(), "device": str(device)})
    expected = world * (world + 1) / 2
    rows, problems = [], []
    for nbytes in sizes:
        numel = max(1, nbytes // 4)
        buf = torch.full((numel,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(buf)
        wrong = (buf != expected).sum().to(torch.float64).reshape(1)
        buf.zero_()
        for _ in range(warmup):
            dist.all_reduce(buf)
        sync()
        dist.all_reduce(torch.zeros(1, device=device))  # line the ranks up before timing
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        sync()
        seconds = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=device)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        dist.all_reduce(wrong)
        t, bad = float(seconds.item()), int(wrong.item())
        size = numel * 4
        row = {
            "bytes": size,
            "time_s": t,
            "algbw_gbps": maths.algbw(size, t),
            "busbw_gbps": maths.busbw(size, t, "all_reduce", world),
            "values_ok": bad == 0,
            "wrong_values": bad,
            "iters": iters,
        }
        if bad:
            problems.append(f"{bad} of {numel * world} elements differ from {expected:g} at {size} bytes")
        rows.append(row)
        if on_row:
            on_row(row)
        del buf
    return {
        "backend": str(dist.get_backend()),
        "world_size": world,
        "ranks": ranks,
        "sweep": rows,
        "value_check": {
            "ok": not problems,
            "expected": expected,
            "detail": "; ".join(problems) or f"every element equals {expected:g} at every size",
        },
    }


def allreduce_loop(config: dict[str, Any]) -> dict[str, Any]:
    """Ray Train worker loop around :func:`allreduce_sweep`.

    Every rank calls ``ray.train.report`` after each size (Ray Train needs all
    ranks to report equally often); rank 0's last report and its return value
    carry the whole table.
    """
    import ray.train
    import torch

    if config["use_gpu"]:
        from ray.train.torch import get_device

        device = get_device()
    else:
        device = torch.device("cpu")
    result = allreduce_sweep(
        config["sizes"],
        config["warmup"],
        config["iters"],
        device,
        on_row=lambda row: ray.train.report(
            {"bytes": row["bytes"], "busbw_gbps": row["busbw_gbps"], "values_ok": row["values_ok"]}
        ),
    )
    rank = ray.train.get_context().get_world_rank()
    ray.train.report({"allreduce": result} if rank == 0 else {"rank": rank})
    return result


def _wait_for_free(resource: str, amount: float, timeout_s: float) -> float:
    """Wait until Ray reports ``amount`` of ``resource`` free (resources of
    finished tasks and killed actors come back a moment later); returns the
    amount last seen free."""
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        free = ray.available_resources().get(resource, 0.0)
        if free >= amount or time.monotonic() >= deadline:
            return free
        time.sleep(0.5)


def run_allreduce(
    nodes: list[dict[str, Any]],
    sizes: list[int] | None = None,
    quick: bool = False,
    warmup: int | None = None,
    iters: int | None = None,
    cpu_workers_per_node: int = 1,
    timeout_s: int = 600,
    min_bytes: int | None = None,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """Phase 2: the all-reduce sweep over every GPU (NCCL), or over
    ``cpu_workers_per_node`` workers on each node of a CPU-only cluster (gloo)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    total_gpus = int(sum(n["num_gpus"] for n in nodes))
    use_gpu = total_gpus > 0
    if use_gpu:
        workers, strategy = total_gpus, "PACK"
    else:
        cpu_nodes = [n for n in nodes if n["num_cpus"] >= cpu_workers_per_node]
        workers = len(cpu_nodes) * cpu_workers_per_node
        strategy = "STRICT_SPREAD" if cpu_workers_per_node == 1 else "SPREAD"
    sizes = sizes or default_allreduce_sizes(use_gpu, quick, min_bytes, max_bytes)
    warmup = warmup if warmup is not None else (2 if quick else 5)
    iters = iters if iters is not None else (5 if quick else 20)
    base = {"backend": "nccl" if use_gpu else "gloo", "world_size": workers, "sweep": []}
    if workers < 1:
        return {**base, "error": "no node can host an all-reduce worker"}
    resource = "GPU" if use_gpu else "CPU"
    free = _wait_for_free(resource, workers, timeout_s=min(timeout_s, 60))
    if free < workers:
        return {**base, "error": f"needs {workers} free {resource}s, only {free:g} are free (another job holds them?)"}
    log(
        f"allreduce: {workers} workers ({base['backend']}), sizes {sizes[0]}..{sizes[-1]} bytes, "
        f"{warmup} warm-up + {iters} timed calls each"
    )
    trainer = TorchTrainer(
        allreduce_loop,
        train_loop_config={"sizes": sizes, "warmup": warmup, "iters": iters, "use_gpu": use_gpu},
        torch_config=TorchConfig(timeout_s=timeout_s),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu, placement_strategy=strategy),
        run_config=RunConfig(name=f"rayrig-allreduce-{int(time.time())}", storage_path=TRAIN_STORAGE_PATH),
    )
    try:
        result = trainer.fit()
    except Exception as exc:  # noqa: BLE001 - reported and judged by the verdict
        return {**base, "error": _describe(exc)}
    # Ray Train v2 keeps only metrics reported with a checkpoint in result.metrics;
    # the loop's return value (rank 0) carries the table there, result.metrics on v1.
    data = getattr(result, "return_value", None) or (result.metrics or {}).get("allreduce")
    if getattr(result, "error", None) and not data:
        return {**base, "error": _describe(result.error)}
    if not data:
        return {**base, "error": "the training run finished without reporting the all-reduce table"}
    return data


# --- cluster: scheduling smoke test --------------------------------------------


def _trial(index: int, use_gpu: bool, sleep_s: float) -> dict[str, Any]:
    """One "trial" of the sweep: proves it got its share of the node, then sleeps."""
    import ray

    where = _here()
    if use_gpu:
        import torch

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
) -> dict[str, Any]:
    """Phase 3: ``tasks`` small SPREAD tasks (at least two per eligible node)
    that must all finish, on every node that has the resources they need."""
    import ray

    use_gpu = any(n["num_gpus"] > 0 for n in nodes)
    share = {"num_cpus": 0.25, "num_gpus": 0.25 if use_gpu else 0}
    eligible = [n for n in nodes if n["num_cpus"] >= share["num_cpus"] and n["num_gpus"] >= share["num_gpus"]]
    tasks = max(tasks, 2 * len(eligible))
    trial = ray.remote(_trial).options(**share, max_retries=3, scheduling_strategy="SPREAD")
    log(f"sweep_test: {tasks} tasks with {share}, expected on {len(eligible)} nodes")
    t0 = time.perf_counter()
    refs = [trial.remote(i, use_gpu, sleep_s) for i in range(tasks)]
    ready, not_ready = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    done: list[dict[str, Any]] = []
    failures: list[str] = []
    for ref in ready:
        try:
            done.append(ray.get(ref))
        except Exception as exc:  # noqa: BLE001 - counted as a failed trial
            failures.append(_describe(exc))
    for ref in not_ready:
        ray.cancel(ref, force=True)
    if not_ready:
        failures.append(f"{len(not_ready)} tasks did not finish within {timeout_s:.0f} s")
    labels = {n["node_id"]: _node_label(n) for n in nodes}
    per_node: dict[str, int] = {}
    seen = set()
    for item in done:
        label = labels.get(item["node_id"]) or verdict.host_label(item)
        per_node[label] = per_node.get(label, 0) + 1
        seen.add(item["node_id"])
    return {
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


def rename_hosts(entries: list[dict[str, Any]], aliases: dict[str, str]) -> list[dict[str, Any]]:
    """Give each entry whose ``ip`` is in ``aliases`` that name as ``host``
    (keeping the reported one as ``hostname``); returns ``entries``."""
    for entry in entries:
        name = aliases.get(entry.get("ip") or "")
        if name and name != entry.get("host"):
            entry.setdefault("hostname", entry.get("host"))
            entry["host"] = name
    return entries


def run_cluster(
    quick: bool = False,
    allreduce_sizes: list[int] | None = None,
    allreduce_min_bytes: int | None = None,
    allreduce_max_bytes: int | None = None,
    allreduce_iters: int | None = None,
    cpu_workers_per_node: int = 1,
    sweep_tasks: int = DEFAULT_SWEEP_TASKS,
    sweep_sleep_s: float | None = None,
    timeout_s: int = 600,
    host_aliases: dict[str, str] | None = None,
    expect_ips: list[str] | None = None,
) -> dict[str, Any]:
    """All three phases on the connected Ray cluster (call :func:`connect` first).

    ``host_aliases`` maps node IPs to the names the operator knows (the
    inventory's), which then name the nodes everywhere in the report.
    ``expect_ips``: wait until exactly these nodes are alive before measuring.
    """
    started = time.time()
    t0 = time.perf_counter()
    timing: dict[str, float] = {}
    aliases = host_aliases or {}
    found = wait_for_nodes(expect_ips, timeout_s=min(timeout_s, 180)) if expect_ips else cluster_nodes()
    nodes = rename_hosts(found, aliases)
    cpu_only = not any(n["num_gpus"] > 0 for n in nodes)
    log(
        f"cluster: {len(nodes)} nodes, {int(sum(n['num_gpus'] for n in nodes))} GPUs, "
        f"{sum(n['num_cpus'] for n in nodes):g} CPUs"
    )
    result: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "mode": "cluster",
        "quick": quick,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "versions": _versions(),
        "cpu_only": cpu_only,
        "nodes": nodes,
        "devices": [],
        "allreduce": None,
        "sweep_test": None,
    }
    with phase("devices", timing):
        result["devices"] = rename_hosts(run_devices(nodes, quick=quick, timeout_s=timeout_s), aliases)
    with phase("allreduce", timing):
        result["allreduce"] = run_allreduce(
            nodes,
            sizes=allreduce_sizes,
            quick=quick,
            iters=allreduce_iters,
            cpu_workers_per_node=cpu_workers_per_node,
            timeout_s=timeout_s,
            min_bytes=allreduce_min_bytes,
            max_bytes=allreduce_max_bytes,
        )
    with phase("sweep_test", timing):
        result["sweep_test"] = run_sweep_test(
            nodes,
            tasks=sweep_tasks,
            sleep_s=sweep_sleep_s if sweep_sleep_s is not None else (0.2 if quick else 0.5),
            timeout_s=timeout_s,
        )
    result["timing"] = {**timing, "total_s": round(time.perf_counter() - t0, 3)}
    return result


# --- command line ------------------------------------------------------------------


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text}")
    return value


def _bytes(text: str) -> int:
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    text = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    try:
        return int(float(number) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 1048576, 1M or 1GiB, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m checks.benchmark``."""
    parser = argparse.ArgumentParser(
        prog="python -m checks.benchmark",
        description="Benchmark GPUs (or CPUs) and judge them against their datasheet and their peers.",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", action="store_true", help="this machine only, torch without Ray")
    where.add_argument("--cluster", action="store_true", help="the whole Ray cluster (run on the head)")
    parser.add_argument("--quick", action="store_true", help="fewer iterations and smaller sizes")
    parser.add_argument("--json", "--out", dest="json", metavar="PATH", help="write the JSON report here")
    parser.add_argument("--plot", metavar="PATH", help="PNG of all-reduce bus bandwidth (needs matplotlib)")
    parser.add_argument("--address", default="auto", help="Ray address for --cluster (default: auto)")
    parser.add_argument(
        "--matmul-min-fraction",
        type=_fraction,
        default=verdict.DEFAULT_MATMUL_MIN_FRACTION,
        help="checks_matmul_min_fraction: minimum matmul TFLOPS / datasheet (default 0.65)",
    )
    parser.add_argument(
        "--membw-min-fraction",
        type=_fraction,
        default=verdict.DEFAULT_MEMBW_MIN_FRACTION,
        help="checks_membw_min_fraction: minimum copy GB/s / datasheet (default 0.80)",
    )
    parser.add_argument(
        "--outlier-fraction",
        type=_fraction,
        default=verdict.DEFAULT_OUTLIER_FRACTION,
        help="checks_outlier_fraction: minimum fraction of the peers' median (default 0.9)",
    )
    parser.add_argument("--allreduce-min-bytes", type=_bytes, help="smallest all-reduce message (default 1MiB)")
    parser.add_argument(
        "--allreduce-max-bytes", type=_bytes, help="largest all-reduce message (default 1GiB on GPUs, 64MiB on CPUs)"
    )
    parser.add_argument("--allreduce-iters", type=int, help="timed all-reduce calls per size (default 20)")
    parser.add_argument(
        "--cpu-workers-per-node",
        type=int,
        default=1,
        help="all-reduce workers per node on CPU-only clusters (default 1)",
    )
    parser.add_argument(
        "--sweep-tasks", type=int, default=DEFAULT_SWEEP_TASKS, help="tasks in the scheduling smoke test (default 64)"
    )
    parser.add_argument(
        "--host-alias",
        action="append",
        default=[],
        metavar="IP=NAME",
        help="name the node at IP as NAME in the report (repeatable), e.g. the inventory's host names",
    )
    parser.add_argument(
        "--expect-nodes", default="", metavar="IP,IP,...",
        help="wait until exactly these nodes are alive before measuring (the inventory's addresses)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=int, default=600, help="seconds each phase may wait (default 600)")
    parser.add_argument("--verbose", action="store_true", help="show Ray's worker logs")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table and the verdict, write the JSON; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    aliases = {}
    for item in args.host_alias:
        ip, sep, name = item.partition("=")
        if not sep or not ip.strip() or not name.strip():
            parser.error(f"--host-alias expects IP=NAME, got {item!r}")
        aliases[ip.strip()] = name.strip()
    t0 = time.perf_counter()
    try:
        if args.local:
            result = run_local(quick=args.quick)
        else:
            log(f"connecting to Ray at {args.address}")
            connect(args.address, log_to_driver=args.verbose)
            result = run_cluster(
                quick=args.quick,
                allreduce_min_bytes=args.allreduce_min_bytes,
                allreduce_max_bytes=args.allreduce_max_bytes,
                allreduce_iters=args.allreduce_iters,
                cpu_workers_per_node=args.cpu_workers_per_node,
                sweep_tasks=args.sweep_tasks,
                timeout_s=args.timeout,
                host_aliases=aliases,
                expect_ips=[ip.strip() for ip in args.expect_nodes.split(",") if ip.strip()] or None,
            )
    except RuntimeError as exc:  # the cluster never settled: a report that says so, judged FAIL
        result = {"schema": REPORT_SCHEMA, "mode": "cluster", "quick": args.quick, "error": str(exc),
                  "nodes": [], "devices": [], "allreduce": None, "sweep_test": None}  # fmt: skip
    except ImportError as exc:
        missing = exc.name or str(exc)
        hint = "pip install rayrig[bench] (torch)" if missing == "torch" else "pip install rayrig[train]"
        print(f"benchmark: {missing} is not installed: {hint}", file=sys.stderr)
        return 1
    thresholds = {
        "matmul_min_fraction": args.matmul_min_fraction,
        "membw_min_fraction": args.membw_min_fraction,
        "outlier_fraction": args.outlier_fraction,
    }
    judged = verdict.evaluate(result, **thresholds)
    result["verdict"] = {**judged.as_dict(), "thresholds": thresholds}
    print(report.render(result, judged))
    if args.json:
        path = report.write_json(result, args.json)
        log(f"JSON report written to {path}")
    if args.plot:
        plotted = report.plot_busbw(result, args.plot)
        log(f"plot written to {plotted}" if plotted else "no plot (no all-reduce sweep, or no matplotlib)")
    log(f"finished in {time.perf_counter() - t0:.1f} s: {judged.status}")
    return judged.exit_code


if __name__ == "__main__":
    sys.exit(main())
