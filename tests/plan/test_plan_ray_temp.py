"""Ray's temp folder: a host folder of its own at /tmp/ray in the container, bounded."""

from __future__ import annotations

import pytest

from tests.plan.fakes.fakehosts import CPU_WORKER, HEAD, reference_cluster, with_data
from tests.plan.harness import run_deploy

OWN = 'chown -R "$(docker run --rm --network=none --entrypoint id rayproject/ray:2.60.0-py311-gpu -u)" {}'


@pytest.mark.parametrize("os_name", ["ubuntu22", "rocky9"])
def test_a_fresh_host_gets_the_folder_private_mounted_at_tmp_ray_and_pruned_at_each_start(os_name):
    run = run_deploy(reference_cluster(os_name))
    for name, step in ((HEAD, "Start the Ray head container"), (CPU_WORKER, "Start the Ray worker container")):
        host = run[name]
        assert host.op("Create Ray's temp folder").commands == [
            "mkdir -p /var/lib/rayrig/ray",
            "chmod 700 /var/lib/rayrig/ray",
        ]
        create = host.docker_create()
        # Ray makes the folder it is given 0777: the one mounted is inside the private one, not it.
        assert "--mount=type=bind,src=/var/lib/rayrig/ray/tmp,dst=/tmp/ray" in create
        assert {"--env=RAY_ROTATION_MAX_BYTES=104857600", "--env=RAY_ROTATION_BACKUP_COUNT=3"} <= set(create)
        # Made the container user's before the container is created, on every replacement.
        commands = host.op(step).commands
        own = [i for i, c in enumerate(commands) if OWN.format("/var/lib/rayrig/ray/tmp") in c]
        assert own and own[0] < len(commands) - 1, commands
        unit = host.uploads["/etc/systemd/system/ray-node.service"]
        prune = [line for line in unit.splitlines() if line.startswith("ExecStartPre=") and "prune-ray" in line]
        assert prune and prune[0].endswith("prune-ray-sessions /var/lib/rayrig/ray/tmp")


def test_a_new_temp_folder_replaces_the_container_and_its_unit():
    run = run_deploy(with_data(reference_cluster("ubuntu22", "converged"), CPU_WORKER, ray_temp_dir="/data/ray"))
    assert set(run.changed_hosts) == {CPU_WORKER}
    host = run[CPU_WORKER]
    assert host.op("Create Ray's temp folder").commands == ["mkdir -p /data/ray", "chmod 700 /data/ray"]
    assert "--mount=type=bind,src=/data/ray/tmp,dst=/tmp/ray" in host.docker_create()
    assert "prune-ray-sessions /data/ray/tmp" in host.uploads["/etc/systemd/system/ray-node.service"]
    assert any(OWN.format("/data/ray/tmp") in c for c in host.commands)


def test_log_rotation_set_in_ray_env_is_the_data_s():
    data = {"ray_env": {"RAY_ROTATION_MAX_BYTES": "1048576", "RAY_ROTATION_BACKUP_COUNT": "1"}}
    create = run_deploy(reference_cluster("ubuntu22", data=data))[HEAD].docker_create()
    assert [a for a in create if a.startswith("--env=RAY_ROTATION")] == [
        "--env=RAY_ROTATION_BACKUP_COUNT=1",
        "--env=RAY_ROTATION_MAX_BYTES=1048576",
    ]
