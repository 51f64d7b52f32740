"""Plans of Ray token authentication: the token reaches every node as a 0600 file and
nowhere else; ray-node reads it from a read-only mount."""

from __future__ import annotations

import logging

import pytest

from deploy.contract import settings
from deploy.ray import auth
from deploy.ray.cluster_token import NO_AUTH_WARNING, ROTATION_ENV, ClusterTokenError
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, reference_cluster
from tests.plan.harness import run_deploy

NODES = (HEAD, GPU_WORKER, CPU_WORKER)


def _token(data: dict | None = None) -> str:
    return auth.read_token(auth.ensure_token(settings.merge(data or {})))


@pytest.mark.parametrize("os_name", ["ubuntu22", "debian12", "rocky9"])
def test_every_node_gets_the_token_0600_and_the_container_reads_it_from_a_read_only_mount(os_name):
    run = run_deploy(reference_cluster(os_name))
    token = _token()
    for name in NODES:
        host = run[name]
        assert host.op("Create the Ray token's directory").commands[-1] == f"chmod 700 {auth.NODE_TOKEN_DIR}"
        put = host.op("Store the cluster's Ray token")
        assert put.uploads == {auth.NODE_TOKEN_PATH: token + "\n"}
        assert f"chmod 600 {auth.NODE_TOKEN_PATH}" in put.commands
        create = host.docker_create()
        assert "--env=RAY_AUTH_MODE=token" in create
        assert f"--env=RAY_AUTH_TOKEN_PATH={auth.NODE_TOKEN_PATH}" in create
        assert f"--mount=type=bind,src={auth.NODE_TOKEN_PATH},dst={auth.NODE_TOKEN_PATH},readonly" in create
        assert any(c.startswith('chown "$(docker run --rm --network=none --entrypoint id ') for c in host.commands)
        names = [op.name for op in host.ops]
        for text in host.commands + host.raw_commands + names + [run.output]:
            assert token not in text


def test_one_token_per_cluster_and_the_same_one_on_every_run():
    first = run_deploy(reference_cluster("debian12"))
    second = run_deploy(reference_cluster("debian12"))
    uploads = {
        run[name].op("Store the cluster's Ray token").uploads[auth.NODE_TOKEN_PATH]
        for run in (first, second)
        for name in NODES
    }
    assert len(uploads) == 1


def test_a_cluster_of_another_name_gets_a_token_of_its_own(tmp_path):
    data = {"ray_cluster_name": "sprint-42"}
    run = run_deploy(reference_cluster("debian12", data=data))
    other = run[HEAD].op("Store the cluster's Ray token").uploads[auth.NODE_TOKEN_PATH]
    assert other == _token(data) + "\n"
    assert other != _token() + "\n"


def test_a_new_local_token_stops_the_deploy_and_a_rotation_replaces_every_container_once(tmp_path, monkeypatch):
    token_file = tmp_path / "token"
    token_file.write_text("first-token-value\n")
    data = {"ray_auth_token_file": str(token_file)}
    hosts = reference_cluster("ubuntu22", "converged", data=data)
    assert run_deploy(hosts).changed_hosts == {}
    token_file.write_text("second-token-value\n")
    with pytest.raises(ClusterTokenError, match="differs from the cluster's"):
        run_deploy(hosts)
    monkeypatch.setenv(ROTATION_ENV, "1")
    changed = run_deploy(hosts).changed_hosts
    for name in NODES:
        assert "Ray node | Store the cluster's Ray token" in changed[name]
        assert any("Start the Ray" in op for op in changed[name])


def test_without_auth_there_is_no_token_and_ray_is_told_so(caplog):
    with caplog.at_level(logging.WARNING, logger="pyinfra"):
        run = run_deploy(reference_cluster("ubuntu24", data={"ray_auth": "none", "ray_auth_allow_none": True}))
    warned = [r.getMessage() for r in caplog.records if r.getMessage() == NO_AUTH_WARNING]
    assert len(warned) == 1  # once per deploy, whatever the number of hosts
    assert warned[0].startswith('ray_auth = "none" (ray_auth_allow_none = True): Ray asks no client for a token')
    for name in NODES:
        host = run[name]
        assert not host.has_op("token")
        create = host.docker_create()
        assert "--env=RAY_AUTH_MODE=disabled" in create
        assert not any("auth_token" in arg for arg in create)
