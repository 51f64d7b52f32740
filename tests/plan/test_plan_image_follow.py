"""The ray-node container follows the image: a new image behind ``ray_image`` replaces it.

Facts are read before the pull runs, so a run that pulls (``ray_image_pull = "always"``)
plans a replacement guarded by a comparison made on the host after the pull: these tests
run that very command on a fake host (``fakes/fake_node.py``) whose pull brought the same
image, or a new one.
"""

from __future__ import annotations

import pytest

from tests.plan.fakes.fake_node import REPLACEMENT_STEPS, FakeNode, first_calls
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, reference_cluster
from tests.plan.harness import HostRun, run_deploy

IMAGE = "rayproject/ray:2.60.0-py311-gpu"
NEW_IMAGE_ID = "sha256:" + "cd" * 32
OLD = f"docker create --name=ray-node {IMAGE} ray start --block"
START = {HEAD: "Ray node | Start the Ray head container", CPU_WORKER: "Ray node | Start the Ray worker container"}


def planned_start(host: HostRun) -> str:
    """The command of the host's "Start the Ray ... container" step, as the host would run it."""
    [command] = [c for c in host.raw_commands if " replace-ray-node " in c]
    return command


def planned_start_name(changes: list[str], name: str) -> str:
    return next(change for change in changes if change.startswith(START[name]))


@pytest.fixture(scope="module")
def always() -> dict[str, HostRun]:
    run = run_deploy(reference_cluster("ubuntu22", "converged", data={"ray_image_pull": "always"}))
    return run.hosts


@pytest.mark.parametrize("name", [HEAD, CPU_WORKER])
def test_pull_always_plans_a_replacement_guarded_by_the_image_id_seen_after_the_pull(always, name):
    changes = [op.name for op in always[name].changes]
    assert changes[1] == f"Ray image | Pull {IMAGE} (in the background)"
    assert changes.index(f"Ray image | Wait for the pull of {IMAGE}") < changes.index(planned_start_name(changes, name))
    assert any(change.startswith(START[name]) for change in changes), changes  # a worker's is named by its batch
    command = planned_start(always[name])
    guard = """bash -c '[ "$(docker image inspect --format "{{.Id}}" "$1")" = """
    assert command.startswith(guard), command
    assert f"' _ {IMAGE} ray-node || {{ systemctl daemon-reload && " in command


@pytest.mark.parametrize("name", [HEAD, CPU_WORKER])
def test_a_pull_that_brought_the_same_image_replaces_nothing(always, name, tmp_path):
    node = FakeNode(tmp_path)
    node.add("ray-node", OLD, running=True)
    result = node.run(planned_start(always[name]))
    assert result.returncode == 0, result.stderr
    assert node.containers() == {"ray-node": OLD}
    assert node.running() == "ray-node"
    assert not [c for c in node.calls() if c.startswith(("systemctl", "docker create", "docker rename"))]


@pytest.mark.parametrize("name", [HEAD, CPU_WORKER])
def test_a_pull_that_brought_a_new_image_replaces_the_container_keeping_the_old_until_the_new_joined(
    always, name, tmp_path
):
    node = FakeNode(tmp_path)
    node.add("ray-node", OLD, running=True)
    node.pull(NEW_IMAGE_ID)
    result = node.run(planned_start(always[name]))
    assert result.returncode == 0, result.stderr
    steps = first_calls(node.calls(), *REPLACEMENT_STEPS)
    assert steps == sorted(steps), node.calls()
    assert list(node.containers()) == ["ray-node"]
    assert node.image_of("ray-node") == NEW_IMAGE_ID
    assert node.running() == "ray-node"


def test_a_container_created_from_another_image_than_the_present_one_is_replaced_without_a_pull():
    """``ray_image_pull = "missing"``: the image is there, but it is not the one the container runs
    (pulled or tagged by hand since): the container is replaced, unguarded, nothing is pulled."""
    options = {GPU_WORKER: {"container_image_id": NEW_IMAGE_ID}}
    run = run_deploy(reference_cluster("ubuntu22", "converged", options=options))
    assert run.changed_hosts == {
        GPU_WORKER: [
            "Ray node | Wait for the Ray head to answer",
            f"Ray node | Start the Ray worker container, batch 1 of 1: {GPU_WORKER}",
        ]
    }
    assert run[GPU_WORKER].replacement()[:2] == ["bash", "-c"]
    assert IMAGE in run[GPU_WORKER].docker_create()


def test_pull_missing_with_the_image_present_plans_no_guard():
    run = run_deploy(reference_cluster("ubuntu22", "converged"))
    assert run.changed_hosts == {}
    assert not any("docker image inspect" in c for h in run.hosts.values() for c in h.raw_commands)
