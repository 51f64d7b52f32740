"""The verdict on a benchmark report: PASS, WARN or FAIL, with the reasons.

Rules (thresholds are arguments; in host data they are
``checks_matmul_min_fraction``, ``checks_membw_min_fraction`` and
``checks_outlier_fraction``):

- every GPU's matmul reaches ``matmul_min_fraction`` (0.65) of its datasheet
  TFLOPS and its copy bandwidth ``membw_min_fraction`` (0.80) of the datasheet
  memory bandwidth, else FAIL; a model missing from :mod:`checks.specs` is a
  WARN (nothing to compare against);
- every GPU (or, on CPU-only clusters, every node's CPU matmul) reaches
  ``outlier_fraction`` (0.9) of the median of its peers (same model), else
  FAIL naming the host: a slow node must be impossible to miss; the same
  comparison of the sustained (power-capped) matmul rate only WARNs, since
  chips of one model legitimately differ a little there;
- a failed measurement, all-reduce values that do not add up, or an
  incomplete scheduling smoke test FAIL;
- on a CPU-only cluster the datasheet checks do not apply: an INFO reason
  says so, and it does not lower the status.
- GPUs and CPUs other jobs held when the benchmark began were left out of it
  (:func:`checks.cluster_bench.mark_busy`): a WARN per node naming how many;
  an all-reduce or smoke test that found no free resources, or nothing
  measured because everything was busy, WARNs too: a busy cluster is not a
  broken one.
- what the host probes read about each GPU (:mod:`checks.gpu_health`: PCIe link, clock event
  reasons at idle and under the matmul, ECC and remapped rows, NVLink, Xid errors, DCGM),
  each reason with the ``source`` of its threshold.

Example::

    verdict = evaluate(report, matmul_min_fraction=0.65)
    print(verdict.status)           # "PASS", "WARN" or "FAIL"
    for reason in verdict.reasons:  # "FAIL: SLOW NODE gpu-3 (10.0.0.7): ..."
        print(reason)
    sys.exit(verdict.exit_code)     # 1 on FAIL
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from . import allreduce_plan, deadlines, gpu_health, maths, specs
from .reasons import FAIL, INFO, PASS, WARN, Reason, host_label

__all__ = ["FAIL", "INFO", "PASS", "WARN", "Reason", "Verdict", "evaluate", "host_label"]


DEFAULT_MATMUL_MIN_FRACTION = 0.65
DEFAULT_MEMBW_MIN_FRACTION = 0.80
DEFAULT_OUTLIER_FRACTION = 0.9

# Short flags shown in the table's "flags" column.
FLAG_SLOW = "SLOW"
FLAG_SLOW_SUSTAINED = "SLOW-SUSTAINED"
FLAG_LOW_TFLOPS = "LOW-TFLOPS"
FLAG_LOW_MEMBW = "LOW-MEMBW"
FLAG_NO_SPEC = "NO-SPEC"
FLAG_ERROR = "ERROR"


@dataclass
class Verdict:
    """PASS, WARN or FAIL (the worst of the reasons) and the reasons."""

    reasons: list[Reason] = field(default_factory=list)

    @property
    def status(self) -> str:
        levels = {r.level for r in self.reasons}
        if FAIL in levels:
            return FAIL
        if WARN in levels:
            return WARN
        return PASS

    @property
    def exit_code(self) -> int:
        """0 for PASS and WARN, 1 for FAIL (2 is left for usage errors)."""
        return 1 if self.status == FAIL else 0

    @property
    def slow_hosts(self) -> list[str]:
        """Hosts with at least one device below its peers, sorted."""
        return sorted({r.host for r in self.reasons if r.flag == FLAG_SLOW and r.host})

    def flags(self, host: str | None, device: str | None) -> list[str]:
        """The table flags for one device, in the order they were found."""
        found: list[str] = []
        for r in self.reasons:
            if r.flag and r.host == host and r.device == device and r.flag not in found:
                found.append(r.flag)
        return found

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``{"status", "slow_hosts", "reasons": [...]}``."""
        return {
            "status": self.status,
            "slow_hosts": self.slow_hosts,
            "reasons": [r.as_dict() for r in self.reasons],
        }


def _value(entry: dict[str, Any], section: str, key: str) -> float | None:
    data = entry.get(section)
    if not isinstance(data, dict):
        return None
    value = data.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def spec_fractions(entry: dict[str, Any]) -> dict[str, Any]:
    """The GPU spec of a device entry and its measured fractions of it.

    ``{"spec": GpuSpec | None, "matmul": float | None, "copy": float | None}``;
    CPU entries and unknown models have no spec and no fractions.
    """
    spec = specs.lookup(entry.get("model")) if entry.get("kind") == "gpu" else None
    matmul = _value(entry, "matmul", "tflops")
    copy = _value(entry, "copy", "gbps")
    return {
        "spec": spec,
        "matmul": matmul / spec.tflops if spec and matmul is not None else None,
        "copy": copy / spec.mem_bw_gbs if spec and copy is not None else None,
    }


def _check_fraction(name: str, value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{name} must be a fraction in (0, 1], got {value!r}")


def _errors(entry: dict[str, Any]) -> list[str]:
    found = []
    if entry.get("error"):
        found.append(str(entry["error"]))
    for section in ("matmul", "copy", "h2d"):
        data = entry.get(section)
        if isinstance(data, dict) and data.get("error"):
            found.append(f"{section}: {data['error']}")
    return found


def _peer_group(entry: dict[str, Any]) -> tuple[Any, ...]:
    """Devices compared with each other: same kind and model (and, for CPUs,
    the same number of threads, since CPU matmul scales with them)."""
    if entry.get("kind") == "cpu":
        threads = (entry.get("matmul") or {}).get("threads")
        return ("cpu", entry.get("model"), threads)
    return ("gpu", entry.get("model"))


def _check_devices(
    report: dict[str, Any], matmul_min: float, membw_min: float, reasons: list[Reason]
) -> list[dict[str, Any]]:
    """Errors and datasheet checks; returns the entries fit for peer comparison."""
    measured = []
    cpu_only = bool(report.get("cpu_only"))
    for entry in report.get("devices") or []:
        host, device = entry.get("host"), entry.get("device")
        where = f"{host_label(entry)} {device}"
        if entry.get("skipped"):
            reasons.append(Reason(INFO, f"{where}: not measured: {entry['skipped']}", host, device))
            continue
        if entry.get("stopped"):
            stopped = entry["stopped"]
            why = deadlines.did_not_finish(stopped, stopped.get("what") or "its measurement")
            message = f"SLOW NODE {host_label(entry)}: {why}; stopped, and left out of the later phases"
            reasons.append(Reason(FAIL, message, host, device, FLAG_SLOW, stopped.get("source")))
            continue
        errors = _errors(entry)
        if errors:
            reasons.append(Reason(FAIL, f"{where}: benchmark failed: {'; '.join(errors)}", host, device, FLAG_ERROR))
        if _value(entry, "matmul", "tflops") is None and not errors:
            reasons.append(Reason(FAIL, f"{where}: no matmul result", host, device, FLAG_ERROR))
        if entry.get("kind") != "gpu" or cpu_only:
            if _value(entry, "matmul", "tflops") is not None:
                measured.append(entry)
            continue
        fractions = spec_fractions(entry)
        spec = fractions["spec"]
        model = entry.get("model") or "unknown"
        if spec is None:
            reasons.append(
                Reason(
                    WARN,
                    f"{where}: GPU model {model!r} is not in the spec table (checks/specs.py); "
                    "its TFLOPS and bandwidth are compared with its peers only",
                    host,
                    device,
                    FLAG_NO_SPEC,
                )
            )
        else:
            tflops = _value(entry, "matmul", "tflops")
            if tflops is not None and not maths.at_least(tflops, matmul_min * spec.tflops):
                reasons.append(
                    Reason(
                        FAIL,
                        f"{where} ({spec.key}): matmul {tflops:.1f} TFLOPS is {fractions['matmul']:.0%} "
                        f"of the {spec.tflops:g} {spec.dtype} TFLOPS datasheet figure, below the "
                        f"{matmul_min:.0%} minimum",
                        host,
                        device,
                        FLAG_LOW_TFLOPS,
                        f"datasheet ({spec.source}) x checks_matmul_min_fraction",
                    )
                )
            gbps = _value(entry, "copy", "gbps")
            if gbps is not None and not maths.at_least(gbps, membw_min * spec.mem_bw_gbs):
                reasons.append(
                    Reason(
                        FAIL,
                        f"{where} ({spec.key}): memory copy {gbps:.0f} GB/s is {fractions['copy']:.0%} "
                        f"of the {spec.mem_bw_gbs:g} GB/s datasheet figure, below the {membw_min:.0%} minimum",
                        host,
                        device,
                        FLAG_LOW_MEMBW,
                        f"datasheet ({spec.source}) x checks_membw_min_fraction",
                    )
                )
        if _value(entry, "matmul", "tflops") is not None:
            measured.append(entry)
    return measured


def _check_peers(entries: list[dict[str, Any]], fraction: float, reasons: list[Reason]) -> None:
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for entry in entries:
        groups[_peer_group(entry)].append(entry)
    for group in groups.values():
        metrics = [("matmul", "tflops", "TFLOPS", "matmul", FAIL, FLAG_SLOW)]
        if group[0].get("kind") == "gpu":
            metrics.append(("copy", "gbps", "GB/s", "memory copy", FAIL, FLAG_SLOW))
            # Under a power cap, chips of one model differ by a few percent: worth a look, not a failure.
            metrics.append(("matmul", "sustained_tflops", "TFLOPS", "sustained matmul", WARN, FLAG_SLOW_SUSTAINED))
        for section, key, unit, what, level, flag in metrics:
            values = {str(i): v for i, e in enumerate(group) if (v := _value(e, section, key)) is not None}
            if len(values) < 2:
                continue
            mid = maths.median(values.values())
            for name in maths.outliers(values, fraction):
                entry = group[int(name)]
                value = values[name]
                is_cpu = entry.get("kind") == "cpu"
                kind = "CPU" if is_cpu else f"{entry.get('device')} {entry.get('model')}"
                peers = "nodes" if is_cpu else "GPUs of this model"
                prefix = "SLOW NODE" if level == FAIL else "slower under sustained load:"
                reasons.append(
                    Reason(
                        level,
                        f"{prefix} {host_label(entry)}: {kind} {what} {value:.3g} {unit} is "
                        f"{value / mid:.0%} of the median {mid:.3g} {unit} across {len(values)} {peers} "
                        f"(minimum {fraction:.0%})",
                        entry.get("host"),
                        entry.get("device"),
                        flag,
                        f"the median of {len(values)} {peers} x checks_outlier_fraction",
                    )
                )


def _check_busy(report: dict[str, Any], reasons: list[Reason]) -> bool:
    """A WARN per node whose GPUs or CPUs other jobs held, so the benchmark left them out; whether any did."""
    busy = False
    for node in report.get("nodes") or []:
        gpus, cpus = node.get("busy_gpus") or 0, node.get("busy_cpus") or 0
        held = [f"{gpus} of {node.get('num_gpus', 0):g} GPUs"] if gpus else []
        held += [f"{cpus:g} of {node.get('num_cpus', 0):g} CPUs"] if cpus else []
        if held:
            busy = True
            message = f"{host_label(node)}: {' and '.join(held)} held by other jobs; the benchmark left them out"
            reasons.append(Reason(WARN, message, node.get("host")))
    return busy


def _check_allreduce(report: dict[str, Any], reasons: list[Reason]) -> None:
    data = report.get("allreduce")
    if not data:
        if report.get("mode") == "cluster":
            reasons.append(Reason(FAIL, "all-reduce test did not run"))
        return
    if data.get("skipped"):
        reasons.append(Reason(WARN, f"all-reduce test not run: {data['skipped']}"))
        return
    if data.get("hung"):  # a collective that did not finish: the ranks that held it up, by host
        for host, message in allreduce_plan.hung_summary(data["hung"]):
            reasons.append(Reason(FAIL, message, host=host, source=data["hung"].get("source")))
        return
    if data.get("error"):
        failed = data.get("failed") or [{}]  # the ranks whose actor failed or was lost
        reasons.append(Reason(FAIL, f"all-reduce test failed: {data['error']}", host=failed[0].get("host")))
        return
    check = data.get("value_check") or {}
    if not check.get("ok"):
        detail = check.get("detail") or "no value check recorded"
        reasons.append(Reason(FAIL, f"all-reduce returned wrong values: {detail}"))
        return
    sweep = [row for row in data.get("sweep") or [] if isinstance(row.get("busbw_gbps"), (int, float))]
    if sweep:
        best = max(sweep, key=lambda row: row["busbw_gbps"])
        reasons.append(
            Reason(
                INFO,
                f"all-reduce over {data.get('world_size')} ranks ({data.get('backend')}): values correct, "
                f"peak bus bandwidth {best['busbw_gbps']:.1f} GB/s at {best['bytes'] / 2**20:g} MiB",
            )
        )


def _check_sweep_test(report: dict[str, Any], reasons: list[Reason]) -> None:
    data = report.get("sweep_test")
    if not data:
        if report.get("mode") == "cluster":
            reasons.append(Reason(FAIL, "scheduling smoke test did not run"))
        return
    if data.get("skipped"):
        reasons.append(Reason(WARN, f"scheduling smoke test not run: {data['skipped']}"))
        return
    if data.get("error"):
        reasons.append(Reason(FAIL, f"scheduling smoke test failed: {data['error']}"))
    tasks, completed = data.get("tasks", 0), data.get("completed", 0)
    if completed < tasks or not tasks:
        failures = data.get("failures") or []
        stopped = data.get("stopped") or {}
        detail = f"; {failures[-1]}" if stopped and failures else f"; first failure: {failures[0]}" if failures else ""
        message = f"scheduling smoke test incomplete: {completed} of {tasks} tasks finished{detail}"
        reasons.append(Reason(FAIL, message, source=stopped.get("source")))
    for host in data.get("missing_nodes") or []:
        reasons.append(
            Reason(FAIL, f"scheduling smoke test: no task ran on {host}, which has the resources for them", host)
        )
    if completed == tasks and tasks and not data.get("missing_nodes") and not data.get("error"):
        reasons.append(
            Reason(INFO, f"scheduling smoke test: {tasks} tasks finished on {len(data.get('per_node') or {})} nodes")
        )


def evaluate(
    report: dict[str, Any],
    matmul_min_fraction: float = DEFAULT_MATMUL_MIN_FRACTION,
    membw_min_fraction: float = DEFAULT_MEMBW_MIN_FRACTION,
    outlier_fraction: float = DEFAULT_OUTLIER_FRACTION,
) -> Verdict:
    """Judge a benchmark report (schema in :mod:`checks.benchmark`)."""
    _check_fraction("matmul_min_fraction (checks_matmul_min_fraction)", matmul_min_fraction)
    _check_fraction("membw_min_fraction (checks_membw_min_fraction)", membw_min_fraction)
    _check_fraction("outlier_fraction (checks_outlier_fraction)", outlier_fraction)
    reasons: list[Reason] = []
    cpu_only = bool(report.get("cpu_only"))
    if report.get("error"):
        reasons.append(Reason(FAIL, f"benchmark failed: {report['error']}"))
    busy = _check_busy(report, reasons)
    if not report.get("devices"):  # a cluster whose every GPU is busy with jobs is not broken
        reasons.append(Reason(WARN if busy else FAIL, "no device was measured"))
    if cpu_only:
        reasons.append(
            Reason(
                INFO,
                f"CPU-only {'machine' if report.get('mode') == 'local' else 'cluster'}: the GPU datasheet checks "
                "(matmul TFLOPS, memory bandwidth) do not apply; "
                "nodes are compared with each other on CPU matmul",
            )
        )
    measured = _check_devices(report, matmul_min_fraction, membw_min_fraction, reasons)
    _check_peers(measured, outlier_fraction, reasons)
    _check_allreduce(report, reasons)
    _check_sweep_test(report, reasons)
    reasons += gpu_health.report_findings(report)  # --local's host probe; clock event reasons under the matmul
    return Verdict(reasons)
