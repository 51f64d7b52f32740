"""Day to day on the lab's cluster, as its users run it: ``rayrig status``, ``exec`` and ``logs``.

``status`` lists the 3 hosts as alive Ray nodes with their resources and exits 0; once a
worker's ray-node unit is stopped it names that worker and exits 1 (the worker is started
again, and every node alive again, before the scenario ends). ``exec --all`` prints one line
per host; ``logs HOST`` shows that host's ray-node journal.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from images import RAY_VERSION
from tests.e2e.labkit import HOSTS, LAB_INVENTORY, Lab, cluster_token, rayrig, wait_for_alive

pytestmark = [pytest.mark.e2e]

INVENTORY = LAB_INVENTORY


def status_json() -> tuple[int, dict]:
    result = rayrig("status", INVENTORY, "--json")
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    return result.returncode, json.loads(result.stdout)


def test_status_lists_every_host_as_an_alive_node_with_its_resources(lab: Lab, baseline):
    status, report = status_json()
    assert status == 0, report
    assert report["ok"] is True and report["not_alive"] == []
    by_address = {h["name"]: h for h in report["hosts"]}
    assert sorted(by_address) == sorted(h["address"] for h in lab.hosts)
    for h in lab.hosts:
        entry = by_address[h["address"]]
        assert (entry["role"], entry["unit"], entry["container"], entry["alive"]) == (
            h["role"],
            "active",
            "running",
            True,
        )
        assert entry["ray_version"] == RAY_VERSION
        assert entry["registered"]["CPU"] == h["num_cpus"], entry
        for name, amount in h["resources"].items():
            assert entry["declared"][name] == amount and entry["registered"][name] == amount, entry
    assert report["cluster"]["nodes_alive"] == HOSTS
    assert "Active" in (report["cluster"]["ray_status"] or ""), report["cluster"]
    assert cluster_token() not in json.dumps(report)


def test_status_names_a_worker_whose_ray_node_unit_is_stopped_and_exits_1(lab: Lab, baseline):
    worker = lab.workers[0]
    # Docker stops the container; stopping the unit too keeps Restart=always from starting it again
    lab.sh(worker, "sudo docker stop --time 30 ray-node && sudo systemctl stop ray-node")
    try:
        deadline = time.monotonic() + 120  # the head notices a node is gone within Ray's health checks
        while True:
            status, report = status_json()
            if status == 1 or time.monotonic() > deadline:
                break
            time.sleep(5)
        assert status == 1, report
        assert report["not_alive"] == [worker["address"]], report
        entry = next(h for h in report["hosts"] if h["name"] == worker["address"])
        # systemd's own word for the unit, which status reports as it is: "inactive", or "failed" when
        # the container's exit (Ray's --block exits 1) reached systemd after the stop began (a loaded host)
        unit = lab.sh(worker, "systemctl is-active ray-node || true").strip()
        assert unit in ("inactive", "failed"), unit
        assert entry["unit"] == unit and entry["alive"] is False, entry
        text = rayrig("status", INVENTORY)
        assert text.returncode == 1
        assert text.stdout.splitlines()[-1].startswith(f"NOT OK: not alive Ray nodes: {worker['address']} (unit ")
    finally:
        lab.sh(worker, "sudo systemctl start ray-node")
        wait_for_alive(lab, HOSTS)
    status, report = status_json()
    assert status == 0, report


def test_exec_all_prints_one_line_per_host(lab: Lab, baseline):
    result = rayrig("exec", INVENTORY, "--all", "--", "ray", "--version")
    assert result.returncode == 0, result.stderr[-3000:]
    expected = [f"{h['address']}: ray, version {RAY_VERSION}" for h in lab.hosts]
    assert sorted(result.stdout.splitlines()) == sorted(expected), result.stdout


def test_logs_show_that_hosts_ray_node_journal(lab: Lab, baseline):
    worker = lab.workers[0]
    result = rayrig("logs", INVENTORY, worker["address"], "-n", "2000")
    assert result.returncode == 0, result.stderr[-3000:]
    # journalctl's lines: "Dec 01 20:00:00 HOSTNAME UNIT[PID]: MESSAGE"; the unit was restarted above
    senders = {m[1] for m in re.finditer(r"^\w{3} [ \d]\d \d\d:\d\d:\d\d (\S+) ", result.stdout, re.MULTILINE)}
    assert senders == {worker["name"]}, result.stdout[-3000:]
    assert any("ray-node.service" in line for line in result.stdout.splitlines()), result.stdout[-3000:]
