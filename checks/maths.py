"""Bandwidth formulas of nccl-tests, medians and slow-outlier detection.

The definitions follow NVIDIA's nccl-tests (doc/PERFORMANCE.md): the
*algorithm bandwidth* of a collective on ``S`` bytes that took ``t`` seconds
is ``S / t``; the *bus bandwidth* scales it by a per-operation factor so that
it is comparable with the hardware's link bandwidth whatever the rank count.
For all-reduce the factor is ``2(n-1)/n``: each rank sends and receives
``(n-1)/n`` of the buffer twice (reduce-scatter, then all-gather).

Example::

    >>> busbw(2**30, 0.01, "all_reduce", 8)  # 1 GiB in 10 ms on 8 ranks
    187.9048192
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping

GB = 1e9  # nccl-tests (and this module) report bandwidth in GB/s = 1e9 bytes/s
REL_TOLERANCE = 1e-9  # thresholds are inclusive; this absorbs float rounding at the boundary

_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}
_ALIASES = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "sendrecv": "send_recv",
}


def _op_name(op: str) -> str:
    key = op.strip().lower().replace("-", "_").replace(" ", "_")
    key = _ALIASES.get(key.replace("_", ""), key)
    if key not in _FACTORS:
        raise ValueError(f"unknown collective {op!r}; expected one of {', '.join(_FACTORS)}")
    return key


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in GB/s: ``nbytes / seconds / 1e9``.

    >>> algbw(2e9, 2.0)
    1.0
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds!r}")
    if nbytes < 0:
        raise ValueError(f"nbytes must not be negative, got {nbytes!r}")
    return nbytes / seconds / GB


def busbw_factor(op: str, n: int) -> float:
    """The nccl-tests factor from algorithm to bus bandwidth for ``op`` on ``n`` ranks.

    all-reduce ``2(n-1)/n``; all-gather, reduce-scatter, all-to-all ``(n-1)/n``;
    broadcast, reduce, send/recv ``1``. ``op`` accepts "all_reduce",
    "allreduce" or "all-reduce".

    >>> busbw_factor("all_reduce", 8)
    1.75
    """
    if n < 1:
        raise ValueError(f"rank count must be at least 1, got {n!r}")
    return float(_FACTORS[_op_name(op)](n))


def busbw(nbytes: float, seconds: float, op: str, n: int) -> float:
    """Bus bandwidth in GB/s: :func:`algbw` times :func:`busbw_factor`."""
    return algbw(nbytes, seconds) * busbw_factor(op, n)


def median(values: Iterable[float]) -> float:
    """The median of ``values``; raises ``ValueError`` when there are none."""
    data = [float(v) for v in values]
    if not data:
        raise ValueError("median of no values")
    return statistics.median(data)


def outliers(values: Mapping[str, float], fraction: float = 0.9) -> list[str]:
    """Names whose value is below ``fraction`` times the median of all values.

    Meant for "higher is better" figures (TFLOPS, GB/s). A value exactly at
    ``fraction * median`` is not an outlier. Fewer than two values have no
    outliers. Names come back in the order of ``values``.

    >>> outliers({"a": 100.0, "b": 101.0, "c": 60.0})
    ['c']
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    if len(values) < 2:
        return []
    floor = fraction * median(values.values())
    return [name for name, value in values.items() if not at_least(value, floor)]


def at_least(value: float, floor: float) -> bool:
    """``value >= floor``, forgiving the last bits of floating-point rounding
    (so 90.0 counts as reaching 0.9 * 100.0 = 90.00000000000001)."""
    return value >= floor - REL_TOLERANCE * abs(floor)
