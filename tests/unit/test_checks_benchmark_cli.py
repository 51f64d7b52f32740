"""The benchmark's command line for the cluster (checks/benchmark.py): its budget, peer factor and node
cap reach the phases, and the JSON report is written after every phase. No Ray here: the phases are a
stand-in that records what it was given."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checks import benchmark, deadlines, full
from checks.deadlines import Budget
from deploy.contract.settings import merge

DONE = {"mode": "cluster", "cpu_only": True, "nodes": [], "devices": [], "allreduce": None, "sweep_test": None}


def fake_phases(monkeypatch: pytest.MonkeyPatch, out: Path | None = None) -> dict[str, Any]:
    """Stand in for Ray: record run_cluster's configuration (its fields) and ``on_phase``; after a
    first phase, what --out holds."""
    given: dict[str, Any] = {}

    def run_cluster(config: benchmark.BenchConfig, on_phase: Any = None) -> dict[str, Any]:
        given.update(vars(config), on_phase=on_phase)
        if on_phase is not None:
            on_phase({**DONE, "devices": [{"host": "w1", "device": "cpu"}]})
            given["after_devices"] = json.loads(out.read_text()) if out else None
        return dict(DONE)

    monkeypatch.setattr(benchmark, "connect", lambda *args, **kwargs: None)
    monkeypatch.setattr(benchmark, "run_cluster", run_cluster)
    return given


def test_budget_peer_factor_and_node_cap_reach_the_phases_and_each_phase_is_written(tmp_path, monkeypatch):
    out = tmp_path / "reports" / "report.json"
    given = fake_phases(monkeypatch, out)
    argv = ["--cluster", "--out", str(out), "--budget", "120", "--peer-factor", "2.5", "--timeout", "60"]

    assert benchmark.main(argv) == 1  # nothing measured by the stand-in: FAIL

    assert given["peer_factor"] == 2.5 and given["timeout_s"] == 60
    assert isinstance(given["budget"], Budget) and given["budget"].total_s == 120
    assert 119 < given["budget"].left() <= 120  # counted from the start of this run
    assert given["after_devices"]["devices"] == [{"host": "w1", "device": "cpu"}]  # on disk after the first phase
    final = json.loads(out.read_text())
    assert final["verdict"]["status"] and final["devices"] == []  # and the full report at the end
    assert [p.name for p in out.parent.iterdir()] == ["report.json"]  # written whole: no temporary file left


def test_without_a_budget_or_an_output_the_phases_get_none(monkeypatch):
    given = fake_phases(monkeypatch)
    assert benchmark.main(["--cluster"]) == 1
    assert (given["budget"], given["on_phase"]) == (None, None)
    assert given["peer_factor"] == 3 and given["timeout_s"] == 300  # checks/deadlines.py's defaults


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--peer-factor", "1"], "expected a factor above 1 (times the peers' median), got 1"),
        (["--peer-factor", "x"], "expected a factor above 1 (times the peers' median), got x"),
        (["--budget", "0"], "expected a number of seconds above 0, got 0"),
        (["--timeout", "-5"], "expected a number of seconds above 0, got -5"),
    ],
)
def test_bad_bounds_are_usage_errors(capsys, argv, expected):
    with pytest.raises(SystemExit) as stopped:
        benchmark.build_parser().parse_args(["--cluster", *argv])
    assert stopped.value.code == 2
    assert expected in capsys.readouterr().err


def test_the_help_describes_the_bounds():
    done = subprocess.run([sys.executable, "-m", "checks.benchmark", "--cluster", "--help"],
                          cwd=full.PACKAGE_DIR.parent, capture_output=True, text=True, timeout=60)  # fmt: skip
    text = " ".join(done.stdout.split())
    assert done.returncode == 0
    assert "--budget SECONDS checks_timeout_s" in text
    assert "--peer-factor F checks_peer_timeout_factor: a node still running when the median node has" in text
    assert "--timeout SECONDS checks_node_timeout_s: the longest one node's measurement may take" in text


def test_the_data_keys_defaults_are_the_benchmarks_own():
    defaults = merge({})
    assert defaults["checks_timeout_s"] == deadlines.DEFAULT_BUDGET_S
    assert defaults["checks_peer_timeout_factor"] == deadlines.DEFAULT_PEER_FACTOR
    assert defaults["checks_node_timeout_s"] == deadlines.DEFAULT_NODE_TIMEOUT_S
    args = benchmark.build_parser().parse_args(["--cluster"])
    assert (args.peer_factor, args.timeout, args.budget) == (deadlines.DEFAULT_PEER_FACTOR,
                                                             deadlines.DEFAULT_NODE_TIMEOUT_S, None)  # fmt: skip
