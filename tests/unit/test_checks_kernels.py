"""The torch kernels (checks/kernels.py), the --local command line (checks/benchmark.py) and the
cluster run's pure helpers (checks/allreduce.py, checks/cluster_bench.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from checks import REPORT_SCHEMA, allreduce, benchmark, cluster_bench, devices, kernels  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_cpu_matmul_returns_positive_tflops() -> None:
    result = kernels.matmul_tflops("cpu", n=128, iters=3, warmup=1)
    assert result["tflops"] > 0
    assert (result["n"], result["dtype"], result["iters"]) == (128, "fp32", 3)
    assert result["min_s"] <= result["median_s"] <= result["max_s"]
    assert result["threads"] >= 1


def test_sustained_matmul_is_measured_only_when_asked() -> None:
    result = kernels.matmul_tflops("cpu", n=64, iters=2, sustain_s=0.05)
    assert result["sustained_tflops"] > 0 and result["sustained_s"] == 0.05


def test_cpu_copy_bandwidth_counts_read_and_write() -> None:
    result = kernels.copy_bandwidth("cpu", nbytes=2**20, iters=3)
    assert result["gbps"] > 0
    assert result["nbytes"] == 2**20
    assert result["gbps"] == pytest.approx(2 * 2**20 / result["median_s"] / 1e9)


def test_h2d_on_cpu_is_skipped_with_a_reason() -> None:
    result = kernels.h2d_bandwidth("cpu")
    assert result["gbps"] is None
    assert "no GPU" in result["skipped"]


def test_cpu_device_info() -> None:
    info = kernels.device_info("cpu")
    assert info["kind"] == "cpu"
    assert info["model"]
    assert info["logical_cpus"] >= 1


def test_iterations_must_be_positive() -> None:
    with pytest.raises(ValueError, match="iters"):
        kernels.matmul_tflops("cpu", n=16, iters=0)


def test_measure_device_records_a_failing_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> dict:
        raise RuntimeError("simulated ECC error")

    monkeypatch.setattr(kernels, "copy_bandwidth", broken)
    monkeypatch.setitem(kernels.COPY_BYTES_QUICK, "cpu", 2**20)
    monkeypatch.setitem(kernels.MATMUL_N_QUICK, "cpu", 64)
    entry = kernels.measure_device("cpu", quick=True)
    assert entry["copy"] == {"error": "RuntimeError: simulated ECC error"}
    assert entry["matmul"]["tflops"] > 0
    assert entry["kind"] == "cpu" and entry["device"] == "cpu" and entry["model"]


def test_the_clock_event_reasons_sampled_under_the_sustained_matmul_go_in_the_device_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Sampler:
        entered = 0

        def __enter__(self) -> Sampler:
            Sampler.entered += 1
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def result(self) -> dict:
            return {"reasons": ["sw_power_cap"], "samples": 3, "counts": {"sw_power_cap": 3}, "via": "nvml"}

    assert kernels._throttle_sampler(torch.device("cpu")) is None  # the CPU has no clock event reasons
    monkeypatch.setattr(kernels, "_throttle_sampler", lambda dev: Sampler())
    monkeypatch.setitem(kernels.MATMUL_N_QUICK, "cpu", 64)
    monkeypatch.setitem(kernels.COPY_BYTES_QUICK, "cpu", 2**20)
    result = kernels.matmul_tflops("cpu", n=64, iters=2, sustain_s=0.05)
    assert result["throttle_under_load"]["samples"] == 3 and Sampler.entered == 1
    entry = kernels.measure_device("cpu", quick=True)  # the CPU sustains nothing: no sampler
    assert "throttle_under_load" not in entry and "throttle_under_load" not in entry["matmul"]
    monkeypatch.setattr(
        kernels,
        "matmul_tflops",
        lambda *a, **k: {"tflops": 1.0, "throttle_under_load": result["throttle_under_load"]},
    )
    entry = kernels.measure_device("cpu", quick=True)
    assert (
        entry["throttle_under_load"]["counts"] == {"sw_power_cap": 3} and "throttle_under_load" not in entry["matmul"]
    )


def test_local_benchmark_reads_gpu_health_where_nvidia_smi_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = (REPO / "tests/unit/fixtures/gpu_health/thermal_h100.txt").read_text()
    query = tmp_path / "q.txt"
    query.write_text(fixture.split("==> nvidia-smi -q\n")[1].split("==> xid")[0])
    tool = tmp_path / "nvidia-smi"
    tool.write_text(f'#!/bin/sh\n[ "$1" = -q ] && exec cat {query}\nexit 1\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setitem(kernels.MATMUL_N_QUICK, "cpu", 64)
    monkeypatch.setitem(kernels.COPY_BYTES_QUICK, "cpu", 2**20)
    result = benchmark.run_local(quick=True)
    (host,) = result["gpu_health"]
    assert result["gpu_health"][host]["gpus"][0]["temp_c"] == 91
    judged = benchmark.verdict.evaluate(result)
    assert any(r.level == "FAIL" and r.device == "gpu 0" and "HW thermal slowdown" in r.message for r in judged.reasons)
    assert "GPU health" in benchmark.report.render(result, judged)


def test_run_local_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(kernels.MATMUL_N_QUICK, "cpu", 64)
    monkeypatch.setitem(kernels.COPY_BYTES_QUICK, "cpu", 2**20)
    result = kernels.run_local(quick=True, devices=["cpu"])
    assert result["schema"] == REPORT_SCHEMA
    assert result["mode"] == "local" and result["cpu_only"] is True
    assert result["allreduce"] is None and result["sweep_test"] is None
    [entry] = result["devices"]
    assert entry["matmul"]["tflops"] > 0 and entry["copy"]["gbps"] > 0
    json.dumps(result)  # JSON-ready


@needs_cuda
def test_gpu_kernels() -> None:
    major, _ = torch.cuda.get_device_capability(0)
    result = kernels.matmul_tflops("cuda:0", n=2048, iters=5, sustain_s=0.1)
    assert result["tflops"] > 1 and result["sustained_tflops"] > 1
    assert result["dtype"] == ("bf16" if major >= 8 else "fp16")
    assert kernels.copy_bandwidth("cuda:0", nbytes=64 * 2**20, iters=5)["gbps"] > 10
    assert kernels.h2d_bandwidth("cuda:0", nbytes=16 * 2**20, iters=5)["gbps"] > 0.5
    info = kernels.device_info("cuda:0")
    assert info["kind"] == "gpu" and info["model"] and info["memory_bytes"] > 2**30


def test_size_sweep_and_size_arguments() -> None:
    assert allreduce.size_sweep(2**20, 2**23) == [2**20, 2**21, 2**22, 2**23]
    assert allreduce.size_sweep(2**20, 3 * 2**20) == [2**20, 2**21]
    with pytest.raises(ValueError):
        allreduce.size_sweep(2**20, 2**10)
    assert benchmark._bytes("1GiB") == 2**30
    assert benchmark._bytes("64M") == 64 * 2**20
    assert benchmark._bytes("4096") == 4096


def test_default_allreduce_sizes() -> None:
    assert allreduce.default_allreduce_sizes(use_gpu=True, quick=False)[-1] == 2**30
    assert len(allreduce.default_allreduce_sizes(use_gpu=True, quick=False)) == 11  # 1 MiB .. 1 GiB
    assert allreduce.default_allreduce_sizes(use_gpu=False, quick=False)[-1] == 64 * 2**20
    assert allreduce.default_allreduce_sizes(use_gpu=False, quick=True, min_bytes=8 * 2**20) == [8 * 2**20, 16 * 2**20]


def test_rename_hosts_uses_the_inventory_names() -> None:
    entries = [{"host": "ip-10-0-0-7", "ip": "10.0.0.7"}, {"host": "other", "ip": "10.0.0.8"}]
    cluster_bench.rename_hosts(entries, {"10.0.0.7": "gpu-3"})
    assert entries == [
        {"host": "gpu-3", "ip": "10.0.0.7", "hostname": "ip-10-0-0-7"},
        {"host": "other", "ip": "10.0.0.8"},
    ]


def test_a_cpu_node_keeps_its_best_round():
    rounds = [{"host": "w1", "matmul": {"tflops": r}} for r in (0.08, 0.22, 0.2)]
    best = devices._best_round(rounds)
    assert best["matmul"]["tflops"] == 0.22
    assert best["matmul"]["rounds_tflops"] == [0.08, 0.22, 0.2]
    assert rounds[1]["matmul"] == {"tflops": 0.22}  # the inputs are left as they were


def _run_cli(*args: str, block_ray: bool = False) -> subprocess.CompletedProcess[str]:
    prelude = "import sys; sys.modules['ray'] = None; " if block_ray else "import sys; "
    code = prelude + "from checks.benchmark import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_cli_local_quick_prints_a_table_and_writes_json(tmp_path: Path) -> None:
    # Ray blocked: --local must work on a machine with torch only.
    out = tmp_path / "bench.json"
    proc = _run_cli("--local", "--quick", "--json", str(out), block_ray=True)
    assert proc.returncode == 0, proc.stderr
    header = proc.stdout.splitlines()[0].split()
    assert header[:4] == ["host", "device", "model", "matmul"]
    assert "VERDICT: PASS" in proc.stdout
    assert "devices: start" in proc.stderr and "devices: done" in proc.stderr
    data = json.loads(out.read_text())
    assert data["schema"] == REPORT_SCHEMA
    assert data["verdict"]["status"] == "PASS"
    assert data["verdict"]["thresholds"]["matmul_min_fraction"] == 0.65
    assert all(d["matmul"]["tflops"] > 0 for d in data["devices"])


def test_python_dash_m_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "checks.benchmark", "--local", "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "matmul TFLOPS" in proc.stdout


def test_cli_usage_errors_exit_2() -> None:
    assert _run_cli().returncode == 2  # neither --local nor --cluster
    assert _run_cli("--local", "--cluster").returncode == 2
    proc = _run_cli("--local", "--matmul-min-fraction", "1.5")
    assert proc.returncode == 2
    assert "fraction" in proc.stderr
    proc = _run_cli("--cluster", "--host-alias", "gpu-3")
    assert proc.returncode == 2
    assert "IP=NAME" in proc.stderr
