"""The metrics ports in the EC2 security group (moto): Ray's metrics endpoints and the exporters'
answer anyone who asks, so the group admits them from itself only, like Ray's ports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cloud import ec2
from cloud.ec2.rules import exposed_ray_ports, ray_ports, rules_of
from cloud.ec2.spec import load_spec
from tests.cloud.conftest import Calls, raw_client

pytestmark = pytest.mark.cloud

#: Ray's per-node metrics, the head's dashboard and autoscaler metrics, the node and GPU exporters.
METRICS_PORTS = (6383, 44227, 44217, 9100, 9400)


@pytest.fixture
def client(aws: str) -> Any:
    return raw_client("ec2", aws)


def bring_up(path: Path, probe: Callable[..., bool]) -> ec2.UpResult:
    return ec2.up(load_spec(path), assume_yes=True, ssh_probe=probe, say=print)


def group_of(client: Any, name: str = "sprint42") -> dict[str, Any]:
    flt = [{"Name": "tag:rayrig:cluster", "Values": [name]}]
    return client.describe_security_groups(Filters=flt)["SecurityGroups"][0]


def test_the_group_admits_the_metrics_ports_from_itself_only(
    write_spec: Callable[..., Path], no_ssh: Any, client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    bring_up(write_spec(), no_ssh)
    group = group_of(client)
    rules = [r for r in rules_of(group) if r.direction == "ingress"]
    for port in METRICS_PORTS:
        admitting = [r for r in rules if r.covers(port, port)]
        assert admitting and {(r.peer_kind, r.peer) for r in admitting} == {("sg", group["GroupId"])}, port
    assert exposed_ray_ports(rules_of(group), ray_ports()) == []
    plan = next(line for line in capsys.readouterr().out.splitlines() if "security group" in line)
    assert "Ray and metrics ports" in plan and "9100" in plan and "9400" in plan and "44217" in plan


def test_a_rule_opening_an_exporter_port_to_an_address_range_is_revoked(
    write_spec: Callable[..., Path], no_ssh: Any, client: Any, calls: Calls
) -> None:
    path = write_spec()
    bring_up(path, no_ssh)
    gid = group_of(client)["GroupId"]
    client.authorize_security_group_ingress(
        GroupId=gid,
        IpPermissions=[{"IpProtocol": "tcp", "FromPort": 9100, "ToPort": 9100, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
    )
    assert exposed_ray_ports(rules_of(group_of(client)), ray_ports()) != []
    calls.clear()

    bring_up(path, no_ssh)

    assert calls.mutating() == ["RevokeSecurityGroupIngress"]
    assert exposed_ray_ports(rules_of(group_of(client)), ray_ports()) == []


def test_the_plan_names_the_exporter_ports_the_spec_sets(
    write_spec: Callable[..., Path], no_ssh: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {"ray_image": "registry.example.com/ray:2.60.0-gpu", "monitoring_ports": {"node_exporter": 9200}}
    bring_up(write_spec(host_data=data), no_ssh)
    plan = next(line for line in capsys.readouterr().out.splitlines() if "security group" in line)
    assert "9200" in plan and "9100" not in plan
