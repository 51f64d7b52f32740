"""What the checks read from Prometheus (checks/monitoring.py), against a real HTTP server on 127.0.0.1.

The server answers with Prometheus's own responses, recorded in tests/unit/fixtures/prometheus/
(``/api/v1/targets`` and ``/api/v1/query`` in Prometheus's exact format): a cluster of three hosts,
``head`` and ``w1`` with GPUs and ``w2`` without. urllib is not mocked: every answer goes over a
socket, and a Prometheus that does not answer is a socket that never does.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from checks import monitoring, report
from checks.reasons import FAIL, INFO, WARN
from deploy.contract.paths import repo_root
from deploy.contract.schema import validate_host
from deploy.contract.settings import merge

FIXTURES = Path(__file__).parent / "fixtures" / "prometheus"
GPU = {"pci_count": 8, "nvswitches": 0, "driver": {"count": 8}}
NO_GPU = {"pci_count": 0, "nvswitches": 0, "driver": None}


@dataclass
class FakeNode:
    name: str
    address: str


NODES = [FakeNode("head", "10.0.0.1"), FakeNode("w1", "10.0.0.2"), FakeNode("w2", "10.0.0.3")]
FACTS = {"head": GPU, "w1": GPU, "w2": NO_GPU}


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


@dataclass
class Answers:
    """What the server answers: targets (one after another, the last one kept), and a query fixture by kind."""

    targets: list[str] = field(default_factory=lambda: ["targets_all_up.json"])
    queries: dict[str, str] = field(default_factory=lambda: {"exported": "query_exported_all.json"})
    asked: list[str] = field(default_factory=list)  # the PromQL expressions received

    def kind(self, expr: str) -> str:
        if expr.startswith("count by (__name__)"):
            return "exported"
        for word, kind in (("unless changes(DCGM_FI_DEV_XID", "xid_before"), ("XID_ERRORS", "xid"),
                           ("floor(", "throttle"), ("ECC_DBE", "ecc"),
                           ("UNCORRECTABLE_REMAPPED", "remapped"), ("ROW_REMAP_FAILURE", "remap_failed")):  # fmt: skip
            if word in expr:
                return kind
        raise AssertionError(f"an unexpected query: {expr}")


@pytest.fixture
def prometheus() -> Iterator[tuple[str, Answers]]:
    """A real HTTP server on 127.0.0.1 answering as Prometheus's API does, from the recorded responses."""
    answers = Answers()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urllib.parse.urlsplit(self.path)
            params = urllib.parse.parse_qs(url.query)
            if url.path == "/api/v1/targets" and params.get("state") == ["active"]:
                name = answers.targets.pop(0) if len(answers.targets) > 1 else answers.targets[0]
                status, body = 200, fixture(name)
            elif url.path == "/api/v1/query":
                expr = params["query"][0]
                answers.asked.append(expr)
                name = answers.queries.get(answers.kind(expr), "query_empty.json")
                body = fixture(name)
                status = 400 if body["status"] == "error" else 200
            else:
                status, body = 404, {"status": "error", "errorType": "not_found", "error": self.path}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answers
    finally:
        server.shutdown()
        server.server_close()


def config_for(url: str, wait_s: float = 0, **data: Any) -> dict[str, Any]:
    port = int(url.rsplit(":", 1)[1])
    return monitoring.config("head", port, NODES, merge(data), FACTS, wait_s=wait_s)


def read(url: str, wait_s: float = 0, **data: Any) -> tuple[dict[str, Any], list[Any]]:
    cfg = config_for(url, wait_s, **data)
    section = json.loads(json.dumps(monitoring.read(cfg, sleep=lambda _s: None)))  # what the program prints
    return section, monitoring.reasons(section, cfg)


def judged(reasons: list[Any]) -> list[tuple[str, str | None, str | None]]:
    return [(r.level, r.host, r.device) for r in reasons]


# --- the targets ----------------------------------------------------------------------------------------------


def test_every_exporter_and_ray_node_up_and_no_gpu_error_passes(prometheus):
    url, answers = prometheus
    section, reasons = read(url)
    assert [r for r in reasons if r.level in (FAIL, WARN)] == []
    assert section["error"] is None and section["prometheus"] == url and section["host"] == "head"
    jobs = [(row["host"], row["job"]) for row in section["targets"]]
    assert jobs == [("head", "node"), ("head", "ray"), ("head", "ray"), ("head", "ray"), ("head", "gpu"),
                    ("w1", "node"), ("w1", "ray"), ("w1", "gpu"), ("w2", "node"), ("w2", "ray")]  # fmt: skip
    assert all(row["health"] == "up" for row in section["targets"])
    assert {row["instance"] for row in section["targets"] if row["host"] == "head" and row["job"] == "ray"} == {
        "10.0.0.1:6383", "10.0.0.1:44227", "10.0.0.1:44217"}  # fmt: skip
    assert "gpu" not in [row["job"] for row in section["targets"] if row["host"] == "w2"]  # no GPU, no exporter
    assert all("[3600s" in expr for expr in answers.asked[1:])  # checks_monitoring_window_s
    assert len(answers.asked) == 1 + 6  # which metrics are exported, then one query per finding


def test_a_node_exporter_down_fails_naming_the_host_the_target_and_what_to_look_at(prometheus):
    url, answers = prometheus
    answers.targets = ["targets_node_down.json"]
    section, reasons = read(url)
    fails = [r for r in reasons if r.level == FAIL]
    assert len(fails) == 1 and fails[0].host == "w1", judged(reasons)
    message = fails[0].message
    assert 'node exporter (job "node") at 10.0.0.2:9100 is down in Prometheus' in message
    assert "connect: connection refused" in message  # Prometheus's own last error
    assert "systemctl status prometheus-node-exporter" in message and "port 9100" in message
    assert fails[0].source == monitoring.SOURCE_TARGETS
    text = report.render_monitoring({"monitoring": section})
    assert text.splitlines()[0] == f"Monitoring: Prometheus on head ({url}): 9 of 10 targets up"
    assert "w1    node  10.0.0.2:9100  down" in text


def test_a_missing_target_fails_naming_the_host_and_the_job(prometheus):
    url, answers = prometheus
    answers.targets = ["targets_ray_missing.json"]
    section, reasons = read(url)
    fails = [r for r in reasons if r.level == FAIL]
    assert judged(fails) == [(FAIL, "w2", None)]
    assert fails[0].message.startswith('Ray node metrics (job "ray"): no target in Prometheus;')
    assert {"host": "w2", "job": "ray", "health": "missing", "instance": None, "error": None} in section["targets"]


def test_targets_not_scraped_yet_are_asked_again_until_they_are_up(prometheus):
    url, answers = prometheus
    answers.targets = ["targets_not_scraped_yet.json", "targets_not_scraped_yet.json", "targets_all_up.json"]
    cfg = config_for(url, wait_s=60)
    slept: list[float] = []
    section = monitoring.read(cfg, sleep=slept.append)
    assert slept == [monitoring.POLL_S, monitoring.POLL_S]
    assert monitoring.reasons(section, cfg) == []
    assert all(row["health"] == "up" for row in section["targets"])


def test_targets_still_not_scraped_after_the_wait_are_a_warning(prometheus):
    url, answers = prometheus
    answers.targets = ["targets_not_scraped_yet.json"]
    _section, reasons = read(url, wait_s=0)
    warned = [r for r in reasons if r.level == WARN]
    assert len(warned) == 10 and {r.host for r in warned} == {"head", "w1", "w2"}
    assert "not scraped yet (unknown)" in warned[0].message


def test_a_target_without_a_host_label_is_the_host_whose_address_its_instance_has():
    hosts = [{"name": "head", "address": "10.0.0.1", "jobs": ["node"]}, {"name": "w6", "address": "fd00::6"}]
    assert monitoring.host_of({"instance": "10.0.0.1:6383", "job": "ray"}, hosts) == "head"
    assert monitoring.host_of({"instance": "[fd00::6]:9100"}, hosts) == "w6"
    assert monitoring.host_of({"instance": "10.9.9.9:9100"}, hosts) is None
    assert monitoring.host_of({"host": "w6", "instance": "10.9.9.9:9100"}, hosts) == "w6"


# --- the GPUs -------------------------------------------------------------------------------------------------


def test_an_xid_error_in_the_window_flags_the_host_and_gpu_with_nvidias_meaning(prometheus):
    url, answers = prometheus
    answers.queries["xid"] = "query_xid.json"
    _section, reasons = read(url)
    assert judged([r for r in reasons if r.level != INFO]) == [(FAIL, "w1", "gpu 3")]  # Xid 79: a FAIL code
    assert reasons[0].message == "gpu 3 (NVIDIA H100 80GB HBM3): Xid 79 in the last 1 h: GPU has fallen off the bus"
    assert "docs.nvidia.com/deploy/xid-errors" in reasons[0].source and "DCGM_FI_DEV_XID_ERRORS" in reasons[0].source


def test_an_xid_from_before_the_window_is_said_but_flags_nothing(prometheus):
    url, answers = prometheus
    answers.queries["xid_before"] = "query_xid.json"
    _section, reasons = read(url)
    assert judged(reasons) == [(INFO, "w1", "gpu 3")]
    assert reasons[0].message == (
        "gpu 3 (NVIDIA H100 80GB HBM3): its last Xid, 79, is from before the last 1 h (none since)")  # fmt: skip
    xid = [expr for expr in answers.asked if "XID" in expr and "__name__" not in expr]
    assert xid == ['max_over_time(DCGM_FI_DEV_XID_ERRORS{job="gpu"}[3600s]) > 0 and '
                   'changes(DCGM_FI_DEV_XID_ERRORS{job="gpu"}[3600s]) > 0',
                   'max_over_time(DCGM_FI_DEV_XID_ERRORS{job="gpu"}[3600s]) > 0 unless '
                   'changes(DCGM_FI_DEV_XID_ERRORS{job="gpu"}[3600s]) > 0']  # fmt: skip


def test_an_application_xid_is_a_warning_as_in_the_host_probe():
    series = {"xid": [{"metric": {"host": "w1", "gpu": "0", "job": "gpu"}, "value": [0, "13"]}]}
    hosts = [{"name": "w1", "address": "10.0.0.2", "jobs": ["gpu"]}]
    found = monitoring.gpu_reasons(series, {"xid": monitoring.XID}, hosts, 1800)
    assert judged(found) == [(WARN, "w1", "gpu 0")]
    assert "Xid 13 in the last 30 min: graphics engine exception" in found[0].message


def test_thermal_throttling_flags_the_host_fail_for_hw_most_of_the_window_warn_for_sw(prometheus):
    url, answers = prometheus
    answers.queries["throttle"] = "query_throttle.json"
    _section, reasons = read(url)
    flagged = [r for r in reasons if r.level != INFO]
    assert judged(flagged) == [(FAIL, "head", "gpu 0"), (WARN, "w1", "gpu 1")]
    assert flagged[0].message == "gpu 0 (NVIDIA H100 80GB HBM3): HW thermal slowdown (too hot) in 75% of the last 1 h"
    assert "SW thermal slowdown" in flagged[1].message and "in 10% of the last 1 h" in flagged[1].message
    assert "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" in flagged[0].source
    throttle = next(expr for expr in answers.asked if "floor(" in expr)
    for bit, name in ((8, "hw_slowdown"), (32, "sw_thermal_slowdown"), (64, "hw_thermal_slowdown"),
                      (128, "hw_power_brake_slowdown")):  # fmt: skip
        assert f"/ {bit}) % 2)[3600s:30s]" in throttle and f'"reason", "{name}"' in throttle


def test_an_uncorrectable_ecc_error_in_the_window_fails_the_host(prometheus):
    url, answers = prometheus
    answers.queries["ecc"] = "query_ecc.json"
    _section, reasons = read(url)
    assert judged([r for r in reasons if r.level != INFO]) == [(FAIL, "w1", "gpu 2")]
    assert "2 uncorrectable (double-bit) ECC error(s) in the last 1 h" in reasons[0].message
    assert 'increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{job="gpu"}[3600s]) > 0' in answers.asked


def test_metrics_the_gpu_exporters_do_not_export_are_said_not_read(prometheus):
    url, answers = prometheus
    answers.queries["exported"] = "query_exported_defaults.json"  # the DCGM exporter's default counters
    _section, reasons = read(url)
    assert [r.level for r in reasons] == [INFO, INFO]
    assert "throttling (DCGM_FI_DEV_CLOCKS_EVENT_REASONS or DCGM_FI_DEV_CLOCK_THROTTLE_REASONS)" in reasons[0].message
    assert "uncorrectable ECC errors (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)" in reasons[1].message
    assert not any("floor(" in expr or "ECC_DBE_VOL" in expr for expr in answers.asked[1:])


def test_without_gpu_hosts_no_gpu_query_is_made(prometheus):
    url, answers = prometheus
    section, reasons = read(url, monitoring_gpu_exporter="none")
    assert answers.asked == [] and section["exported"] is None
    assert "gpu" not in {row["job"] for row in section["targets"]}
    assert reasons == []


# --- Prometheus that does not answer -----------------------------------------------------------------------------


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers: a hung Prometheus."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def test_prometheus_not_answering_fails_within_the_timeout_saying_what_to_do(silent_port):
    cfg = monitoring.config("head", silent_port, NODES, merge({}), FACTS, wait_s=60)
    cfg["timeout_s"] = 1
    started = time.monotonic()
    section = monitoring.read(cfg)
    took = time.monotonic() - started
    assert took < 5, took  # one request's timeout, not the wait for targets
    assert section["error"] == "no answer within 1 s"
    [reason] = monitoring.reasons(section, cfg)
    assert reason.level == FAIL and reason.host == "head"
    assert reason.message.startswith(f"Prometheus on head (http://127.0.0.1:{silent_port}) did not answer: no answer")
    assert "systemctl status rayrig-prometheus" in reason.message and "checks_monitoring = False" in reason.message
    assert report.render_monitoring({"monitoring": section}).startswith("monitoring: Prometheus on head (")


def test_nothing_listening_fails_at_once_saying_it_cannot_connect():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    cfg = monitoring.config("head", port, NODES, merge({}), FACTS, wait_s=60)
    section = monitoring.read(cfg)
    assert section["error"].startswith("cannot connect: ") and "refused" in section["error"]


def test_an_error_answer_is_a_fail_with_prometheus_s_words(prometheus):
    url, answers = prometheus
    answers.queries["xid"] = "query_bad_expression.json"
    section, reasons = read(url)
    said = 'invalid parameter "query": 1:1: parse error: unexpected end of input'  # Prometheus's words
    assert section["error"] == f"answered with an error: {said}"
    assert judged(reasons) == [(FAIL, "head", None)]


# --- the part as the checks run it -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "why"),
    [({"monitoring_enabled": False}, "monitoring is off (monitoring_enabled = False)"),
     ({"checks_monitoring": False}, "checks_monitoring = False")],
)  # fmt: skip
def test_monitoring_off_or_not_checked_is_skipped_and_says_so(data, why):
    assert monitoring.skipped(merge(data)) == why
    assert monitoring.skipped(merge({})) is None
    assert report.render_monitoring({"monitoring": {"skipped": why}}) == f"monitoring: not read: {why}"


def test_the_monitoring_host_is_the_head_or_the_host_named_by_name_or_address():
    head = NODES[0]
    assert monitoring.monitoring_node(NODES, head, None) is head
    assert monitoring.monitoring_node(NODES, head, "w2") is NODES[2]
    assert monitoring.monitoring_node(NODES, head, "10.0.0.2") is NODES[1]
    assert monitoring.monitoring_node(NODES, head, "elsewhere") is None


def test_the_program_prints_the_section_as_the_container_runs_it(prometheus):
    url, answers = prometheus
    answers.targets = ["targets_node_down.json"]
    cfg = config_for(url)
    done = subprocess.run([sys.executable, "-m", "checks.monitoring", json.dumps(cfg)], cwd=repo_root(),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    section = monitoring.parse_result(done.stdout.splitlines())
    assert section is not None and section["prometheus"] == url
    assert [(f["level"], f["host"]) for f in section["findings"]] == [(FAIL, "w1")]


@pytest.mark.parametrize(
    ("data", "words"),
    [({"checks_monitoring_window_s": 30}, "checks_monitoring_window_s = 30: expected a number of seconds from 60"),
     ({"checks_monitoring": "yes"}, "checks_monitoring = 'yes': expected true or false")],
)  # fmt: skip
def test_the_checks_monitoring_keys_are_validated_naming_key_and_value(data, words):
    assert any(words in str(problem) for problem in validate_host("gpu-1", data)), validate_host("gpu-1", data)
