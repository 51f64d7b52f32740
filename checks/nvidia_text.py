"""Parsers of the text NVIDIA's tools print, into plain JSON-ready dicts.

- ``nvidia-smi -q``: "Key : Value" lines and section titles nested by indentation
  (:func:`query_tree`), one GPU's health facts from it (:func:`gpu_facts`);
- ``nvidia-smi nvlink -s`` / ``-e``: each link's speed or ``<inactive>``, its error
  counters (:func:`parse_nvlink`);
- the kernel log's ``NVRM: Xid (PCI:0000:18:00): 79, ...`` lines (:func:`parse_xids`);
- ``dcgmi diag``'s text table (:func:`parse_dcgm`). Its ``--json`` form would be easier
  to read, but its layout changed between DCGM majors (3.x ``test_categories``, 4.x
  per-entity results), while the table's rows (``| Denylist | Pass |``) have kept their
  shape: the table it is.
- NVML's clock event reasons bitmask (:func:`decode_reasons`).

Example::

    >>> decode_reasons(0x1)
    ['gpu_idle']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

_KEY_VALUE = re.compile(r"^(\s*)(\S.*?)\s+:\s?(.*)$")
_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


def query_tree(lines: Iterable[str]) -> list[dict[str, Any]]:
    """``nvidia-smi -q`` text as one nested dict per GPU, in nvidia-smi's order.

    The format is "Key : Value" lines and section titles, nested by indentation.

    >>> query_tree(["GPU 00000000:18:00.0", "    PCI", "        Bus Id : 00000000:18:00.0"])
    [{'bus_id': '00000000:18:00.0', 'PCI': {'Bus Id': '00000000:18:00.0'}}]
    """
    gpus: list[dict[str, Any]] = []
    stack: list[tuple[int, dict[str, Any]]] = []
    for line in lines:
        if not line.strip():
            continue
        header = _GPU_HEADER.match(line)
        if header:
            gpus.append({"bus_id": header.group(1)})
            stack = [(-1, gpus[-1])]
            continue
        if not stack:
            continue  # the log's header: timestamp, driver version
        indent = len(line) - len(line.lstrip())
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        match = _KEY_VALUE.match(line)
        if match:
            stack[-1][1][match.group(2).strip()] = match.group(3).strip()
        else:
            child: dict[str, Any] = {}
            stack[-1][1][line.strip()] = child
            stack.append((indent, child))
    return gpus


def _number(value: Any) -> float | None:
    match = re.match(r"\s*(-?\d+(?:\.\d+)?)", str(value)) if value is not None else None
    return float(match.group(1)) if match else None


def _int(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None else None


def _yes(value: Any) -> bool | None:
    text = str(value).strip().lower() if isinstance(value, str) else ""
    return {"yes": True, "no": False}.get(text)


def _section(tree: Mapping[str, Any], *names: str) -> dict[str, Any]:
    for name in names:
        found = tree.get(name)
        if isinstance(found, dict):
            return found
    return {}


# nvidia-smi -q's names for the clock event reasons, and the names used everywhere here (nvidia-smi's
# --query-gpu fields: clocks_event_reasons.<name>).
REASON_NAMES = {
    "Idle": "gpu_idle",
    "Applications Clocks Setting": "applications_clocks_setting",
    "SW Power Cap": "sw_power_cap",
    "HW Slowdown": "hw_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "Display Clock Setting": "display_clock_setting",
}

# nvml.h: nvmlClocksEventReason* (formerly nvmlClocksThrottleReason*), the bits of
# nvmlDeviceGetCurrentClocksEventReasons and of nvidia-smi's clocks_event_reasons.active.
REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def decode_reasons(mask: int) -> list[str]:
    """The names of the clock event reasons set in an NVML bitmask (unknown bits as ``bit_0x...``).

    >>> decode_reasons(0x4 | 0x40)
    ['sw_power_cap', 'hw_thermal_slowdown']
    """
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    rest = mask & ~sum(REASON_BITS)
    return names + ([f"bit_{rest:#x}"] if rest else [])


def _ecc_uncorrectable(errors: Mapping[str, Any]) -> int | None:
    """Uncorrectable ECC errors in one ``ECC Errors`` part: "DRAM/SRAM Uncorrectable..." (R510 on),
    or "Double Bit: Total" before; None when the GPU reports none (N/A, ECC off)."""
    double = errors.get("Double Bit")
    if isinstance(double, dict):
        return _int(double.get("Total"))
    counts = [_int(v) for k, v in errors.items() if "Uncorrectable" in k and not isinstance(v, dict)]
    known = [c for c in counts if c is not None]
    return sum(known) if known else None


def gpu_facts(index: int, tree: Mapping[str, Any]) -> dict[str, Any]:
    """The health facts of one GPU of :func:`query_tree`."""
    link = _section(_section(tree, "PCI"), "GPU Link Info")
    gen, width = _section(link, "PCIe Generation"), _section(link, "Link Width")
    reasons_title = next((t for t in ("Clocks Event Reasons", "Clocks Throttle Reasons") if t in tree), None)
    reasons = _section(tree, "Clocks Event Reasons", "Clocks Throttle Reasons")
    temp = _section(tree, "Temperature")
    power = _section(tree, "GPU Power Readings", "Power Readings")
    ecc = _section(tree, "ECC Errors")
    retired = _section(tree, "Retired Pages")
    remapped = _section(tree, "Remapped Rows")
    pending_pages = retired.get("Pending Page Blacklist", retired.get("Pending Page Retirement"))
    return {
        "index": index,
        "bus_id": tree.get("bus_id"),
        "model": tree.get("Product Name"),
        "pcie": {
            "gen": _int(gen.get("Current")),
            "gen_max": _int(gen.get("Max")),
            "width": _int(width.get("Current")),
            "width_max": _int(width.get("Max")),
        },
        "reasons_title": reasons_title,
        "idle_reasons": [REASON_NAMES.get(k, k) for k, v in reasons.items() if str(v).strip() == "Active"],
        "utilization_pct": _int(_section(tree, "Utilization").get("Gpu")),
        "temp_c": _int(temp.get("GPU Current Temp")),
        "slowdown_c": _int(temp.get("GPU Slowdown Temp")),
        "shutdown_c": _int(temp.get("GPU Shutdown Temp")),
        "tlimit_c": _int(temp.get("GPU T.Limit Temp")),  # degrees left below the slowdown limit (Hopper on)
        "power_w": _number(power.get("Power Draw")),
        "power_limit_w": _number(power.get("Current Power Limit", power.get("Power Limit"))),
        "ecc_volatile_uncorrectable": _ecc_uncorrectable(_section(ecc, "Volatile")),
        "ecc_aggregate_uncorrectable": _ecc_uncorrectable(_section(ecc, "Aggregate")),
        "retired_pages_pending": _yes(pending_pages),
        "remapped_rows_pending": _yes(remapped.get("Pending")),
        "remapping_failed": _yes(remapped.get("Remapping Failure Occurred")),
        "remapped_rows_uncorrectable": _int(remapped.get("Uncorrectable Error")),
    }


_NVLINK_GPU = re.compile(r"^GPU (\d+):\s*(.*?)\s*(?:\(UUID.*)?$")
_NVLINK_STATE = re.compile(r"^\s*Link (\d+):\s*(.+?)\s*$")
_NVLINK_ERROR = re.compile(r"^\s*Link (\d+):\s*(.+?):\s*(\d+)\s*$")


def _under_gpu_headers(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """The lines of ``nvidia-smi nvlink`` output that follow a ``GPU N: ...`` header, with that N."""
    gpu: int | None = None
    for line in lines:
        header = _NVLINK_GPU.match(line)
        if header:
            gpu = int(header.group(1))
        elif gpu is not None:
            yield gpu, line


def parse_nvlink(state_lines: Iterable[str], error_lines: Iterable[str]) -> dict[int, dict[str, Any]]:
    """``nvidia-smi nvlink -s`` and ``-e`` by GPU index: ``{"links": {n: GB/s | None (inactive)},
    "errors": {n: {"CRC Errors": 0, ...}}}``; GPUs that list no link have no entry."""
    found: dict[int, dict[str, Any]] = {}
    for gpu, line in _under_gpu_headers(state_lines):
        state = _NVLINK_STATE.match(line)
        if state:
            links = found.setdefault(gpu, {"links": {}, "errors": {}})["links"]
            links[int(state.group(1))] = _number(state.group(2)) if "inactive" not in state.group(2).lower() else None
    for gpu, line in _under_gpu_headers(error_lines):
        error = _NVLINK_ERROR.match(line)
        if error:
            errors = found.setdefault(gpu, {"links": {}, "errors": {}})["errors"]
            errors.setdefault(int(error.group(1)), {})[error.group(2).strip()] = int(error.group(3))
    return found


_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\):\s*(\d+)(?:,\s*(.*))?")


def _bus_key(domain: str, bus: str, device: str) -> str:
    return f"{domain[-4:]}:{bus}:{device}".lower()


def parse_xids(lines: Iterable[str], gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The kernel log's Xid lines by GPU and code: ``[{"gpu", "bus", "code", "count", "last"}]``
    (``gpu`` None when the bus matches no GPU of ``nvidia-smi -q``)."""
    index = {}
    for gpu in gpus:
        parts = re.match(r"([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})", str(gpu.get("bus_id") or ""))
        if parts:
            index[_bus_key(*parts.groups())] = gpu["index"]
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for line in lines:
        match = _XID.search(line)
        if not match:
            continue
        bus = _bus_key(match.group(1), match.group(2), match.group(3))
        code = int(match.group(4))
        entry = found.setdefault((bus, code), {"gpu": index.get(bus), "bus": bus, "code": code, "count": 0})
        entry["count"] += 1
        entry["last"] = (match.group(5) or "").strip()[:200]
    return list(found.values())


_DCGM_ROW = re.compile(r"^\|([^|]*)\|(.*)\|\s*$")
_DCGM_CATEGORY = re.compile(r"^[|+]-+\s+(\S.*?)\s+-+\+")
_DCGM_STATUS = re.compile(r"^(Pass|Fail|Skip|Warn)\b", re.IGNORECASE)
_DCGM_CELL = 45  # dcgmi wraps a result's text every 45 characters (DATA_INFO_TAG_LEN in dcgmi's Diag.cpp)


def parse_dcgm(lines: list[str]) -> dict[str, Any]:
    """``dcgmi diag -r 1``'s text table: ``{"tests": [{"category", "name", "status", "detail"}],
    "metadata": {...}}``, or ``{"error": first line}`` when it printed no table (no host engine)."""
    tests: list[dict[str, Any]] = []
    metadata: dict[str, str] = {}
    category = ""
    for line in lines:
        title = _DCGM_CATEGORY.match(line)
        if title:
            category = title.group(1)
            continue
        row = _DCGM_ROW.match(line.rstrip())
        if not row:
            continue
        name, cell = row.group(1).strip(), row.group(2)[1:]
        text = cell[:_DCGM_CELL] if len(cell.rstrip()) >= _DCGM_CELL else cell.rstrip()
        if name == "Diagnostic" and text.strip() == "Result":
            continue
        if category == "Metadata" and name:
            metadata[name] = text.strip()
            continue
        status = _DCGM_STATUS.match(text.strip())
        if name and name not in ("Warning", "Error", "Info") and status:
            tests.append({"category": category, "name": name, "status": status.group(1).capitalize(),
                          "detail": ""})  # fmt: skip
        elif tests:
            last = tests[-1]
            if not name and status and not last["detail"]:  # "Pass - GPUs: 1, 2" then "Fail - GPU: 0"
                if status.group(1).lower() == "fail":
                    last["status"] = "Fail"
                continue
            if name in ("Warning", "Error") and last["status"] == "Pass":
                last["status"] = "Warn"
            label = f"{name}: " if name else ""
            last["detail"] += (" " if label and last["detail"] else "") + label + text
    for test in tests:
        test["detail"] = re.sub(r"\s+", " ", test["detail"]).strip()
    if not tests:
        first = next((line.strip() for line in lines if line.strip()), "no output")
        return {"error": first[:200]}
    return {"tests": tests, "metadata": metadata}
