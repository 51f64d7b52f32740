"""Shared storage as jobs see it: which mounts they can write to, and the folder their results go to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def writable(mount: Mapping[str, Any]) -> bool:
    """Whether jobs can write to a shared mount: an S3 mount without ``read_only``, an NFS mount without ``ro``.

    >>> writable({"bucket": "b", "path": "/mnt/b", "read_only": True}), writable({"path": "/mnt/n", "options": "ro"})
    (False, False)
    """
    if "bucket" in mount:
        return not mount.get("read_only", False)
    return "ro" not in mount.get("options", "").split(",")


def shared_dir(settings: Mapping[str, Any]) -> str | None:
    """The folder jobs keep their results in (``RAYRIG_SHARED_DIR`` in ray-node): ``storage_shared_dir``,
    else the first writable shared mount, NFS then S3 as the data lists them; None without one.

    >>> shared_dir({"storage_shared_dir": None, "storage_nfs_mounts": [],
    ...             "storage_s3_mounts": [{"bucket": "d", "path": "/mnt/d", "read_only": True},
    ...                                   {"bucket": "r", "path": "/mnt/results"}]})
    '/mnt/results'
    """
    if settings["storage_shared_dir"] is not None:
        return settings["storage_shared_dir"]
    mounts = [*settings["storage_nfs_mounts"], *settings["storage_s3_mounts"]]
    return next((m["path"] for m in mounts if writable(m)), None)
