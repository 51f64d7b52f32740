"""Present a benchmark report: terminal tables, the JSON file, a bandwidth plot.

Plain text with aligned columns, so it reads the same in a terminal, in
pyinfra's output and in a CI log. matplotlib is optional
(``pip install rayrig[plot]``): :func:`plot_busbw` returns ``None`` without it.

Example::

    verdict = evaluate(report)
    print(render(report, verdict))
    write_json(report, "bench.json")
    plot_busbw(report, "busbw.png")
    json_path, plot_path = save_report(report, Path("reports"), "prod")   # checks-prod-<time>.json
    print(latest_checks("prod", Path("reports")))
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import gpu_health, monitoring
from .allreduce_plan import host_words
from .verdict import Reason, Verdict, spec_fractions

PLOT_INSTALL_HINT = "matplotlib is not installed: install it with `pip install rayrig[plot]` to get the plot"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """Columns padded to their widest cell; column indexes in ``right`` are right-aligned."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(row) for row in cells[1:]])


def _num(value: Any, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


def _pct(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "-"


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def _short_model(model: str, width: int = 32) -> str:
    return model if len(model) <= width else model[: width - 1] + "…"


def render_devices(report: dict[str, Any], verdict: Verdict | None = None) -> str:
    """One row per measured device: host, device, model, matmul TFLOPS and its
    % of spec, copy GB/s and its % of spec, h2d GB/s, and the verdict's flags."""
    headers = ["host", "device", "model", "matmul TFLOPS", "% spec", "copy GB/s", "% spec", "h2d GB/s", "flags"]
    rows = []
    for entry in report.get("devices") or []:
        fractions = spec_fractions(entry)
        matmul = entry.get("matmul") or {}
        dtype = matmul.get("dtype")
        tflops = _num(matmul.get("tflops"), 3 if entry.get("kind") == "cpu" else 1)
        flags = verdict.flags(entry.get("host"), entry.get("device")) if verdict else []
        if entry.get("skipped"):
            flags = ["skipped"]
        elif entry.get("stopped") and "stopped" not in flags:
            flags.append(f"stopped after {entry['stopped'].get('elapsed_s', 0):g} s")
        rows.append(
            [
                entry.get("host") or "?",
                entry.get("device") or "?",
                _short_model(str(entry.get("model") or "?")),
                f"{tflops} {dtype}" if dtype and tflops != "-" else tflops,
                _pct(fractions["matmul"]),
                _num((entry.get("copy") or {}).get("gbps")),
                _pct(fractions["copy"]),
                _num((entry.get("h2d") or {}).get("gbps")),
                ",".join(flags),
            ]
        )
    return format_table(headers, rows, right=(3, 4, 5, 6, 7))


def render_gpu_health(report: dict[str, Any]) -> str:
    """One row per GPU the host probes read (:mod:`checks.gpu_health`); "" when there are none."""
    rows = gpu_health.table_rows(report)
    return "GPU health\n" + format_table(gpu_health.TABLE_HEADERS, rows, right=(1,)) if rows else ""


def render_allreduce(report: dict[str, Any]) -> str:
    """The all-reduce sweep: size, time per call, algbw and busbw (GB/s); when it stopped, why, and
    each rank's state (the sizes measured before still shown)."""
    data = report.get("allreduce")
    if not data:
        return "all-reduce: not run"
    head = f"all-reduce: {data.get('world_size')} ranks, {data.get('backend')}"
    if data.get("skipped"):
        return f"all-reduce: not run: {data['skipped']}"
    lines = [f"{head}: FAILED: {data['error']}" if data.get("error") else head]
    for rank in (data.get("hung") or {}).get("ranks") or []:
        lines.append(f"  rank {rank['rank']} on {host_words(rank)}: {rank.get('state')}")
    limits = data.get("deadlines") or {}
    if limits.get("setup_s") is not None:  # the numbers the deadlines came from (checks.allreduce)
        lines.append(
            f"  deadlines: setup {limits['setup_deadline_s']:g} s (took {limits['setup_s']:g} s); each size "
            f"{limits['peer_factor']:g} x the time it should take, at least {limits['floor_s']:g} s, "
            f"at most {limits['cap_s']:g} s"
        )
    rows = [
        [
            _size(row["bytes"]),
            f"{row['time_s'] * 1e3:.3f}",
            _num(row.get("algbw_gbps"), 2),
            _num(row.get("busbw_gbps"), 2),
            "ok" if row.get("values_ok", True) else "WRONG",
        ]
        for row in data.get("sweep") or []
    ]
    if rows or not data.get("error"):
        lines.append(format_table(["size", "time ms", "algbw GB/s", "busbw GB/s", "values"], rows, right=(0, 1, 2, 3)))
    return "\n".join(lines)


def render_sweep_test(report: dict[str, Any]) -> str:
    """The scheduling smoke test: tasks finished and where they ran."""
    data = report.get("sweep_test")
    if not data:
        return "scheduling smoke test: not run"
    if data.get("skipped"):
        return f"scheduling smoke test: not run: {data['skipped']}"
    lines = [
        f"scheduling smoke test: {data.get('completed', 0)}/{data.get('tasks', 0)} tasks finished "
        f"in {_num(data.get('elapsed_s'))} s"
    ]
    for host, count in sorted((data.get("per_node") or {}).items()):
        lines.append(f"  {host}: {count} tasks")
    for host in data.get("missing_nodes") or []:
        lines.append(f"  {host}: NO TASK RAN HERE")
    if data.get("error"):
        lines.append(f"  error: {data['error']}")
    return "\n".join(lines)


def _names(ips: list[str], hosts: dict[str, str], most: int = 3) -> str:
    names = [hosts.get(ip, ip) for ip in ips]
    return ", ".join(names) if len(names) <= most else f"{len(names)} nodes"


def render_storage(report: dict[str, Any]) -> str:
    """The shared-storage round trip: one line per mount (path, kind, OK/FAIL, where it was
    written and read, how long it took); "" when the cluster has no shared mount."""
    data = report.get("storage")
    if not data:
        return ""
    if data.get("error") or "mounts" not in data:
        return f"shared storage: FAILED: {data.get('error')}"
    hosts = data.get("hosts") or {}
    rows = []
    for m in data["mounts"]:
        if m.get("writable"):
            where = f"written on {hosts.get(m['written_on'], m['written_on']) if m.get('written_on') else '-'}"
            where += f", read on {_names(m.get('read_on') or [], hosts) or '-'}"
        else:
            where = f"read-only, listed on {_names(m.get('listed_on') or [], hosts) or '-'}"
        detail = f"{where} in {_num(m.get('seconds'), 2)} s"
        if m.get("error"):
            detail += f"; {m['error']}"
        rows.append([m["path"], m["kind"], "OK" if m.get("ok") else "FAIL", detail])
    return "Shared storage\n" + format_table(["mount", "kind", "status", "round trip"], rows)


def render_monitoring(report: dict[str, Any]) -> str:
    """What the checks read from Prometheus (:mod:`checks.monitoring`): how many targets are up, a row for
    each one that is not, and whether the GPUs' findings were read; "" in a report without the part."""
    data = report.get("monitoring")
    if not data:
        return ""
    if data.get("skipped"):
        return f"monitoring: not read: {data['skipped']}"
    where = f"Prometheus on {data['host']} ({data.get('prometheus')})" if data.get("host") else "Prometheus"
    if data.get("error"):
        return f"monitoring: {where}: FAILED: {data['error']}"
    targets = data.get("targets") or []
    up = sum(1 for t in targets if t["health"] == "up")
    lines = [f"Monitoring: {where}: {up} of {len(targets)} targets up"]
    rows = [[t["host"], t["job"], t.get("instance") or "-", t["health"], t.get("error") or ""]
            for t in targets if t["health"] != "up"]  # fmt: skip
    if rows:
        lines.append(format_table(["host", "job", "target", "health", "last error"], rows))
    if data.get("exported") is not None:
        found = data.get("findings") or []
        gpu = [f for f in found if f.get("source") != monitoring.SOURCE_TARGETS and f["level"] != "INFO"]
        window = monitoring.span(data.get("window_s") or 0)
        lines.append(f"GPU findings in the last {window} (XID, throttling, ECC): {len(gpu) or 'none'}")
    return "\n".join(lines)


def render_mode(report: dict[str, Any]) -> str:
    """Which checks ran and why: ``checks: quick: no ray-node was created or replaced in this run; ...``
    ("" in a report without it, such as the benchmark's own)."""
    checks = report.get("checks") or {}
    if not checks.get("mode"):
        return ""
    return f"checks: {checks['mode']}: {checks.get('why') or 'no reason recorded'}"


def render_nodes(report: dict[str, Any]) -> str:
    """The alive Ray nodes the cluster state found: host, address, CPUs, GPUs, Ray version."""
    state = report.get("cluster_state")
    if not state:
        return "Ray nodes: the cluster state could not be read"
    hosts = state.get("hosts") or {}
    rows = []
    for node in sorted(state.get("nodes") or [], key=lambda n: (hosts.get(n["ip"], "~"), n["ip"])):
        resources = node.get("resources") or {}
        rows.append([hosts.get(node["ip"], "(not in the inventory)"), node["ip"], f"{resources.get('CPU', 0):g}",
                     f"{resources.get('GPU', 0):g}", node.get("ray_version") or "?"])  # fmt: skip
    return "Ray nodes\n" + format_table(["host", "address", "CPUs", "GPUs", "Ray"], rows, right=(2, 3))


def _named(reason: Reason) -> str:
    """The reason's message, led by its host's name where the message does not name it already."""
    if reason.host and reason.host not in reason.message:
        return f"{reason.host}: {reason.message}"
    return reason.message


def render_verdict(verdict: Verdict) -> str:
    """``VERDICT: FAIL`` followed by one line per reason, the failures first."""
    order = {"FAIL": 0, "WARN": 1, "INFO": 2}
    reasons = sorted(verdict.reasons, key=lambda r: order.get(r.level, 3))
    lines = [f"VERDICT: {verdict.status}"]
    for r in reasons:
        lines.append(f"  {r.level:<4}  {_named(r)}")
        if r.source and r.level in ("FAIL", "WARN"):
            lines.append(f"        threshold from: {r.source}")
    if verdict.slow_hosts:
        lines.append(f"  SLOW HOSTS: {', '.join(verdict.slow_hosts)}")
    return "\n".join(lines)


def render(report: dict[str, Any], verdict: Verdict | None = None) -> str:
    """Everything above, in the order a reader wants it: devices, all-reduce, smoke test, shared
    storage, timing, then which checks ran and why, and the verdict. The quick checks' report has
    their Ray nodes in place of the benchmark's sections."""
    if (report.get("checks") or {}).get("mode") == "quick":
        parts = [render_nodes(report)]
    else:
        parts = [render_devices(report, verdict)]
        parts += [text for text in [render_gpu_health(report)] if text]
        if report.get("mode") == "cluster" or report.get("allreduce"):
            parts.append(render_allreduce(report))
        if report.get("mode") == "cluster" or report.get("sweep_test"):
            parts.append(render_sweep_test(report))
        storage = render_storage(report)
        if storage:
            parts.append(storage)
        watched = render_monitoring(report)
        if watched:
            parts.append(watched)
        timing = report.get("timing") or {}
        if timing:
            parts.append("timing: " + ", ".join(f"{k} {_num(v)} s" for k, v in timing.items()))
    mode = render_mode(report)
    if mode:
        parts.append(mode)
    if verdict is not None:
        parts.append(render_verdict(verdict))
    return "\n\n".join(parts)


def write_json(report: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``report`` as indented JSON, atomically (a reader never sees half
    a file); creates the parent folder. Returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def plot_busbw(report: dict[str, Any], path: str | os.PathLike[str]) -> Path | None:
    """A PNG of all-reduce bus bandwidth (GB/s) against message size.

    Returns the path, or ``None`` when there is no all-reduce sweep to plot or
    matplotlib is missing (then it prints how to install it to stderr).
    """
    data = report.get("allreduce") or {}
    sweep = [row for row in data.get("sweep") or [] if isinstance(row.get("busbw_gbps"), (int, float))]
    if not sweep:
        return None
    try:  # matplotlib is optional (rayrig[plot]) and slow to import: only when there is a plot to draw
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(PLOT_INSTALL_HINT, file=sys.stderr)
        return None
    sizes = [row["bytes"] for row in sweep]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    try:
        ax.plot(sizes, [row["busbw_gbps"] for row in sweep], marker="o", label="bus bandwidth")
        ax.plot(sizes, [row["algbw_gbps"] for row in sweep], marker=".", linestyle="--", label="algorithm bandwidth")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([_size(s) for s in sizes], rotation=45, ha="right")
        ax.set_xlabel("message size")
        ax.set_ylabel("GB/s")
        ax.set_title(f"all-reduce, {data.get('world_size')} ranks ({data.get('backend')})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(target, dpi=120)
    finally:
        plt.close(fig)
    return target


def save_report(result: dict[str, Any], report_dir: Path, cluster: str) -> tuple[Path, Path | None]:
    """Write ``checks-<cluster>-<time>.json`` and its bus-bandwidth plot (``-busbw.png``); return their paths."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = report_dir / f"checks-{cluster}-{stamp}"
    json_path = write_json(result, base.with_suffix(".json"))
    plot_path = plot_busbw(result, base.with_name(base.name + "-busbw.png"))
    return json_path, plot_path


def latest_report(cluster: str, report_dir: Path) -> dict[str, Any] | None:
    """The newest checks report of ``cluster``: ``{"verdict", "report", "plot"}`` (paths as text,
    ``plot`` None when there is none); None when the checks never ran here."""
    reports = sorted(report_dir.glob(f"checks-{cluster}-*[0-9].json"))
    if not reports:
        return None
    verdict = json.loads(reports[-1].read_text()).get("verdict", {}).get("status", "unknown")
    plot = reports[-1].with_name(reports[-1].stem + "-busbw.png")
    return {"verdict": verdict, "report": str(reports[-1]), "plot": str(plot) if plot.exists() else None}


def latest_checks(cluster: str, report_dir: Path) -> str:
    """One line on the newest checks report of ``cluster``: its verdict and where it and its plot are."""
    latest = latest_report(cluster, report_dir)
    if latest is None:
        return "==> checks: no report yet (rayrig check inventories/lab.py)"
    plot = f", plot {latest['plot']}" if latest["plot"] else ""
    return f"==> checks: {latest['verdict']}; report {latest['report']}{plot}"
