"""Monitoring on the lab's Debian 12 hosts, end to end, on the cluster of the first deploy
(``monitoring_enabled`` is on by default):

- Debian's node exporter on every host, listening on the node's address; the metrics ports (the
  exporters' and Ray's) answering members and no one else;
- Prometheus on the head scraping every Ray node (and every node exporter), answering on the head's
  loopback only.

The lab runs its own Prometheus image (Debian's package, pushed to the lab's registry by ``rayrig lab
up``), without Grafana or a GPU exporter (neither can be fetched here; they, EPEL's node exporter and
Amazon Linux's container are proven by plans and rendered files). Turning monitoring off is proven
last, before teardown (test_lab_monitoring_off.py), so that no deploy is spent turning it on again.
"""

from __future__ import annotations

import json
import shlex
import time

import pytest

from deploy.contract import settings
from deploy.monitoring import exporters as mon
from tests.e2e.labkit import HOSTS, Lab, member_can_connect, outsider_probe, ray_ports

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SERVICE = mon.DEBIAN_PACKAGE.service
NODE_PORT = settings.defaults()["monitoring_ports"]["node_exporter"]


def listeners(lab: Lab, h: dict, port: int) -> set[str]:
    """The local addresses a host listens on at ``port`` (``ss``'s Local Address:Port column)."""
    out = lab.sh(h, f"sudo ss -Hltn 'sport = :{port}'")
    return {line.split()[3] for line in out.splitlines() if line.strip()}


def test_every_host_runs_debians_node_exporter_on_its_node_address(lab, baseline):
    for h in lab.hosts:
        assert lab.sh(h, f"systemctl is-active {SERVICE}").strip() == "active"
        assert (
            lab.sh(h, f"dpkg-query -W -f '${{Status}}' {mon.DEBIAN_PACKAGE.package}").strip() == "install ok installed"
        )
        assert lab.sh(h, f"sudo cat {mon.PACKAGE_MARKER}").strip() == mon.DEBIAN_PACKAGE.package
        assert listeners(lab, h, NODE_PORT) == {f"{h['address']}:{NODE_PORT}"}  # not 0.0.0.0, not [::]
        metrics = lab.sh(lab.head, f"curl -sf http://{h['address']}:{NODE_PORT}/metrics")
        assert "node_exporter_build_info" in metrics and "node_cpu_seconds_total" in metrics


def test_the_metrics_ports_answer_members_and_no_one_else(lab, baseline):
    ports = ray_ports()
    head, worker = lab.head["address"], lab.workers[0]["address"]
    targets = [(worker, NODE_PORT), (head, NODE_PORT), (worker, ports["metrics_export"])]
    targets += [(head, ports["dashboard_metrics"]), (head, ports["autoscaler_metrics"])]
    seen = outsider_probe(lab, targets)
    assert {t: seen[f"{t[0]}:{t[1]}"] for t in targets} == {t: False for t in targets}
    # A member reaches each of them: the firewall, not an idle port, keeps the outsider out.
    for address, port in targets:
        member = lab.workers[1]
        assert member_can_connect(lab, member, address, port), f"{address}:{port} does not answer a member"


PORT = 9090
SCRAPED_WITHIN_S = 120  # a scrape every 15 s; Ray's file is rewritten every 5 s


def query(lab: Lab, promql: str) -> list[dict]:
    """The series of an instant query to Prometheus, asked on the head itself (it listens on loopback)."""
    url = f"http://127.0.0.1:{PORT}/api/v1/query"
    out = lab.sh(lab.head, f"curl -fsS --max-time 10 {url} --data-urlencode {shlex.quote('query=' + promql)}")
    body = json.loads(out)
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for(lab: Lab, promql: str, done, seconds: int = SCRAPED_WITHIN_S) -> list[dict]:
    deadline = time.monotonic() + seconds
    while True:
        try:
            result = query(lab, promql)
        except AssertionError:  # not answering yet (just started)
            result = []
        if done(result) or time.monotonic() > deadline:
            return result
        time.sleep(5)


def hosts_up(result: list[dict]) -> dict[str, str]:
    return {series["metric"].get("host", "?"): series["value"][1] for series in result}


def test_prometheus_on_the_head_has_every_ray_node_up(lab: Lab, baseline):
    names = {h["address"] for h in lab.hosts}  # the lab's inventory names its hosts by address
    result = wait_for(lab, 'up{job="ray", ray_component="node"}', lambda r: hosts_up(r) == dict.fromkeys(names, "1"))
    assert hosts_up(result) == dict.fromkeys(names, "1"), result
    head = {
        s["metric"]["ray_component"]
        for s in query(lab, 'up{job="ray"} == 1')
        if s["metric"]["host"] == lab.head["address"]
    }
    assert head >= {"node", "dashboard"}, head  # the head's dashboard metrics too (Ray's file and the list agree)
    # One series per node of a Ray node metric, each labelled with its inventory host.
    cpus = wait_for(lab, "ray_node_cpu_count", lambda r: len(r) == HOSTS)
    assert sorted(s["metric"]["host"] for s in cpus) == sorted(names), cpus


def test_prometheus_has_every_node_exporter_up(lab: Lab, baseline):
    names = {h["address"] for h in lab.hosts}
    result = wait_for(lab, 'up{job="node"}', lambda r: hosts_up(r) == dict.fromkeys(names, "1"))
    assert hosts_up(result) == dict.fromkeys(names, "1"), result
    rules = json.loads(lab.sh(lab.head, f"curl -fsS http://127.0.0.1:{PORT}/api/v1/rules"))["data"]["groups"]
    assert [r["name"] for g in rules for r in g["rules"]] == [
        "NodeDown", "RayNodeMissing", "GpuXidError", "GpuTooHot", "DiskAlmostFull"
    ]  # fmt: skip


def test_prometheus_answers_on_the_heads_loopback_only(lab: Lab, baseline):
    address = lab.head["address"]
    assert outsider_probe(lab, [(address, PORT)]) == {f"{address}:{PORT}": False}
    assert not member_can_connect(lab, lab.workers[0], address, PORT)
