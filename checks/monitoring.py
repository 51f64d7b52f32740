"""What Prometheus says about the cluster: every host's exporters and Ray node are up targets, and
no GPU had an XID error, throttled, hit an uncorrectable ECC error, ran hot or lost an NVLink in the
window.

Prometheus listens on 127.0.0.1 of the monitoring host (``monitoring_host``, the head by default,
port ``monitoring_prometheus_port``), so the reading runs there: ``python -m checks.monitoring
CONFIG`` in that host's ray-node container (host networking), from the copy of the checks the full
checks made (:mod:`checks.full`). It asks Prometheus's HTTP API with urllib, every request
bounded by ``timeout_s`` (and Prometheus's own ``timeout`` parameter on queries):

- ``GET /api/v1/targets?state=active``: for every inventory host, the targets of job ``node``
  (its node exporter), ``ray`` (its Ray node's metrics, from Ray's service-discovery file; the
  head has its dashboard's and autoscaler's too) and, on hosts with GPUs, ``gpu`` (the DCGM
  exporter). A target is the host's by its ``host`` label (the inventory name Prometheus's
  configuration gives every target) or, without one, by the address in its ``instance``. A
  missing or down target is a FAIL naming the host and the target. Targets Prometheus has not
  scraped yet (``health: "unknown"``: it just started) are asked again for up to ``wait_s``.
- ``GET /api/v1/query`` over the last ``window_s`` seconds, on the ``gpu`` job's series (the
  DCGM exporter's field names, its ``etc/default-counters.csv``):

  - ``DCGM_FI_DEV_XID_ERRORS`` (a default counter, "value of the last XID error") changed in the
    window and above 0: an XID error, FAIL for the codes of :data:`checks.gpu_health.XID_FAIL`,
    else WARN; above 0 but unchanged all along, an error from before the window: INFO;
  - ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` (``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` before DCGM 3.3),
    NVML's clock event reasons bitmask: the share of the window HW slowdown, HW thermal slowdown,
    HW power brake slowdown or SW thermal slowdown was active; FAIL for a HW one in half the
    window or more, else WARN (SW thermal: WARN);
  - ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` (uncorrectable ECC errors) or
    ``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`` rising, ``DCGM_FI_DEV_ROW_REMAP_FAILURE`` above 0: FAIL;
  - ``DCGM_FI_DEV_GPU_TEMP`` at or above the GPU's own ``DCGM_FI_DEV_SLOWDOWN_TEMP`` (joined on
    ``instance`` and ``gpu``; a slowdown temperature of 0, not reported, is left out) in more than
    half the window: FAIL;
  - NVLink down in more than half the window: FAIL. Read from ``DCGM_EXP_GPU_HEALTH_STATUS``, the
    exporter's view of DCGM's health watches (one series per GPU and watch, labels ``health_watch``
    and ``health_error_code``, 20 for FAIL; in the exporter since 4.0): ``health_watch="NVLINK"``
    with ``health_error_code="DCGM_FR_NVLINK_DOWN"``. DCGM's NVLink watch reads every link's state
    as ``dcgmi nvlink -s`` shows it and fails when one is down (disabled and unsupported links, and
    GPUs in MIG mode, left out; NVIDIA/DCGM ``modules/health/DcgmHealthWatch.cpp``,
    ``MonitorNVLinkStatus``). Not the per-link ``DCGM_FI_DEV_NVLINK_GET_STATE``: it needs DCGM 4.5,
    and an exporter that does not know a field of its counters file does not start; not
    ``DCGM_FI_DEV_NVLINK_P2P_STATUS``: whether P2P is supported, not whether a link is up. DCGM
    also reports every link of a PCIe GPU without a bridge as down (NVIDIA/NVSentinel#1481): a GPU
    is flagged only where a GPU of its model, itself included, showed its links up in the window.

  The shares of the window are ``avg_over_time`` over a subquery (:func:`step`), NVLink's the share
  of the window's scrapes (the watch's series is another one while it fails). The levels are
  :mod:`checks.gpu_health`'s: its XID table, its rule for clock event reasons under load
  (:func:`checks.gpu_health.load_findings`), its ECC and row-remapping findings. The clock event
  reasons, the ECC totals, the slowdown temperature and the health watches are not among the DCGM
  exporter's default counters (rayrig's ``deploy/monitoring/dcgm-counters.csv`` adds them): a
  metric no GPU exporter exports for XID, throttling or ECC is one INFO saying what was not read.

The program prints one ``RESULT {json}`` line: the report's ``"monitoring"`` section
(``prometheus``, ``host``, ``window_s``, ``targets``, ``exported``, ``findings``, ``error``);
:func:`reasons` turns it into the verdict's reasons on the operator's side. Prometheus not
answering within the timeout is one FAIL that says what to look at.

Example (what :mod:`checks.full` does)::

    config = monitoring.config("head", 9090, nodes, head_settings, gpus)
    ok, lines = node.run(monitoring_command(container, config, workdir=..., limit_s=...))
    section = monitoring.parse_result(lines)
    found = monitoring.reasons(section, config)

Stdlib only: no pyinfra, no Ray.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from . import gpu_health
from .node import Node
from .preflight import detected_gpus
from .reasons import FAIL, INFO, WARN, Reason

NODE, GPU, RAY = "node", "gpu", "ray"  # Prometheus's job names (its configuration on the monitoring host)
WHAT = {NODE: "node exporter", GPU: "GPU exporter", RAY: "Ray node metrics"}
REQUEST_TIMEOUT_S = 10  # one request to Prometheus, connecting included
WAIT_S = 60  # how long targets not scraped yet, missing or down are asked for again
POLL_S = 5
RESULT = "RESULT "
REQUESTS = 9  # the most requests after the targets: the metrics exported, then one per finding

UP, DOWN, UNKNOWN, MISSING = "up", "down", "unknown", "missing"

SOURCE_TARGETS = "Prometheus's last scrape of the target (/api/v1/targets)"
SOURCE_XID = f"{gpu_health.SOURCE_XID}; DCGM_FI_DEV_XID_ERRORS in Prometheus"
SOURCE_THROTTLE = "NVIDIA: clock event reasons (nvml.h), the DCGM exporter's {metric} in Prometheus"
SOURCE_ECC = "NVIDIA: uncorrectable ECC errors and row remapping, the DCGM exporter's {metric} in Prometheus"
SOURCE_HOT = (
    "NVIDIA: the GPU's slowdown temperature, the DCGM exporter's DCGM_FI_DEV_GPU_TEMP and "
    "DCGM_FI_DEV_SLOWDOWN_TEMP in Prometheus"
)
SOURCE_NVLINK = (
    "NVIDIA DCGM: its NVLink health watch (DCGM_FR_NVLINK_DOWN, as dcgmi nvlink -s shows the links), "
    "the DCGM exporter's DCGM_EXP_GPU_HEALTH_STATUS in Prometheus"
)

# What to look at when a host's target is missing or down, by job.
MISSING_HINT = {
    NODE: "the deploy writes the exporters' targets on the monitoring host: deploy again",
    GPU: "the deploy writes the exporters' targets on the monitoring host: deploy again",
    RAY: "Ray's service-discovery file on the head does not list this node: is it an alive Ray node?",
}
DOWN_HINT = {
    NODE: "is its node exporter running? (systemctl status prometheus-node-exporter, node_exporter "
    "or rayrig-node-exporter there) Is port {port} open to the monitoring host?",
    GPU: "is its GPU exporter running? (systemctl status rayrig-gpu-exporter there) Is port {port} open "
    "to the monitoring host?",
    RAY: "is its ray-node running? (rayrig status INVENTORY) Is port {port} open to the monitoring host?",
}

XID = "DCGM_FI_DEV_XID_ERRORS"
CLOCK_REASONS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")  # new name first
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
REMAPPED = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
REMAP_FAILED = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
GPU_TEMP, SLOWDOWN_TEMP = "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SLOWDOWN_TEMP"
HEALTH = "DCGM_EXP_GPU_HEALTH_STATUS"
METRICS = (XID, *CLOCK_REASONS, ECC_DBE, REMAPPED, REMAP_FAILED, GPU_TEMP, SLOWDOWN_TEMP, HEALTH)
NVLINK_DOWN = "DCGM_FR_NVLINK_DOWN"  # the NVLink watch's failure when a link is down (dcgm_errors.h)
MOST = 0.5  # "most of the window": a larger share than this
# The labels that name a GPU in the health watches' series, kept through their aggregation.
GPU_LABELS = "instance, host, Hostname, gpu, UUID, modelName"
# NVML's clock event reason bits (nvml.h, nvmlClocksEventReason*) the checks flag, as gpu_health names them;
# the SW power cap is left out: a GPU under a sustained load holding its power limit is expected.
CLOCK_BITS = {"hw_slowdown": 0x8, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
              "hw_power_brake_slowdown": 0x80}  # fmt: skip


class PrometheusError(Exception):
    """Prometheus did not answer, or answered with an error; the message says which."""


# --- the configuration, on the operator's side -------------------------------------------------------


def skipped(settings: Mapping[str, Any]) -> str | None:
    """Why this part does not run with the head's ``settings`` (None: it runs)."""
    if not settings["monitoring_enabled"]:
        return "monitoring is off (monitoring_enabled = False)"
    if not settings["checks_monitoring"]:
        return "checks_monitoring = False"
    return None


def monitoring_node(nodes: Sequence[Node], head: Node, named: str | None) -> Node | None:
    """The node that runs Prometheus: ``monitoring_host`` (an inventory name or address), the head when
    None; None when it names no node of ``nodes``."""
    if named is None:
        return head
    return next((n for n in nodes if named in (n.name, n.address)), None)


def config(host: str, port: int, nodes: Sequence[Node], settings: Mapping[str, Any],
           gpus: Mapping[str, Mapping[str, Any]], wait_s: float = WAIT_S) -> dict[str, Any]:  # fmt: skip
    """What :func:`read` needs: Prometheus's URL on ``host``'s loopback, each node's name, address and
    expected jobs (``gpu`` where its GPU facts count a GPU, unless ``monitoring_gpu_exporter`` is
    ``"none"``; a node without GPU facts, outside the run, is not expected to have one), the window.

    + settings: the head's settings (``checks_monitoring_window_s``, ``monitoring_gpu_exporter``)
    """
    gpu_exporter = settings["monitoring_gpu_exporter"] != "none"
    hosts = []
    for node in nodes:
        jobs = [NODE, RAY]
        if gpu_exporter and node.name in gpus and detected_gpus(gpus[node.name]) > 0:
            jobs.append(GPU)
        hosts.append({"name": node.name, "address": node.address, "jobs": jobs})
    return {
        "url": f"http://127.0.0.1:{port}",
        "host": host,
        "hosts": hosts,
        "window_s": int(settings["checks_monitoring_window_s"]),
        "timeout_s": REQUEST_TIMEOUT_S,
        "wait_s": max(0, int(wait_s)),
    }


def time_needed(cfg: Mapping[str, Any]) -> int:
    """The longest :func:`read` may take with ``cfg``: its wait, a request after it, and the queries."""
    return int(cfg["wait_s"] + (REQUESTS + 2) * cfg["timeout_s"] + POLL_S)


# --- Prometheus's HTTP API -----------------------------------------------------------------------------


def get(url: str, timeout_s: float) -> Any:
    """The ``data`` of Prometheus's answer to ``GET url`` within ``timeout_s`` seconds; PrometheusError
    when it does not answer in time, cannot be reached, or answers with an error."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 (an http URL we built)
            body = json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as error:
        try:
            body = json.loads(error.read().decode("utf-8"))
        except ValueError:
            raise PrometheusError(f"HTTP {error.code} {error.reason}") from None
    except TimeoutError:
        raise PrometheusError(f"no answer within {timeout_s:g} s") from None
    except urllib.error.URLError as error:
        reason = error.reason
        if isinstance(reason, TimeoutError):
            raise PrometheusError(f"no answer within {timeout_s:g} s") from None
        raise PrometheusError(f"cannot connect: {reason}") from None
    except (OSError, ValueError) as error:
        raise PrometheusError(f"no usable answer: {error}") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        detail = body.get("error") if isinstance(body, dict) else None
        raise PrometheusError(f"answered with an error: {detail or repr(body)}")
    return body.get("data")


def active_targets(url: str, timeout_s: float) -> list[dict[str, Any]]:
    """Prometheus's active targets (``/api/v1/targets?state=active``)."""
    data = get(f"{url}/api/v1/targets?state=active", timeout_s)
    return list((data or {}).get("activeTargets") or [])


def query(url: str, expr: str, timeout_s: float, at: float | None = None) -> list[dict[str, Any]]:
    """The series of an instant query (``/api/v1/query``): ``[{"metric": {...}, "value": [t, "v"]}]``;
    evaluated at ``at`` (Unix seconds, Prometheus's ``time``), else now."""
    params = {"query": expr, "timeout": f"{timeout_s:g}s"}
    if at is not None:
        params["time"] = f"{at:.3f}"
    data = get(f"{url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout_s)
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        raise PrometheusError(f"an instant vector expected for {expr!r}, got {data!r}")
    return list(data.get("result") or [])


# --- which host a target or series is ------------------------------------------------------------------


def _address(instance: str) -> str:
    """The address in an ``instance`` label: ``10.0.0.2:9100`` -> ``10.0.0.2``, ``[fd00::2]:9100`` -> ``fd00::2``."""
    if instance.startswith("["):
        return instance[1 : instance.find("]")] if "]" in instance else instance
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance


def host_of(labels: Mapping[str, str], hosts: Iterable[Mapping[str, Any]]) -> str | None:
    """The inventory host a target's or a series' labels name: its ``host`` label, else the address of its
    ``instance``; None when neither is an inventory host's."""
    hosts = list(hosts)
    names = {h["name"] for h in hosts}
    if labels.get("host") in names:
        return labels["host"]
    address = _address(labels.get("instance", ""))
    by_address = {h["address"]: h["name"] for h in hosts}
    return by_address.get(address) or (address if address in names else None)


# --- the targets ---------------------------------------------------------------------------------------


def target_rows(hosts: Sequence[Mapping[str, Any]], targets: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per expected target: ``{"host", "job", "health", "instance", "error"}``, health ``"missing"``
    for an expected (host, job) with no target at all; in the hosts' order, then the jobs'."""
    found: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for target in targets:
        labels = target.get("labels") or {}
        host = host_of(labels, hosts)
        if host is not None:
            found.setdefault((host, labels.get("job", "")), []).append(target)
    rows = []
    for host in hosts:
        for job in host["jobs"]:
            matched = found.get((host["name"], job), [])
            if not matched:
                rows.append({"host": host["name"], "job": job, "health": MISSING, "instance": None, "error": None})
            for target in sorted(matched, key=lambda t: (t.get("labels") or {}).get("instance", "")):
                rows.append({
                    "host": host["name"],
                    "job": job,
                    "health": target.get("health") or UNKNOWN,
                    "instance": (target.get("labels") or {}).get("instance"),
                    "error": target.get("lastError") or None,
                })  # fmt: skip
    return rows


def target_reasons(rows: Sequence[Mapping[str, Any]], waited_s: float) -> list[Reason]:
    """A FAIL for every missing or down target, naming the host and the target; a WARN for one still
    not scraped after ``waited_s`` seconds."""
    reasons = []
    for row in rows:
        job, health = row["job"], row["health"]
        what = f'{WHAT.get(job, job)} (job "{job}")'
        if health == MISSING:
            message = f"{what}: no target in Prometheus; {MISSING_HINT.get(job, '')}"
            reasons.append(Reason(FAIL, message, host=row["host"], source=SOURCE_TARGETS))
        elif health == DOWN:
            port = (row["instance"] or "").rsplit(":", 1)[-1] or "?"
            said = f": {row['error']}" if row.get("error") else ""
            hint = DOWN_HINT.get(job, "").format(port=port)
            message = f"{what} at {row['instance']} is down in Prometheus{said}; {hint}"
            reasons.append(Reason(FAIL, message, host=row["host"], source=SOURCE_TARGETS))
        elif health != UP:
            message = f"{what} at {row['instance']}: not scraped yet ({health}) after {waited_s:g} s"
            reasons.append(Reason(WARN, message, host=row["host"], source=SOURCE_TARGETS))
    return reasons


# --- the GPUs' findings --------------------------------------------------------------------------------


def span(seconds: float) -> str:
    """``3600`` -> ``"1 h"``, ``1800`` -> ``"30 min"``, ``90`` -> ``"90 s"``."""
    seconds = int(seconds)
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def step(window_s: int) -> str:
    """The subqueries' resolution: the scrape interval (15 s) in a window under 10 min, else 30 s."""
    return "15s" if window_s < 600 else "30s"


def gpu_queries(exported: Iterable[str], window_s: int) -> dict[str, tuple[str, str]]:
    """The queries of the GPU findings whose metric is exported: ``{kind: (metric, PromQL)}``."""
    window = f"{int(window_s)}s"
    subquery = f"[{window}:{step(window_s)}]"
    exported = set(exported)
    queries: dict[str, tuple[str, str]] = {}
    if XID in exported:
        # The gauge keeps the last code: one that changed in the window is an error in it; one that held
        # all along is an error from before it (the GPU health probes read the kernel log since boot).
        last, changed = f'max_over_time({XID}{{job="gpu"}}[{window}]) > 0', f'changes({XID}{{job="gpu"}}[{window}]) > 0'
        queries["xid"] = (XID, f"{last} and {changed}")
        queries["xid_before"] = (XID, f"{last} unless {changed}")
    reasons_metric = next((m for m in CLOCK_REASONS if m in exported), None)
    if reasons_metric:
        bits = [
            f'label_replace(avg_over_time((floor({reasons_metric}{{job="gpu"}} / {bit}) % 2){subquery}) > 0, '
            f'"reason", "{name}", "", "")'
            for name, bit in CLOCK_BITS.items()
        ]
        queries["throttle"] = (reasons_metric, " or ".join(bits))
    for kind, metric, function in (("ecc", ECC_DBE, "increase"), ("remapped", REMAPPED, "increase"),
                                   ("remap_failed", REMAP_FAILED, "max_over_time")):  # fmt: skip
        if metric in exported:
            queries[kind] = (metric, f'{function}({metric}{{job="gpu"}}[{window}]) > 0')
    if GPU_TEMP in exported and SLOWDOWN_TEMP in exported:
        # 1 while at or above the slowdown temperature, 0 below it; the right side aggregated, so that a
        # series renamed by a changed label (a new driver version) cannot make the match ambiguous.
        hot = (f'{GPU_TEMP}{{job="gpu"}} >= bool on(instance, gpu) group_left '
               f'max by (instance, gpu) ({SLOWDOWN_TEMP}{{job="gpu"}} > 0)')  # fmt: skip
        queries["hot"] = (GPU_TEMP, f"avg_over_time(({hot}){subquery}) > {MOST}")
    if HEALTH in exported:
        # Every scrape shows one series of a GPU's NVLink watch, another one (health_error_code) while a link is
        # down: the share of its scrapes in the window that said so. Only where a GPU of the same model, itself
        # included, showed its links up in the window: a PCIe GPU without a bridge never does.
        watch = 'job="gpu", health_watch="NVLINK", health_error_code'
        down, up = f'{HEALTH}{{{watch}="{NVLINK_DOWN}"}}', f'{HEALTH}{{{watch}!="{NVLINK_DOWN}"}}'
        scrapes = f'sum by ({GPU_LABELS}) (count_over_time({HEALTH}{{job="gpu", health_watch="NVLINK"}}[{window}]))'
        share = f"sum by ({GPU_LABELS}) (count_over_time({down}[{window}])) / {scrapes}"
        peers = f"group by (modelName) (count_over_time({up}[{window}]))"
        queries["nvlink_down"] = (HEALTH, f"{share} > {MOST} and on(modelName) {peers}")
    return queries


def exported_query() -> str:
    """The query that lists which of :data:`METRICS` the GPU exporters export."""
    return f'count by (__name__) ({{job="gpu", __name__=~"{"|".join(METRICS)}"}})'


def _gpu(labels: Mapping[str, str]) -> tuple[str | None, str]:
    """The device (``"gpu 3"``) and how a message names it."""
    index = labels.get("gpu")
    device = f"gpu {index}" if index is not None else None
    model = labels.get("modelName")
    where = device or "a GPU"
    return device, f"{where} ({model})" if model else where


def gpu_reasons(series: Mapping[str, Sequence[Mapping[str, Any]]], metrics: Mapping[str, str],
                hosts: Sequence[Mapping[str, Any]], window_s: int) -> list[Reason]:  # fmt: skip
    """The findings of the GPU queries' ``series`` (by kind, as :func:`gpu_queries` names them), each naming
    the host and the GPU; ``metrics``: the metric each kind read."""
    window = span(window_s)
    reasons = []
    for kind, found in series.items():
        metric = metrics[kind]
        for one in found:
            labels = one.get("metric") or {}
            host = host_of(labels, hosts) or labels.get("host") or labels.get("instance") or "?"
            device, where = _gpu(labels)
            value = float(one["value"][1])
            if kind == "xid_before":
                message = f"{where}: its last Xid, {int(value)}, is from before the last {window} (none since)"
                reasons.append(Reason(INFO, message, host=host, device=device, source=SOURCE_XID))
            elif kind == "xid":
                code = int(value)
                level = FAIL if code in gpu_health.XID_FAIL else WARN
                meaning = gpu_health.XID_MEANINGS.get(code, "see NVIDIA's XID catalogue")
                message = f"{where}: Xid {code} in the last {window}: {meaning}"
                reasons.append(Reason(level, message, host=host, device=device, source=SOURCE_XID))
            elif kind == "throttle":
                name = labels.get("reason", "")
                level = WARN if name == "sw_thermal_slowdown" or value < 0.5 else FAIL
                text = gpu_health.LOAD_REASON_LEVELS.get(name, name)
                message = f"{where}: {text} in {value:.0%} of the last {window}"
                reasons.append(Reason(level, message, host=host, device=device,
                                      source=SOURCE_THROTTLE.format(metric=metric)))  # fmt: skip
            elif kind == "hot":
                message = f"{where}: at or above its slowdown temperature in {value:.0%} of the last {window}"
                reasons.append(Reason(FAIL, message, host=host, device=device, source=SOURCE_HOT))
            elif kind == "nvlink_down":
                message = f"{where}: NVLink down in {value:.0%} of the last {window} (dcgmi nvlink -s there says which)"
                reasons.append(Reason(FAIL, message, host=host, device=device, source=SOURCE_NVLINK))
            else:
                text = {
                    "ecc": f"{max(1, round(value))} uncorrectable (double-bit) ECC error(s) in the last {window}",
                    "remapped": f"{max(1, round(value))} row(s) remapped for uncorrectable errors in the last {window}",
                    "remap_failed": "row remapping failed (the GPU has no spare rows left: replace it)",
                }[kind]
                reasons.append(Reason(FAIL, f"{where}: {text}", host=host, device=device,
                                      source=SOURCE_ECC.format(metric=metric)))  # fmt: skip
    return reasons


def not_read(exported: Iterable[str]) -> list[Reason]:
    """An INFO for each GPU finding whose metric no GPU exporter exports (one for all when none is)."""
    exported = set(exported)
    if not exported:
        return [Reason(INFO, "no GPU metrics in Prometheus: XID errors, throttling and ECC errors not read "
                             "(the GPU exporters' targets say why)")]  # fmt: skip
    missing = []
    if XID not in exported:
        missing.append(f"XID errors ({XID})")
    if not exported & set(CLOCK_REASONS):
        missing.append(f"throttling ({' or '.join(CLOCK_REASONS)})")
    if ECC_DBE not in exported:
        missing.append(f"uncorrectable ECC errors ({ECC_DBE})")
    hint = "the GPU exporters do not export it (add it to the DCGM exporter's counters)"
    return [Reason(INFO, f"not read from Prometheus: {what}: {hint}") for what in missing]


# --- the whole reading ----------------------------------------------------------------------------------


def read(cfg: Mapping[str, Any], sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Everything this module reads from Prometheus with ``cfg`` (:func:`config`): the report's
    ``"monitoring"`` section, its ``findings`` already judged."""
    url, timeout_s, hosts = cfg["url"], float(cfg["timeout_s"]), cfg["hosts"]
    section: dict[str, Any] = {"prometheus": url, "host": cfg["host"], "window_s": cfg["window_s"], "targets": [],
                               "exported": None, "findings": [], "error": None}  # fmt: skip
    started = time.monotonic()
    try:
        while True:
            rows = target_rows(hosts, active_targets(url, timeout_s))
            waited = time.monotonic() - started
            if all(row["health"] == UP for row in rows) or waited + POLL_S > cfg["wait_s"]:
                break
            sleep(POLL_S)
        section["targets"] = rows
        found = target_reasons(rows, round(waited))
        if any(GPU in host["jobs"] for host in hosts):
            exported = sorted({s["metric"].get("__name__", "") for s in query(url, exported_query(), timeout_s)})
            section["exported"] = exported
            queries = gpu_queries(exported, cfg["window_s"])
            series = {kind: query(url, expr, timeout_s) for kind, (_metric, expr) in queries.items()}
            metrics = {kind: metric for kind, (metric, _expr) in queries.items()}
            found += gpu_reasons(series, metrics, hosts, cfg["window_s"]) + not_read(exported)
    except PrometheusError as error:
        section["error"] = str(error)
        return section
    section["findings"] = [reason.as_dict() for reason in found]
    return section


def parse_result(lines: Sequence[str]) -> dict[str, Any] | None:
    """The section the program printed after ``RESULT`` (None without one)."""
    results = [line[len(RESULT) :] for line in lines if line.startswith(RESULT)]
    try:
        return json.loads(results[-1]) if results else None
    except ValueError:
        return None


def reasons(section: Mapping[str, Any], cfg: Mapping[str, Any]) -> list[Reason]:
    """The verdict's reasons from the ``"monitoring"`` section: its findings, or one FAIL when Prometheus
    did not answer, saying what to look at."""
    if section.get("skipped"):
        return []
    if section.get("error"):
        host = cfg["host"]
        return [Reason(
            FAIL,
            f"Prometheus on {host} ({cfg['url']}) did not answer: {section['error']}; look at "
            f"`systemctl status rayrig-prometheus` and `journalctl -u rayrig-prometheus` on {host}, "
            "or set checks_monitoring = False to leave it out of the checks",
            host=host,
        )]  # fmt: skip
    return [Reason(**finding) for finding in section.get("findings") or []]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m checks.monitoring CONFIG_JSON``: print the section after ``RESULT``; exit 0."""
    parser = argparse.ArgumentParser(prog="python -m checks.monitoring", description=__doc__.splitlines()[0])
    parser.add_argument("config", help="the JSON of checks.monitoring.config(...)")
    args = parser.parse_args(argv)
    print(RESULT + json.dumps(read(json.loads(args.config))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
