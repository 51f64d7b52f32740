"""The health gate's functional probe, and its view of the Ray cluster: a program run from its source.

The gate (:mod:`checks.health_gate`) runs it two ways, each printing one ``RESULT {json}`` line:

- in the head's ray-node container (``python -c SOURCE --cluster``): the alive Ray nodes (address,
  id, resources), and with ``--probe`` the probe on every one of them as a Ray task pinned to the
  node (``NodeAffinitySchedulingStrategy``, not soft; ``num_cpus=0``, so that a node full of work
  still runs it), all started together and waited for at most ``--deadline-s``;
- in a one-off container of a quarantined node's image (``python -c SOURCE --local``): the probe
  on that machine, outside the cluster.

The probe: ``--work`` products of two 256x256 float32 matrices on the CPU (numpy), or 10 times as
many 1024x1024 products on each GPU (torch, where CUDA is there); its result is the seconds the
products took (the slowest GPU's). Importing this module imports neither Ray nor numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

RESULT = "RESULT "
CPU_SIZE = 256
GPU_SIZE = 1024
GPU_FACTOR = 10


def probe(work: int) -> dict[str, Any]:
    """Run the probe here: ``{"seconds": s, "device": "cpu" | "cuda x N"}``."""
    try:
        import torch  # noqa: PLC0415 - where there is one

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        torch, gpus = None, 0
    if gpus:
        slowest = 0.0
        for index in range(gpus):
            device = torch.device("cuda", index)
            a = torch.randn(GPU_SIZE, GPU_SIZE, device=device)
            torch.cuda.synchronize(device)
            started = time.perf_counter()
            for _ in range(work * GPU_FACTOR):
                a @ a  # noqa: B018 - the work itself
            torch.cuda.synchronize(device)
            slowest = max(slowest, time.perf_counter() - started)
        return {"seconds": slowest, "device": f"cuda x {gpus}"}
    import numpy as np  # noqa: PLC0415

    a = np.random.default_rng(0).random((CPU_SIZE, CPU_SIZE), dtype=np.float32)
    started = time.perf_counter()
    for _ in range(work):
        a @ a  # noqa: B018
    return {"seconds": time.perf_counter() - started, "device": "cpu"}


def cluster(work: int, deadline_s: float, with_probe: bool) -> dict[str, Any]:
    """The alive nodes, and each one's probe (``None``: it missed the deadline), from a driver on the head."""
    import ray  # noqa: PLC0415
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    alive = [n for n in ray.nodes() if n.get("Alive")]
    nodes = [
        {"ip": n["NodeManagerAddress"], "node_id": n["NodeID"], "resources": n.get("Resources", {})} for n in alive
    ]
    result: dict[str, Any] = {"nodes": nodes, "probes": None}
    if not with_probe:
        return result
    remote = ray.remote(num_cpus=0, max_retries=0)(probe)
    started = time.monotonic()
    refs = {
        n["ip"]: remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["node_id"], soft=False)).remote(
            work
        )
        for n in nodes
    }
    by_ref = {ref: ip for ip, ref in refs.items()}
    probes: dict[str, Any] = {ip: {"seconds": None, "wall_s": None, "error": None} for ip in refs}
    pending = list(refs.values())
    while pending:
        left = deadline_s - (time.monotonic() - started)
        if left <= 0:
            break
        ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        for ref in ready:
            ip = by_ref[ref]
            probes[ip]["wall_s"] = round(time.monotonic() - started, 3)
            try:
                probes[ip].update(ray.get(ref))
            except Exception as error:  # noqa: BLE001 - a node's failure is its finding
                probes[ip]["error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    for ref in pending:
        probes[by_ref[ref]]["error"] = f"missed its deadline of {deadline_s:g} s"
        ray.cancel(ref, force=True)
    result["probes"] = probes
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--cluster", action="store_true", help="from the head: the nodes, and with --probe the probes")
    mode.add_argument("--local", action="store_true", help="the probe here, outside the cluster")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--work", type=int, default=1000)
    parser.add_argument("--deadline-s", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.local:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        out = probe(args.work)
    else:
        out = cluster(args.work, args.deadline_s, args.probe)
    print(RESULT + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
