"""``monitoring_enabled = False`` on the lab, the last scenario before teardown: it takes away everything
rayrig installed for monitoring (the node exporter package, its drop-in and records, the exporter ports
in the firewall, Prometheus's unit, container, files, data and image, and the head's Prometheus
environment), the cluster stays alive, and a re-run changes nothing.

It runs last so that no baseline deploy has to turn monitoring on again (in any other order the next
module's baseline does: turning it on again is the first deploy's path, and the plans prove off then on,
tests/plan/test_plan_monitoring*.py).
"""

from __future__ import annotations

import pytest

from deploy.monitoring import exporters as mon
from tests.e2e.labkit import HOSTS, LAB_INVENTORY, Lab, changed_operations, cluster_state, deploy
from tests.e2e.test_lab_monitoring import NODE_PORT, listeners

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_monitoring_off_leaves_no_exporter_prometheus_unit_or_rule(lab: Lab, baseline):
    off = deploy(LAB_INVENTORY, "--data", "monitoring_enabled=false")
    assert off.returncode == 0, "the deploy with monitoring off failed"
    for h in lab.hosts:
        package = lab.sh(h, f"dpkg-query -W -f '${{Status}}' {mon.DEBIAN_PACKAGE.package} 2>/dev/null || true")
        assert "install ok installed" not in package, h["address"]
        left = lab.sh(h, f"sudo ls -d {mon.STATE_DIR} {mon.DEBIAN_PACKAGE.drop_in} 2>/dev/null || true").strip()
        assert left == "", (h["address"], left)
        assert listeners(lab, h, NODE_PORT) == set()
        assert str(NODE_PORT) not in lab.sh(h, "sudo nft list table inet rayrig")
    left = lab.sh(
        lab.head,
        "sudo ls -d /etc/systemd/system/rayrig-prometheus.service /etc/rayrig/monitoring /var/lib/rayrig/prometheus "
        "2>/dev/null; sudo docker ps -a --format '{{.Names}}' | grep -x rayrig-prometheus; "
        "sudo docker images --format '{{.Repository}}' | grep lab-prometheus; true",
    )
    assert left.strip() == "", left
    assert "RAY_PROMETHEUS_HOST" not in lab.sh(lab.head, "sudo docker inspect --format '{{.Config.Env}}' ray-node")
    assert len(cluster_state(lab)["nodes"]) == HOSTS

    again = deploy(LAB_INVENTORY, "--data", "monitoring_enabled=false")
    assert again.returncode == 0
    assert sum(changed_operations(again.stdout + again.stderr).values()) == 0, (
        "a re-run with monitoring off changed things"
    )
