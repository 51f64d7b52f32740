"""Keeping the cluster's state across a head restart (``ray_gcs_fault_tolerance``).

By default Ray's GCS (the head's cluster table: nodes, actors, jobs, placement
groups) lives in the head's memory: a restarted head starts a new cluster, and
every worker leaves and joins again (the timeline is in ``deploy.ray.ray_node``).

With ``ray_gcs_fault_tolerance = True`` the head keeps the GCS in Ray's embedded
RocksDB store (``RAY_gcs_storage=rocksdb``) in ``ray_gcs_storage_path``, a folder
on the head host (0700) bind-mounted at the same path into the head's container.
A restarted or replaced head reopens it: the workers stay connected (their raylets
wait up to ``WORKER_RECONNECT_TIMEOUT_S`` for the GCS, instead of Ray's 60 s) and
keep their node IDs, and a detached actor on a worker answers again under its name.
Actors that lived on the head itself die with its container.

Why RocksDB rather than Redis (``RAY_REDIS_ADDRESS``): it is inside Ray 2.60's own
GCS binary, so there is no second service to install, secure, supervise and keep
on the head (a Redis on the head host would need its own unit, firewall rule and
password, and would fail with the host anyway); the state is a folder next to the
container, which survives a container restart, a replacement and a reboot. Ray
marks the RocksDB store alpha; it was tried with Ray 2.60: a head killed (or stopped) and started
again with the same folder kept a worker with its node ID and a detached named
actor, with its state, answering. Redis stays the choice for a head that must move
to another host, which rayrig does not do.
"""

from __future__ import annotations

from typing import Any

#: How long a worker's raylet waits for a GCS that went away before it exits (Ray's default is 60 s).
WORKER_RECONNECT_TIMEOUT_S = 300


def container_env(settings: dict[str, Any], role: str) -> dict[str, str]:
    """The ray-node container's environment for the GCS store: on the head, where the
    store lives; on workers, how long they wait for a restarting head. Empty when off.

    >>> container_env({"ray_gcs_fault_tolerance": True, "ray_gcs_storage_path": "/var/lib/rayrig/gcs"}, "worker")
    {'RAY_gcs_rpc_server_reconnect_timeout_s': '300'}
    """
    if not settings["ray_gcs_fault_tolerance"]:
        return {}
    if role == "head":
        return {"RAY_gcs_storage": "rocksdb", "RAY_gcs_storage_path": settings["ray_gcs_storage_path"]}
    return {"RAY_gcs_rpc_server_reconnect_timeout_s": str(WORKER_RECONNECT_TIMEOUT_S)}


def mount_args(settings: dict[str, Any], role: str) -> list[str]:
    """``docker create`` arguments that bind the store's folder into the head's container.

    >>> mount_args({"ray_gcs_fault_tolerance": True, "ray_gcs_storage_path": "/var/lib/rayrig/gcs"}, "head")
    ['--mount=type=bind,src=/var/lib/rayrig/gcs,dst=/var/lib/rayrig/gcs']
    """
    if not settings["ray_gcs_fault_tolerance"] or role != "head":
        return []
    path = settings["ray_gcs_storage_path"]
    return [f"--mount=type=bind,src={path},dst={path}"]
