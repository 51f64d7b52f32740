"""Tables, JSON and plot of a benchmark report, and the saved reports (checks/report.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from checks import report, verdict


def sample_report() -> dict[str, Any]:
    return {
        "mode": "cluster",
        "cpu_only": False,
        "devices": [
            {
                "host": "gpu-a",
                "ip": "10.0.0.1",
                "device": "cuda:0",
                "kind": "gpu",
                "model": "NVIDIA H100 80GB HBM3",
                "matmul": {"tflops": 742.0, "dtype": "bf16"},
                "copy": {"gbps": 2900.0},
                "h2d": {"gbps": 51.2},
            },
            {
                "host": "gpu-bravo-long-name",
                "ip": "10.0.0.2",
                "device": "cuda:1",
                "kind": "gpu",
                "model": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                "matmul": {"tflops": 400.0, "dtype": "bf16"},
                "copy": {"gbps": 1500.0},
                "h2d": {"gbps": 25.0},
            },
        ],
        "allreduce": {
            "backend": "nccl",
            "world_size": 2,
            "sweep": [
                {"bytes": 2**20, "time_s": 1e-4, "algbw_gbps": 10.49, "busbw_gbps": 10.49, "values_ok": True},
                {"bytes": 2**30, "time_s": 0.02, "algbw_gbps": 53.7, "busbw_gbps": 53.7, "values_ok": True},
            ],
            "value_check": {"ok": True, "expected": 3.0},
        },
        "sweep_test": {"tasks": 64, "completed": 64, "per_node": {"gpu-a": 40, "gpu-bravo-long-name": 24}},
        "timing": {"devices_s": 12.0, "total_s": 40.0},
    }


def test_format_table_aligns_columns() -> None:
    text = report.format_table(["name", "value"], [["a", 1], ["longer", 22.5]], right=(1,))
    lines = text.splitlines()
    assert lines[0] == "name    value"
    assert lines[1] == "------  -----"
    assert lines[2] == "a           1"
    assert lines[3] == "longer   22.5"


def test_device_table_shows_spec_fractions_and_flags() -> None:
    data = sample_report()
    v = verdict.evaluate(data)
    lines = report.render_devices(data, v).splitlines()
    header = lines[0]
    for column in ("host", "device", "model", "matmul TFLOPS", "% spec", "copy GB/s", "h2d GB/s", "flags"):
        assert column in header
    h100 = lines[2]
    assert "742.0 bf16" in h100 and "75%" in h100 and "87%" in h100 and "51.2" in h100
    other = lines[3]
    assert other.split()[0] == "gpu-bravo-long-name"
    assert other.rstrip().endswith("NO-SPEC")
    assert "…" in other  # long model names are shortened
    # columns line up: every row's "% spec" value ends where the header's does
    end = header.index("% spec") + len("% spec")
    assert h100[end - 3 : end] == "75%"


def test_render_includes_allreduce_smoke_test_timing_and_verdict() -> None:
    data = sample_report()
    text = report.render(data, verdict.evaluate(data))
    assert "all-reduce: 2 ranks, nccl" in text
    assert "1 GiB" in text and "53.70" in text
    assert "scheduling smoke test: 64/64 tasks finished" in text
    assert "timing: devices_s 12.0 s, total_s 40.0 s" in text
    assert "\nVERDICT: WARN\n  WARN  gpu-bravo-long-name (10.0.0.2) cuda:1: GPU model" in text


def test_render_says_when_a_phase_did_not_run() -> None:
    data = {**sample_report(), "allreduce": None, "sweep_test": None}
    text = report.render(data)
    assert "all-reduce: not run" in text
    assert "scheduling smoke test: not run" in text


def test_write_json_round_trips_and_creates_the_folder(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "bench.json"
    written = report.write_json(sample_report(), target)
    assert written == target
    assert json.loads(target.read_text())["devices"][0]["host"] == "gpu-a"
    assert [p.name for p in target.parent.iterdir()] == ["bench.json"]  # no temporary file left


def test_plot_busbw_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = report.plot_busbw(sample_report(), tmp_path / "busbw.png")
    assert out is not None
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_busbw_without_a_sweep_returns_none(tmp_path: Path) -> None:
    assert report.plot_busbw({"allreduce": None}, tmp_path / "x.png") is None
    assert not (tmp_path / "x.png").exists()


def test_plot_busbw_without_matplotlib_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    assert report.plot_busbw(sample_report(), tmp_path / "busbw.png") is None
    assert "pip install rayrig[plot]" in capsys.readouterr().err


def test_latest_checks_reports_the_newest_verdict_and_its_plot(tmp_path):
    for stamp, status in (("20261130-000001", "FAIL"), ("20261130-000002", "PASS")):
        (tmp_path / f"checks-lab-{stamp}.json").write_text(json.dumps({"verdict": {"status": status}}))
    (tmp_path / "checks-lab-20261130-000002-busbw.png").write_bytes(b"png")
    (tmp_path / "checks-other-20261130-000003.json").write_text(json.dumps({"verdict": {"status": "FAIL"}}))
    line = report.latest_checks("lab", tmp_path)
    assert line.startswith("==> checks: PASS; report ")
    assert "checks-lab-20261130-000002.json" in line
    assert "checks-lab-20261130-000002-busbw.png" in line
    assert "no report yet" in report.latest_checks("absent", tmp_path)


def test_latest_report_gives_the_newest_verdict_and_paths_as_data(tmp_path):
    (tmp_path / "checks-lab-20261130-000001.json").write_text(json.dumps({"verdict": {"status": "PASS"}}))
    (tmp_path / "checks-lab-20261130-000002.json").write_text(json.dumps({"verdict": {"status": "WARN"}}))
    assert report.latest_report("lab", tmp_path) == {
        "verdict": "WARN",
        "report": str(tmp_path / "checks-lab-20261130-000002.json"),
        "plot": None,
    }
    assert report.latest_report("absent", tmp_path) is None
