"""EFA hosts (``ray_efa``): ray-node gets the EFA devices, an unlimited memlock and libfabric's environment;
a host without the EFA device stops the deploy before any operation; other hosts' ray-node is unchanged."""

from __future__ import annotations

import pytest

from deploy.host.efa import EfaDeviceError
from deploy.ray.ray_node import HASH_LABEL
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, expected_run_args, reference_cluster
from tests.plan.harness import run_deploy

EFA_DEVICES = ["rdma_cm", "uverbs0", "uverbs1", "uverbs2", "uverbs3"]


def efa_cluster(devices: list[str], **efa_data: object) -> list[tuple[str, dict]]:
    """The reference cluster with the GPU worker declared an EFA host whose /dev/infiniband holds ``devices``."""
    hosts = reference_cluster("ubuntu22", host_data={GPU_WORKER: {"ray_efa": True, **efa_data}})
    for name, data in hosts:
        if name == GPU_WORKER:
            data["fake_responses"] = {"ls -1 /dev/infiniband": devices, **data["fake_responses"]}
    return hosts


def test_an_efa_host_s_ray_node_gets_the_devices_memlock_and_libfabric_environment():
    run = run_deploy(efa_cluster(EFA_DEVICES, ray_efa_device_rdma=True))
    create = run[GPU_WORKER].docker_create()
    for flag in (
        "--device=/dev/infiniband",
        "--ulimit=memlock=-1:-1",
        "--env=FI_PROVIDER=efa",
        "--env=FI_EFA_USE_DEVICE_RDMA=1",
        "--env=NCCL_SOCKET_IFNAME=^docker,lo,veth",
    ):
        assert flag in create, flag
    assert "--gpus=all" in create


def test_device_rdma_only_where_the_data_says_so():
    create = run_deploy(efa_cluster(EFA_DEVICES))[GPU_WORKER].docker_create()
    assert "--env=FI_PROVIDER=efa" in create
    assert not any("FI_EFA_USE_DEVICE_RDMA" in arg for arg in create)


def test_ray_env_may_set_the_efa_environment_otherwise():
    hosts = efa_cluster(EFA_DEVICES, ray_env={"NCCL_SOCKET_IFNAME": "ens32"})
    create = run_deploy(hosts)[GPU_WORKER].docker_create()
    assert "--env=NCCL_SOCKET_IFNAME=ens32" in create
    assert "--env=NCCL_SOCKET_IFNAME=^docker,lo,veth" not in create


def test_hosts_without_ray_efa_keep_the_same_ray_node():
    run = run_deploy(efa_cluster(EFA_DEVICES))
    for name, node_ip in ((HEAD, "10.0.0.1"), (CPU_WORKER, "10.0.0.3")):
        create = run[name].docker_create()
        assert not any("infiniband" in arg or "memlock" in arg or "FI_" in arg for arg in create)
        data = dict(reference_cluster("ubuntu22"))[name]
        without_efa = expected_run_args(data, node_ip, "10.0.0.1")
        assert [a for a in create if not a.startswith(f"--label={HASH_LABEL}=")] == without_efa, name


def test_an_efa_host_without_the_efa_device_stops_the_deploy_naming_it():
    with pytest.raises(EfaDeviceError) as error:
        run_deploy(efa_cluster([]))
    message = str(error.value)
    assert f"host {GPU_WORKER}: ray_efa = True" in message
    assert "/dev/infiniband/uverbs0" in message
    assert "efa_installer.sh" in message and "Deep Learning AMI" in message
