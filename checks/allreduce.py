"""The all-reduce phase of the ``--cluster`` benchmark: a message-size sweep through Ray Train.

:func:`run_allreduce` runs Ray Train's TorchTrainer over every GPU (NCCL), or
over one worker per node on CPU-only clusters (gloo, STRICT_SPREAD); each worker
runs :func:`allreduce_loop`, which times ``dist.all_reduce`` at every size
(:func:`allreduce_sweep`), checks the reduced values and computes the nccl-tests
algbw/busbw (:mod:`checks.maths`). The workers import this module from the
``checks`` package Ray ships to them (:func:`checks.cluster_bench.connect`).

Example::

    result = run_allreduce(cluster_nodes(), sizes=size_sweep(MiB, 64 * MiB), iters=5)
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from . import maths
from .progress import describe, log

MiB = 2**20
GiB = 2**30



@contextlib.contextmanager
def private_storage() -> Iterator[str]:
    """A fresh directory of the driver's own (0700, a name nobody can guess) for one run's Ray Train
    storage, removed afterwards, failed or not.

    Ray Train writes there only from its controller, which runs on the driver's node (the
    head): the run's marker and checkpoint bookkeeping. The all-reduce reports no checkpoint,
    so no worker writes to it; a fixed path such as /tmp/rayrig-train could be made first,
    and owned, by anyone on the head.
    """
    path = tempfile.mkdtemp(prefix="rayrig-train.")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


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
    import torch  # lazy: heavy, and present only where it runs
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
    import ray.train  # lazy: heavy, and absent where --local runs
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
    import ray  # lazy: heavy, and absent where --local runs

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
    # lazy: Ray Train is heavy and present only where the cluster run happens
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    use_gpu = any(n["num_gpus"] > 0 for n in nodes)
    held = {"GPU": sum(n.get("busy_gpus", 0) for n in nodes), "CPU": sum(n.get("busy_cpus", 0.0) for n in nodes)}
    if use_gpu:  # over the GPUs no other job holds (``busy_gpus``, :func:`checks.cluster_bench.mark_busy`)
        workers, strategy = int(sum(n["num_gpus"] - n.get("busy_gpus", 0) for n in nodes)), "PACK"
    else:
        free = [n["num_cpus"] - n.get("busy_cpus", 0.0) for n in nodes]
        workers = sum(cpu_workers_per_node for cpus in free if cpus >= cpu_workers_per_node)
        strategy = "STRICT_SPREAD" if cpu_workers_per_node == 1 else "SPREAD"
    sizes = sizes or default_allreduce_sizes(use_gpu, quick, min_bytes, max_bytes)
    warmup = warmup if warmup is not None else (2 if quick else 5)
    iters = iters if iters is not None else (5 if quick else 20)
    base = {"backend": "nccl" if use_gpu else "gloo", "world_size": workers, "sweep": []}
    resource = "GPU" if use_gpu else "CPU"
    if workers < 1:
        if held[resource]:
            return {**base, "skipped": f"other jobs hold {held[resource]:g} {resource}s: no node has one free"}
        return {**base, "error": "no node can host an all-reduce worker"}
    wait_s = min(timeout_s, 60)
    free_now = _wait_for_free(resource, workers, timeout_s=wait_s)
    if free_now < workers:  # a busy cluster, not a broken one: reported, never waited for longer
        return {**base, "skipped": f"needs {workers} free {resource}s, only {free_now:g} were free after {wait_s} s: "
                                   f"other jobs hold {workers - free_now:g}"}  # fmt: skip
    log(
        f"allreduce: {workers} workers ({base['backend']}), sizes {sizes[0]}..{sizes[-1]} bytes, "
        f"{warmup} warm-up + {iters} timed calls each"
    )
    with private_storage() as storage:
        trainer = TorchTrainer(
            allreduce_loop,
            train_loop_config={"sizes": sizes, "warmup": warmup, "iters": iters, "use_gpu": use_gpu},
            torch_config=TorchConfig(timeout_s=timeout_s),
            scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu, placement_strategy=strategy),
            run_config=RunConfig(name=f"rayrig-allreduce-{int(time.time())}", storage_path=storage),
        )
        try:
            result = trainer.fit()
        except Exception as exc:  # noqa: BLE001 - reported and judged by the verdict
            return {**base, "error": describe(exc)}
    # Ray Train v2 keeps only metrics reported with a checkpoint in result.metrics;
    # the loop's return value (rank 0) carries the table there, result.metrics on v1.
    data = getattr(result, "return_value", None) or (result.metrics or {}).get("allreduce")
    if getattr(result, "error", None) and not data:
        return {**base, "error": describe(result.error)}
    if not data:
        return {**base, "error": "the training run finished without reporting the all-reduce table"}
    return data
