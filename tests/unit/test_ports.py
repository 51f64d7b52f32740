"""deploy.contract.ports: the Ray ports as the ranges the firewall and the EC2 security group check."""

from __future__ import annotations

from deploy.contract.ports import ray_port_ranges


def test_ray_port_ranges_join_adjacent_ports() -> None:
    ports = {"gcs": 6379, "node_manager": 6380, "dashboard": 8265, "client_server": 10001, "metrics_export": 9999,
             "worker_min": 10002, "worker_max": 10999, "dashboard_agent_http": 52365}  # fmt: skip
    assert ray_port_ranges(ports) == [(6379, 6380), (8265, 8265), (9999, 9999), (10001, 10999), (52365, 52365)]
