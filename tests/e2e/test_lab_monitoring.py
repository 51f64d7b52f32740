"""Prometheus on the lab's head, end to end: it scrapes every Ray node (and every node exporter), it
answers on the head's loopback only, and turning monitoring off leaves none of it behind.

The lab runs its own Prometheus image (Debian's package, pushed to the lab's registry by ``rayrig lab
up``), without Grafana or a GPU exporter (neither can be fetched here; they are proven by plans and
rendered files). It starts from the cluster on the lab's own inventory, every node alive, and leaves
it so, with monitoring on again.
"""

from __future__ import annotations

import json
import shlex
import time

import pytest

from tests.e2e.labkit import HOSTS, Lab, changed_operations, cluster_state, deploy, member_can_connect, outsider_probe

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LAB_INVENTORY = "inventories/lab.py"
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


def test_prometheus_on_the_head_has_every_ray_node_up(lab: Lab, first_deploy):
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


def test_prometheus_has_every_node_exporter_up(lab: Lab, first_deploy):
    names = {h["address"] for h in lab.hosts}
    result = wait_for(lab, 'up{job="node"}', lambda r: hosts_up(r) == dict.fromkeys(names, "1"))
    assert hosts_up(result) == dict.fromkeys(names, "1"), result
    rules = json.loads(lab.sh(lab.head, f"curl -fsS http://127.0.0.1:{PORT}/api/v1/rules"))["data"]["groups"]
    assert [r["name"] for g in rules for r in g["rules"]] == [
        "NodeDown", "RayNodeMissing", "GpuXidError", "GpuTooHot", "DiskAlmostFull"
    ]  # fmt: skip


def test_prometheus_answers_on_the_heads_loopback_only(lab: Lab, first_deploy):
    address = lab.head["address"]
    assert outsider_probe(lab, [(address, PORT)]) == {f"{address}:{PORT}": False}
    assert not member_can_connect(lab, lab.workers[0], address, PORT)


def test_monitoring_off_leaves_nothing_and_on_again_brings_it_back(lab: Lab, first_deploy):
    off = deploy(LAB_INVENTORY, "--data", "monitoring_enabled=false")
    assert off.returncode == 0, "the deploy with monitoring off failed"
    left = lab.sh(
        lab.head,
        "sudo ls -d /etc/systemd/system/rayrig-prometheus.service /etc/rayrig/monitoring /var/lib/rayrig/prometheus "
        "2>/dev/null; sudo docker ps -a --format '{{.Names}}' | grep -x rayrig-prometheus; "
        "sudo docker images --format '{{.Repository}}' | grep lab-prometheus; true",
    )
    assert left.strip() == "", left
    assert "RAY_PROMETHEUS_HOST" not in lab.sh(lab.head, "sudo docker inspect --format '{{.Config.Env}}' ray-node")
    assert len(cluster_state(lab)["nodes"]) == HOSTS
    again = deploy(LAB_INVENTORY, "--data", "monitoring_enabled=false")
    assert again.returncode == 0 and sum(changed_operations(again.stdout + again.stderr).values()) == 0
    on = deploy(LAB_INVENTORY)
    assert on.returncode == 0, "the deploy with monitoring on again failed"
    names = {h["address"] for h in lab.hosts}
    result = wait_for(lab, 'up{job="ray", ray_component="node"}', lambda r: hosts_up(r) == dict.fromkeys(names, "1"))
    assert hosts_up(result) == dict.fromkeys(names, "1"), result
    assert len(cluster_state(lab)["nodes"]) == HOSTS
