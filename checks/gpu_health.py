"""GPU health beyond speed: what a host's own tools say about each of its GPUs.

The benchmark measures how fast a GPU is; this module reads why it might not be:

- ``nvidia-smi -q``: the PCIe link (generation and width, now and at most), the active
  clock event reasons ("Clocks Event Reasons" from driver 535 on, "Clocks Throttle
  Reasons" before), temperature against the GPU's own slowdown and shutdown
  temperatures, power, volatile and aggregate ECC errors, pending retired pages,
  remapped rows (pending, failed);
- ``nvidia-smi nvlink -s`` and ``-e``: each NVLink's state and speed, its error counters;
- the kernel log since boot (``journalctl -k -b``, else ``dmesg``): the
  ``NVRM: Xid (PCI:0000:18:00): 79, ...`` lines, by GPU and code;
- ``dcgmi diag -r 1`` when DCGM is installed: its quick deployment checks. NVIDIA's
  ``dcgmi diag`` reference says level 1 "normally lasts seconds" (level 2 about two
  minutes), so it runs whenever ``dcgmi`` is there, bounded like every other section.

:func:`probe_command` is one ``sh`` script that prints each tool's raw output after a
``==> NAME`` line (and ``==> NAME: missing`` / ``: exit N`` / ``: unreadable`` when it
could not); :func:`parse` turns that into a JSON-ready dict, one entry per GPU (index as
nvidia-smi numbers them, bus id, model); :func:`findings` judges it, each reason naming
the host and the GPU (``device="gpu 3"``) and saying where its threshold comes from.

The parsers are in :mod:`checks.nvidia_text`. Under load, :class:`checks.throttle.ThrottleSampler`
reads one GPU's active clock event reasons (NVML's bitmask) while the sustained matmul runs;
:func:`load_findings` judges what it saw.

Example::

    ok, lines = node.run(probe_command(gpus))
    health = parse("\\n".join(lines), nvswitches=gpus["nvswitches"])
    reasons = findings("gpu-1", health)

Stdlib only (pynvml is used when importable): no torch, no Ray, no pyinfra.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping
from typing import Any

from .node import Node
from .nvidia_text import gpu_facts, parse_dcgm, parse_nvlink, parse_xids, query_tree
from .reasons import FAIL, INFO, WARN, Reason, host_label

MARK = "==> "
SMI_Q = "nvidia-smi -q"
NVLINK_S = "nvidia-smi nvlink -s"
NVLINK_E = "nvidia-smi nvlink -e"
XID = "xid"
DCGM = "dcgmi diag -r 1"
FLAG_THROTTLED = "THROTTLED"

SOURCE_LINK = "the GPU's own maximum link, nvidia-smi -q 'GPU Link Info: Max'"
SOURCE_REASONS = "NVIDIA: clock event reasons (nvml.h, nvidia-smi -q 'Clocks Event Reasons')"
SOURCE_TEMP = "the GPU's slowdown temperature from nvidia-smi -q"
SOURCE_ECC = "NVIDIA: ECC and row remapping (nvidia-smi -q 'ECC Errors', 'Remapped Rows', 'Retired Pages')"
SOURCE_NVLINK = "NVIDIA: nvidia-smi nvlink -s (link state) and -e (error counters)"
SOURCE_XID = "NVIDIA: XID errors catalogue (docs.nvidia.com/deploy/xid-errors)"
SOURCE_DCGM = "DCGM diagnostic level 1"

# $1: GPUs on the PCI bus (NVLink joins two or more). One section per tool, each bounded by
# timeout, none able to fail the script. The kernel log may need root (kernel.dmesg_restrict,
# the systemd-journal group): read through sudo -n where the user is not root and sudo asks
# no password, as the user otherwise.
PROBE_SCRIPT = r"""
run() { s=$1; shift; if command -v timeout >/dev/null 2>&1; then timeout -k 5 "$s" "$@"; else "$@"; fi; }
section() { name=$1; s=$2; shift 2; echo "==> $name"
  if ! command -v "$1" >/dev/null 2>&1; then echo "==> $name: missing"; return; fi
  run "$s" "$@" 2>&1; rc=$?; [ "$rc" -eq 0 ] || echo "==> $name: exit $rc"; }
if [ "$(id -u)" -eq 0 ]; then S=; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then S="sudo -n"
else S=; fi
section "nvidia-smi -q" 60 nvidia-smi -q
if [ "${1:-0}" -gt 1 ]; then
  section "nvidia-smi nvlink -s" 30 nvidia-smi nvlink -s
  section "nvidia-smi nvlink -e" 30 nvidia-smi nvlink -e
fi
echo "==> xid"
if command -v journalctl >/dev/null 2>&1 && log=$(run 60 $S journalctl -k -b -q --no-pager 2>/dev/null) \
   && [ -n "$log" ]; then echo "==> xid: from journalctl -k -b"
elif log=$(run 30 $S dmesg 2>/dev/null) && [ -n "$log" ]; then echo "==> xid: from dmesg"
else log=; echo "==> xid: unreadable"; fi
printf '%s\n' "$log" | grep 'NVRM: Xid' | tail -n 500
section "dcgmi diag -r 1" 180 dcgmi diag -r 1
exit 0
"""


def probe_command(gpus: Mapping[str, Any], timeout_s: float | None = None) -> str:
    """The shell command that prints one host's GPU health sections (see the module); it always exits 0
    (but for ``timeout``, with ``timeout_s``: the sections it finished are printed).

    + gpus: the node's GPU facts (:mod:`checks.preflight`); ``pci_count`` decides the NVLink sections

    >>> probe_command({"pci_count": 8, "nvswitches": 4, "driver": None})[-3:]
    '_ 8'
    """
    command = f"sh -c {shlex.quote(PROBE_SCRIPT)} _ {int(gpus.get('pci_count') or 0)}"
    return command if timeout_s is None else f"timeout -k 5 {max(1, int(timeout_s))} {command}"


def check_node(
    node: Node, gpus: Mapping[str, Any], timeout_s: float | None = None
) -> tuple[dict[str, Any], list[Reason]]:
    """Run the probe on ``node`` (whose GPU facts are ``gpus``), stopped after ``timeout_s`` if given;
    what it found and the reasons."""
    _ok, lines = node.run(probe_command(gpus, timeout_s))
    health = parse("\n".join(lines), nvswitches=int(gpus.get("nvswitches") or 0))
    return health, findings(node.name, health)


def probe_local(host: str, gpu_count: int, timeout_s: float = 600) -> dict[str, Any] | None:
    """Run :func:`probe_command` on this machine: ``{host: parse(...)}``, or None without nvidia-smi."""
    if not any(os.access(os.path.join(d, "nvidia-smi"), os.X_OK) for d in os.get_exec_path()):
        return None
    command = probe_command({"pci_count": gpu_count})
    try:
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=timeout_s, check=False)
        text = done.stdout
    except (OSError, subprocess.SubprocessError) as exc:
        text = f"{MARK}{SMI_Q}\n{MARK}{SMI_Q}: could not run the probe: {exc}\n"
    return {host: parse(text)}


# --- the sections --------------------------------------------------------------------------------


def sections(text: str) -> dict[str, dict[str, Any]]:
    """The probe's output by section: ``{name: {"lines": [...], "status": "ok" | "missing" | ...}}``."""
    found: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        if line.startswith(MARK):
            name, sep, status = line[len(MARK) :].partition(": ")
            if sep and name in found:
                found[name]["status"] = status.strip()
                continue
            current = found.setdefault(line[len(MARK) :].strip(), {"lines": [], "status": "ok"})
        elif current is not None:
            current["lines"].append(line)
    return found


def parse(text: str, nvswitches: int = 0) -> dict[str, Any]:
    """The probe's output (:func:`probe_command`) as a JSON-ready dict.

    ``{"gpus": [{index, bus_id, model, pcie, idle_reasons, temp_c, ..., "nvlink"?}],
    "xids": [...], "dcgm": {...} | None, "nvswitches": n,
    "tools": {"nvidia-smi": ..., "kernel_log": ..., "dcgmi": ...}}``
    """
    found = sections(text)
    smi = found.get(SMI_Q, {"lines": [], "status": "not run"})
    gpus = [gpu_facts(i, tree) for i, tree in enumerate(query_tree(smi["lines"]))]
    nvlink = parse_nvlink(found.get(NVLINK_S, {}).get("lines", []), found.get(NVLINK_E, {}).get("lines", []))
    for gpu in gpus:
        if gpu["index"] in nvlink:
            gpu["nvlink"] = nvlink[gpu["index"]]
    xid = found.get(XID, {"lines": [], "status": "not run"})
    dcgm = found.get(DCGM)
    dcgm_status = dcgm["status"] if dcgm else "not run"
    return {
        "gpus": gpus,
        "nvswitches": int(nvswitches or 0),
        "xids": parse_xids(xid["lines"], gpus) if xid["status"] != "unreadable" else [],
        "dcgm": parse_dcgm(dcgm["lines"]) if dcgm and dcgm_status != "missing" else None,
        "tools": {
            "nvidia-smi": smi["status"] if gpus or smi["status"] != "ok" else "no GPU listed",
            "kernel_log": xid["status"],
            "dcgmi": dcgm_status,
        },
    }


# NVIDIA's XID catalogue, one line each: the codes that mean the GPU (or its memory, NVLink or
# firmware) needs a reset, a reboot or a replacement are FAIL; the others (mostly an application's
# own fault) WARN.
XID_MEANINGS = {
    13: "graphics engine exception (often the application's fault)",
    31: "GPU memory page fault (often the application's fault)",
    32: "invalid or corrupted push buffer stream",
    38: "driver firmware error",
    43: "GPU stopped processing (often the application's fault)",
    45: "preemptive cleanup, after earlier errors",
    48: "double bit ECC error",
    61: "internal micro-controller breakpoint or warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapping recording failure",
    68: "video processor exception",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (reset the GPU)",
    95: "uncontained ECC error (reset the GPU)",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    121: "C2C link corrected error",
    140: "unrecovered ECC error",
}
XID_FAIL = frozenset({48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140})


# --- findings --------------------------------------------------------------------------------


def _where(gpu: Mapping[str, Any]) -> str:
    return f"gpu {gpu['index']} ({gpu.get('model') or 'unknown model'}, bus {gpu.get('bus_id') or '?'})"


def _reason(level: str, message: str, host: str, gpu: Mapping[str, Any] | None, source: str) -> Reason:
    device = f"gpu {gpu['index']}" if gpu is not None else None
    return Reason(level, message, host=host, device=device, source=source)


def _pcie(host: str, gpu: Mapping[str, Any], reasons: list[Reason]) -> bool:
    """Width below the maximum: FAIL (datacenter GPUs do not narrow the link to save power: a link
    trained narrower is a seating, riser or slot fault). Generation below the maximum is how an
    idle GPU saves power: only under load is it a finding (WARN). Returns whether gen is low at idle."""
    pcie = gpu["pcie"]
    width, width_max, gen, gen_max = pcie["width"], pcie["width_max"], pcie["gen"], pcie["gen_max"]
    if width and width_max and width < width_max:
        reasons.append(_reason(FAIL, f"{_where(gpu)}: PCIe link x{width}, below its maximum x{width_max}",
                               host, gpu, SOURCE_LINK))  # fmt: skip
    if gen and gen_max and gen < gen_max:
        busy = "gpu_idle" not in gpu["idle_reasons"] and (gpu.get("utilization_pct") or 0) > 10
        if busy:
            reasons.append(_reason(WARN, f"{_where(gpu)}: PCIe gen {gen} under load "
                                   f"({gpu['utilization_pct']}% busy), below its maximum gen {gen_max}",
                                   host, gpu, SOURCE_LINK))  # fmt: skip
        return not busy
    return False


# Each reason active at idle: (a FAIL, not a WARN?, what it says).
IDLE_REASONS = {
    # External power brake or overheating with no load: the power supply, the cooling or the board.
    "hw_power_brake_slowdown": (True, "HW power brake slowdown active at idle"),
    "hw_thermal_slowdown": (True, "HW thermal slowdown active at idle"),
    # nvml.h: HW slowdown may also be reported during a PState or clock change: one reading is not proof.
    "hw_slowdown": (False, "HW slowdown active at idle (one reading; the matmul's samples confirm it)"),
    "sw_thermal_slowdown": (False, "SW thermal slowdown active at idle (hotter than its max operating temperature)"),
}


def findings(host: str, health: Mapping[str, Any]) -> list[Reason]:
    """What one host's :func:`parse` found, as reasons naming the host and GPU (``device="gpu N"``,
    nvidia-smi's index); each says where its threshold comes from (``source``)."""
    reasons: list[Reason] = []
    tools = health.get("tools") or {}
    gpus = health.get("gpus") or []
    if not gpus:
        status = tools.get("nvidia-smi", "not run")
        why = "nvidia-smi is not installed" if status == "missing" else f"nvidia-smi -q: {status}"
        reasons.append(Reason(INFO, f"GPU health not read: {why}", host=host))
    low_gen = []
    for gpu in gpus:
        if _pcie(host, gpu, reasons):
            low_gen.append(gpu)
        active = set(gpu["idle_reasons"])
        if {"hw_power_brake_slowdown", "hw_thermal_slowdown"} & active:
            active.discard("hw_slowdown")  # the umbrella of the two: the specific one says more
        for name, (severe, text) in IDLE_REASONS.items():
            if name in active:
                level = FAIL if severe else WARN
                reasons.append(_reason(level, f"{_where(gpu)}: {text}", host, gpu, SOURCE_REASONS))
        temp, slowdown, tlimit = gpu.get("temp_c"), gpu.get("slowdown_c"), gpu.get("tlimit_c")
        if temp is not None and slowdown is not None and temp >= slowdown:
            reasons.append(_reason(WARN, f"{_where(gpu)}: {temp} C, at or above its slowdown temperature "
                                   f"{slowdown} C", host, gpu, SOURCE_TEMP))  # fmt: skip
        elif tlimit is not None and tlimit <= 0:
            reasons.append(_reason(WARN, f"{_where(gpu)}: {-tlimit} C past its slowdown limit "
                                   "(nvidia-smi -q 'GPU T.Limit Temp')", host, gpu, SOURCE_TEMP))  # fmt: skip
        if gpu.get("ecc_volatile_uncorrectable"):
            reasons.append(_reason(FAIL, f"{_where(gpu)}: {gpu['ecc_volatile_uncorrectable']} uncorrectable "
                                   "ECC errors since the driver loaded", host, gpu, SOURCE_ECC))  # fmt: skip
        if gpu.get("remapping_failed"):
            reasons.append(_reason(FAIL, f"{_where(gpu)}: row remapping failed (the GPU has no spare "
                                   "rows left: replace it)", host, gpu, SOURCE_ECC))  # fmt: skip
        if gpu.get("remapped_rows_pending"):
            reasons.append(_reason(WARN, f"{_where(gpu)}: remapped rows pending: reset the GPU "
                                   "(or reboot) to apply them", host, gpu, SOURCE_ECC))  # fmt: skip
        if gpu.get("retired_pages_pending"):
            reasons.append(_reason(WARN, f"{_where(gpu)}: retired pages pending: reset the GPU "
                                   "(or reboot) to apply them", host, gpu, SOURCE_ECC))  # fmt: skip
        _nvlink(host, gpu, int(health.get("nvswitches") or 0), reasons)
    if low_gen:
        names = ", ".join(f"gpu {g['index']} gen {g['pcie']['gen']}/{g['pcie']['gen_max']}" for g in low_gen)
        reasons.append(Reason(INFO, f"PCIe generation below the maximum at idle ({names}): "
                                      "GPUs lower it to save power; the h2d copy measures the link under load",
                                      host=host, source=SOURCE_LINK))  # fmt: skip
    by_index = {g["index"]: g for g in gpus}
    for xid in health.get("xids") or []:
        gpu = by_index.get(xid["gpu"])
        level = FAIL if xid["code"] in XID_FAIL else WARN
        meaning = XID_MEANINGS.get(xid["code"], "see NVIDIA's XID catalogue")
        where = _where(gpu) if gpu else f"GPU at PCI {xid['bus']}"
        times = f" x{xid['count']}" if xid["count"] > 1 else ""
        reasons.append(_reason(level, f"{where}: Xid {xid['code']}{times} since boot: {meaning}",
                               host, gpu, SOURCE_XID))  # fmt: skip
    if gpus and tools.get("kernel_log") == "unreadable":
        reasons.append(Reason(INFO, "kernel log unreadable (not root, no passwordless sudo): "
                                      "XID errors not read", host=host))  # fmt: skip
    reasons += _dcgm(host, health.get("dcgm"), tools.get("dcgmi"), bool(gpus))
    return reasons


def _nvlink(host: str, gpu: Mapping[str, Any], nvswitches: int, reasons: list[Reason]) -> None:
    """A link down among active ones, or any down on an NVSwitch system: FAIL. All down without an
    NVSwitch is a PCIe card without its bridge: INFO. Error counters above zero: WARN."""
    nvlink = gpu.get("nvlink") or {}
    links = nvlink.get("links") or {}
    down = sorted(int(n) for n, speed in links.items() if speed is None)
    if down and (len(down) < len(links) or nvswitches):
        active = f"{len(links) - len(down)} of {len(links)} active"
        reasons.append(_reason(FAIL, f"{_where(gpu)}: NVLink {_numbers(down)} inactive ({active})",
                               host, gpu, SOURCE_NVLINK))  # fmt: skip
    elif down:
        reasons.append(_reason(INFO, f"{_where(gpu)}: no active NVLink (no bridge or NVSwitch)",
                               host, gpu, SOURCE_NVLINK))  # fmt: skip
    counted = []
    for link, counters in sorted((nvlink.get("errors") or {}).items(), key=lambda item: int(item[0])):
        nonzero = [f"{count} {name}" for name, count in counters.items() if count]
        if nonzero:
            counted.append(f"link {link}: {', '.join(nonzero)}")
    if counted:
        reasons.append(_reason(WARN, f"{_where(gpu)}: NVLink errors: {'; '.join(counted)}",
                               host, gpu, SOURCE_NVLINK))  # fmt: skip


def _numbers(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


def _dcgm(host: str, dcgm: Mapping[str, Any] | None, status: str | None, has_gpus: bool) -> list[Reason]:
    if not has_gpus:
        return []
    if status == "missing":
        return [Reason(INFO, "DCGM is not installed (no dcgmi): its diagnostic was not run", host=host)]
    if not dcgm:
        return []
    if dcgm.get("error"):
        return [Reason(INFO, f"DCGM diagnostic could not run: {dcgm['error']}", host=host)]
    reasons = []
    for test in dcgm.get("tests") or []:
        level = {"Fail": FAIL, "Warn": WARN}.get(test["status"])
        if level:
            detail = f": {test['detail']}" if test["detail"] else ""
            verb = "failed" if level == FAIL else "warned"
            reasons.append(Reason(level, f"DCGM diagnostic level 1: {test['name']} {verb}{detail}",
                                          host=host, source=SOURCE_DCGM))  # fmt: skip
    if not reasons:
        passed = sum(1 for t in dcgm.get("tests") or [] if t["status"] == "Pass")
        reasons.append(Reason(INFO, f"DCGM diagnostic level 1: {passed} checks passed",
                                      host=host, source=SOURCE_DCGM))  # fmt: skip
    return reasons


# --- under load ------------------------------------------------------------------------------

SOURCE_LOAD = "NVIDIA: clock event reasons (nvml.h), sampled during the sustained matmul"

LOAD_REASON_LEVELS = {
    "hw_power_brake_slowdown": "HW power brake slowdown (the system's power supply cut the clocks)",
    "hw_thermal_slowdown": "HW thermal slowdown (too hot)",
    "hw_slowdown": "HW slowdown (clocks cut by half or more)",
    "sw_thermal_slowdown": "SW thermal slowdown (above its max operating temperature)",
}


def report_findings(report: Mapping[str, Any]) -> list[Reason]:
    """The findings of a benchmark report: the host probe's that ``--local`` ran (``"gpu_health"``,
    by host) and the clock event reasons under load of every device entry."""
    reasons = []
    for host, health in sorted((report.get("gpu_health") or {}).items()):
        reasons += findings(host, health)
    return reasons + load_findings(report)


def load_findings(report: Mapping[str, Any]) -> list[Reason]:
    """The clock event reasons seen under the sustained matmul, by device entry.

    HW slowdown, thermal or power brake in at least half the samples: FAIL; in fewer: WARN
    (nvml.h: HW slowdown may be reported during a clock change). SW thermal slowdown: WARN. The
    SW power cap under a sustained matmul is how the GPU holds its power limit: INFO.
    """
    reasons = []
    for entry in report.get("devices") or []:
        seen = entry.get("throttle_under_load")
        if not isinstance(seen, dict) or not seen.get("samples"):
            continue
        host, device, samples = entry.get("host"), entry.get("device"), seen["samples"]
        counts = seen.get("counts") or {}
        where = f"{host_label(entry)} {device}"
        shown = False
        for name, text in LOAD_REASON_LEVELS.items():
            count = counts.get(name, 0)
            if not count or (name == "hw_slowdown" and shown):
                continue
            shown = True
            level = WARN
            if name != "sw_thermal_slowdown" and 2 * count >= samples:
                level = FAIL
            reasons.append(Reason(level, f"{where}: {text} in {count} of {samples} samples under load",
                                          host, device, FLAG_THROTTLED, SOURCE_LOAD))  # fmt: skip
        if counts.get("sw_power_cap"):
            reasons.append(Reason(INFO, f"{where}: at its power cap in {counts['sw_power_cap']} "
                                          f"of {samples} samples under load (expected)", host, device,
                                          source=SOURCE_LOAD))  # fmt: skip
    return reasons


# --- the report's table ----------------------------------------------------------------------


def health_by_host(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every host's GPU health in a report: the preflight's (full checks) and the benchmark's own (--local)."""
    found = {host: data for host, data in (report.get("gpu_health") or {}).items() if isinstance(data, dict)}
    for host, pre in (report.get("preflight") or {}).items():
        if isinstance(pre, dict) and isinstance(pre.get("gpu_health"), dict):
            found[host] = pre["gpu_health"]
    return found


def _dcgm_cell(health: Mapping[str, Any]) -> str:
    dcgm = health.get("dcgm")
    if (health.get("tools") or {}).get("dcgmi") == "missing":
        return "not installed"
    if not dcgm:
        return "-"
    if dcgm.get("error"):
        return "did not run"
    bad = [t["name"] for t in dcgm.get("tests") or [] if t["status"] in ("Fail", "Warn")]
    return ("FAIL: " + ", ".join(bad)) if bad else "pass"


def table_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """One row per GPU: host, GPU, PCIe now / max, temperature, throttle reasons at idle,
    remapped rows pending, XIDs since boot, DCGM; no rows without GPU health data."""
    rows = []
    for host, health in sorted(health_by_host(report).items()):
        xids: dict[Any, list[str]] = {}
        for xid in health.get("xids") or []:
            xids.setdefault(xid["gpu"], []).append(f"{xid['code']}" + (f"x{xid['count']}" if xid["count"] > 1 else ""))
        for gpu in health.get("gpus") or []:
            p = gpu["pcie"]
            throttle = [r for r in gpu["idle_reasons"] if r != "gpu_idle"]
            temp = "-" if gpu.get("temp_c") is None else f"{gpu['temp_c']} C"
            if gpu.get("slowdown_c") is not None:
                temp += f" / {gpu['slowdown_c']}"
            rows.append([
                host,
                str(gpu["index"]),
                f"gen{p['gen'] or '?'} x{p['width'] or '?'} / gen{p['gen_max'] or '?'} x{p['width_max'] or '?'}",
                temp,
                ",".join(throttle) or "-",
                {True: "YES", False: "no"}.get(gpu.get("remapped_rows_pending"), "-"),
                ",".join(xids.get(gpu["index"], [])) or "-",
                _dcgm_cell(health),
            ])  # fmt: skip
    return rows


TABLE_HEADERS = ["host", "GPU", "PCIe now / max", "temp / slowdown", "throttle at idle", "remap pending", "XIDs",
                 "DCGM"]  # fmt: skip
