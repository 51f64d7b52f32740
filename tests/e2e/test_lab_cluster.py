"""The whole deploy, end to end, on a 3-host local lab.

Real sshd hosts with systemd, pyinfra over SSH, Docker installed inside each
host, the Ray image pulled from the lab's registry, a real Ray cluster. The
tests run in file order and share one lab; the last one tears it down and
checks that nothing is left (the fixture tears down too when a test fails).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cloud import local
from rayrig import remote
from rayrig.paths import repo_root

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LAB = os.environ.get("RAYRIG_E2E_LAB", "rayrig-e2e")
HOSTS = 3


def deploy(inventory: str | Path, *extra: str) -> subprocess.CompletedProcess:
    """Run the deploy with pyinfra, as a user would, and return its output."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pyinfra", str(inventory), "deploy/cluster.py", "-y", *extra],
        cwd=repo_root(),
        env={**os.environ, "RAYRIG_LAB": LAB},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    print(f"deploy of {inventory} took {time.monotonic() - started:.1f} s")
    if result.returncode != 0:
        print(result.stdout[-6000:], result.stderr[-4000:])
    return result


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def changed_operations(output: str) -> dict[str, int]:
    """pyinfra's own report: per host, how many operations changed something.

    pyinfra prints ``[host] Success`` for an operation that ran commands and
    ``[host] No changes`` for one that did not; its results table ends with a
    "Grand total" row whose Success column must agree.
    """
    changed: dict[str, int] = {}
    total_success = None
    for line in ANSI.sub("", output).splitlines():
        match = re.search(r"\[(?P<host>[^\]]+)\]\s+(?P<status>Success|No changes)\b", line)
        if match:
            changed.setdefault(match["host"], 0)
            changed[match["host"]] += match["status"] == "Success"
        if line.strip().startswith("Grand total"):
            total_success = line.split()[3]
    assert total_success is not None, "pyinfra printed no results table"
    assert (total_success == "-") == (sum(changed.values()) == 0), (total_success, changed)
    return changed


class Lab:
    """The lab under test: its state, and commands on its hosts."""

    def __init__(self, state: dict):
        self.state = state
        self.hosts = state["hosts"]
        self.head = next(h for h in self.hosts if h["role"] == "head")
        self.workers = [h for h in self.hosts if h["role"] != "head"]

    def target(self, h: dict) -> remote.SshTarget:
        return remote.SshTarget(
            h["address"], self.state["ssh_user"], Path(self.state["ssh_key"]), Path(self.state["known_hosts"])
        )

    def sh(self, h: dict, command: str, timeout: float = 300) -> str:
        status, output = remote.run(self.target(h), command, timeout=timeout)
        assert status == 0, f"{command!r} on {h['address']} failed ({status}): {output[-3000:]}"
        return output

    def container_id(self, h: dict) -> str:
        return self.sh(h, "sudo docker inspect --format '{{.Id}}' ray-node").strip()

    def ray_python(self, code: str, timeout: float = 300) -> dict:
        """Run Python inside the head's ray-node container; it prints one line ``RESULT <json>``.

        Ray's own warnings share the output stream, so the result line is marked.
        """
        script = textwrap.dedent(code)
        command = "sudo docker exec -i ray-node python -"
        status, output = remote.run_with_input(self.target(self.head), command, script, timeout=timeout)
        assert status == 0, f"python in the head container failed ({status}): {output[-3000:]}"
        results = [line[len("RESULT ") :] for line in output.splitlines() if line.startswith("RESULT ")]
        assert results, f"no RESULT line in: {output[-3000:]}"
        return json.loads(results[-1])


CLUSTER_STATE = """
import json, time, ray
ray.init(address="auto", logging_level="ERROR")
deadline = time.time() + {wait}
while True:
    nodes = [n for n in ray.nodes() if n["Alive"]]
    if len(nodes) >= {expect} or time.time() > deadline:
        break
    time.sleep(2)
print("RESULT", json.dumps({{"nodes": [{{"id": n["NodeID"], "ip": n["NodeManagerAddress"], "resources": n["Resources"]}}
                            for n in nodes],
                  "total": ray.cluster_resources()}}))
"""


def cluster_state(lab: Lab, expect: int = HOSTS, wait: int = 90) -> dict:
    return lab.ray_python(CLUSTER_STATE.format(expect=expect, wait=wait))


def wait_for_total_cpus(lab: Lab, cpus: float, seconds: int = 120) -> dict:
    """The cluster state once its CPU total is ``cpus`` (replaced nodes take a moment to rejoin)."""
    deadline = time.monotonic() + seconds
    while True:
        state = cluster_state(lab)
        if state["total"].get("CPU") == cpus and len(state["nodes"]) == HOSTS:
            return state
        if time.monotonic() > deadline:
            return state
        time.sleep(3)


@pytest.fixture(scope="module")
def lab():
    started = time.monotonic()
    state = local.up(hosts=HOSTS, name=LAB)
    print(f"lab up took {time.monotonic() - started:.1f} s")
    try:
        yield Lab(state)
    finally:
        local.down(LAB)


@pytest.fixture(scope="module")
def first_deploy(lab):
    result = deploy("inventories/lab.py")
    assert result.returncode == 0, "the first deploy failed"
    return result


def test_three_nodes_alive_with_declared_resources(lab, first_deploy):
    state = cluster_state(lab)
    assert sorted(n["ip"] for n in state["nodes"]) == sorted(h["address"] for h in lab.hosts)
    assert state["total"]["CPU"] == sum(h["num_cpus"] for h in lab.hosts)
    assert state["total"].get("GPU", 0) == 0
    for h in lab.hosts:
        node = next(n for n in state["nodes"] if n["ip"] == h["address"])
        for resource, amount in h["resources"].items():
            assert node["resources"].get(resource) == amount, f"{resource} on {h['address']}"
            assert state["total"][resource] == amount


PINNED_TASKS = """
import json, ray
ray.init(address="auto", logging_level="ERROR")

@ray.remote(num_cpus=0)
def where():
    return ray.util.get_node_ip_address()

print("RESULT", json.dumps({{name: ray.get(where.options(resources={{name: 0.01}}).remote(), timeout=120)
                  for name in {names!r}}}))
"""


def test_task_pinned_by_custom_resource_runs_on_its_node(lab, first_deploy):
    names = {next(iter(h["resources"])): h["address"] for h in lab.hosts}
    ran_on = lab.ray_python(PINNED_TASKS.format(names=list(names)))
    assert ran_on == names


def report_paths(output: str) -> tuple[Path, Path]:
    """The JSON report and the plot the checks say they saved."""
    json_path = re.search(r"--> JSON report: (\S+)", output)
    plot_path = re.search(r"--> bus bandwidth plot: (\S+)", output)
    assert json_path and plot_path, output[-3000:]
    return Path(json_path[1]), Path(plot_path[1])


def test_checks_pass_at_the_end_of_the_deploy(lab, first_deploy):
    output = first_deploy.stdout + first_deploy.stderr
    assert "Running the post-deploy checks" in output
    json_path, plot_path = report_paths(output)
    report = json.loads(json_path.read_text())
    assert report["verdict"]["status"] == "PASS", report["verdict"]
    assert "VERDICT: PASS" in output
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(d["ip"] for d in report["devices"]) == sorted(h["address"] for h in lab.hosts)
    assert all(d["matmul"]["tflops"] > 0 for d in report["devices"])
    assert report["allreduce"]["world_size"] == HOSTS
    assert report["allreduce"]["value_check"]["ok"] is True
    assert all(row["busbw_gbps"] > 0 for row in report["allreduce"]["sweep"])
    assert report["sweep_test"]["completed"] == report["sweep_test"]["tasks"]
    assert not report["sweep_test"]["missing_nodes"]
    assert set(report["preflight"]) == {h["address"] for h in lab.hosts}


def test_a_slow_node_is_named_by_the_checks(lab, first_deploy):
    slow = lab.workers[0]
    # A tenth of a CPU for the worker's Ray container: its matmul rate drops far below its peers'.
    lab.sh(slow, "sudo docker update --cpus 0.1 ray-node")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "rayrig", "check", "inventories/lab.py"],
            cwd=repo_root(),
            env={**os.environ, "RAYRIG_LAB": LAB},
            capture_output=True,
            text=True,
            timeout=1200,
        )
    finally:
        # `--cpus 0` leaves the quota in place: give back every CPU of the machine instead.
        lab.sh(slow, 'sudo docker update --cpus "$(nproc)" ray-node')
        nano = lab.sh(slow, "sudo docker inspect --format '{{.HostConfig.NanoCpus}}' ray-node").strip()
        assert int(nano) == int(lab.sh(slow, "nproc")) * 10**9, nano
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    report = json.loads(report_paths(output)[0].read_text())
    assert report["verdict"]["status"] == "FAIL"
    assert slow["name"] in report["verdict"]["slow_hosts"]
    assert [h for h in lab.hosts if h["name"] in report["verdict"]["slow_hosts"]] == [slow]
    assert re.search(rf"SLOW HOSTS: {re.escape(slow['name'])}\b", output)


def test_second_deploy_changes_nothing(lab, first_deploy):
    before = {h["address"]: lab.container_id(h) for h in lab.hosts}
    result = deploy("inventories/lab.py")
    assert result.returncode == 0
    changes = changed_operations(result.stdout + result.stderr)
    assert set(changes) == {h["address"] for h in lab.hosts}, result.stdout[-3000:]
    assert all(n == 0 for n in changes.values()), changes
    assert {h["address"]: lab.container_id(h) for h in lab.hosts} == before


def test_changing_one_workers_cpus_replaces_only_that_worker(lab, first_deploy, tmp_path):
    worker = lab.workers[0]
    before = {h["address"]: lab.container_id(h) for h in lab.hosts}
    # An inventory kept outside inventories/: the defaults must still apply.
    inventory = tmp_path / "bigger.py"
    inventory.write_text(
        textwrap.dedent(
            f"""
            import runpy
            lab = runpy.run_path({str(repo_root() / "inventories" / "lab.py")!r})
            heads = lab["heads"]
            workers = [(name, {{**data, "ray_num_cpus": data["ray_num_cpus"] + 3}} if name == {worker["address"]!r}
                        else data) for name, data in lab["workers"]]
            """
        )
    )
    result = deploy(inventory)
    assert result.returncode == 0
    after = {h["address"]: lab.container_id(h) for h in lab.hosts}
    assert after[worker["address"]] != before[worker["address"]]
    assert {a: i for a, i in after.items() if a != worker["address"]} == {
        a: i for a, i in before.items() if a != worker["address"]
    }
    expected = sum(h["num_cpus"] for h in lab.hosts) + 3
    assert wait_for_total_cpus(lab, expected)["total"]["CPU"] == expected


def test_killed_worker_container_comes_back_and_rejoins(lab, first_deploy):
    worker = lab.workers[-1]
    old = lab.container_id(worker)
    old_nodes = {n["id"] for n in cluster_state(lab)["nodes"]}
    lab.sh(worker, "sudo docker kill ray-node")
    killed_at = time.monotonic()
    deadline = killed_at + 60
    rejoined = False
    while time.monotonic() < deadline and not rejoined:
        time.sleep(2)
        state = cluster_state(lab, wait=0)
        # A new Ray node (a new id) alive at the worker's address: the restarted raylet joined.
        rejoined = any(n["ip"] == worker["address"] and n["id"] not in old_nodes for n in state["nodes"])
    print(f"worker rejoined {time.monotonic() - killed_at:.1f} s after docker kill")
    assert rejoined, "the killed worker did not come back within 60 s"
    assert lab.container_id(worker) == old  # the same container, started again


def test_lab_down_leaves_nothing(lab):
    local.down(LAB)
    for kind in ("container ls -a", "network ls", "volume ls"):
        listed = subprocess.run(
            ["docker", *kind.split(), "--quiet", "--filter", f"label=rayrig.lab={LAB}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert listed == "", f"lab down left {kind.split()[0]}s: {listed}"
    assert local.load_state(LAB) is None
