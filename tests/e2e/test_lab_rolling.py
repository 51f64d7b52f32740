"""Rolling changes and head failure on the lab (1 head, 2 workers).

A second tag of the lab image, pinned by its digest, rolls out the head first, then one worker
at a time (each host pulls the digest and runs it by the name of that digest), and back; a
restarted head container and a rebooted head host get every worker back within 120 s with no
deploy; with ``ray_gcs_fault_tolerance`` a head restart keeps the workers' node IDs and a detached
named actor. Every test starts from the baseline and leaves the cluster on ``inventories/lab.py``.
The deploys here skip the checks: what they prove on a changed cluster is test_lab_tls's (every
node replaced, the checks PASS).
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from cloud import ssh as remote
from cloud.lab.state import LAB_IMAGE_REPO, lab_image_tag
from deploy.host import image_mirror
from images import RAY_VERSION
from tests.e2e.labkit import (
    ANSI,
    HOSTS,
    LAB_INVENTORY,
    Lab,
    deploy,
    inventory_variant,
    upstream_digest,
    wait_for_alive,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROLLED_TAG = f"{LAB_IMAGE_REPO}:{RAY_VERSION}-rolled"
BACK_WITHIN_S = 120
NO_CHECKS = ("--data", "checks_enabled=False")


def images(lab: Lab) -> dict[str, str]:
    command = "sudo docker inspect ray-node --format '{{.Config.Image}}'"
    return {h["address"]: lab.sh(h, command).strip() for h in lab.hosts}


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


def test_a_new_image_rolls_out_head_first_then_one_worker_at_a_time_and_back(lab, baseline, tmp_path):
    local = f"{lab.state['registry_local']}/{ROLLED_TAG}"
    for command in (["docker", "tag", lab_image_tag(), local], ["docker", "push", local], ["docker", "rmi", local]):
        subprocess.run(command, check=True, capture_output=True, timeout=600)
    rolled = f"{lab.state['registry']}/{ROLLED_TAG}@{upstream_digest(lab, ROLLED_TAG)}"
    try:
        rolled_inventory = inventory_variant(tmp_path / "rolled.py", {"ray_image": rolled, "ray_rolling_batch": 1})
        result = deploy(rolled_inventory, *NO_CHECKS)
        assert result.returncode == 0, "the rolling deploy of a second image tag failed"
        assert_rolled_one_at_a_time(lab, result.stdout + result.stderr)
        assert images(lab) == {h["address"]: image_mirror.local_name(rolled) for h in lab.hosts}
        assert len(wait_for_alive(lab, HOSTS, BACK_WITHIN_S)) == HOSTS
    finally:
        back = deploy(LAB_INVENTORY, *NO_CHECKS)
    assert back.returncode == 0, "the deploy back to the lab's own image failed"
    assert_rolled_one_at_a_time(lab, back.stdout + back.stderr)  # a quarter of 2 workers: one at a time
    assert images(lab) == {h["address"]: lab.state["image"] for h in lab.hosts}
    assert len(wait_for_alive(lab, HOSTS, BACK_WITHIN_S)) == HOSTS


def test_a_restarted_head_container_gets_every_worker_back_without_a_deploy(lab, baseline):
    before = {n["id"] for n in wait_for_alive(lab, HOSTS, BACK_WITHIN_S)}
    lab.sh(lab.head, "sudo docker restart ray-node")
    went_down = time.monotonic()
    wait_for_alive(lab, HOSTS, BACK_WITHIN_S, since=went_down, new_ids_of=before)  # the new head is a new cluster


def test_a_rebooted_head_host_gets_every_worker_back_without_a_deploy(lab, baseline):
    before = {n["id"] for n in wait_for_alive(lab, HOSTS, BACK_WITHIN_S)}
    subprocess.run(["docker", "restart", "--time", "60", lab.head["container"]], check=True, timeout=180)
    deadline = time.monotonic() + 180
    while not remote.ssh_answers(lab.head["address"], timeout=2.0):
        assert time.monotonic() < deadline, "the head's sshd did not come back within 180 s"
        time.sleep(2)
    wait_for_alive(lab, HOSTS, BACK_WITHIN_S, new_ids_of=before)


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


def test_with_gcs_fault_tolerance_a_head_restart_keeps_workers_and_a_detached_actor(lab, baseline, tmp_path):
    try:
        result = deploy(inventory_variant(tmp_path / "ft.py", {"ray_gcs_fault_tolerance": True}), *NO_CHECKS)
        assert result.returncode == 0, "the deploy with ray_gcs_fault_tolerance failed"
        # the store (the container's user's) inside a folder of root's that no other account enters
        layout = lab.sh(lab.head, "sudo stat -c '%u %a' /var/lib/rayrig/gcs /var/lib/rayrig/gcs/store").split()
        uid = lab.sh(lab.head, "sudo docker exec ray-node id -u").strip()
        assert layout == ["0", "700", uid, "700"], (layout, uid)  # the lab's image runs as root: uid 0
        nodes = wait_for_alive(lab, HOSTS, BACK_WITHIN_S)
        worker_ids = {n["id"] for n in nodes if n["ip"] != lab.head["address"]}
        assert lab.ray_python(ACTOR.format(worker=lab.workers[0]["address"])) == 1
        lab.sh(lab.head, "sudo docker restart ray-node")
        went_down = time.monotonic()
        nodes = wait_for_alive(lab, HOSTS, BACK_WITHIN_S, since=went_down)
        assert worker_ids <= {n["id"] for n in nodes}, "a worker left the cluster across the head's restart"
        assert lab.ray_python(ASK_ACTOR) == 2, "the detached actor lost its state across the head's restart"
    finally:
        back = deploy(LAB_INVENTORY, *NO_CHECKS)
    assert back.returncode == 0, "the deploy back to the lab's default configuration failed"
    assert len(wait_for_alive(lab, HOSTS, BACK_WITHIN_S)) == HOSTS
