"""What a benchmark run says about itself: progress lines, phase timings, versions, errors.

Shared by the ``--local`` run (:mod:`checks.benchmark`) and the ``--cluster`` run
(:mod:`checks.cluster_bench`, :mod:`checks.allreduce`). Progress goes to stderr:
stdout is kept for the table.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import platform
import sys
import time
from collections.abc import Iterator
from typing import Any


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


def versions() -> dict[str, Any]:
    """The versions measured with: Python, torch and its CUDA (None without torch), Ray (None without it)."""
    found: dict[str, Any] = {"python": platform.python_version(), "torch": None, "cuda": None, "ray": None}
    try:  # torch is optional here (the Ray head may lack it) and heavy: imported only to read its version
        import torch

        found["torch"], found["cuda"] = torch.__version__, torch.version.cuda
    except ImportError:
        pass
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):  # without paying for importing Ray
        found["ray"] = importlib.metadata.version("ray")
    return found


def describe(exc: BaseException) -> str:
    """An exception as one line for the report: its type and its last line of text."""
    text = str(exc).strip().splitlines()
    last = text[-1] if text else ""
    return f"{type(exc).__name__}: {last}"[:500]
