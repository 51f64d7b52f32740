"""Check the shared mounts through Ray, from the head's ray-node container.

Runs in the head container, from the checks package copied there, with the
configuration :func:`checks.shared_storage.probe_config` builds as its one argument::

    python -m checks.storage_probe '{"mounts": [...], "require_mount": true, ...}'

Prints one line, ``RESULT <json>``: ``{"alive": [ip, ...], "mounts": [...]}``, or
``{"error": ...}`` when the check could not run. What it does per mount is described in
:mod:`checks.shared_storage`, which also judges the result.

The module imports nothing from the checks package: the probe, write, read and remove
functions run as Ray tasks on every node, and a ``python -m`` module's functions
travel to Ray's workers by value, so the workers need no copy of the package.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat
import sys
import time
from typing import Any


def describe(exc: BaseException) -> str:
    """An error as a short line: the OS's words and the file, else the exception's type and text."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    return f"{type(exc).__name__}: {exc}"


def probe(path: str, require_mount: bool, listing: bool, listing_entries: int) -> dict[str, Any]:
    """On one node: ``path`` is a directory (a mount point when ``require_mount``); its first names when ``listing``."""
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
    out: dict[str, Any] = {"error": None}
    if listing:
        try:
            out["entries"] = sorted(os.listdir(path))[:listing_entries]
        except OSError as exc:
            return {"error": "cannot be listed: " + describe(exc)}
    out["seconds"] = time.monotonic() - start
    return out


def write(path: str, name: str, data: bytes) -> dict[str, Any]:
    """On one node: write ``data`` to ``path/name`` and fsync it."""
    start = time.monotonic()
    try:
        with open(os.path.join(path, name), "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        return {"error": "cannot write a test file: " + describe(exc)}
    return {"error": None, "seconds": time.monotonic() - start}


def read(path: str, name: str, digest: str, size: int, wait_s: float) -> dict[str, Any]:
    """On one node: read ``path/name`` back until its SHA-256 is ``digest``, for at most ``wait_s``."""
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


def remove(path: str, name: str, missing_ok: bool) -> dict[str, Any]:
    """On one node: delete the test file (``missing_ok`` when its write may never have happened)."""
    try:
        os.remove(os.path.join(path, name))
    except FileNotFoundError as exc:
        return {"error": None if missing_ok else describe(exc)}
    except OSError as exc:
        return {"error": describe(exc)}
    return {"error": None}


def listing_errors(listings: dict[str, list[str]]) -> list[dict[str, Any]]:
    """{ip: names} -> an error for each node whose names differ from what most nodes list."""
    keys = {ip: json.dumps(names) for ip, names in listings.items()}
    counts: dict[str, int] = {}
    for key in keys.values():
        counts[key] = counts.get(key, 0) + 1
    common = max(counts, key=counts.get) if counts else None
    ref = next((ip for ip, key in keys.items() if key == common), None)
    errors = []
    for ip, names in listings.items():
        if keys[ip] != common:
            expected = json.loads(common)
            first = next((a for a, b in zip(names, expected, strict=False) if a != b), None)
            detail = f"first difference: {first!r}" if first else f"{len(names)} names, not {len(expected)}"
            errors.append({"node": ip, "stage": "list", "ref": ref, "error": f"its listing differs ({detail})"})
    return errors


def gather(calls: dict[Any, Any], timeout: float) -> dict[Any, dict[str, Any]]:
    """{key: ObjectRef} -> {key: result}; what has not answered in time gets an error."""
    import ray  # present only in the ray-node container

    refs = list(calls.values())
    ready = set(ray.wait(refs, num_returns=len(refs), timeout=timeout)[0]) if refs else set()
    out: dict[Any, dict[str, Any]] = {}
    for key, ref in calls.items():
        if ref in ready:
            try:
                out[key] = ray.get(ref, timeout=10)
            except Exception as exc:
                out[key] = {"error": "the Ray task failed: " + (str(exc).strip().splitlines() or ["?"])[-1]}
        else:
            out[key] = {"error": f"no answer within {timeout:g} s (a hung mount?)"}
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
    return out


def check(config: dict[str, Any]) -> dict[str, Any]:
    """Every mount of ``config`` checked on every alive node that has it; the result to print."""
    import ray  # present only in the ray-node container

    limit, wait = config["task_timeout_s"], config["read_wait_s"]
    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    alive = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
    task = {f.__name__: ray.remote(num_cpus=0, max_retries=0)(f) for f in (probe, write, read, remove)}

    def on(name: str, ip: str, *args: Any) -> Any:
        return task[name].options(resources={f"node:{ip}": 0.001}).remote(*args)

    results = [_empty_result(m, alive) for m in config["mounts"]]

    probes = gather(
        {
            (i, ip): on("probe", ip, m["path"], config["require_mount"], not m["writable"], config["listing_entries"])
            for i, m in enumerate(config["mounts"])
            for ip in m["nodes"]
            if ip in alive
        },
        limit,
    )
    good: dict[int, dict[str, dict[str, Any]]] = {}
    for (i, ip), answer in probes.items():
        if answer["error"]:
            results[i]["errors"].append({"node": ip, "stage": "probe", "error": answer["error"]})
        else:
            good.setdefault(i, {})[ip] = answer

    writes: dict[int, Any] = {}
    plans: dict[int, tuple[str, list[str], str, str, int]] = {}
    for i, m in enumerate(config["mounts"]):
        seen = good.get(i, {})
        if not m["writable"]:
            _note_listings(results[i], m, seen)
            continue
        writer = next((ip for ip in m["writers"] if ip in seen), None)
        if writer is None:
            continue
        readers = [ip for ip in m["nodes"] if ip in seen and ip != writer] or [writer]
        data = secrets.token_bytes(config["file_bytes"])
        name = config["prefix"] + secrets.token_hex(8)
        plans[i] = (writer, readers, name, hashlib.sha256(data).hexdigest(), len(data))
        results[i]["written_on"] = writer
        writes[i] = on("write", writer, m["path"], name, data)

    written = gather(writes, limit)
    reads: dict[tuple[int, str], Any] = {}
    for i, answer in written.items():
        writer, readers, name, digest, size = plans[i]
        if answer["error"]:
            results[i]["errors"].append({"node": writer, "stage": "write", "error": answer["error"]})
            continue
        results[i]["seconds"] = answer["seconds"]
        for ip in readers:
            reads[(i, ip)] = on("read", ip, config["mounts"][i]["path"], name, digest, size, wait)
    read_back: dict[int, float] = {}
    for (i, ip), answer in gather(reads, wait + limit).items():
        writer = plans[i][0]
        if answer["error"]:
            results[i]["errors"].append({"node": ip, "stage": "read", "ref": writer, "error": answer["error"]})
        else:
            results[i]["read_on"].append(ip)
            read_back[i] = max(read_back.get(i, 0.0), answer["seconds"])
    for i, seconds in read_back.items():
        results[i]["seconds"] += seconds

    # also where the write failed or timed out: a write that finished late leaves no file behind
    removals = {
        i: on("remove", plans[i][0], config["mounts"][i]["path"], plans[i][2], bool(answer["error"]))
        for i, answer in written.items()
    }
    for i, answer in gather(removals, limit).items():
        if answer["error"]:
            results[i]["errors"].append({"node": plans[i][0], "stage": "cleanup", "error": answer["error"]})

    for r in results:
        _judge(r)
    return {"alive": alive, "mounts": results}


def _empty_result(mount: dict[str, Any], alive: list[str]) -> dict[str, Any]:
    """A mount's result before any task ran: its nodes that are not alive are skipped."""
    errors = [
        {"node": ip, "stage": "skipped", "error": "not an alive Ray node"} for ip in mount["nodes"] if ip not in alive
    ]
    return {
        "path": mount["path"],
        "kind": mount["kind"],
        "writable": mount["writable"],
        "nodes_with_mount": mount["nodes"],
        "written_on": None,
        "read_on": [],
        "listed_on": [],
        "seconds": 0.0,
        "errors": errors,
    }


def _note_listings(result: dict[str, Any], mount: dict[str, Any], seen: dict[str, dict[str, Any]]) -> None:
    """A read-only mount: where it was listed, and the nodes whose listing differs from the others'."""
    listings = {ip: seen[ip]["entries"] for ip in mount["nodes"] if ip in seen}
    result["listed_on"] = list(listings)
    result["seconds"] = max((seen[ip]["seconds"] for ip in listings), default=0.0)
    result["errors"] += listing_errors(listings)


def _judge(result: dict[str, Any]) -> None:
    """A mount's ``ok`` and first ``error``: skipped nodes and cleanup problems do not fail it."""
    result["seconds"] = round(result["seconds"], 3)
    failures = [e for e in result["errors"] if e["stage"] not in ("skipped", "cleanup")]
    result["ok"] = not failures and bool(result["read_on"] or result["listed_on"])
    result["error"] = failures[0]["error"] if failures else None if result["ok"] else "no alive node could check it"


def main(argv: list[str] | None = None) -> int:
    """Run the check with the JSON configuration in ``argv[0]``; print the ``RESULT`` line."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        result: dict[str, Any] = {"error": "usage: python -m checks.storage_probe CONFIG_JSON"}
    else:
        try:
            result = check(json.loads(args[0]))
        except Exception as exc:
            result = {"error": describe(exc)}
    print("RESULT", json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
