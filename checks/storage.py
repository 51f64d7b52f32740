"""Shared-storage round trip: every shared mount works inside the ray-node containers.

For each mount point of ``storage_nfs_mounts`` and ``storage_s3_mounts`` (the
ray-node container bind-mounts each at the same path), a script run in the
head container drives Ray tasks pinned to the nodes that have it:

1. on every such node, the path is a mount point inside the container (a
   directory that is not a mount is a mount that went missing);
2. a writable mount: a node writes ``<path>/.rayrig-check-<random hex>`` with
   random content (and fsyncs it), every other node reads it back, retrying
   for ``read_wait_s`` (NFS attribute caches and s3fs may lag), and the
   content must match; then the writer deletes it;
3. a read-only mount (``"read_only": true``, or NFS options with ``ro``):
   every node lists it (the first 50 names, sorted) and the lists agree.

Every wait is bounded (``task_timeout_s`` per phase), and the command itself
runs under ``timeout``: a hung mount becomes a FAIL, never a hung deploy.

Example (what ``deploy/post_checks.py`` does)::

    mounts = storage_mounts({"10.0.0.1": head_settings, "10.0.0.2": worker_settings})
    ok, lines = run_on_head(storage_check_command("ray-node", mounts))
    result = parse_result(lines)          # {"mounts": [...], "alive": [...]} or None
    reasons = storage_reasons(result, {"10.0.0.2": "gpu-1"})
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from .verdict import FAIL, INFO, WARN, Reason

READ_WAIT_S = 30  # how long a reader retries until the file written on another node shows up intact
TASK_TIMEOUT_S = 60  # how long each phase (probe, write, read beyond READ_WAIT_S, delete) may take
INIT_ALLOWANCE_S = 60  # connecting to Ray, and the margin before the shell's timeout
LISTING_ENTRIES = 50  # names compared between nodes on a read-only mount
TEST_FILE_BYTES = 64 * 2**10
TEST_FILE_PREFIX = ".rayrig-check-"

#: Run with ``python -c`` in the head container; ``__CONFIG__`` becomes a JSON string literal.
#: Prints one ``RESULT <json>`` line: ``{"alive": [ip, ...], "mounts": [...]}``, or ``{"error": ...}``.
STORAGE_CHECK_SCRIPT = r'''
import hashlib, json, os, secrets, stat, time

CONFIG = json.loads(__CONFIG__)
T, WAIT = CONFIG["task_timeout_s"], CONFIG["read_wait_s"]


def describe(exc):
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    return f"{type(exc).__name__}: {exc}"


def probe(path, require_mount, listing):
    start = time.monotonic()
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return {"error": "missing in the container"}
    except OSError as exc:
        return {"error": describe(exc)}
    if not stat.S_ISDIR(mode):
        return {"error": "not a directory"}
    if require_mount and not os.path.ismount(path):
        return {"error": "a plain directory in the container, not a mount point (not mounted on the host?)"}
    out = {"error": None}
    if listing:
        try:
            out["entries"] = sorted(os.listdir(path))[: CONFIG["listing_entries"]]
        except OSError as exc:
            return {"error": "cannot be listed: " + describe(exc)}
    out["seconds"] = time.monotonic() - start
    return out


def write(path, name, data):
    start = time.monotonic()
    try:
        with open(os.path.join(path, name), "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        return {"error": "cannot write a test file: " + describe(exc)}
    return {"error": None, "seconds": time.monotonic() - start}


def read(path, name, digest, size, wait_s):
    start, target = time.monotonic(), os.path.join(path, name)
    while True:
        try:
            with open(target, "rb") as fh:
                data = fh.read()
            if hashlib.sha256(data).hexdigest() == digest:
                return {"error": None, "seconds": time.monotonic() - start}
            last = f"its content differs ({len(data)} bytes read, {size} written)"
        except FileNotFoundError:
            last = f"{target} is not there"
        except PermissionError as exc:
            return {"error": "cannot read it: " + describe(exc)}
        except OSError as exc:
            last = "cannot read it: " + describe(exc)
        if time.monotonic() - start >= wait_s:
            return {"error": f"{last} after {wait_s:g} s"}
        time.sleep(0.5)


def remove(path, name, missing_ok):
    try:
        os.remove(os.path.join(path, name))
    except FileNotFoundError as exc:
        return {"error": None if missing_ok else describe(exc)}
    except OSError as exc:
        return {"error": describe(exc)}
    return {"error": None}


def listing_errors(listings):
    """{ip: names} -> an error for each node whose names differ from what most nodes list."""
    keys = {ip: json.dumps(names) for ip, names in listings.items()}
    counts = {}
    for key in keys.values():
        counts[key] = counts.get(key, 0) + 1
    common = max(counts, key=counts.get) if counts else None
    ref = next((ip for ip, key in keys.items() if key == common), None)
    errors = []
    for ip, names in listings.items():
        if keys[ip] != common:
            expected = json.loads(common)
            first = next((a for a, b in zip(names, expected) if a != b), None)
            detail = f"first difference: {first!r}" if first else f"{len(names)} names, not {len(expected)}"
            errors.append({"node": ip, "stage": "list", "ref": ref, "error": f"its listing differs ({detail})"})
    return errors


def gather(calls, timeout):
    """{key: ObjectRef} -> {key: result}; what has not answered in time gets an error."""
    import ray

    refs = list(calls.values())
    ready = set(ray.wait(refs, num_returns=len(refs), timeout=timeout)[0]) if refs else set()
    out = {}
    for key, ref in calls.items():
        if ref in ready:
            try:
                out[key] = ray.get(ref, timeout=10)
            except Exception as exc:
                out[key] = {"error": "the Ray task failed: " + (str(exc).strip().splitlines() or ["?"])[-1]}
        else:
            out[key] = {"error": f"no answer within {timeout:g} s (a hung mount?)"}
            try:
                ray.cancel(ref, force=True)
            except Exception:
                pass
    return out


def main():
    import ray

    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    alive = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
    task = {f.__name__: ray.remote(num_cpus=0, max_retries=0)(f) for f in (probe, write, read, remove)}

    def on(name, ip, *args):
        return task[name].options(resources={f"node:{ip}": 0.001}).remote(*args)

    results = []
    for m in CONFIG["mounts"]:
        errors = [{"node": ip, "stage": "skipped", "error": "not an alive Ray node"} for ip in m["nodes"]
                  if ip not in alive]
        results.append({"path": m["path"], "kind": m["kind"], "writable": m["writable"], "nodes_with_mount": m["nodes"],
                        "written_on": None, "read_on": [], "listed_on": [], "seconds": 0.0, "errors": errors})

    probes = gather({(i, ip): on("probe", ip, m["path"], CONFIG["require_mount"], not m["writable"])
                     for i, m in enumerate(CONFIG["mounts"]) for ip in m["nodes"] if ip in alive}, T)
    good = {}
    for (i, ip), answer in probes.items():
        if answer["error"]:
            results[i]["errors"].append({"node": ip, "stage": "probe", "error": answer["error"]})
        else:
            good.setdefault(i, {})[ip] = answer

    writes, plans = {}, {}
    for i, m in enumerate(CONFIG["mounts"]):
        seen = good.get(i, {})
        if not m["writable"]:
            listings = {ip: seen[ip]["entries"] for ip in m["nodes"] if ip in seen}
            results[i]["listed_on"] = list(listings)
            results[i]["seconds"] = max((seen[ip]["seconds"] for ip in listings), default=0.0)
            results[i]["errors"] += listing_errors(listings)
            continue
        writer = next((ip for ip in m["writers"] if ip in seen), None)
        if writer is None:
            continue
        readers = [ip for ip in m["nodes"] if ip in seen and ip != writer] or [writer]
        data = secrets.token_bytes(CONFIG["file_bytes"])
        name = CONFIG["prefix"] + secrets.token_hex(8)
        plans[i] = (writer, readers, name, hashlib.sha256(data).hexdigest(), len(data))
        results[i]["written_on"] = writer
        writes[i] = on("write", writer, m["path"], name, data)

    written = gather(writes, T)
    reads = {}
    for i, answer in written.items():
        writer, readers, name, digest, size = plans[i]
        if answer["error"]:
            results[i]["errors"].append({"node": writer, "stage": "write", "error": answer["error"]})
            continue
        results[i]["seconds"] = answer["seconds"]
        for ip in readers:
            reads[(i, ip)] = on("read", ip, CONFIG["mounts"][i]["path"], name, digest, size, WAIT)
    read_back = {}
    for (i, ip), answer in gather(reads, WAIT + T).items():
        writer = plans[i][0]
        if answer["error"]:
            results[i]["errors"].append({"node": ip, "stage": "read", "ref": writer, "error": answer["error"]})
        else:
            results[i]["read_on"].append(ip)
            read_back[i] = max(read_back.get(i, 0.0), answer["seconds"])
    for i, seconds in read_back.items():
        results[i]["seconds"] += seconds

    # also where the write failed or timed out: a write that finished late leaves no file behind
    removals = {i: on("remove", plans[i][0], CONFIG["mounts"][i]["path"], plans[i][2], bool(answer["error"]))
                for i, answer in written.items()}
    for i, answer in gather(removals, T).items():
        if answer["error"]:
            results[i]["errors"].append({"node": plans[i][0], "stage": "cleanup", "error": answer["error"]})

    for r in results:
        r["seconds"] = round(r["seconds"], 3)
        failures = [e for e in r["errors"] if e["stage"] not in ("skipped", "cleanup")]
        r["ok"] = not failures and bool(r["read_on"] or r["listed_on"])
        r["error"] = failures[0]["error"] if failures else None if r["ok"] else "no alive node could check it"
    return {"alive": alive, "mounts": results}


try:
    result = main()
except Exception as exc:
    result = {"error": describe(exc)}
print("RESULT", json.dumps(result))
'''


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


def storage_check_script(
    mounts: list[dict[str, Any]],
    *,
    require_mount: bool = True,
    read_wait_s: float = READ_WAIT_S,
    task_timeout_s: float = TASK_TIMEOUT_S,
) -> str:
    """The Python script that checks ``mounts`` (from :func:`storage_mounts`) through Ray.

    ``require_mount`` false accepts a plain directory where a mount point is expected
    (for tests, where a temporary directory stands in for a mount).
    """
    config = {
        "mounts": mounts,
        "require_mount": require_mount,
        "read_wait_s": read_wait_s,
        "task_timeout_s": task_timeout_s,
        "listing_entries": LISTING_ENTRIES,
        "file_bytes": TEST_FILE_BYTES,
        "prefix": TEST_FILE_PREFIX,
    }
    return STORAGE_CHECK_SCRIPT.replace("__CONFIG__", repr(json.dumps(config)), 1)


def storage_check_command(
    container: str,
    mounts: list[dict[str, Any]],
    *,
    read_wait_s: float = READ_WAIT_S,
    task_timeout_s: float = TASK_TIMEOUT_S,
) -> str:
    """The shell command that runs the check in the head's ``container``, bounded by ``timeout``."""
    script = storage_check_script(mounts, read_wait_s=read_wait_s, task_timeout_s=task_timeout_s)
    limit = check_timeout(task_timeout_s, read_wait_s)
    return f"timeout -k 10 {limit} docker exec {shlex.quote(container)} python -c {shlex.quote(script)}"


def parse_result(lines: Iterable[str]) -> dict[str, Any] | None:
    """The last ``RESULT <json>`` line of the script's output, or None when there is none."""
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
