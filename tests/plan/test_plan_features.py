"""Plans of single features: image pulls, registry logins, GPU checks, cloud-init, OS support."""

from __future__ import annotations

import base64
import json

import pytest

from deploy.host.nvidia import NvidiaDriverMissing
from deploy.host.platform import UnsupportedPlatform
from deploy.host.ray_image import start_pull_command
from deploy.ray.ray_node import GpuCountError
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, cluster, reference_cluster, with_data
from tests.plan.harness import run_deploy

IMAGE = "rayproject/ray:2.60.0-py311-gpu"
AUTH = {"registry": "registry.lab.example:5000", "username": "ray", "password": "hunter2-Secret"}
PRIVATE_IMAGE = "registry.lab.example:5000/ml/ray-torch:2.60.0-cu128"


def test_pull_always_pulls_a_present_image_and_changes_nothing_else():
    """Beside the pull, only the ray-node steps that replace the container if the pull brought a new
    image (tests/plan/test_plan_image_follow.py)."""
    run = run_deploy(reference_cluster("ubuntu22", "converged", data={"ray_image_pull": "always"}))
    for name in (HEAD, GPU_WORKER, CPU_WORKER):
        assert run.changed_hosts[name][:3] == [
            "Ray image | Install the background image pull",
            "Ray image | Pull rayproject/ray:2.60.0-py311-gpu (in the background)",
            "Ray image | Wait for the pull of rayproject/ray:2.60.0-py311-gpu",
        ]
        assert all(op.startswith("Ray node | ") for op in run.changed_hosts[name][3:])
        assert run[name].op("Pull ").commands == [start_pull_command(IMAGE, IMAGE, 3600, with_auth=False)]
        assert not any(c.startswith(("apt-get", "dnf", "systemctl restart")) for c in run[name].commands)


def test_pull_missing_pulls_only_where_the_image_is_absent():
    hosts = reference_cluster("ubuntu22", "converged", options={CPU_WORKER: {"image_present": False}})
    run = run_deploy(hosts)
    assert set(run.changed_hosts) == {CPU_WORKER}
    # and the container is replaced if what the pull brought is not the image it was created from
    assert run.changed_hosts[CPU_WORKER] == [
        "Ray image | Install the background image pull",
        "Ray image | Pull rayproject/ray:2.60.0-py311-gpu (in the background)",
        "Ray image | Wait for the pull of rayproject/ray:2.60.0-py311-gpu",
        "Ray node | Wait for the Ray head to answer",
        f"Ray node | Start the Ray worker container, batch 1 of 1: {CPU_WORKER}",
    ]
    assert run[CPU_WORKER].op("Start the Ray worker container").commands[0].startswith("bash -c '[ \"$(docker image")


@pytest.mark.parametrize("os_name", ["ubuntu24", "rocky9"])
def test_registry_login_is_a_0600_file_and_the_password_is_never_in_a_command(os_name):
    data = {"docker_registry_auth": AUTH, "ray_image": PRIVATE_IMAGE}
    run = run_deploy(reference_cluster(os_name, data=data))
    token = base64.b64encode(b"ray:hunter2-Secret").decode()
    for name in (HEAD, GPU_WORKER, CPU_WORKER):
        host = run[name]
        assert host.op("Create rayrig's Docker config directory").commands[-1] == "chmod 700 /etc/rayrig/docker"
        login = host.op("Store the login for registry.lab.example:5000")
        assert json.loads(login.uploads["/etc/rayrig/docker/config.json"]) == {
            "auths": {"registry.lab.example:5000": {"auth": token}}
        }
        assert "chmod 600 /etc/rayrig/docker/config.json" in login.commands
        assert host.op("Pull ").commands == [start_pull_command(PRIVATE_IMAGE, PRIVATE_IMAGE, 3600, with_auth=True)]
        assert "pull-image.sh /var/lib/rayrig/image-pull 3600 " in host.op("Pull ").commands[0]
        assert " /etc/rayrig/docker " in host.op("Pull ").commands[0]
        names = [op.name for op in host.changes]
        assert names.index(login.name) < names.index(f"Ray image | Pull {PRIVATE_IMAGE} (in the background)")
        for command in host.commands + host.raw_commands + names:
            assert "hunter2" not in command
            assert token not in command
        assert PRIVATE_IMAGE in host.docker_create()


def test_without_registry_login_no_docker_config_is_written():
    host = run_deploy(reference_cluster("debian12"))[HEAD]
    assert not host.has_op("login")
    assert "/etc/rayrig/docker/config.json" not in host.uploads
    assert not any("--config" in c for c in host.commands)


def test_declared_gpus_that_differ_from_the_host_stop_the_deploy():
    hosts = with_data(reference_cluster("ubuntu22"), GPU_WORKER, ray_num_gpus=4)
    with pytest.raises(GpuCountError) as error:
        run_deploy(hosts)
    message = str(error.value)
    assert GPU_WORKER in message
    assert "ray_num_gpus = 4" in message
    assert "expected 8" in message


def test_declared_gpus_on_a_host_without_gpus_stop_the_deploy():
    hosts = with_data(reference_cluster("rocky9"), CPU_WORKER, ray_num_gpus=2)
    with pytest.raises(GpuCountError, match=f"host {CPU_WORKER}: ray_num_gpus = 2: expected 0"):
        run_deploy(hosts)


def test_gpus_on_the_bus_without_a_driver_count_from_pci():
    hosts = reference_cluster("ubuntu22")
    name, data = hosts[1]
    others = {k: v for k, v in data["fake_responses"].items() if k != "PCI_GPUS="}
    responses = {"PCI_GPUS=": ["PCI_GPUS=8", "NVSWITCHES=0"], **others}  # first match wins
    hosts[1] = (name, {**data, "fake_responses": responses})
    # By default a GPU host without a working driver stops the deploy, naming the host...
    with pytest.raises(NvidiaDriverMissing, match=f"host {name}: 8 NVIDIA GPU"):
        run_deploy(hosts)
    # ...and when rayrig may install the driver, Ray gets the GPUs counted on the PCI bus.
    hosts[1] = (name, {**data, "fake_responses": responses, "nvidia_driver": "install"})
    create = run_deploy(hosts)[GPU_WORKER].docker_create()
    assert "--num-gpus=8" in create


def test_cloud_init_still_running_is_waited_for_first():
    hosts = reference_cluster("ubuntu22", options={HEAD: {"cloud_init_running": True}})
    run = run_deploy(hosts)
    head = run[HEAD]
    made, waited = head.changes[:2]  # the SSH user's private upload directory, then cloud-init, then the rest
    assert made.name == "Create the private upload directory"
    assert waited.name == "Base | Wait for cloud-init to finish"
    assert waited.commands == ["timeout 600 cloud-init status --wait >/dev/null || true"]
    assert not run[CPU_WORKER].has_op("cloud-init")


def test_unsupported_os_stops_the_deploy_naming_the_host():
    hosts = cluster("ubuntu22")
    name, data = hosts[2]
    hosts[2] = (name, cluster("centos7", hosts=[(name, {k: v for k, v in data.items() if k.startswith("ray_")})])[0][1])
    with pytest.raises(UnsupportedPlatform) as error:
        run_deploy(hosts)
    assert f"host {name}: unsupported OS 'centos 7'" in str(error.value)
    assert "Ubuntu 22.04/24.04" in str(error.value)
