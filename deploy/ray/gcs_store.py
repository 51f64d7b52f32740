"""Keeping the cluster's state across a head restart (``ray_gcs_fault_tolerance``).

By default Ray's GCS (the head's cluster table: nodes, actors, jobs, placement
groups) lives in the head's memory: a restarted head starts a new cluster, and
every worker leaves and joins again (the timeline is in ``deploy.ray.ray_node``).

With ``ray_gcs_fault_tolerance = True`` the head keeps the GCS in Ray's embedded
RocksDB store (``RAY_gcs_storage=rocksdb``). On the head host ``ray_gcs_storage_path`` is a
folder of root's (0700) holding the store, ``store/`` (:func:`store_path`, 0700, owned by the
container's user), which is bind-mounted at ``ray_gcs_storage_path`` into the head's container. The
parent keeps every other user of the host out: the store's owner is the image's user id (1000 in
Ray's images), which on the host may be a person's account, and that account must not read or
change the cluster's state. A head kept the store in ``ray_gcs_storage_path`` itself before;
:func:`layout_command` moves it into ``store/`` (a rename: the running container keeps its bind
mount, which holds the folder, not its path).
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

import shlex
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
    ['--mount=type=bind,src=/var/lib/rayrig/gcs/store,dst=/var/lib/rayrig/gcs']
    """
    if not settings["ray_gcs_fault_tolerance"] or role != "head":
        return []
    return [f"--mount=type=bind,src={store_path(settings)},dst={settings['ray_gcs_storage_path']}"]


def store_path(settings: dict[str, Any]) -> str:
    """The store's own folder on the head host, inside ``ray_gcs_storage_path`` (root's, 0700).

    >>> store_path({"ray_gcs_storage_path": "/var/lib/rayrig/gcs/"})
    '/var/lib/rayrig/gcs/store'
    """
    return f"{settings['ray_gcs_storage_path'].rstrip('/')}/store"


def layout_command(settings: dict[str, Any]) -> str:
    """The shell command that gives ``ray_gcs_storage_path`` its layout: the folder root's own and
    0700, and a store kept in the folder itself (the layout before) moved into ``store/``.

    The move is two renames through a sibling (``PATH.rayrig-layout``), so a run cut between them
    finishes it the next time; a store folder that is a mount point cannot be renamed, and the
    command fails saying what to do instead.

    >>> print(layout_command({"ray_gcs_storage_path": "/var/lib/rayrig/gcs"}))  # doctest: +ELLIPSIS
    bash -c '...' _ /var/lib/rayrig/gcs
    """
    return f"bash -c {shlex.quote(_LAYOUT_SCRIPT)} _ {shlex.quote(settings['ray_gcs_storage_path'].rstrip('/'))}"


_LAYOUT_SCRIPT = """set -eu
folder=$1; store=$folder/store; moving=$folder.rayrig-layout
if [ ! -e "$moving" ] && [ -d "$folder" ] && [ ! -d "$store" ] && [ -n "$(ls -A "$folder")" ]; then
    if mountpoint -q "$folder"; then
        echo "$folder holds the GCS store and is a mount point, which cannot be moved into $store:" \
            "stop ray-node on this host, move the folder's contents into $store (owned by the" \
            "container's user), then deploy again; or set ray_gcs_storage_path to a folder inside the mount" >&2
        exit 1
    fi
    mv -T "$folder" "$moving"
fi
mkdir -p "$folder"
chown root:root "$folder"
chmod 700 "$folder"
if [ -d "$moving" ]; then
    mv -T "$moving" "$store"
fi
"""
