"""The exporters on the lab's Debian 12 hosts: Debian's node exporter on every host, listening on
the node's address; the metrics ports (the exporters' and Ray's) answering members and no one
else; and ``monitoring_enabled = False`` taking away everything rayrig installed for them, then
the default data putting it back (the cluster stays alive for the next scenario).

The lab has no GPU: the DCGM exporter, EPEL's package and the Amazon Linux container are proven
by the plan tests only (tests/plan/test_plan_monitoring_exporters.py).
"""

from __future__ import annotations

import pytest

from deploy import monitoring_exporters as mon
from deploy import settings
from tests.e2e.labkit import LAB, Lab, changed_operations, deploy, member_can_connect, outsider_probe, ray_ports

pytestmark = pytest.mark.e2e

SERVICE = mon.DEBIAN_PACKAGE.service
NODE_PORT = settings.defaults()["monitoring_ports"]["node_exporter"]


def listeners(lab: Lab, h: dict, port: int) -> set[str]:
    """The local addresses a host listens on at ``port`` (``ss``'s Local Address:Port column)."""
    out = lab.sh(h, f"sudo ss -Hltn 'sport = :{port}'")
    return {line.split()[3] for line in out.splitlines() if line.strip()}


def test_every_host_runs_debians_node_exporter_on_its_node_address(lab, first_deploy):
    for h in lab.hosts:
        assert lab.sh(h, f"systemctl is-active {SERVICE}").strip() == "active"
        assert (
            lab.sh(h, f"dpkg-query -W -f '${{Status}}' {mon.DEBIAN_PACKAGE.package}").strip() == "install ok installed"
        )
        assert lab.sh(h, f"sudo cat {mon.PACKAGE_MARKER}").strip() == mon.DEBIAN_PACKAGE.package
        assert listeners(lab, h, NODE_PORT) == {f"{h['address']}:{NODE_PORT}"}  # not 0.0.0.0, not [::]
        metrics = lab.sh(lab.head, f"curl -sf http://{h['address']}:{NODE_PORT}/metrics")
        assert "node_exporter_build_info" in metrics and "node_cpu_seconds_total" in metrics


def test_the_metrics_ports_answer_members_and_no_one_else(lab, first_deploy):
    ports = ray_ports()
    head, worker = lab.head["address"], lab.workers[0]["address"]
    targets = [(worker, NODE_PORT), (head, NODE_PORT), (worker, ports["metrics_export"])]
    targets += [(head, ports["dashboard_metrics"]), (head, ports["autoscaler_metrics"])]
    seen = outsider_probe(lab, targets)
    assert {t: seen[f"{t[0]}:{t[1]}"] for t in targets} == {t: False for t in targets}
    # A member reaches each of them: the firewall, not an idle port, keeps the outsider out.
    for address, port in targets:
        member = lab.workers[1]
        assert member_can_connect(lab, member, address, port), f"{address}:{port} does not answer a member"


def test_monitoring_off_removes_the_exporters_and_on_puts_them_back(lab, first_deploy):
    result = deploy("inventories/lab.py", "--data", "monitoring_enabled=False")
    assert result.returncode == 0, "the deploy with monitoring off failed"
    for h in lab.hosts:
        package = lab.sh(h, f"dpkg-query -W -f '${{Status}}' {mon.DEBIAN_PACKAGE.package} 2>/dev/null || true")
        assert "install ok installed" not in package
        left = lab.sh(h, f"sudo ls -d {mon.STATE_DIR} {mon.DEBIAN_PACKAGE.drop_in} 2>/dev/null || true").strip()
        assert left == ""
        assert listeners(lab, h, NODE_PORT) == set()
        assert str(NODE_PORT) not in lab.sh(h, "sudo nft list table inet rayrig")

    again = deploy("inventories/lab.py", "--data", "monitoring_enabled=False")
    assert again.returncode == 0
    assert sum(changed_operations(again.stdout + again.stderr).values()) == 0, (
        "a re-run with monitoring off changed things"
    )

    back = deploy("inventories/lab.py")
    assert back.returncode == 0, f"the deploy that turns monitoring on again failed ({LAB})"
    for h in lab.hosts:
        assert listeners(lab, h, NODE_PORT) == {f"{h['address']}:{NODE_PORT}"}
