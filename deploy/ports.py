"""Port ranges: merging ports into ranges, and the Ray ports of ``ray_ports`` as ranges.

One helper for the host firewall (nftables sets), the EC2 security group's
exposure check and the plan of ``rayrig cloud up``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: The keys of ``ray_ports`` that bound Ray's worker port range (the others are single ports).
WORKER_RANGE = ("worker_min", "worker_max")


def port_ranges(ports: Iterable[int | str | tuple[int, int]], join_adjacent: bool = False) -> list[tuple[int, int]]:
    """Ports (integers, "first-last" strings or (first, last) pairs) as sorted (first, last) ranges.

    Overlapping ranges are merged; neighbours only with ``join_adjacent``.

    >>> port_ranges([9000, "8000-8010", 8005, "9001-9001"])
    [(8000, 8010), (9000, 9000), (9001, 9001)]
    >>> port_ranges([9000, (9001, 9005)], join_adjacent=True)
    [(9000, 9005)]
    """
    ranges = []
    for port in ports:
        if isinstance(port, tuple):
            first, last = port
        elif isinstance(port, str) and "-" in port:
            first, last = (int(p) for p in port.split("-", 1))
        else:
            first = last = int(port)
        ranges.append((int(first), int(last)))
    gap = 1 if join_adjacent else 0
    merged: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + gap:
            merged[-1] = (merged[-1][0], max(last, merged[-1][1]))
        else:
            merged.append((first, last))
    return merged


def ray_port_ranges(ports: Mapping[str, int]) -> list[tuple[int, int]]:
    """The Ray ports as sorted, merged (first, last) ranges; the worker range is one range.

    >>> ray_port_ranges({"gcs": 6379, "node_manager": 6380, "worker_min": 10002, "worker_max": 10999})
    [(6379, 6380), (10002, 10999)]
    """
    spans: list[int | str | tuple[int, int]] = [p for k, p in ports.items() if k not in WORKER_RANGE]
    if all(k in ports for k in WORKER_RANGE):
        spans.append((ports["worker_min"], ports["worker_max"]))
    return port_ranges(spans, join_adjacent=True)
