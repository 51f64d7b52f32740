"""Shared-storage round trip: every shared mount works inside the ray-node containers.

For each mount point of ``storage_nfs_mounts`` and ``storage_s3_mounts`` (the
ray-node container bind-mounts each at the same path), :mod:`checks.storage_probe`,
run in the head container, drives Ray tasks pinned to the nodes that have it:

1. on every such node, the path is a mount point inside the container (a
   directory that is not a mount is a mount that went missing);
2. a writable mount: a node writes ``<path>/.rayrig-check-<random hex>`` with
   random content (and fsyncs it), every other node reads it back, retrying
   for ``read_wait_s`` (NFS attribute caches and s3fs may lag), and the
   content must match; then the writer deletes it;
3. a read-only mount (``"read_only": true``, or NFS options with ``ro``):
   every node lists it (the first 50 names, sorted) and the lists agree.

Every wait is bounded (``task_timeout_s`` per phase), and the command itself
runs under ``timeout`` (:func:`check_timeout`): a hung mount becomes a FAIL, never
a hung deploy. This module holds the operator's side: which node has which mount,
the probe's configuration, and the judgement of its result.

Example (what :func:`checks.full.run_checks` does)::

    mounts = storage_mounts({"10.0.0.1": head_settings, "10.0.0.2": worker_settings})
    ok, lines = head.run(storage_command("ray-node", mounts))   # checks.full
    result = parse_result(lines)          # {"mounts": [...], "alive": [...]} or None
    reasons = storage_reasons(result, {"10.0.0.2": "gpu-1"})
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from .verdict import FAIL, INFO, WARN, Reason

READ_WAIT_S = 30  # how long a reader retries until the file written on another node shows up intact
TASK_TIMEOUT_S = 60  # how long each phase (probe, write, read beyond READ_WAIT_S, delete) may take
INIT_ALLOWANCE_S = 60  # connecting to Ray, and the margin before the shell's timeout
LISTING_ENTRIES = 50  # names compared between nodes on a read-only mount
TEST_FILE_BYTES = 64 * 2**10
TEST_FILE_PREFIX = ".rayrig-check-"


def _read_only(kind: str, mount: Mapping[str, Any]) -> bool:
    if kind == "s3":
        return bool(mount.get("read_only"))
    return "ro" in str(mount.get("options") or "").split(",")


def storage_mounts(settings_by_node: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Which node has which shared mount, from each node's settings keyed by its node address.

    One entry per mount point, in the order the data first lists it:
    ``{"path", "kind" ("nfs", "s3"; "nfs/s3" when hosts disagree), "nodes": [ip, ...],
    "writers": [ip, ...] (the nodes where it is writable), "writable"}``. A mount is
    read-only on a node when it is an S3 mount with ``"read_only": true`` or an NFS mount
    whose options hold ``ro``; it is checked as writable when any node may write it.

    >>> storage_mounts({"10.0.0.1": {"storage_nfs_mounts": [{"path": "/mnt/shared"}], "storage_s3_mounts": []}})
    [{'path': '/mnt/shared', 'kind': 'nfs', 'nodes': ['10.0.0.1'], 'writers': ['10.0.0.1'], 'writable': True}]
    """
    mounts: dict[str, dict[str, Any]] = {}
    kinds: dict[str, list[str]] = {}
    for ip, settings in settings_by_node.items():
        for kind, key in (("nfs", "storage_nfs_mounts"), ("s3", "storage_s3_mounts")):
            for mount in settings.get(key) or []:
                entry = mounts.setdefault(mount["path"], {"path": mount["path"], "nodes": [], "writers": []})
                kinds.setdefault(mount["path"], [])
                if kind not in kinds[mount["path"]]:
                    kinds[mount["path"]].append(kind)
                if ip not in entry["nodes"]:
                    entry["nodes"].append(ip)
                if not _read_only(kind, mount) and ip not in entry["writers"]:
                    entry["writers"].append(ip)
    return [
        {
            "path": path,
            "kind": "/".join(sorted(kinds[path])),
            "nodes": entry["nodes"],
            "writers": entry["writers"],
            "writable": bool(entry["writers"]),
        }
        for path, entry in mounts.items()
    ]


def check_timeout(task_timeout_s: float = TASK_TIMEOUT_S, read_wait_s: float = READ_WAIT_S) -> int:
    """The most seconds the whole check may take: four phases, the read's wait, connecting."""
    return int(4 * task_timeout_s + read_wait_s + INIT_ALLOWANCE_S)


def probe_config(
    mounts: list[dict[str, Any]],
    *,
    require_mount: bool = True,
    read_wait_s: float = READ_WAIT_S,
    task_timeout_s: float = TASK_TIMEOUT_S,
) -> dict[str, Any]:
    """The configuration :mod:`checks.storage_probe` takes (as JSON) to check ``mounts`` (from :func:`storage_mounts`).

    ``require_mount`` false accepts a plain directory where a mount point is expected
    (for tests, where a temporary directory stands in for a mount).
    """
    return {
        "mounts": mounts,
        "require_mount": require_mount,
        "read_wait_s": read_wait_s,
        "task_timeout_s": task_timeout_s,
        "listing_entries": LISTING_ENTRIES,
        "file_bytes": TEST_FILE_BYTES,
        "prefix": TEST_FILE_PREFIX,
    }


def parse_result(lines: Iterable[str]) -> dict[str, Any] | None:
    """The last ``RESULT <json>`` line of the probe's output, or None when there is none."""
    found = None
    for line in lines:
        if line.startswith("RESULT "):
            try:
                found = json.loads(line[len("RESULT ") :])
            except ValueError:
                continue
    return found


def host_name(ip: str | None, aliases: Mapping[str, str]) -> str:
    """A node as the inventory names it, else its address."""
    return aliases.get(ip, ip) if ip else "?"


def storage_reasons(result: dict[str, Any] | None, aliases: Mapping[str, str]) -> list[Reason]:
    """FAIL for each node where a mount is missing or does not round-trip, naming the mount and the host.

    A node that is not an alive Ray node, or a test file left behind, is a WARN (the cluster-state
    check already fails a missing node); ``result`` None (no shared mounts) gives no reason.
    """
    if result is None:
        return []
    if result.get("error") or "mounts" not in result:
        return [Reason(FAIL, f"shared storage: the check did not run in the head container: {result.get('error')}")]
    reasons: list[Reason] = []
    for mount in result["mounts"]:
        path, kind, first = mount["path"], mount["kind"], len(reasons)
        for e in mount.get("errors") or []:
            host = host_name(e.get("node"), aliases)
            ref = host_name(e.get("ref"), aliases)
            stage, error = e.get("stage"), e.get("error")
            if stage == "skipped":
                reasons.append(Reason(WARN, f"{host}: shared storage {path} ({kind}) not checked: {error}", host=host))
            elif stage == "cleanup":
                reasons.append(Reason(WARN, f"{host}: could not delete the test file in {path}: {error}", host=host))
            elif stage == "read":
                message = (
                    f"{host}: shared storage {path} ({kind}): the file written on {ref} did not read back: {error}"
                )
                reasons.append(Reason(FAIL, message, host=host))
            elif stage == "list":
                message = f"{host}: shared storage {path} ({kind}) lists differently from {ref}: {error}"
                reasons.append(Reason(FAIL, message, host=host))
            else:
                reasons.append(Reason(FAIL, f"{host}: shared storage {path} ({kind}): {error}", host=host))
        if not mount.get("ok") and not any(r.level == FAIL for r in reasons[first:]):
            reasons.append(Reason(FAIL, f"shared storage {path} ({kind}) was not checked: {mount.get('error')}"))
    if result["mounts"] and all(m.get("ok") for m in result["mounts"]):
        paths = ", ".join(f"{m['path']} ({m['kind']})" for m in result["mounts"])
        reasons.append(Reason(INFO, f"shared storage works on every node that mounts it: {paths}"))
    return reasons
