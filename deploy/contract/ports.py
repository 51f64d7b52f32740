"""Port ranges: merging ports into ranges, and the Ray ports of ``ray_ports`` as ranges.

One helper for the host firewall (nftables sets), the EC2 security group's
exposure check and the plan of ``rayrig cloud up``; and the single list of the
ports only the cluster's members reach (:func:`member_ports`: Ray's, their
metrics ports included, and the exporters' of ``monitoring_ports``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

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


# --- Monitoring: the metrics ports that join Ray's in the single port list --------------------------

#: The head's metrics ports of ``ray_ports`` and the environment variables Ray reads them from
#: (``ray/dashboard/consts.py`` DASHBOARD_METRIC_PORT, ``ray/autoscaler/_private/constants.py``
#: AUTOSCALER_METRIC_PORT in Ray 2.60): ``ray start`` has no option for them.
HEAD_METRICS_ENV = {"dashboard_metrics": "DASHBOARD_METRIC_PORT", "autoscaler_metrics": "AUTOSCALER_METRIC_PORT"}


def ray_metrics_env(ports: Mapping[str, int], role: str) -> dict[str, str]:
    """The head's environment that pins Ray's dashboard and autoscaler metrics ports (none on a worker).

    >>> ray_metrics_env({"dashboard_metrics": 44227, "autoscaler_metrics": 44217}, "head")
    {'DASHBOARD_METRIC_PORT': '44227', 'AUTOSCALER_METRIC_PORT': '44217'}
    """
    return {env: str(int(ports[key])) for key, env in HEAD_METRICS_ENV.items()} if role == "head" else {}


def exporter_ports(settings: Mapping[str, Any]) -> dict[str, int]:
    """The exporters' ports of ``monitoring_ports`` in use: none without ``monitoring_enabled``, no GPU
    exporter's with ``monitoring_gpu_exporter = "none"``.

    >>> exporter_ports({"monitoring_enabled": True, "monitoring_gpu_exporter": "none",
    ...                 "monitoring_ports": {"node_exporter": 9100, "gpu_exporter": 9400}})
    {'node_exporter': 9100}
    """
    if not settings["monitoring_enabled"]:
        return {}
    ports = {"node_exporter": int(settings["monitoring_ports"]["node_exporter"])}
    if settings["monitoring_gpu_exporter"] != "none":
        ports["gpu_exporter"] = int(settings["monitoring_ports"]["gpu_exporter"])
    return ports


def member_ports(settings: Mapping[str, Any]) -> dict[str, int]:
    """The single port list the cluster's members reach and no one else: every port of ``ray_ports``
    (their metrics ports included) and the exporters' (:func:`exporter_ports`), by name. The host
    firewall admits them from the members, the EC2 security group from the group itself only.

    >>> ports = member_ports({"ray_ports": {"gcs": 6379}, "monitoring_enabled": True,
    ...     "monitoring_gpu_exporter": "dcgm", "monitoring_ports": {"node_exporter": 9100, "gpu_exporter": 9400}})
    >>> ports
    {'gcs': 6379, 'node_exporter': 9100, 'gpu_exporter': 9400}
    """
    return {**settings["ray_ports"], **exporter_ports(settings)}


#: The NFS server's ports: NFS itself, and rpcbind, which NFSv3 clients ask first.
NFS_PORT = 2049
RPCBIND_PORT = 111
