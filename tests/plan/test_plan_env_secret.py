"""Plans of workload secrets (ray_env_secret): a 0600 env file that docker reads, never a
command line; a changed value replaces the container, a converged host plans nothing."""

from __future__ import annotations

import pytest

from deploy.ray import env_secret
from deploy.ray.env_secret import EnvSecretError
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, UPLOAD_DIR, reference_cluster, with_data
from tests.plan.harness import run_deploy

VALUE = "wandb-Secret-0123456789"
SECRET = {"ray_env_secret": {"WANDB_API_KEY": VALUE}, "ray_env": {"NCCL_SOCKET_IFNAME": "eth0"}}


@pytest.mark.parametrize("os_name", ["ubuntu22", "rocky9"])
def test_secret_environment_goes_through_a_0600_file_and_never_a_command_line(os_name):
    run = run_deploy(reference_cluster(os_name, data={**SECRET, "_sudo": True}))
    for name in (HEAD, GPU_WORKER, CPU_WORKER):
        host = run[name]
        assert host.op("Create the directory of ray-node's secret environment").commands[-1] == (
            f"chmod 700 {env_secret.ENV_DIR}"
        )
        put = host.op(r"Store ray-node's secret environment")
        assert put.uploads == {env_secret.ENV_FILE: f"WANDB_API_KEY={VALUE}\n"}
        assert f"chmod 600 {env_secret.ENV_FILE}" in put.commands
        assert put.temp_paths[env_secret.ENV_FILE].startswith(f"{UPLOAD_DIR}/")
        create = host.docker_create()
        assert f"--env-file={env_secret.ENV_FILE}" in create
        assert "--env=NCCL_SOCKET_IFNAME=eth0" in create  # ray_env stays as it was
        assert any(arg.startswith(f"--label={env_secret.DIGEST_LABEL}=") for arg in create)
        names = [op.name for op in host.ops]
        for text in host.commands + host.raw_commands + names + [run.output]:
            assert VALUE not in text


def test_a_converged_host_with_a_secret_environment_plans_nothing():
    assert run_deploy(reference_cluster("debian12", "converged", data=SECRET)).changed_hosts == {}


def test_a_changed_secret_value_rewrites_the_file_and_replaces_only_that_container():
    hosts = reference_cluster("debian12", "converged", data=SECRET)
    changed = with_data(hosts, GPU_WORKER, ray_env_secret={"WANDB_API_KEY": "another-value"})
    run = run_deploy(changed)
    assert set(run.changed_hosts) == {GPU_WORKER}
    assert run[GPU_WORKER].has_op("Start the Ray worker container")
    assert run[GPU_WORKER].op(r"Store ray-node's secret environment").uploads == {
        env_secret.ENV_FILE: "WANDB_API_KEY=another-value\n"
    }


def test_a_secret_environment_no_longer_in_the_data_is_removed_from_the_host():
    hosts = reference_cluster("debian12", "converged", data=SECRET)
    run = run_deploy(with_data(hosts, HEAD, ray_env_secret={}))
    assert run[HEAD].op("Remove ray-node's secret environment").commands == [f"rm -f {env_secret.ENV_FILE}"]
    assert run[HEAD].has_op("Start the Ray head container")  # created without --env-file


@pytest.mark.parametrize(
    "data,expected",
    [
        (
            {"ray_env": {"WANDB_API_KEY": "x"}},
            r"WANDB_API_KEY is in ray_env too; expected each variable in one of them",
        ),
        ({"ray_env_secret": {"RAY_AUTH_TOKEN": VALUE}}, r"expected no RAY_AUTH_\* variable \(set ray_auth instead\)"),
    ],
)
def test_a_clashing_secret_name_stops_the_deploy_naming_host_and_name_not_value(data, expected):
    with pytest.raises(EnvSecretError, match=rf"host {CPU_WORKER}: ray_env_secret\['[A-Z_]+'\]: {expected}") as error:
        run_deploy(reference_cluster("ubuntu22", host_data={CPU_WORKER: {**SECRET, **data}}))
    assert VALUE not in str(error.value)
