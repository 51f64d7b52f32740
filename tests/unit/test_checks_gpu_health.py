"""GPU health beyond speed (checks/gpu_health.py, checks/nvidia_text.py, checks/throttle.py).

No GPU here: the probe's output is recorded in tests/unit/fixtures/gpu_health/, each file written
from NVIDIA's documented formats and public recorded outputs (its first lines say which).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from checks import full, gpu_health, report, throttle, verdict
from checks.nvidia_text import decode_reasons, parse_dcgm
from checks.verdict import FAIL, INFO, WARN, Reason
from tests.unit.test_checks_full import BENCH as CPU_BENCH
from tests.unit.test_checks_full import HEAD_IP, RUNNING, WORKER_IP, FakeNode, alive, settings

FIXTURES = Path(__file__).parent / "fixtures" / "gpu_health"


def health(name: str, nvswitches: int = 0) -> dict:
    return gpu_health.parse((FIXTURES / name).read_text(), nvswitches=nvswitches)


def found(name: str, nvswitches: int = 0) -> list[tuple[str, str | None, str]]:
    return [(r.level, r.device, r.message) for r in gpu_health.findings("gpu-7", health(name, nvswitches))]


def above_info(name: str, nvswitches: int = 0) -> list[tuple[str, str | None, str]]:
    return [f for f in found(name, nvswitches) if f[0] != INFO]


# --- the recorded outputs, each giving its finding ------------------------------------------------


def test_a_healthy_h100_node_gives_nothing_above_info():
    data = health("healthy_h100.txt", nvswitches=4)
    assert [(g["index"], g["bus_id"], g["model"]) for g in data["gpus"]] == [
        (0, "00000000:18:00.0", "NVIDIA H100 80GB HBM3"),
        (1, "00000000:2A:00.0", "NVIDIA H100 80GB HBM3"),
    ]
    gpu = data["gpus"][0]
    assert gpu["pcie"] == {"gen": 5, "gen_max": 5, "width": 16, "width_max": 16}
    assert gpu["reasons_title"] == "Clocks Event Reasons" and gpu["idle_reasons"] == ["gpu_idle"]
    assert (gpu["remapped_rows_pending"], gpu["remapping_failed"], gpu["ecc_volatile_uncorrectable"]) == (
        False,
        False,
        0,
    )
    assert (gpu["temp_c"], gpu["tlimit_c"], gpu["power_w"], gpu["power_limit_w"]) == (31, 56, 71.35, 700.0)
    assert len(gpu["nvlink"]["links"]) == 18 and set(gpu["nvlink"]["links"].values()) == {26.562}
    assert data["tools"] == {"nvidia-smi": "ok", "kernel_log": "from journalctl -k -b", "dcgmi": "ok"}
    assert above_info("healthy_h100.txt", nvswitches=4) == []
    assert (INFO, None, "DCGM diagnostic level 1: 9 checks passed") in found("healthy_h100.txt", 4)
    json.dumps(data)  # JSON-ready as it is


def test_a_gpu_at_reduced_pcie_width_fails_but_a_lower_generation_at_idle_does_not():
    data = health("reduced_width_a100.txt")
    gpu = data["gpus"][0]
    assert gpu["reasons_title"] == "Clocks Throttle Reasons"  # a driver before 535 names them so
    assert gpu["pcie"] == {"gen": 1, "gen_max": 4, "width": 8, "width_max": 16}
    assert above_info("reduced_width_a100.txt") == [
        (FAIL, "gpu 0", "gpu 0 (NVIDIA A100-SXM4-80GB, bus 00000000:18:00.0): PCIe link x8, below its maximum x16")
    ]
    reasons = gpu_health.findings("gpu-7", data)
    width = next(r for r in reasons if r.level == FAIL)
    assert width.host == "gpu-7" and width.source == gpu_health.SOURCE_LINK
    idle = [r.message for r in reasons if r.level == INFO and "PCIe generation" in r.message]
    assert idle and "gpu 0 gen 1/4" in idle[0] and "save power" in idle[0]


def test_a_lower_pcie_generation_while_the_gpu_is_busy_is_a_warning():
    data = health("reduced_width_a100.txt")
    gpu = data["gpus"][0]
    gpu["pcie"]["width"] = 16
    gpu["idle_reasons"], gpu["utilization_pct"] = [], 95
    levels = [(r.level, r.message) for r in gpu_health.findings("gpu-7", data) if r.level != INFO]
    assert levels == [(WARN, "gpu 0 (NVIDIA A100-SXM4-80GB, bus 00000000:18:00.0): PCIe gen 1 under load "
                             "(95% busy), below its maximum gen 4")]  # fmt: skip


def test_a_thermally_throttled_gpu_fails_and_says_how_hot_it_is():
    where = "gpu 0 (NVIDIA H100 80GB HBM3, bus 00000000:18:00.0)"
    assert above_info("thermal_h100.txt") == [
        (FAIL, "gpu 0", f"{where}: HW thermal slowdown active at idle"),
        (WARN, "gpu 0", f"{where}: SW thermal slowdown active at idle (hotter than its max operating temperature)"),
        (WARN, "gpu 0", f"{where}: 91 C, at or above its slowdown temperature 89 C"),
    ]  # HW slowdown, the umbrella of HW thermal slowdown, is not said twice
    sources = {r.source for r in gpu_health.findings("gpu-7", health("thermal_h100.txt")) if r.level != INFO}
    assert sources == {gpu_health.SOURCE_REASONS, gpu_health.SOURCE_TEMP}


def test_pending_remapped_rows_warn_to_reset_the_gpu():
    data = health("remap_pending_a100.txt")
    assert data["gpus"][0]["remapped_rows_pending"] is True and data["gpus"][0]["remapped_rows_uncorrectable"] == 1
    assert above_info("remap_pending_a100.txt") == [
        (WARN, "gpu 0", "gpu 0 (NVIDIA A100-SXM4-80GB, bus 00000000:18:00.0): remapped rows pending: "
                        "reset the GPU (or reboot) to apply them"),
    ]  # fmt: skip


def test_a_failed_remapping_and_volatile_uncorrectable_ecc_errors_fail():
    data = health("remap_pending_a100.txt")
    data["gpus"][0].update(remapping_failed=True, remapped_rows_pending=False, ecc_volatile_uncorrectable=3)
    messages = [m for level, _, m in [(r.level, r.device, r.message) for r in gpu_health.findings("h", data)]
                if level == FAIL]  # fmt: skip
    assert [m.split(": ", 1)[1] for m in messages] == [
        "3 uncorrectable ECC errors since the driver loaded",
        "row remapping failed (the GPU has no spare rows left: replace it)",
    ]


def test_a_failed_dcgm_diagnostic_fails_naming_the_test_and_its_message():
    data = health("dcgm_fail_h100.txt", nvswitches=4)
    failed = [t for t in data["dcgm"]["tests"] if t["status"] != "Pass"]
    assert failed == [{"category": "Deployment", "name": "Page Retirement/Row Remap", "status": "Fail",
                       "detail": "Error: GPU 1 had uncorrectable memory errors and row remappings are pending. "
                                 "Drain the GPU and reset it or reboot the node."}]  # fmt: skip
    assert data["dcgm"]["metadata"]["DCGM Version"] == "3.3.5"
    dcgm = [r for r in gpu_health.findings("gpu-7", data) if r.source == gpu_health.SOURCE_DCGM]
    assert [(r.level, r.host, r.message) for r in dcgm] == [
        (FAIL, "gpu-7", f"DCGM diagnostic level 1: Page Retirement/Row Remap failed: {failed[0]['detail']}")
    ]


def test_dcgm_warnings_and_wrapped_result_lines():
    lines = [
        "|-----  Hardware  ----------+------------------------------------------------|",
        "| GPU Memory                | Pass - GPUs: 1, 2, 3, 4, 5, 6, 7               |",
        "|                           | Fail - GPU: 0                                  |",
        "| PCIe                      | Pass                                           |",
        "| Warning                   | GPU 0 Thermal violations totaling 13.3 second  |",
        "|                           | s started at 9.7 seconds into the test         |",
    ]
    tests = parse_dcgm(lines)["tests"]
    assert [(t["name"], t["status"]) for t in tests] == [("GPU Memory", "Fail"), ("PCIe", "Warn")]
    assert (
        tests[1]["detail"]
        == "Warning: GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test"
    )
    data = health("healthy_h100.txt", nvswitches=4)
    data["dcgm"] = {"tests": tests}
    dcgm = [(r.level, r.message) for r in gpu_health.findings("h", data) if r.source == gpu_health.SOURCE_DCGM]
    assert dcgm == [(FAIL, "DCGM diagnostic level 1: GPU Memory failed"),
                    (WARN, f"DCGM diagnostic level 1: PCIe warned: {tests[1]['detail']}")]  # fmt: skip


def test_xid_errors_fail_for_the_known_bad_codes_and_warn_for_the_others():
    data = health("xid_nvlink_h100.txt", nvswitches=4)
    assert [(x["gpu"], x["code"], x["count"]) for x in data["xids"]] == [
        (1, 79, 1), (0, 13, 2), (1, 94, 1), (None, 119, 1)]  # fmt: skip
    xids = [(r.level, r.device, r.message) for r in gpu_health.findings("gpu-7", data)
            if r.source == gpu_health.SOURCE_XID]  # fmt: skip
    h100 = "(NVIDIA H100 80GB HBM3, bus 00000000:{}:00.0)"
    assert xids == [
        (FAIL, "gpu 1", f"gpu 1 {h100.format('2A')}: Xid 79 since boot: GPU has fallen off the bus"),
        (WARN, "gpu 0", f"gpu 0 {h100.format('18')}: Xid 13 x2 since boot: graphics engine exception "
                        "(often the application's fault)"),
        (FAIL, "gpu 1", f"gpu 1 {h100.format('2A')}: Xid 94 since boot: contained ECC error (reset the GPU)"),
        (FAIL, None, "GPU at PCI 0000:c1:00: Xid 119 since boot: GSP RPC timeout"),
    ]  # fmt: skip


def test_nvlink_down_fails_and_its_error_counters_warn():
    nvlink = [(r.level, r.device, r.message.split(": ", 1)[1]) for r in gpu_health.findings(
        "gpu-7", health("xid_nvlink_h100.txt")) if r.source == gpu_health.SOURCE_NVLINK]  # fmt: skip
    assert nvlink == [
        (WARN, "gpu 0", "NVLink errors: link 5: 3 Replay Errors, 12 CRC Errors"),
        (FAIL, "gpu 1", "NVLink 3, 11 inactive (16 of 18 active)"),
    ]


def test_every_nvlink_inactive_is_a_card_without_a_bridge_unless_the_node_has_nvswitches():
    data = health("healthy_h100.txt")
    for gpu in data["gpus"]:
        gpu["nvlink"]["links"] = dict.fromkeys(gpu["nvlink"]["links"])
    levels = {r.level for r in gpu_health.findings("h", data) if r.source == gpu_health.SOURCE_NVLINK}
    assert levels == {INFO}
    data["nvswitches"] = 4
    levels = {r.level for r in gpu_health.findings("h", data) if r.source == gpu_health.SOURCE_NVLINK}
    assert levels == {FAIL}


def test_missing_tools_say_so_without_a_crash():
    assert found("no_tools.txt") == [(INFO, None, "GPU health not read: nvidia-smi is not installed")]
    assert (INFO, None, "DCGM is not installed (no dcgmi): its diagnostic was not run") in found(
        "reduced_width_a100.txt"
    )
    assert found("dcgm_no_hostengine.txt") == [
        (INFO, None, "DCGM diagnostic could not run: Error: unable to establish a connection to the specified "
                     "host: localhost")]  # fmt: skip
    unreadable = health("healthy_h100.txt")
    unreadable["tools"]["kernel_log"] = "unreadable"
    assert (INFO, "kernel log unreadable (not root, no passwordless sudo): XID errors not read") in [
        (r.level, r.message) for r in gpu_health.findings("h", unreadable)
    ]
    empty = gpu_health.parse("")  # the probe printed nothing (the connection dropped)
    assert [r.message for r in gpu_health.findings("h", empty)] == ["GPU health not read: nvidia-smi -q: not run"]


# --- the probe itself ----------------------------------------------------------------------------


def test_the_probe_is_valid_sh_and_runs_here_to_its_end():
    command = gpu_health.probe_command({"pci_count": 2, "nvswitches": 0, "driver": None})
    assert subprocess.run(["sh", "-n", "-c", gpu_health.PROBE_SCRIPT], check=False).returncode == 0
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    marks = [line for line in done.stdout.splitlines() if line.startswith("==> ") and ": " not in line]
    assert marks == ["==> nvidia-smi -q", "==> nvidia-smi nvlink -s", "==> nvidia-smi nvlink -e", "==> xid",
                     "==> dcgmi diag -r 1"]  # fmt: skip
    one = gpu_health.probe_command({"pci_count": 1, "nvswitches": 0, "driver": None})
    assert one.endswith(" _ 1")  # NVLink joins two GPUs or more: one GPU has no NVLink section


def _tool(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_the_probe_reads_each_tool_and_survives_a_failing_one(tmp_path):
    query = tmp_path / "q.txt"
    text = (FIXTURES / "thermal_h100.txt").read_text()
    query.write_text(text.split("==> nvidia-smi -q\n")[1].split("==> xid")[0])
    _tool(tmp_path, "nvidia-smi", f'[ "$1" = -q ] && exec cat {query}\necho "nvlink is not supported"; exit 3\n')
    _tool(tmp_path, "dcgmi", "echo 'Error: unable to establish a connection to the specified host: localhost'\n"
                             "exit 255\n")  # fmt: skip
    env = {**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    command = gpu_health.probe_command({"pci_count": 2})
    done = subprocess.run(command, shell=True, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0
    assert "==> nvidia-smi nvlink -s: exit 3" in done.stdout and "==> dcgmi diag -r 1: exit 255" in done.stdout
    data = gpu_health.parse(done.stdout)
    assert data["gpus"][0]["idle_reasons"] == ["gpu_idle", "hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown"]
    assert data["dcgm"] == {"error": "Error: unable to establish a connection to the specified host: localhost"}
    assert "nvlink" not in data["gpus"][0]


def test_the_local_probe_runs_only_where_nvidia_smi_is(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_health.probe_local("box", 1) is None
    _tool(tmp_path, "nvidia-smi", "exit 0\n")
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    local = gpu_health.probe_local("box", 1)
    assert list(local) == ["box"] and local["box"]["tools"]["nvidia-smi"] == "no GPU listed"


# --- under load ----------------------------------------------------------------------------------


def test_the_nvml_bitmask_decodes_to_the_named_reasons():
    assert decode_reasons(0) == []
    assert decode_reasons(0x1) == ["gpu_idle"]
    assert decode_reasons(0x4 | 0x8 | 0x80) == ["sw_power_cap", "hw_slowdown", "hw_power_brake_slowdown"]
    assert decode_reasons(0x20 | 0x40 | 0x100) == [
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "display_clock_setting",
    ]
    assert decode_reasons(0x2 | 0x10 | 0x1000) == ["applications_clocks_setting", "sync_boost", "bit_0x1000"]


def gpu_entry(counts: dict[str, int], samples: int = 10) -> dict:
    return {"host": "gpu-7", "device": "cuda:1", "kind": "gpu", "model": "NVIDIA H100 80GB HBM3",
            "throttle_under_load": {"reasons": sorted(counts), "samples": samples, "counts": counts}}  # fmt: skip


@pytest.mark.parametrize(
    "counts,expected",
    [
        ({"hw_power_brake_slowdown": 6, "hw_slowdown": 6}, [(FAIL, "HW power brake slowdown")]),
        ({"hw_slowdown": 1}, [(WARN, "HW slowdown (clocks cut by half or more) in 1 of 10")]),
        ({"hw_thermal_slowdown": 5, "hw_slowdown": 5}, [(FAIL, "HW thermal slowdown (too hot) in 5 of 10")]),
        ({"sw_thermal_slowdown": 10}, [(WARN, "SW thermal slowdown")]),
        ({"sw_power_cap": 10}, [(INFO, "at its power cap in 10 of 10 samples under load (expected)")]),
        ({}, []),
    ],
)
def test_clock_event_reasons_under_load(counts, expected):
    reasons = gpu_health.load_findings({"devices": [gpu_entry(counts)]})
    assert [(r.level, r.host, r.device) for r in reasons] == [(level, "gpu-7", "cuda:1") for level, _ in expected]
    for reason, (_, words) in zip(reasons, expected, strict=True):
        assert words in reason.message and reason.source == gpu_health.SOURCE_LOAD
    assert gpu_health.load_findings({"devices": [gpu_entry(counts, samples=0)]}) == []


def test_the_verdict_judges_throttling_under_load_and_the_local_probe():
    bench = {"mode": "local", "devices": [{**gpu_entry({"hw_power_brake_slowdown": 9}), "matmul": {"tflops": 1.0}}],
             "gpu_health": {"gpu-7": health("remap_pending_a100.txt")}}  # fmt: skip
    judged = verdict.evaluate(bench)
    assert judged.status == FAIL
    assert gpu_health.FLAG_THROTTLED in judged.flags("gpu-7", "cuda:1")
    assert any(r.level == WARN and r.device == "gpu 0" and "remapped rows pending" in r.message for r in judged.reasons)


def test_a_reason_carries_its_source_into_the_json_only_when_set():
    assert Reason(FAIL, "x", source="DCGM diagnostic level 1").as_dict() == {
        "level": FAIL, "message": "x", "source": "DCGM diagnostic level 1"}  # fmt: skip
    assert "source" not in Reason(FAIL, "x").as_dict()


def test_the_sampler_falls_back_to_nvidia_smi_and_its_older_field(tmp_path, monkeypatch):
    _tool(tmp_path, "nvidia-smi", 'case "$1" in --query-gpu=clocks_throttle_reasons.active) echo 0x0000000000000084;;\n'
                                  '*) echo "Field is not a valid field to query."; exit 2;; esac\n')  # fmt: skip
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    with throttle.ThrottleSampler("GPU-1234") as sampler:
        time.sleep(0.3)
    seen = sampler.result()
    assert (seen["via"], seen["samples"], seen["reasons"]) == ("nvidia-smi", 1, ["hw_power_brake_slowdown",
                                                                                 "sw_power_cap"])  # fmt: skip
    assert "error" not in seen


def test_a_sampler_that_cannot_read_records_why_and_never_raises(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    with throttle.ThrottleSampler("0") as sampler:
        pass
    seen = sampler.result()
    assert seen["samples"] == 0 and "FileNotFoundError" in seen["error"]


def test_the_sampler_names_the_gpu_as_nvml_knows_it(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    assert throttle.nvml_id(1, None) == "7"  # CUDA's second visible GPU is the machine's GPU 7
    assert throttle.nvml_id(1, "58ed5e02-aaaa") == "GPU-58ed5e02-aaaa"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert throttle.nvml_id(3, None) == "3"


# --- wiring: the full checks and the report ---------------------------------------------------------


def test_the_full_checks_probe_each_gpu_node_and_judge_it(tmp_path):
    driver = {"count": 1, "models": ["NVIDIA H100 80GB HBM3"], "driver_version": "535", "memory_mib": [81559]}
    one = {"pci_count": 1, "nvswitches": 0, "driver": driver}
    thermal = (True, (FIXTURES / "thermal_h100.txt").read_text().splitlines())
    head = FakeNode("head", HEAD_IP, {"probe": RUNNING, "cluster_state": alive(HEAD_IP, WORKER_IP)},
                    report=CPU_BENCH)  # fmt: skip
    worker = FakeNode("w1", WORKER_IP, {"probe": (True, [*RUNNING[1], "CONTAINER_GPUS=1"]), "gpu_health": thermal})
    every = {"head": settings(tmp_path), "w1": settings(tmp_path, ray_num_gpus="auto")}

    outcome = full.run_checks([head, worker], head, every, {"head": gpu_health_none(), "w1": one},
                                 progress=lambda _: None)  # fmt: skip

    assert [kind for kind, _ in worker.calls] == ["probe", "gpu_health"]
    assert "gpu_health" not in [kind for kind, _ in head.calls]  # no GPU on the PCI bus: nothing to read
    gpu0 = [(r.level, r.host, r.message.split(": ", 1)[1]) for r in outcome.verdict.reasons if r.device == "gpu 0"]
    assert (FAIL, "w1", "HW thermal slowdown active at idle") in gpu0
    saved = json.loads(outcome.json_path.read_text())
    assert saved["preflight"]["w1"]["gpu_health"]["gpus"][0]["temp_c"] == 91
    thermal_reason = next(r for r in saved["verdict"]["reasons"] if r.get("device") == "gpu 0" and r["level"] == FAIL)
    assert thermal_reason["source"] == gpu_health.SOURCE_REASONS
    table = report.render_gpu_health(saved)
    assert table.splitlines()[0] == "GPU health"
    assert table.splitlines()[3].split() == ["w1", "0", "gen5", "x16", "/", "gen5", "x16", "91", "C", "/", "89",
                                             "hw_slowdown,hw_thermal_slowdown,sw_thermal_slowdown", "no", "-",
                                             "not", "installed"]  # fmt: skip


def gpu_health_none() -> dict:
    return {"pci_count": 0, "nvswitches": 0, "driver": None}


def test_the_report_shows_gpu_health_only_when_there_is_some():
    assert report.render_gpu_health({"devices": []}) == ""
    local = {"mode": "local", "devices": [], "gpu_health": {"box": health("xid_nvlink_h100.txt")}}
    table = report.render(local)
    assert "GPU health" in table
    rows = [line.split() for line in table.splitlines() if line.startswith("box ")]
    assert [(row[1], row[-2]) for row in rows] == [("0", "13x2"), ("1", "79,94")]
    assert all(row[-1] == "pass" for row in rows)
