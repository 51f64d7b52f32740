"""Measurement kernels: matmul TFLOPS, memory and host-to-device bandwidth.

Torch only, no Ray: these run the same in a Ray task on a cluster node and in
``python -m checks.benchmark --local`` on a lone machine. Each kernel returns
a plain JSON-ready dict. On a GPU every iteration is timed with CUDA events;
on the CPU with ``time.perf_counter``; the figure reported is the median
iteration, so one hiccup does not move it.

Default sizes fit every GPU in :mod:`checks.specs` (an 8192^3 bf16 matmul
holds 3 x 128 MiB; the 1 GiB copy holds 2 GiB) and finish in seconds.

Example::

    >>> matmul_tflops("cpu", n=256, iters=3)["tflops"] > 0
    True
"""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

import torch

from . import REPORT_SCHEMA, throttle

MiB = 2**20
GiB = 2**30

# (GPU, CPU) defaults, full and --quick.
MATMUL_N = {"cuda": 8192, "cpu": 2048}
MATMUL_N_QUICK = {"cuda": 8192, "cpu": 1024}
COPY_BYTES = {"cuda": GiB, "cpu": 256 * MiB}
COPY_BYTES_QUICK = {"cuda": GiB, "cpu": 32 * MiB}
H2D_BYTES = 256 * MiB
H2D_BYTES_QUICK = 64 * MiB


def _device(device: str | torch.device) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def default_dtype(device: str | torch.device) -> torch.dtype:
    """bf16 on GPUs that have bf16 tensor cores (compute capability 8.0+),
    fp16 on older ones (T4, V100), fp32 on the CPU."""
    dev = _device(device)
    if dev.type != "cuda":
        return torch.float32
    major, _ = torch.cuda.get_device_capability(dev)
    return torch.bfloat16 if major >= 8 else torch.float16


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(
        dtype, str(dtype).removeprefix("torch.")
    )


def _event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)


def _time_iterations(fn: Callable[[], object], dev: torch.device, warmup: int, iters: int) -> list[float]:
    """Run ``fn`` ``warmup`` times, then time ``iters`` calls one by one
    (CUDA events on a GPU, ``perf_counter`` on the CPU); seconds per call."""
    if iters < 1:
        raise ValueError(f"iters must be at least 1, got {iters!r}")
    is_cuda = dev.type == "cuda"
    for _ in range(warmup):
        fn()
    if is_cuda:
        torch.cuda.synchronize(dev)
        with torch.cuda.device(dev):
            events = [(_event(), _event()) for _ in range(iters)]
            for begin, end in events:
                begin.record()
                fn()
                end.record()
        torch.cuda.synchronize(dev)
        return [begin.elapsed_time(end) / 1e3 for begin, end in events]
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _time_sustained(fn: Callable[[], object], dev: torch.device, seconds: float) -> list[float]:
    """Keep ``fn`` running back to back for about ``seconds``; the per-call
    times of the second half, when clocks have settled under the power cap."""
    times: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        times += _time_iterations(fn, dev, warmup=0, iters=16)
    return times[len(times) // 2 :]


def _throttle_sampler(dev: torch.device) -> throttle.ThrottleSampler | None:
    """A sampler of this GPU's clock event reasons during the sustained matmul (None on the CPU)."""
    if dev.type != "cuda":
        return None
    try:
        uuid = getattr(torch.cuda.get_device_properties(dev), "uuid", None)
        return throttle.ThrottleSampler(throttle.nvml_id(dev.index or 0, str(uuid) if uuid else None))
    except Exception:  # noqa: BLE001 - sampling is a bonus: the matmul runs without it
        return None


def _summary(times: list[float]) -> dict[str, float]:
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
    }


def matmul_tflops(
    device: str | torch.device = "cpu",
    n: int | None = None,
    dtype: torch.dtype | None = None,
    warmup: int | None = None,
    iters: int = 30,
    sustain_s: float = 0.0,
) -> dict[str, Any]:
    """Dense ``n x n`` matmul throughput: TFLOPS = 2 n^3 / median seconds / 1e12.

    Defaults: n=8192 in bf16 (fp16 before compute capability 8.0) on a GPU,
    n=2048 in fp32 on the CPU. ``tflops`` is the median of ``iters`` calls
    right after a short warm-up: the boost-clock figure that datasheets
    quote. With ``sustain_s`` > 0 the matmuls then go on back to back for
    that long and ``sustained_tflops`` gives the rate once the GPU's power
    cap has pulled its clocks down (about 10-20% lower on an H100 or H200
    with random data).
    """
    dev = _device(device)
    n = n or MATMUL_N[dev.type if dev.type == "cuda" else "cpu"]
    dtype = dtype or default_dtype(dev)
    if warmup is None:
        warmup = 10 if dev.type == "cuda" else 2
    gen = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=dev, dtype=dtype, generator=gen)
    c = torch.empty(n, n, device=dev, dtype=dtype)

    def step() -> None:
        torch.matmul(a, b, out=c)

    stats = _summary(_time_iterations(step, dev, warmup, iters))
    flops = 2 * n**3
    result: dict[str, Any] = {
        "tflops": flops / stats["median_s"] / 1e12,
        "n": n,
        "dtype": _dtype_name(dtype),
        "iters": iters,
        **stats,
    }
    if sustain_s > 0:
        sampler = _throttle_sampler(dev)
        with sampler or contextlib.nullcontext():
            sustained = _time_sustained(step, dev, sustain_s)
        result["sustained_tflops"] = flops / statistics.median(sustained) / 1e12
        result["sustained_s"] = sustain_s
        if sampler is not None:
            result["throttle_under_load"] = sampler.result()
    if dev.type == "cpu":
        result["threads"] = torch.get_num_threads()
    return result


def copy_bandwidth(
    device: str | torch.device = "cpu",
    nbytes: int | None = None,
    warmup: int = 3,
    iters: int = 20,
) -> dict[str, Any]:
    """Device-to-device copy bandwidth in GB/s (1e9 B/s), counting the bytes
    read plus the bytes written (2 x ``nbytes``), as memory-bandwidth tests do.

    Defaults: 1 GiB on a GPU (capped at a quarter of its free memory),
    256 MiB on the CPU.
    """
    dev = _device(device)
    wanted = nbytes or COPY_BYTES[dev.type if dev.type == "cuda" else "cpu"]
    size = wanted
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        size = min(wanted, free // 4)
    src = torch.ones(size, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    times = _time_iterations(lambda: dst.copy_(src), dev, warmup, iters)
    stats = _summary(times)
    result: dict[str, Any] = {
        "gbps": 2 * size / stats["median_s"] / 1e9,
        "nbytes": size,
        "iters": iters,
        **stats,
    }
    if size != wanted:
        result["note"] = f"reduced from {wanted} bytes to fit in free GPU memory"
    return result


def h2d_bandwidth(
    device: str | torch.device = "cpu",
    nbytes: int = H2D_BYTES,
    warmup: int = 3,
    iters: int = 20,
) -> dict[str, Any]:
    """Host-to-device copy bandwidth in GB/s from pinned host memory (bytes
    moved once, as ``bandwidthTest`` counts). On the CPU there is no such
    copy: ``gbps`` is ``None`` and ``skipped`` says why."""
    dev = _device(device)
    if dev.type != "cuda":
        return {"gbps": None, "skipped": "no GPU: a host-to-device copy does not apply"}
    src = torch.ones(nbytes, dtype=torch.uint8).pin_memory()
    dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    times = _time_iterations(lambda: dst.copy_(src, non_blocking=True), dev, warmup, iters)
    stats = _summary(times)
    result = {"gbps": nbytes / stats["median_s"] / 1e9, "nbytes": nbytes, "iters": iters, **stats}
    return result


def _nvidia_driver_version() -> str | None:
    try:
        import pynvml  # type: ignore[import-not-found]  # optional: without it, nvidia-smi answers

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # pynvml missing or NVML unusable: try nvidia-smi
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.strip().splitlines()
    return lines[0].strip() if lines else None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _host_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def device_info(device: str | torch.device = "cpu") -> dict[str, Any]:
    """What the device is: model name, memory, and for GPUs the compute
    capability, NVIDIA driver version and CUDA runtime version."""
    dev = _device(device)
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "device": str(dev),
        "torch_version": torch.__version__,
    }
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        info.update(
            kind="gpu",
            model=props.name,
            memory_bytes=props.total_memory,
            compute_capability=f"{props.major}.{props.minor}",
            multiprocessors=props.multi_processor_count,
            uuid=str(getattr(props, "uuid", "")) or None,
            cuda_version=torch.version.cuda,
            driver_version=_nvidia_driver_version(),
        )
    else:
        info.update(
            kind="cpu",
            model=_cpu_model(),
            memory_bytes=_host_memory_bytes(),
            logical_cpus=os.cpu_count(),
            torch_threads=torch.get_num_threads(),
        )
    return info


def measure_device(device: str | torch.device, quick: bool = False) -> dict[str, Any]:
    """Every kernel on one device, as one device entry of the benchmark report.

    Keys: ``host``, ``device``, ``kind`` ("gpu" or "cpu"), ``model``,
    ``info``, ``matmul``, ``copy``, ``h2d``, ``elapsed_s``. A kernel that
    raises is recorded as ``{"error": "..."}`` in its slot, so one broken
    measurement does not hide the others (the verdict fails it).
    """
    started = time.perf_counter()
    dev = _device(device)
    kind = "cuda" if dev.type == "cuda" else "cpu"
    matmul_n = (MATMUL_N_QUICK if quick else MATMUL_N)[kind]
    copy_bytes = (COPY_BYTES_QUICK if quick else COPY_BYTES)[kind]
    iters = 10 if quick and kind == "cpu" else 20
    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "info": lambda: device_info(dev),
        "matmul": lambda: matmul_tflops(
            dev,
            n=matmul_n,
            iters=30 if kind == "cuda" else iters,
            sustain_s=(0.5 if quick else 2.0) if kind == "cuda" else 0.0,
        ),
        "copy": lambda: copy_bandwidth(dev, nbytes=copy_bytes, iters=iters),
        "h2d": lambda: h2d_bandwidth(dev, nbytes=H2D_BYTES_QUICK if quick else H2D_BYTES),
    }
    entry: dict[str, Any] = {
        "host": socket.gethostname(),
        "device": str(dev),
        "kind": "gpu" if kind == "cuda" else "cpu",
    }
    for name, step in steps.items():
        try:
            entry[name] = step()
        except Exception as exc:  # noqa: BLE001 - recorded, and the verdict fails it
            entry[name] = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            if kind == "cuda":
                torch.cuda.empty_cache()
    if isinstance(entry["matmul"], dict) and "throttle_under_load" in entry["matmul"]:
        entry["throttle_under_load"] = entry["matmul"].pop("throttle_under_load")
    entry["model"] = entry["info"].get("model") or "unknown"
    entry["elapsed_s"] = round(time.perf_counter() - started, 3)
    return entry


def local_devices() -> list[str]:
    """Every visible GPU ("cuda:0", ...), or ``["cpu"]`` when there is none."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return ["cpu"]


def run_local(quick: bool = False, devices: list[str] | None = None) -> dict[str, Any]:
    """Measure every visible GPU (or the CPU when there is none) on this machine.

    Returns a benchmark report (see :mod:`checks.benchmark` for the schema)
    with ``mode="local"``: one node, one device entry per device, and no
    all-reduce or scheduling test (those need Ray).
    """
    started = time.time()
    t0 = time.perf_counter()
    devices = devices or local_devices()
    entries = []
    for dev in devices:
        entries.append(measure_device(dev, quick=quick))
    hostname = socket.gethostname()
    return {
        "schema": REPORT_SCHEMA,
        "mode": "local",
        "quick": quick,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "ray": None},
        "cpu_only": all(entry["kind"] == "cpu" for entry in entries),
        "nodes": [
            {
                "host": hostname,
                "ip": None,
                "node_id": None,
                "num_gpus": sum(1 for entry in entries if entry["kind"] == "gpu"),
                "num_cpus": os.cpu_count(),
            }
        ],
        "devices": entries,
        "allreduce": None,
        "sweep_test": None,
        "timing": {"devices_s": round(time.perf_counter() - t0, 3)},
    }
