"""The checks read Prometheus, end to end on the lab: a stopped node exporter fails them naming its host.

On the deployed lab (monitoring on, Prometheus on the head), one worker's node exporter is
stopped (``systemctl stop prometheus-node-exporter``: the lab's hosts are Debian, whose
package it is). Once Prometheus has scraped it down, ``rayrig check`` must end with FAIL, its
report's ``"monitoring"`` section must show that host's ``node`` target down, and the verdict's
FAIL must name that host and no other. The exporter is started again whatever happened, and the
scenario waits until Prometheus has it up again, leaving the cluster healthy for the next one.

``rayrig dashboard`` is also shown to forward Prometheus through the head: ``up`` asked on this
machine answers for every node exporter.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from rayrig.dashboard import free_port
from tests.e2e.labkit import HOSTS, LAB_INVENTORY, Lab, rayrig, rayrig_background, report_paths

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXPORTER_UNIT = "prometheus-node-exporter"  # Debian's package's unit, on every lab host
PROMETHEUS = "http://127.0.0.1:9090"  # monitoring_prometheus_port on the head's loopback
CHECK = ["check", LAB_INVENTORY, "--data", "checks_profile=quick"]

TARGETS = f"""
import json, urllib.request
with urllib.request.urlopen("{PROMETHEUS}/api/v1/targets?state=active", timeout=10) as answer:
    targets = json.load(answer)["data"]["activeTargets"]
print("RESULT", json.dumps([{{"job": t["labels"].get("job"), "host": t["labels"].get("host"),
                             "instance": t["labels"].get("instance"), "health": t["health"]}} for t in targets]))
"""


def node_targets(lab: Lab) -> dict[str, str]:
    """The health of each node exporter's target, by instance address, as Prometheus on the head has it
    (asked from the head's ray-node container, which shares the head's loopback)."""
    targets = lab.ray_python(TARGETS)
    return {t["instance"].rsplit(":", 1)[0]: t["health"] for t in targets if t["job"] == "node"}


def wait_for_node_target(lab: Lab, address: str, health: str, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while (seen := node_targets(lab).get(address)) != health:
        assert time.monotonic() < deadline, f"the node exporter of {address} is {seen!r} in Prometheus, not {health}"
        time.sleep(5)


def test_a_stopped_node_exporter_fails_the_checks_naming_its_host(lab, baseline):
    victim = lab.workers[0]
    assert set(node_targets(lab).values()) == {"up"} and len(node_targets(lab)) == HOSTS
    lab.sh(victim, f"sudo systemctl stop {EXPORTER_UNIT}")
    try:
        wait_for_node_target(lab, victim["address"], "down")
        result = rayrig(*CHECK, timeout=1200)
    finally:
        lab.sh(victim, f"sudo systemctl start {EXPORTER_UNIT}")
        wait_for_node_target(lab, victim["address"], "up")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    report = json.loads(report_paths(output)[0].read_text())
    assert report["verdict"]["status"] == "FAIL"
    watched = report["monitoring"]
    assert watched["error"] is None and watched["host"] == lab.head["address"], watched
    down = [(t["host"], t["job"]) for t in watched["targets"] if t["health"] != "up"]
    assert down == [(victim["address"], "node")], watched["targets"]
    fails = [r for r in report["verdict"]["reasons"] if r["level"] == "FAIL"]
    assert [r["host"] for r in fails] == [victim["address"]], fails  # that host, and nothing else failed
    assert 'node exporter (job "node")' in fails[0]["message"] and "is down in Prometheus" in fails[0]["message"]
    # what the operator reads: the message names the host's address already, so it is not repeated
    assert f'FAIL  node exporter (job "node") at {victim["address"]}:9100 is down in Prometheus' in output


def test_the_dashboard_forwards_prometheus_through_the_head(lab, baseline):
    dashboard, prometheus = free_port(), free_port()
    process = rayrig_background(
        "dashboard", LAB_INVENTORY, "--local-port", str(dashboard), "--local-prometheus-port", str(prometheus),
        "--local-grafana-port", str(free_port()),
    )  # fmt: skip
    watchdog = threading.Timer(120, process.kill)  # a tunnel that never opens fails the test, not the tier
    watchdog.start()
    try:
        banner: list[str] = []
        while not banner or not banner[-1].startswith(("The tunnel runs", "rayrig dashboard:")) and banner[-1]:
            banner.append(process.stdout.readline())
        assert f"Prometheus: http://127.0.0.1:{prometheus}\n" in banner, banner
        url = f"http://127.0.0.1:{prometheus}/api/v1/query?query=up%7Bjob%3D%22node%22%7D"
        with urllib.request.urlopen(url, timeout=10) as answer:
            series = json.load(answer)["data"]["result"]
        assert len(series) == HOSTS and {s["value"][1] for s in series} == {"1"}, series
    finally:
        watchdog.cancel()
        process.terminate()
        process.wait(timeout=30)
