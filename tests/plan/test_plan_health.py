"""The health gate's parts on the hosts (deploy/monitoring/health.py), as planned commands."""

from __future__ import annotations

import json

from deploy.monitoring import health
from tests.plan.fakes.fakehosts import CPU_WORKER, HEAD, reference_cluster
from tests.plan.harness import run_deploy

ON = {"health_gate": True, "health_interval_s": 15, "health_max_quarantined": 1}


def test_with_the_gate_on_the_head_runs_it_and_every_host_gets_its_command_and_drop_in():
    run = run_deploy(reference_cluster("debian12", "fresh", data=ON))
    head, worker = run[HEAD], run[CPU_WORKER]
    config = json.loads(head.uploads[health.CONFIG])
    assert (config["self"], config["interval_s"], config["max_quarantined"]) == (HEAD, 15, 1)
    assert {h["name"]: h["role"] for h in config["hosts"]}[HEAD] == "head"
    assert f"/etc/systemd/system/{health.GATE_UNIT}.service" in head.uploads
    for one in (head, worker):
        assert health.NODE_COMMAND in one.uploads
        assert one.uploads[health.drop_in_path("ray-node")] == health.drop_in_text()
        assert f"{health.CODE_DIR}/checks/health_node.py" in one.uploads
    # the gate's key may run the node command on the others, and nothing else
    line = next(op for op in worker.changes if "authorized_keys" in op.name)
    assert any('restrict,command="/usr/local/libexec/rayrig-health-node"' in c for c in line.commands)
    assert not any("authorized_keys" in op.name and op.changed for op in head.changes)
    assert "PRIVATE KEY" not in head.uploads[health.CONFIG]  # the key goes as a secret file, 0600
    assert head.op("Store the health gate's SSH key").changed
