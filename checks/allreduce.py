"""The all-reduce phase of the ``--cluster`` benchmark: a message-size sweep with a deadline on every step.

:func:`run_allreduce` starts one rank actor (:class:`AllreduceRank`) per free GPU (NCCL), or
``cpu_workers_per_node`` per node on CPU-only clusters (gloo), each pinned to its node; they
join one torch.distributed process group, as Ray Train's TorchTrainer does underneath (rank 0's
IP and a free port, ``init_process_group(init_method="tcp://ip:port")``; on GPUs each rank sees
all the GPUs the ranks of its node hold, :func:`checks.allreduce_plan.visible_devices`). The
driver then runs the sweep one size at a time on every rank (:func:`measure_size`: the reduced
values checked, the slowest rank's time, the nccl-tests algbw/busbw of :mod:`checks.maths`).
The rank actors import this module from the ``checks`` package Ray ships to them
(:func:`checks.cluster_bench.connect`). Only the nodes passed in take part: a node an earlier
phase found too slow is simply left out of the list.

Deadlines (:mod:`checks.allreduce_plan`; the numbers used are in the result's ``deadlines``):

- setup (starting the actors, importing torch, joining the process group): the cap ``timeout_s``;
- the first size: ``peer_factor`` x the setup's seconds, at least ``FLOOR_S`` (30 s);
- each later size: ``peer_factor`` x twice the previous size's seconds (the message doubles), at
  least ``FLOOR_S``; never more than the cap;
- every step: never more than what is left of the run's ``budget``.

A hung collective blocks every rank, the healthy ones waiting for the stuck ones; so once a
deadline passes, every rank is asked how far it got (:meth:`AllreduceRank.progress`, answered
from a second thread while the collective blocks the first). A rank that does not answer (its
node frozen) or that is furthest behind is named; the others were "waiting for peers". Every
rank actor is then killed, without waiting on any, and the result says which ranks held it up
(``hung``). A rank whose actor dies (its node lost) is named in the ``error`` and ``failed``.

Example::

    result = run_allreduce(cluster_nodes(), SweepConfig(sizes=size_sweep(MiB, 64 * MiB), iters=5, budget=Budget(900)))
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import allreduce_plan as plan
from . import maths, nccl_net
from .deadlines import DEFAULT_PEER_FACTOR, Budget
from .progress import describe, log

MiB = 2**20
GiB = 2**30
NCCL_LOG_WAIT_S = 10  # how long the driver waits for the ranks to say which network NCCL chose


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


def calls_per_size(warmup: int, iters: int) -> int:
    """All-reduce calls one size makes: the value check, ``warmup``, the line-up, ``iters``, the time and the count."""
    return warmup + iters + 4


def measure_size(
    nbytes: int, warmup: int, iters: int, device: Any, reduce: Callable[..., None] | None = None
) -> dict[str, Any]:
    """One size of the sweep on this rank, as a row (every rank returns the same row).

    Each rank fills its float32 buffer with ``rank + 1``; after one all-reduce every element must
    equal ``n(n+1)/2``. The timed calls run on a zeroed buffer (values stay finite), and the time
    is the slowest rank's mean time per call. ``reduce(tensor, op=None)`` makes each all-reduce
    (the rank actors count them); by default ``dist.all_reduce``.
    """
    import torch  # lazy: heavy, and present only where it runs
    import torch.distributed as dist

    def all_reduce(tensor: Any, op: Any = None) -> None:
        dist.all_reduce(tensor, op=op if op is not None else dist.ReduceOp.SUM)

    reduce = reduce or all_reduce
    rank, world = dist.get_rank(), dist.get_world_size()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    expected = world * (world + 1) / 2
    numel = max(1, nbytes // 4)
    buf = torch.full((numel,), float(rank + 1), dtype=torch.float32, device=device)
    reduce(buf)
    wrong = (buf != expected).sum().to(torch.float64).reshape(1)
    buf.zero_()
    for _ in range(warmup):
        reduce(buf)
    sync()
    reduce(torch.zeros(1, device=device))  # line the ranks up before timing
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        reduce(buf)
    sync()
    seconds = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=device)
    reduce(seconds, op=dist.ReduceOp.MAX)
    reduce(wrong)
    t, bad, size = float(seconds.item()), int(wrong.item()), numel * 4
    return {
        "bytes": size,
        "time_s": t,
        "algbw_gbps": maths.algbw(size, t),
        "busbw_gbps": maths.busbw(size, t, "all_reduce", world),
        "values_ok": bad == 0,
        "wrong_values": bad,
        "iters": iters,
    }


def sweep_result(backend: str, ranks: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The phase's result from its rows: backend, ranks, the sweep and the value check over all sizes."""
    world = len(ranks)
    expected = world * (world + 1) / 2
    problems = [
        f"{r['wrong_values']} of {r['bytes'] // 4 * world} elements differ from {expected:g} at {r['bytes']} bytes"
        for r in rows
        if r["wrong_values"]
    ]
    return {
        "backend": backend,
        "world_size": world,
        "ranks": ranks,
        "sweep": rows,
        "value_check": {
            "ok": not problems,
            "expected": expected,
            "detail": "; ".join(problems) or f"every element equals {expected:g} at every size",
        },
    }


class AllreduceRank:
    """One rank of the sweep, in its own Ray actor; threaded (``max_concurrency=2``) so that
    :meth:`progress` answers while :meth:`run_size` is blocked in a collective."""

    def __init__(self) -> None:
        self.device: Any = None
        self.nbytes: int | None = None
        self.calls = self.entered = self.completed = self.total = 0
        self.nccl_log = os.path.join(tempfile.gettempdir(), f"rayrig-nccl-{os.getpid()}.log")

    def info(self) -> dict[str, Any]:
        """Where this rank runs (pid included: a test freezes it), its GPU ids, and a free port here."""
        import ray  # lazy: heavy, and absent where --local runs

        with socket.socket() as sock:  # bind to port 0: the OS picks a free one, as Ray Train does
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return {
            "pid": os.getpid(),
            "ip": ray.util.get_node_ip_address(),
            "gpu_ids": [int(g) for g in ray.get_gpu_ids()],
            "port": port,
        }

    def setup(self, rank: int, world: int, backend: str, init_method: str, visible: str | None,
              local_index: int, timeout_s: float) -> None:  # fmt: skip
        """Join the process group; on GPUs, see ``visible`` (set before CUDA starts) and use GPU ``local_index``."""
        if visible is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        import datetime  # lazy, with torch: only the actors need them

        import torch
        import torch.distributed as dist

        self.device = torch.device(f"cuda:{local_index}" if backend == "nccl" else "cpu")
        if backend == "nccl":  # NCCL names its network in its log when it starts (checks.nccl_net)
            os.environ.update(nccl_net.debug_env(self.nccl_log))
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        timeout = datetime.timedelta(seconds=timeout_s)
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world, timeout=timeout)

    def _reduce(self, tensor: Any, op: Any = None) -> None:
        import torch.distributed as dist  # lazy: imported by setup already

        self.entered += 1
        self.total += 1
        dist.all_reduce(tensor, op=op if op is not None else dist.ReduceOp.SUM)
        self.completed += 1

    def run_size(self, nbytes: int, warmup: int, iters: int) -> dict[str, Any]:
        """One size of the sweep (every rank at once)."""
        import torch  # lazy: imported by setup already

        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # the current device is per thread
        self.nbytes, self.calls, self.entered, self.completed = nbytes, calls_per_size(warmup, iters), 0, 0
        return measure_size(nbytes, warmup, iters, self.device, self._reduce)

    def nccl_network(self) -> str | None:
        """The network NCCL chose, from its log (:func:`checks.nccl_net.network_of`); the log is removed."""
        try:
            with open(self.nccl_log, encoding="utf-8", errors="replace") as log_file:
                lines = log_file.read().splitlines()
        except OSError:
            return None
        os.unlink(self.nccl_log)
        return nccl_net.network_of(lines)

    def progress(self) -> dict[str, Any]:
        """The size this rank is at, the all-reduce calls it entered and completed there, and in all.

        With NCCL a call returns once queued on the GPU, so a rank stuck on its GPU shows as having
        completed calls its peers are still waiting in; the rank that does not answer is exact either way.
        """
        return {"bytes": self.nbytes, "entered": self.entered, "completed": self.completed,
                "calls": self.calls, "total": self.total}  # fmt: skip


def _rank_actors(ranks: list[dict[str, Any]], use_gpu: bool) -> list[Any]:
    """One sweep actor per rank, pinned to its rank's node, holding a GPU (or a CPU); never restarted."""
    import ray  # lazy: heavy, and absent where --local runs
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    rank_actor = ray.remote(AllreduceRank)
    resources = {"num_gpus": 1, "num_cpus": 0} if use_gpu else {"num_cpus": 1}
    return [
        rank_actor.options(**resources, max_concurrency=2, max_restarts=0,
                           scheduling_strategy=NodeAffinitySchedulingStrategy(r["node_id"], soft=False)).remote()
        for r in ranks
    ]  # fmt: skip


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


class _Stopped(Exception):
    """A step of the sweep did not complete: ``result`` says why (``hung`` or ``failed``)."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result.get("error"))
        self.result = result


def _await(actors: list[Any], ranks: list[dict[str, Any]], refs: list[Any], deadline_s: float,
           nbytes: int | None, source: str, since: float | None = None) -> list[Any]:  # fmt: skip
    """Every rank's answer to ``refs`` (one per rank), or :class:`_Stopped` once ``deadline_s`` from
    ``since`` (default: now) passes, naming the ranks that held the step up, or a rank fails, naming it."""
    import ray  # lazy: heavy, and absent where --local runs

    t0 = since if since is not None else time.monotonic()
    index = {ref: i for i, ref in enumerate(refs)}
    answers: list[Any] = [None] * len(refs)
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline_s - (time.monotonic() - t0)))
        if not ready:
            waited = time.monotonic() - t0
            hung = {"bytes": nbytes, "deadline_s": round(deadline_s, 1), "waited_s": round(waited, 1),
                    "source": source, "ranks": plan.stuck_ranks(ranks, _progress(actors))}  # fmt: skip
            error = "; ".join(message for _, message in plan.hung_summary(hung))
            raise _Stopped({"error": error, "hung": hung})
        failed = [(ref, exc) for ref in ready if (exc := _answer(ref, answers, index[ref]))]
        if failed:
            raise _Stopped(_failure(ranks, index, failed, pending, nbytes))
    return answers


def _answer(ref: Any, answers: list[Any], i: int) -> Exception | None:
    """Store rank i's answer; return its exception instead when it failed."""
    import ray  # lazy: heavy, and absent where --local runs

    try:
        answers[i] = ray.get(ref)
    except Exception as exc:  # noqa: BLE001 - the rank is named in the result, judged by the verdict
        return exc
    return None


def _failure(ranks: list[dict[str, Any]], index: dict[Any, int], failed: list[tuple[Any, Exception]],
             pending: list[Any], nbytes: int | None) -> dict[str, Any]:  # fmt: skip
    """The result when ranks failed: the ranks whose actor was lost (its node gone) if any, as their
    peers' collectives then fail too (gloo sees the connection drop), else the ranks that failed."""
    import ray  # lazy: heavy, and absent where --local runs

    if pending:  # a moment for a lost peer's death to show, so that it is the one named
        late, _ = ray.wait(pending, num_returns=len(pending), timeout=plan.PROGRESS_TIMEOUT_S)
        failed += [(ref, exc) for ref in late if (exc := _answer(ref, [None] * len(ranks), index[ref]))]
    lost = [(ref, exc) for ref, exc in failed if isinstance(exc, ray.exceptions.RayActorError)]
    where = f"at {nbytes} bytes" if nbytes is not None else "while starting"
    words = "was lost" if lost else "failed"
    culprits = sorted(lost or failed, key=lambda item: index[item[0]])
    error = "; ".join(
        f"rank {ranks[index[ref]]['rank']} on {plan.host_words(ranks[index[ref]])} {words} {where}: {describe(exc)}"
        for ref, exc in culprits
    )
    return {"error": error, "failed": [ranks[index[ref]] for ref, _ in culprits]}


def _progress(actors: list[Any]) -> list[dict[str, Any] | None]:
    """Each rank's progress, or None for a rank that does not answer within PROGRESS_TIMEOUT_S."""
    import ray  # lazy: heavy, and absent where --local runs

    refs = [actor.progress.remote() for actor in actors]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=plan.PROGRESS_TIMEOUT_S)
    answers: list[dict[str, Any] | None] = []
    for ref in refs:
        try:
            answers.append(ray.get(ref) if ref in ready else None)
        except Exception:  # noqa: BLE001 - a dead rank answers nothing
            answers.append(None)
    return answers


def _nccl_networks(actors: list[Any], ranks: list[dict[str, Any]]) -> None:
    """Each rank's ``nccl_network``, as far as the ranks answer within ``NCCL_LOG_WAIT_S``."""
    import ray  # lazy: heavy, and absent where --local runs

    refs = [actor.nccl_network.remote() for actor in actors]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=NCCL_LOG_WAIT_S)
    for rank, ref in zip(ranks, refs, strict=True):
        if ref in ready:
            try:
                rank["nccl_network"] = ray.get(ref)
            except Exception:  # noqa: BLE001 - a rank that cannot read its log leaves the network unknown
                rank["nccl_network"] = None


def _placement(nodes: list[dict[str, Any]], use_gpu: bool, per_node: int) -> list[dict[str, Any]]:
    """The node of each rank, in rank order: one per free GPU, or ``per_node`` per node with that many free CPUs."""
    if use_gpu:  # over the GPUs no other job holds (``busy_gpus``, :func:`checks.cluster_bench.mark_busy`)
        return [n for n in nodes for _ in range(int(n["num_gpus"] - n.get("busy_gpus", 0)))]
    return [n for n in nodes if n["num_cpus"] - n.get("busy_cpus", 0.0) >= per_node for _ in range(per_node)]


@dataclass(frozen=True)
class SweepConfig:
    """How the all-reduce sweep runs: its sizes (``sizes``, else the defaults between ``min_bytes`` and
    ``max_bytes``), its calls per size, its ranks on a CPU-only cluster, and its limits: ``timeout_s``
    caps every step, ``peer_factor`` stops a size its peers have long finished, ``budget`` bounds
    them all (see the module's docstring). None: the default (``quick``'s or the full run's)."""

    quick: bool = False
    sizes: list[int] | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    warmup: int | None = None
    iters: int | None = None
    cpu_workers_per_node: int = 1
    timeout_s: int = 600
    peer_factor: float = DEFAULT_PEER_FACTOR
    budget: Budget | None = None


def run_allreduce(
    nodes: list[dict[str, Any]],
    config: SweepConfig = SweepConfig(),  # noqa: B008 - frozen: one shared default is safe
    on_row: Callable[[dict[str, Any], list[dict[str, Any]]], None] | None = None,
) -> dict[str, Any]:
    """Phase 2: the all-reduce sweep over every free GPU (NCCL), or over ``cpu_workers_per_node``
    ranks on each node of a CPU-only cluster (gloo), of ``nodes`` only; ``on_row(row, ranks)`` is
    called on the driver after each size.
    """
    import ray  # lazy: heavy, and absent where --local runs

    quick, timeout_s, peer_factor, budget = config.quick, config.timeout_s, config.peer_factor, config.budget
    use_gpu = any(n["num_gpus"] > 0 for n in nodes)
    held = {"GPU": sum(n.get("busy_gpus", 0) for n in nodes), "CPU": sum(n.get("busy_cpus", 0.0) for n in nodes)}
    placement = _placement(nodes, use_gpu, config.cpu_workers_per_node)
    workers, backend, resource = len(placement), "nccl" if use_gpu else "gloo", "GPU" if use_gpu else "CPU"
    sizes = config.sizes or default_allreduce_sizes(use_gpu, quick, config.min_bytes, config.max_bytes)
    warmup = config.warmup if config.warmup is not None else (2 if quick else 5)
    iters = config.iters if config.iters is not None else (5 if quick else 20)
    base = {"backend": backend, "world_size": workers, "sweep": []}
    if workers < 1:
        if held[resource]:
            return {**base, "skipped": f"other jobs hold {held[resource]:g} {resource}s: no node has one free"}
        return {**base, "error": "no node can host an all-reduce worker"}
    left = budget.left if budget else lambda: None
    if budget and budget.spent():
        return {**base, "error": "not started: no time left of checks_timeout_s, the budget of the whole run"}
    wait_s = round(min(timeout_s, 60, left() or 60))
    free_now = _wait_for_free(resource, workers, timeout_s=wait_s)
    if free_now < workers:  # a busy cluster, not a broken one: reported, never waited for longer
        return {**base, "skipped": f"needs {workers} free {resource}s, only {free_now:g} were free after {wait_s} s: "
                                   f"other jobs hold {workers - free_now:g}"}  # fmt: skip
    log(f"allreduce: {workers} ranks ({backend}), sizes {sizes[0]}..{sizes[-1]} bytes, "
        f"{warmup} warm-up + {iters} timed calls each")  # fmt: skip
    ranks = [{"rank": i, "host": n["host"], "ip": n["ip"], "node_id": n["node_id"]} for i, n in enumerate(placement)]
    setup_deadline, setup_source = plan.setup_deadline(timeout_s, left())
    deadlines: dict[str, Any] = {"peer_factor": peer_factor, "floor_s": plan.FLOOR_S, "cap_s": timeout_s,
                                 "setup_deadline_s": round(setup_deadline, 1), "sizes": []}  # fmt: skip
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    actors = _rank_actors(ranks, use_gpu)
    try:
        infos = _await(actors, ranks, [a.info.remote() for a in actors], setup_deadline, None, setup_source, t0)
        for rank, info in zip(ranks, infos, strict=True):
            rank.update(pid=info["pid"], device=f"cuda:{info['gpu_ids'][0]}" if use_gpu else "cpu")
        shared = plan.visible_devices([(r["node_id"], i["gpu_ids"][0]) for r, i in zip(ranks, infos, strict=True)]
                                      if use_gpu else [])  # fmt: skip
        init = f"tcp://{infos[0]['ip']}:{infos[0]['port']}"
        refs = [a.setup.remote(i, workers, backend, init, *(shared[i] if use_gpu else (None, 0)), timeout_s)
                for i, a in enumerate(actors)]  # fmt: skip
        _await(actors, ranks, refs, setup_deadline, None, setup_source, since=t0)
        basis = deadlines["setup_s"] = round(time.monotonic() - t0, 2)
        for n, nbytes in enumerate(sizes):
            deadline, source = plan.size_deadline(basis, n == 0, peer_factor, timeout_s, left(), floor_s=plan.FLOOR_S)
            started = time.monotonic()
            answers = _await(actors, ranks, [a.run_size.remote(nbytes, warmup, iters) for a in actors],
                             deadline, nbytes, source)  # fmt: skip
            basis = time.monotonic() - started
            deadlines["sizes"].append({"bytes": nbytes, "took_s": round(basis, 2), "deadline_s": round(deadline, 1),
                                       "source": source})  # fmt: skip
            rows.append(answers[0])
            log(f"allreduce: {nbytes} bytes in {basis:.1f} s (deadline {deadline:.0f} s)")
            if on_row:
                on_row(rows[-1], ranks)
        if use_gpu:
            _nccl_networks(actors, ranks)
    except _Stopped as stopped:
        return {**sweep_result(backend, ranks, rows), "deadlines": deadlines, **stopped.result}
    except Exception as exc:  # noqa: BLE001 - Ray itself failing: reported and judged by the verdict
        return {**sweep_result(backend, ranks, rows), "deadlines": deadlines, "error": describe(exc)}
    finally:
        for actor in actors:  # never waited on: a frozen node's actor goes when its node does
            ray.kill(actor, no_restart=True)
    _wait_for_free(resource, workers, timeout_s=min(10, wait_s))  # the next phase needs them back
    return {**sweep_result(backend, ranks, rows), "deadlines": deadlines}
