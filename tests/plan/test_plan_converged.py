"""Re-runs: a converged cluster plans nothing; a changed value changes only what it must."""

from __future__ import annotations

import json

import pytest

from tests.plan.fakes.fakehosts import (
    CPU_WORKER,
    GPU_WORKER,
    HEAD,
    LAB_REGISTRY,
    NVIDIA_DAEMON_JSON,
    OSES,
    cluster,
    reference_cluster,
    with_data,
)
from tests.plan.harness import run_deploy

AUTH = {"registry": "registry.lab.example:5000", "username": "ray", "password": "hunter2-Secret"}


@pytest.mark.parametrize("os_name", OSES)
def test_converged_cluster_plans_no_change(os_name):
    run = run_deploy(reference_cluster(os_name, "converged"))
    assert run.changed_hosts == {}
    # The deploy did look: every host ran its operations (as no-ops).
    assert all(len(h.ops) >= 4 for h in run.hosts.values())


@pytest.mark.parametrize(
    "os_name,data",
    [
        ("ubuntu24", {"docker_source": "docker"}),
        ("debian12", {"docker_source": "docker", "base_extra_packages": ["htop", "jq"]}),
        ("rocky9", {"docker_registry_auth": AUTH, "ray_image": "registry.lab.example:5000/ml/ray:2.60.0"}),
        ("ubuntu22", {"docker_registry_mirrors": ["https://mirror.lab.example"], "ray_shm_size": "16g"}),
        ("al2023", {"ray_ulimit_nofile": None, "docker_daemon_options": {"live-restore": True}}),
    ],
    ids=["docker-repo", "extra-packages", "registry-auth", "mirrors-shm", "no-ulimit-daemon-opts"],
)
def test_converged_cluster_with_more_features_plans_no_change(os_name, data):
    assert run_deploy(reference_cluster(os_name, "converged", data=data)).changed_hosts == {}


def test_converged_cluster_from_the_command_line_inventory_plans_no_change():
    assert run_deploy(cluster("ubuntu22", "converged")).changed_hosts == {}


@pytest.mark.parametrize("os_name", ["ubuntu22", "rocky9"])
def test_changed_cpus_on_one_worker_replaces_only_that_container(os_name):
    hosts = with_data(reference_cluster(os_name, "converged"), GPU_WORKER, ray_num_cpus=64)
    run = run_deploy(hosts)
    assert set(run.changed_hosts) == {GPU_WORKER}
    changes = run.changed_hosts[GPU_WORKER]
    assert changes == [
        "Ray node | Wait for the Ray head to answer",
        f"Ray node | Start the Ray worker container, batch 1 of 1: {GPU_WORKER}",
    ]
    assert run[GPU_WORKER].replacement()[4:6] == ["ray-node", "ray-node-previous"]  # kept until the new one joined
    create = run[GPU_WORKER].docker_create()
    assert "--num-cpus=64" in create
    assert "--num-cpus=96" not in create
    assert "--gpus=all" in create


def test_changed_head_address_replaces_every_container():
    """Workers dial the head: a new head address is a new configuration for all of them."""
    hosts = with_data(reference_cluster("ubuntu22", "converged"), HEAD, ray_node_ip="10.0.1.1")
    run = run_deploy(hosts)
    assert set(run.changed_hosts) == {HEAD, GPU_WORKER, CPU_WORKER}
    for name in (GPU_WORKER, CPU_WORKER):
        assert "--address=10.0.1.1:6379" in run[name].docker_create()
    for host in run.hosts.values():
        # Nothing else moves, but the firewall (it admits the head's new address instead of the old one),
        # the record of the members, on the head Prometheus's targets (reloaded, not restarted) and the
        # head's node exporter, which listens on its address.
        moved = (
            "Ray node",
            "Firewall",
            "Cluster membership",
            "Monitoring server",
            *(("Monitoring exporters",) if host.name == HEAD else ()),
        )
        assert not [op.name for op in host.changes if not op.name.startswith(moved)]
        assert (
            not host.has_op("Keep the rayrig-prometheus service")
            or not host.op("Keep the rayrig-prometheus service").changed
        )
        lines = {line.strip().rstrip(",") for line in host.uploads["/etc/rayrig/firewall.nft"].splitlines()}
        assert "10.0.1.1" in lines and "10.0.0.1" not in lines
        assert not any(c.startswith(("apt-get", "dnf", "docker pull")) for c in host.commands)
    drop_in = run[HEAD].uploads["/etc/systemd/system/prometheus-node-exporter.service.d/rayrig.conf"]
    assert "--web.listen-address=10.0.1.1:9100" in drop_in
    assert run[HEAD].has_op("Restart prometheus-node-exporter with rayrig's flags")


@pytest.mark.parametrize(
    "container",
    [
        {"container_hash": "0000000000000000"},  # another configuration
        {"container_present": False},  # no container
    ],
    ids=["stale-hash", "absent"],
)
def test_container_that_is_not_current_is_replaced(container):
    hosts = reference_cluster("ubuntu22", "converged", options={CPU_WORKER: container})
    run = run_deploy(hosts)
    assert set(run.changed_hosts) == {CPU_WORKER}
    assert run[CPU_WORKER].docker_create()


def test_converged_container_of_a_stopped_service_is_started_not_replaced():
    hosts = reference_cluster("ubuntu22", "converged")
    name, data = hosts[2]
    responses = dict(data["fake_responses"])
    responses["--property SubState ray-node.service"] = ["Id=ray-node.service", "SubState=dead"]
    hosts[2] = (name, {**data, "fake_responses": responses})
    run = run_deploy(hosts)
    assert run.changed_hosts == {CPU_WORKER: ["Ray node | Keep the ray-node service enabled and running"]}
    assert run[CPU_WORKER].commands == ["systemctl start ray-node.service"]


def test_docker_restarts_only_when_daemon_json_changed():
    # A new insecure registry on a running, converged cluster: daemon.json changes, Docker restarts.
    hosts = reference_cluster("ubuntu22", "converged")
    changed = [(n, {**d, "docker_insecure_registries": [LAB_REGISTRY, "10.0.0.6:5000"]}) for n, d in hosts]
    run = run_deploy(changed)
    for name in (HEAD, GPU_WORKER, CPU_WORKER):
        host = run[name]
        assert [op.name for op in host.changes] == [
            "Docker | Merge rayrig's keys into daemon.json",
            "Docker | Restart Docker for its new configuration",
        ]
        written = json.loads(host.uploads["/etc/docker/daemon.json"])
        assert written["insecure-registries"] == [LAB_REGISTRY, "10.0.0.6:5000"]
        assert host.op("Restart Docker for its new configuration").commands == ["systemctl restart docker.service"]
    assert json.loads(run[GPU_WORKER].uploads["/etc/docker/daemon.json"])["runtimes"] == NVIDIA_DAEMON_JSON["runtimes"]

    # Unchanged daemon.json: no restart, not even a planned one.
    same = run_deploy(reference_cluster("ubuntu22", "converged"))
    for host in same.hosts.values():
        assert not any("restart docker" in c for c in host.commands)


def test_foreign_daemon_json_gets_rayrig_keys_added_once():
    """A daemon.json another tool wrote, on an otherwise converged host: merged, then stable."""
    # The GPU worker's daemon.json holds only what the NVIDIA toolkit wrote (rayrig's keys missing).
    options = {GPU_WORKER: {"daemon_json": NVIDIA_DAEMON_JSON, "daemon_json_merged": False}}
    hosts = reference_cluster("ubuntu22", "converged", options=options)
    run = run_deploy(hosts)
    assert set(run.changed_hosts) == {GPU_WORKER}
    written = json.loads(run[GPU_WORKER].uploads["/etc/docker/daemon.json"])
    assert written == {
        **NVIDIA_DAEMON_JSON,
        "insecure-registries": [LAB_REGISTRY],
        "log-driver": "json-file",
        "log-opts": {"max-size": "100m", "max-file": "3"},
    }
    assert run[GPU_WORKER].op("Restart Docker for its new configuration").commands == [
        "systemctl restart docker.service"
    ]
