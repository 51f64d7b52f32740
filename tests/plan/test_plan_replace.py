"""Replacing a ray-node container keeps the previous one until the new one has joined.

The planned replacement is one command of the "Start the Ray ... container" step; these
tests run that very command on a fake host (``fakes/fake_node.py``) whose new node joins,
or is refused by Ray, and look at what it did.
"""

from __future__ import annotations

import shlex

import pytest

from tests.plan.fakes.fake_node import RAY_ERROR, REPLACEMENT_STEPS, FakeNode, first_calls
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, reference_cluster, with_data
from tests.plan.harness import HostRun, run_deploy

OLD = "docker create --name=ray-node rayproject/ray:2.60.0-py311-gpu ray start --block"
CHANGES = [
    (GPU_WORKER, {"ray_num_cpus": 64}, "Start the Ray worker container", "--num-cpus=64"),
    (HEAD, {"ray_object_store_bytes": 2**40}, "Start the Ray head container", f"--object-store-memory={2**40}"),
]


def planned_replacement(host: HostRun) -> str:
    """The replacement command as the host would run it."""
    [command] = [c for c in host.raw_commands if c.startswith("bash -c ") and " replace-ray-node " in c]
    return command


def changed(name: str, **data) -> HostRun:
    """The plan for one host of a converged cluster whose data changed."""
    return run_deploy(with_data(reference_cluster("ubuntu22", "converged"), name, **data))[name]


@pytest.mark.parametrize("name,data,step,_value", CHANGES, ids=["worker", "head"])
def test_the_previous_is_stopped_and_kept_before_the_create_and_removed_only_after_the_join(
    tmp_path, name, data, step, _value
):
    host = changed(name, **data)
    commands = host.op(step).commands
    assert commands[0] == "systemctl daemon-reload"
    assert shlex.split(commands[-1]) == host.replacement()  # the replacement, rollback included, is one command
    node = FakeNode(tmp_path)
    node.add("ray-node", OLD, running=True)
    result = node.run(planned_replacement(host))
    assert result.returncode == 0, result.stderr
    steps = first_calls(node.calls(), *REPLACEMENT_STEPS)
    assert steps == sorted(steps), node.calls()
    assert node.containers() == {"ray-node": shlex.join(host.docker_create())}
    assert node.running() == "ray-node"


@pytest.mark.parametrize("name,data,step,value", CHANGES, ids=["worker", "head"])
def test_a_node_ray_refuses_is_rolled_back_by_the_same_step_which_fails_naming_the_host(
    tmp_path, name, data, step, value
):
    host = changed(name, **data, ray_replace_timeout_s=1)
    assert host.replacement()[7] == "1"
    node = FakeNode(tmp_path, refuse=value)
    node.add("ray-node", OLD, running=True)
    result = node.run(planned_replacement(host))
    assert result.returncode == 1
    assert node.containers() == {"ray-node": OLD}
    assert node.running() == "ray-node"
    assert result.stderr.strip() == (
        f"{name}: the new ray-node container did not join the cluster within 1 s; "
        f"the previous container is running again and has rejoined. Ray said: {RAY_ERROR}"
    )
    calls = node.calls()
    assert "docker rm --force ray-node-previous" not in calls
    rollback = ("docker create ", "docker rm --force ray-node", "docker rename ray-node-previous ray-node")
    steps = first_calls(calls, *rollback)
    assert steps == sorted(steps), calls
    assert calls[steps[-1] + 1] == "systemctl start ray-node.service"


def test_a_previous_container_left_by_a_run_cut_short_makes_the_next_run_replace_again():
    hosts = reference_cluster("ubuntu22", "converged", options={CPU_WORKER: {"previous_present": True}})
    run = run_deploy(hosts)
    assert run.changed_hosts == {
        CPU_WORKER: [
            "Ray node | Wait for the Ray head to answer",
            f"Ray node | Start the Ray worker container, batch 1 of 1: {CPU_WORKER}",
        ]
    }
    assert run[CPU_WORKER].replacement()[4:6] == ["ray-node", "ray-node-previous"]


def test_the_replacement_timeout_comes_from_the_data():
    assert changed(GPU_WORKER, ray_num_cpus=64, ray_replace_timeout_s=300).replacement()[7] == "300"
