"""The checks' report schema (checks/report_schema.py, docs/reference/checks-report.md) holds for the reports the
full and the quick checks save, and refuses a report that breaks it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from checks import full, quick
from checks.report_schema import SCHEMA
from tests.unit import test_checks_full as full_case
from tests.unit import test_checks_quick as quick_case

VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def problems(report: dict[str, Any]) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(report)]


def full_report(tmp_path: Path) -> dict[str, Any]:
    """What the full checks save for a healthy two-host cluster (the run of test_checks_full's healthy case)."""
    mount = {"path": "/mnt/shared", "kind": "nfs", "writable": True, "nodes_with_mount": [full_case.HEAD_IP],
             "written_on": full_case.HEAD_IP, "read_on": [], "listed_on": [], "seconds": 0.1, "errors": [],
             "ok": True, "error": None}  # fmt: skip
    answers = {
        "probe": full_case.RUNNING,
        "cluster_state": full_case.alive(full_case.HEAD_IP, full_case.WORKER_IP),
        "storage": full_case.result_line({"alive": [full_case.HEAD_IP, full_case.WORKER_IP], "mounts": [mount]}),
        "monitoring": full_case.watched(("head", "node", "up"), ("w1", "node", "down")),
    }
    head = full_case.FakeNode("head", full_case.HEAD_IP, answers, report=full_case.BENCH)
    worker = full_case.FakeNode("w1", full_case.WORKER_IP, {"probe": full_case.RUNNING})
    share = {"storage_nfs_mounts": [{"server": "head", "export": "/srv", "path": "/mnt/shared"}]}
    every = {name: full_case.settings(tmp_path, **share, monitoring_enabled=True) for name in ("head", "w1")}
    gpus = {"head": full_case.NO_GPUS, "w1": full_case.NO_GPUS}
    outcome = full.run_checks([head, worker], head, every, gpus, progress=lambda _line: None)
    return json.loads(outcome.json_path.read_text())


def test_the_full_checks_report_holds_to_the_schema(tmp_path: Path) -> None:
    saved = full_report(tmp_path)
    assert {"checks", "preflight", "cluster_state", "storage", "monitoring", "budget", "verdict"} <= set(saved)
    assert saved["verdict"]["status"] == "FAIL"  # a node exporter down: reasons of every kind are in it
    assert problems(saved) == []


def test_the_quick_checks_report_holds_to_the_schema(tmp_path: Path) -> None:
    state = quick_case.state(quick_case.node(quick_case.HEAD_IP), quick_case.node(quick_case.W1_IP))
    head = quick_case.FakeNode("head", quick_case.HEAD_IP, quick_case.answer(state))
    worker = quick_case.FakeNode("w1", quick_case.W1_IP)
    every = {name: quick_case.settings(tmp_path) for name in ("head", "w1")}
    run = quick.run_quick_checks([head, worker], head, every, {}, lambda _line: None, quick_case.WHY)
    assert problems(json.loads(run.json_path.read_text())) == []


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda r: r["verdict"].update(status="GREEN"), "['verdict', 'status']"),
        (lambda r: r["verdict"]["reasons"].append({"level": "FAIL"}), "['verdict', 'reasons', "),
        (lambda r: r.pop("checks"), "[]: 'checks' is a required property"),
        (lambda r: r["budget"].update(total_s="900"), "['budget', 'total_s']"),
    ],
)
def test_a_report_that_breaks_the_schema_is_refused(tmp_path: Path, change: Any, where: str) -> None:
    saved = full_report(tmp_path)
    change(saved)
    assert any(p.startswith(where) for p in problems(saved)), problems(saved)


def test_every_field_of_the_schema_is_described() -> None:
    def missing(schema: dict[str, Any], path: str) -> list[str]:
        found = []
        for key, spec in schema.get("properties", {}).items():
            if not spec.get("description"):
                found.append(path + key)
            for nested in (spec, spec.get("items"), spec.get("additionalProperties")):
                if isinstance(nested, dict):
                    found += missing(nested, f"{path}{key}.")
        return found

    assert missing(SCHEMA, "") == []
