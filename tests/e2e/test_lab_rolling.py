"""Rolling changes and head failure on the lab (1 head, 2 workers).

A second tag of the lab image rolls out the head first, then one worker at a time, and
back; a restarted head container and a rebooted head host get every worker back within
120 s with no deploy; with ``ray_gcs_fault_tolerance`` a head restart keeps the workers'
node IDs and a detached named actor. Every test leaves the cluster on ``inventories/lab.py``.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from cloud import ssh as remote
from cloud.lab.state import LAB_IMAGE_REPO, lab_image_tag
from images import RAY_VERSION
from tests.e2e.labkit import ANSI, CLUSTER_STATE, HOSTS, Lab, deploy, inventory_for_all

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROLLED_TAG = f"{LAB_IMAGE_REPO}:{RAY_VERSION}-rolled"
BACK_WITHIN_S = 120
POLL_S = 30  # one look at the cluster, at most


def images(lab: Lab) -> dict[str, str]:
    command = "sudo docker inspect ray-node --format '{{.Config.Image}}'"
    return {h["address"]: lab.sh(h, command).strip() for h in lab.hosts}


def alive_nodes(lab: Lab) -> list[dict] | str:
    """The alive nodes the head's GCS lists now, or why it could not tell (the head restarting, its
    host rebooting: SSH, ``docker exec`` or ``ray.init`` fail or hang, which one poll bounds)."""
    try:
        return lab.ray_python(CLUSTER_STATE.format(expect=HOSTS, wait=0), timeout=POLL_S)["nodes"]
    except Exception as exc:  # any failure of one poll is "not yet"; the caller bounds the wait
        return f"{type(exc).__name__}: {str(exc)[-300:]}"


def wait_until_all_alive(lab: Lab, since: float, seconds: float, *, new_ids_of: set[str] = frozenset()) -> list[dict]:
    """The alive nodes once there are HOSTS of them (none of them in ``new_ids_of``), or fail after ``seconds``."""
    seen: list[dict] | str = "nothing yet"
    while time.monotonic() < since + seconds:
        seen = alive_nodes(lab)
        if not isinstance(seen, str) and len(seen) == HOSTS and not {n["id"] for n in seen} & new_ids_of:
            print(f"{HOSTS} nodes alive after {time.monotonic() - since:.1f} s")
            return seen
        time.sleep(3)
    pytest.fail(f"not {HOSTS} alive nodes within {seconds} s; last seen: {seen}")


def rolling_steps(output: str) -> list[str]:
    """The ray-node start operations pyinfra ran, in order."""
    return re.findall(r"--> Starting operation: Ray node \| (Start the Ray .*?)\s*$", ANSI.sub("", output), re.M)


def assert_rolled_one_at_a_time(lab: Lab, output: str) -> None:
    steps = rolling_steps(output)
    assert steps[0] == "Start the Ray head container", steps
    workers = [w["address"] for w in lab.workers]
    batches = [re.fullmatch(r"Start the Ray worker container, batch (\d) of (\d): (\S+)", s) for s in steps[1:]]
    assert all(batches) and len(batches) == len(workers), steps
    assert [(b[1], b[2]) for b in batches] == [("1", "2"), ("2", "2")], steps
    assert sorted(b[3] for b in batches) == sorted(workers), steps


def test_a_new_image_rolls_out_head_first_then_one_worker_at_a_time_and_back(lab, first_deploy, tmp_path):
    local = f"{lab.state['registry_local']}/{ROLLED_TAG}"
    for command in (["docker", "tag", lab_image_tag(), local], ["docker", "push", local], ["docker", "rmi", local]):
        subprocess.run(command, check=True, capture_output=True, timeout=600)
    rolled = f"{lab.state['registry']}/{ROLLED_TAG}"
    try:
        result = deploy(inventory_for_all(tmp_path / "rolled.py", {"ray_image": rolled, "ray_rolling_batch": 1}))
        assert result.returncode == 0, "the rolling deploy of a second image tag failed"
        assert_rolled_one_at_a_time(lab, result.stdout + result.stderr)
        assert images(lab) == {h["address"]: rolled for h in lab.hosts}
        assert len(wait_until_all_alive(lab, time.monotonic(), BACK_WITHIN_S)) == HOSTS
    finally:
        back = deploy("inventories/lab.py", "--data", "checks_enabled=False")  # the checks ran on the change
    assert back.returncode == 0, "the deploy back to the lab's own image failed"
    assert_rolled_one_at_a_time(lab, back.stdout + back.stderr)  # a quarter of 2 workers: one at a time
    assert images(lab) == {h["address"]: lab.state["image"] for h in lab.hosts}
    assert len(wait_until_all_alive(lab, time.monotonic(), BACK_WITHIN_S)) == HOSTS


def test_a_restarted_head_container_gets_every_worker_back_without_a_deploy(lab, first_deploy):
    before = {n["id"] for n in wait_until_all_alive(lab, time.monotonic(), BACK_WITHIN_S)}
    lab.sh(lab.head, "sudo docker restart ray-node")
    went_down = time.monotonic()
    wait_until_all_alive(lab, went_down, BACK_WITHIN_S, new_ids_of=before)  # the new head is a new cluster


def test_a_rebooted_head_host_gets_every_worker_back_without_a_deploy(lab, first_deploy):
    before = {n["id"] for n in wait_until_all_alive(lab, time.monotonic(), BACK_WITHIN_S)}
    subprocess.run(["docker", "restart", "--time", "60", lab.head["container"]], check=True, timeout=180)
    deadline = time.monotonic() + 180
    while not remote.ssh_answers(lab.head["address"], timeout=2.0):
        assert time.monotonic() < deadline, "the head's sshd did not come back within 180 s"
        time.sleep(2)
    wait_until_all_alive(lab, time.monotonic(), BACK_WITHIN_S, new_ids_of=before)


ACTOR = """
import json, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address="auto", logging_level="ERROR")

@ray.remote(num_cpus=0)
class Keeper:
    def __init__(self):
        self.calls = 0
    def call(self):
        self.calls += 1
        return self.calls

worker = next(n for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == {worker!r})
keeper = Keeper.options(name="keeper", namespace="rolling", lifetime="detached",
                        scheduling_strategy=NodeAffinitySchedulingStrategy(worker["NodeID"], soft=False)).remote()
print("RESULT", json.dumps(ray.get(keeper.call.remote())))
"""

ASK_ACTOR = """
import json, ray
ray.init(address="auto", logging_level="ERROR")
keeper = ray.get_actor("keeper", namespace="rolling")
calls = ray.get(keeper.call.remote(), timeout=60)
ray.kill(keeper)
print("RESULT", json.dumps(calls))
"""


def test_with_gcs_fault_tolerance_a_head_restart_keeps_workers_and_a_detached_actor(lab, first_deploy, tmp_path):
    try:
        result = deploy(inventory_for_all(tmp_path / "ft.py", {"ray_gcs_fault_tolerance": True}))
        assert result.returncode == 0, "the deploy with ray_gcs_fault_tolerance failed"
        nodes = wait_until_all_alive(lab, time.monotonic(), BACK_WITHIN_S)
        worker_ids = {n["id"] for n in nodes if n["ip"] != lab.head["address"]}
        assert lab.ray_python(ACTOR.format(worker=lab.workers[0]["address"])) == 1
        lab.sh(lab.head, "sudo docker restart ray-node")
        went_down = time.monotonic()
        nodes = wait_until_all_alive(lab, went_down, BACK_WITHIN_S)
        assert worker_ids <= {n["id"] for n in nodes}, "a worker left the cluster across the head's restart"
        assert lab.ray_python(ASK_ACTOR) == 2, "the detached actor lost its state across the head's restart"
    finally:
        back = deploy("inventories/lab.py", "--data", "checks_enabled=False")  # the checks ran on the change
    assert back.returncode == 0, "the deploy back to the lab's default configuration failed"
    assert len(wait_until_all_alive(lab, time.monotonic(), BACK_WITHIN_S)) == HOSTS
