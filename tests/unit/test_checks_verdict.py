"""The benchmark verdict (checks/verdict.py) and its table flags (checks/report.py)."""

from __future__ import annotations

from typing import Any

import pytest

from checks import report, specs, verdict

H100 = "NVIDIA H100 80GB HBM3"
H100_SPEC = specs.lookup(H100)


def gpu(host: str, index: int = 0, model: str = H100, tflops: float = 800.0, gbps: float = 3000.0) -> dict[str, Any]:
    return {
        "host": host,
        "ip": f"10.0.0.{ord(host[-1]) % 200}",
        "device": f"cuda:{index}",
        "kind": "gpu",
        "model": model,
        "matmul": {"tflops": tflops, "dtype": "bf16", "n": 8192},
        "copy": {"gbps": gbps},
        "h2d": {"gbps": 50.0},
    }


def cpu(host: str, tflops: float = 0.5, threads: int = 8) -> dict[str, Any]:
    return {
        "host": host,
        "ip": None,
        "device": "cpu",
        "kind": "cpu",
        "model": "Intel(R) Xeon(R) Platinum 8375C",
        "matmul": {"tflops": tflops, "dtype": "fp32", "threads": threads},
        "copy": {"gbps": 20.0},
        "h2d": {"gbps": None, "skipped": "no GPU"},
    }


def allreduce(ok: bool = True, world: int = 16) -> dict[str, Any]:
    return {
        "backend": "nccl",
        "world_size": world,
        "sweep": [{"bytes": 2**20, "time_s": 1e-4, "algbw_gbps": 10.5, "busbw_gbps": 19.7, "values_ok": ok}],
        "value_check": {"ok": ok, "expected": 136.0, "detail": "ok" if ok else "12 elements differ from 136"},
    }


def sweep_test(completed: int = 64, missing: list[str] | None = None) -> dict[str, Any]:
    return {
        "tasks": 64,
        "completed": completed,
        "failures": [] if completed == 64 else ["RayTaskError: boom"],
        "per_node": {"gpu-a": 32, "gpu-b": 32},
        "missing_nodes": missing or [],
    }


def cluster(devices: list[dict[str, Any]], cpu_only: bool = False, **sections: Any) -> dict[str, Any]:
    return {
        "mode": "cluster",
        "cpu_only": cpu_only,
        "devices": devices,
        "allreduce": sections.get("allreduce", allreduce()),
        "sweep_test": sections.get("sweep_test", sweep_test()),
    }


def healthy_gpus() -> list[dict[str, Any]]:
    return [gpu(host, i, tflops=800.0 + i) for host in ("gpu-a", "gpu-b") for i in range(8)]


def levels(v: verdict.Verdict) -> list[str]:
    return [r.level for r in v.reasons]


def test_healthy_gpu_cluster_passes() -> None:
    v = verdict.evaluate(cluster(healthy_gpus()))
    assert v.status == "PASS"
    assert v.exit_code == 0
    assert "FAIL" not in levels(v) and "WARN" not in levels(v)
    assert v.slow_hosts == []
    assert any("peak bus bandwidth 19.7 GB/s" in r.message for r in v.reasons)


def test_one_slow_gpu_fails_and_names_its_host() -> None:
    devices = healthy_gpus()
    devices[11]["matmul"]["tflops"] = 700.0  # gpu-b cuda:3: 87% of its peers, still above the datasheet floor
    v = verdict.evaluate(cluster(devices))
    assert v.status == "FAIL"
    assert v.exit_code == 1
    assert v.slow_hosts == ["gpu-b"]
    slow = [r for r in v.reasons if r.flag == verdict.FLAG_SLOW]
    assert len(slow) == 1
    assert slow[0].host == "gpu-b" and slow[0].device == "cuda:3"
    assert "SLOW NODE gpu-b" in slow[0].message and "gpu-a" not in slow[0].message
    table = report.render(cluster(devices), v)
    row = next(line for line in table.splitlines() if line.startswith("gpu-b") and "cuda:3" in line)
    assert row.rstrip().endswith("SLOW")
    assert "SLOW HOSTS: gpu-b" in table


def test_slow_memory_bandwidth_is_an_outlier_too() -> None:
    devices = healthy_gpus()
    devices[2]["copy"]["gbps"] = 2700.0  # 90% of its peers, below a 91% floor
    v = verdict.evaluate(cluster(devices), outlier_fraction=0.91)
    assert v.slow_hosts == ["gpu-a"]
    assert "memory copy" in next(r.message for r in v.reasons if r.flag == verdict.FLAG_SLOW)


def test_slow_under_sustained_load_only_warns() -> None:
    devices = healthy_gpus()
    for d in devices:
        d["matmul"]["sustained_tflops"] = 680.0
    devices[7]["matmul"]["sustained_tflops"] = 560.0  # gpu-a cuda:7 throttles (cooling?)
    v = verdict.evaluate(cluster(devices))
    assert v.status == "WARN"
    assert v.slow_hosts == []
    assert v.flags("gpu-a", "cuda:7") == [verdict.FLAG_SLOW_SUSTAINED]
    assert "gpu-a" in next(r.message for r in v.reasons if r.level == "WARN")


def test_matmul_threshold_is_inclusive_at_the_boundary() -> None:
    at = 0.65 * H100_SPEC.tflops
    assert verdict.evaluate(cluster([gpu("gpu-a", tflops=at)])).status == "PASS"
    below = verdict.evaluate(cluster([gpu("gpu-a", tflops=at * 0.999)]))
    assert below.status == "FAIL"
    assert [r.flag for r in below.reasons if r.level == "FAIL"] == [verdict.FLAG_LOW_TFLOPS]
    assert "below the 65% minimum" in str(below.reasons[0])


def test_membw_threshold_is_inclusive_at_the_boundary() -> None:
    at = 0.80 * H100_SPEC.mem_bw_gbs
    assert verdict.evaluate(cluster([gpu("gpu-a", gbps=at)])).status == "PASS"
    below = verdict.evaluate(cluster([gpu("gpu-a", gbps=at - 1)]))
    assert below.status == "FAIL"
    assert [r.flag for r in below.reasons if r.level == "FAIL"] == [verdict.FLAG_LOW_MEMBW]


def test_thresholds_come_from_the_arguments() -> None:
    devices = [gpu("gpu-a", tflops=500.0), gpu("gpu-b", tflops=500.0)]  # 51% of 989.4
    assert verdict.evaluate(cluster(devices)).status == "FAIL"
    assert verdict.evaluate(cluster(devices), matmul_min_fraction=0.5).status == "PASS"
    with pytest.raises(ValueError, match="checks_outlier_fraction"):
        verdict.evaluate(cluster(devices), outlier_fraction=0)


def test_unknown_gpu_model_warns() -> None:
    devices = [gpu("gpu-a", i, model="NVIDIA GeForce RTX 5090", tflops=200.0) for i in range(2)]
    v = verdict.evaluate(cluster(devices))
    assert v.status == "WARN"
    assert v.exit_code == 0
    assert [r.flag for r in v.reasons if r.level == "WARN"] == [verdict.FLAG_NO_SPEC] * 2
    assert "RTX 5090" in v.reasons[0].message


def test_mixed_models_are_not_compared_with_each_other() -> None:
    l4 = specs.lookup("NVIDIA L4")
    l4_gpus = [gpu("infer-z", i, model="NVIDIA L4", tflops=0.8 * l4.tflops, gbps=260) for i in range(2)]
    devices = healthy_gpus() + l4_gpus
    v = verdict.evaluate(cluster(devices))
    assert v.status == "PASS", [str(r) for r in v.reasons]


def test_cpu_only_cluster_healthy_passes_with_an_info_reason() -> None:
    devices = [cpu("cpu-a", 0.50), cpu("cpu-b", 0.52), cpu("cpu-c", 0.49)]
    v = verdict.evaluate(cluster(devices, cpu_only=True))
    assert v.status == "PASS"
    info = [r.message for r in v.reasons if r.level == "INFO"]
    assert any("CPU-only cluster" in m and "do not apply" in m for m in info)


def test_cpu_only_cluster_with_one_slow_node_fails_naming_it() -> None:
    devices = [cpu("cpu-a", 0.50), cpu("cpu-b", 0.52), cpu("cpu-c", 0.30)]
    v = verdict.evaluate(cluster(devices, cpu_only=True))
    assert v.status == "FAIL"
    assert v.slow_hosts == ["cpu-c"]
    assert "SLOW NODE cpu-c" in str(next(r for r in v.reasons if r.level == "FAIL"))


def test_allreduce_wrong_values_fail() -> None:
    v = verdict.evaluate(cluster(healthy_gpus(), allreduce=allreduce(ok=False)))
    assert v.status == "FAIL"
    assert any("wrong values" in r.message and "differ from 136" in r.message for r in v.reasons)


def test_allreduce_error_or_absence_fails_on_a_cluster() -> None:
    failed = {**allreduce(), "error": "DistBackendError: NCCL timeout"}
    assert verdict.evaluate(cluster(healthy_gpus(), allreduce=failed)).status == "FAIL"
    assert verdict.evaluate(cluster(healthy_gpus(), allreduce=None)).status == "FAIL"


def test_incomplete_scheduling_smoke_test_fails() -> None:
    v = verdict.evaluate(cluster(healthy_gpus(), sweep_test=sweep_test(completed=60)))
    assert v.status == "FAIL"
    assert any("60 of 64 tasks" in r.message and "boom" in r.message for r in v.reasons)


def test_node_missing_from_the_smoke_test_fails_by_name() -> None:
    v = verdict.evaluate(cluster(healthy_gpus(), sweep_test=sweep_test(missing=["gpu-c (10.0.0.9)"])))
    assert v.status == "FAIL"
    assert any("gpu-c (10.0.0.9)" in r.message for r in v.reasons if r.level == "FAIL")


def test_failed_measurement_fails() -> None:
    devices = healthy_gpus()
    devices[0] = {**devices[0], "matmul": {"error": "RuntimeError: CUDA error: ECC error"}}
    v = verdict.evaluate(cluster(devices))
    assert v.status == "FAIL"
    assert v.flags("gpu-a", "cuda:0") == [verdict.FLAG_ERROR]


def test_local_report_needs_no_allreduce_or_smoke_test() -> None:
    local = {"mode": "local", "cpu_only": True, "devices": [cpu("laptop")], "allreduce": None, "sweep_test": None}
    v = verdict.evaluate(local)
    assert v.status == "PASS"
    assert "CPU-only machine" in v.reasons[0].message


def test_nothing_measured_fails() -> None:
    assert verdict.evaluate(cluster([])).status == "FAIL"


def test_verdict_as_dict_is_json_ready() -> None:
    devices = healthy_gpus()
    devices[5]["matmul"]["tflops"] = 600.0
    data = verdict.evaluate(cluster(devices)).as_dict()
    assert data["status"] == "FAIL"
    assert data["slow_hosts"] == ["gpu-a"]
    assert {"level", "message"} <= set(data["reasons"][0])
