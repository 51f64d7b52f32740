"""Replacing the ray-node container never destroys first: the replacement command, run on a
fake host whose docker and systemctl keep their state in files (``tests/plan/fakes/fake_node.py``)."""

from __future__ import annotations

import shlex

import pytest

from deploy.contract import settings
from deploy.contract.schema import validate_cluster
from deploy.ray import ray_node
from tests.plan.fakes.fake_node import RAY_ERROR, REFUSED_LOG, REPLACEMENT_STEPS, FakeNode, first_calls

OLD = "docker create --name=ray-node rayproject/ray ray start --num-cpus=8"
NEW = ["docker", "create", "--name=ray-node", "rayproject/ray", "ray", "start", "--num-cpus=16"]


def replace(node: FakeNode, create=NEW, host="worker-1", wait_s=5):
    return node.run(ray_node.replace_command("ray-node", host, wait_s, create))


def test_a_node_that_joins_replaces_the_previous_container(tmp_path):
    node = FakeNode(tmp_path)
    node.add("ray-node", OLD, running=True)
    result = replace(node)
    assert result.returncode == 0, result.stderr
    assert node.containers() == {"ray-node": shlex.join(NEW)}
    assert node.running() == "ray-node"
    steps = first_calls(node.calls(), *REPLACEMENT_STEPS)
    assert steps == sorted(steps), node.calls()


def test_a_node_ray_refuses_is_rolled_back_and_the_failure_names_the_host_and_rays_error(tmp_path):
    node = FakeNode(tmp_path, refuse="--num-cpus=16")
    node.add("ray-node", OLD, running=True)
    result = replace(node, wait_s=1)
    assert result.returncode == 1
    assert node.containers() == {"ray-node": OLD}  # the previous container, under its own name again
    assert node.running() == "ray-node"
    assert result.stderr.strip() == (
        "worker-1: the new ray-node container did not join the cluster within 1 s; "
        f"the previous container is running again and has rejoined. Ray said: {RAY_ERROR}"
    )
    calls = node.calls()
    assert "docker rm --force ray-node-previous" not in calls
    steps = first_calls(
        calls,
        "docker create ",
        "docker logs --tail 400 ray-node",
        "docker rm --force ray-node",
        "docker rename ray-node-previous ray-node",
    )
    assert steps == sorted(steps), calls
    assert calls[steps[-1] + 1] == "systemctl start ray-node.service"


@pytest.mark.parametrize(
    "log,said",
    [
        (f"{REFUSED_LOG}[2026-12-01 08:00:00,000 E 1 1] ERROR a later complaint\n", RAY_ERROR),
        (
            "Starting Ray\n[2026-12-01 08:00:00,000 E 1 1] ERROR the raylet died\nbye\n",
            "[2026-12-01 08:00:00,000 E 1 1] ERROR the raylet died",
        ),
        ("Starting Ray\nstill starting\n\n", "still starting"),
        ("", "nothing in its log"),
    ],
    ids=["exception-first", "error-line", "last-line", "empty"],
)
def test_rays_error_line_is_its_last_exception_else_its_last_error_else_its_last_line(tmp_path, log, said):
    node = FakeNode(tmp_path, refuse="--num-cpus=16", refused_log=log)
    node.add("ray-node", OLD, running=True)
    result = replace(node, wait_s=1)
    assert result.stderr.strip().endswith(f"Ray said: {said}")


def test_a_container_docker_cannot_create_is_rolled_back_too(tmp_path):
    node = FakeNode(tmp_path, bad_create="--num-cpus=16")
    node.add("ray-node", OLD, running=True)
    result = replace(node, wait_s=1)
    assert result.returncode == 1
    assert node.containers() == {"ray-node": OLD}
    assert node.running() == "ray-node"
    assert "docker: Error response from daemon: invalid argument" in result.stderr
    assert result.stderr.strip().endswith(
        "worker-1: docker could not create the new ray-node container; "
        "the previous container is running again and has rejoined."
    )


def test_a_restored_node_that_does_not_rejoin_is_said_so(tmp_path):
    node = FakeNode(tmp_path, refuse="ray start")  # the head is gone: no node joins, old or new
    node.add("ray-node", OLD, running=True)
    result = replace(node, wait_s=1)
    assert result.returncode == 1
    assert node.containers() == {"ray-node": OLD} and node.running() == "ray-node"
    assert "the previous container is back as ray-node but has not rejoined within 1 s" in result.stderr


def test_a_first_node_that_does_not_join_leaves_nothing_and_says_there_was_nothing_to_restore(tmp_path):
    node = FakeNode(tmp_path, refuse="--num-cpus=16")
    result = replace(node, wait_s=1)
    assert result.returncode == 1
    assert node.containers() == {} and node.running() is None
    assert result.stderr.strip() == (
        "worker-1: the new ray-node container did not join the cluster within 1 s; "
        f"there was no previous container to restore. Ray said: {RAY_ERROR}"
    )


def test_a_replacement_cut_short_is_finished_and_keeps_the_last_joined_container_meanwhile(tmp_path):
    node = FakeNode(tmp_path)
    node.add("ray-node-previous", OLD)
    node.add("ray-node", "docker create --name=ray-node never-checked", running=True)
    result = replace(node)
    assert result.returncode == 0, result.stderr
    assert node.containers() == {"ray-node": shlex.join(NEW)}
    assert "docker rename ray-node ray-node-previous" not in node.calls()


def test_when_the_new_node_fails_the_previous_kept_by_a_run_cut_short_comes_back(tmp_path):
    node = FakeNode(tmp_path, refuse="--num-cpus=16")
    node.add("ray-node-previous", OLD)
    result = replace(node, wait_s=1)
    assert result.returncode == 1
    assert node.containers() == {"ray-node": OLD} and node.running() == "ray-node"


@pytest.mark.parametrize("host", ['w"; touch PWNED; echo "', "$(touch PWNED)", "`touch PWNED`", "-n\nx"])
def test_values_reach_the_script_only_as_arguments(tmp_path, host):
    node = FakeNode(tmp_path / "host", refuse="--num-cpus=16")
    hostile = '--resources={"a": 1}; touch PWNED'
    result = node.run(ray_node.replace_command("ray-node", host, 1, [*NEW, hostile]), timeout=60)
    assert result.returncode == 1
    assert not list(tmp_path.rglob("PWNED"))
    assert result.stderr.startswith(f"{host}: the new ray-node container did not join")
    [create] = [call for call in node.calls() if call.startswith("docker create ")]
    assert create == shlex.join(NEW).replace("'", "") + " " + hostile  # one word, as it was given


def test_the_command_is_the_script_with_positional_arguments():
    words = shlex.split(ray_node.replace_command("ray-node", "10.0.0.2", 90.0, NEW))
    assert words[:2] == ["bash", "-c"]
    assert "docker rename" in words[2]
    assert words[3:] == ["replace-ray-node", "ray-node", "ray-node-previous", "10.0.0.2", "90", *NEW]


def test_the_replacement_timeout_must_be_a_positive_number_of_seconds():
    hosts = [("h", {"ray_role": "head", "ray_node_ip": "10.0.0.1", "ray_replace_timeout_s": 0}, "10.0.0.1")]
    problems = [str(p) for p in validate_cluster(hosts)]
    assert any("ray_replace_timeout_s" in p and "a positive number of seconds" in p for p in problems), problems
    assert settings.defaults()["ray_replace_timeout_s"] == 120
