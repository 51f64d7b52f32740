"""EFA against moto: interfaces for the types built for it, the same single interface for the others,
``efa = "on"`` refused on a type without EFA before anything exists, the group's self-referencing egress,
and the inventory's ``ray_efa``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cloud import ec2
from cloud.ec2.spec import SpecError, load_spec
from tests.cloud.conftest import Calls, base_spec, raw_client

pytestmark = pytest.mark.cloud


def bring_up(path: Path, probe: Callable[..., bool]) -> ec2.UpResult:
    return ec2.up(load_spec(path), assume_yes=True, ssh_probe=probe, say=print)


def launches(calls: Calls, instance_type: str) -> list[dict[str, Any]]:
    return [p for p in calls.params("RunInstances") if p["InstanceType"] == instance_type]


def instance_tags(params: dict[str, Any]) -> dict[str, str]:
    spec = next(s for s in params["TagSpecifications"] if s["ResourceType"] == "instance")
    return {t["Key"]: t["Value"] for t in spec["Tags"]}


def efa_spec(public_key: Path, instance_type: str, **worker: Any) -> dict[str, Any]:
    data = base_spec(public_key)
    data["workers"] = [{"name": "gpu", "instance_type": instance_type, "count": 2, **worker}]
    return data


def test_what_moto_knows_of_efa(aws: str) -> None:
    """rayrig reads EFA support from DescribeInstanceTypes; moto answers with AWS's data for these types."""
    found = raw_client("ec2", aws).describe_instance_types(
        InstanceTypes=["p4d.24xlarge", "p5.48xlarge", "g5.xlarge", "g5.12xlarge"]
    )["InstanceTypes"]
    net = {t["InstanceType"]: t["NetworkInfo"] for t in found}
    summary = {
        name: (n["EfaSupported"], n.get("EfaInfo", {}).get("MaximumEfaInterfaces"), len(n["NetworkCards"]))
        for name, n in net.items()
    }
    assert summary == {
        "p4d.24xlarge": (True, 4, 4),
        "p5.48xlarge": (True, 32, 32),
        "g5.xlarge": (False, None, 1),
        "g5.12xlarge": (True, 1, 1),
    }


def test_p4d_workers_behind_a_bastion_get_one_efa_interface_per_network_card(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, calls: Calls, aws: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    data = efa_spec(keys[0], "p4d.24xlarge")
    data["network"] = {"public_ips": False, "bastion": "ec2-user@bastion.example.com"}
    result = bring_up(write_spec(data), no_ssh)

    assert "EFA     gpu: 4 EFA interface(s) per p4d.24xlarge" in capsys.readouterr().out
    (head,) = launches(calls, "m5.2xlarge")
    assert len(head["NetworkInterfaces"]) == 1 and "InterfaceType" not in head["NetworkInterfaces"][0]
    workers = launches(calls, "p4d.24xlarge")
    assert len(workers) == 2
    group_id = head["NetworkInterfaces"][0]["Groups"]
    for params in workers:
        interfaces = params["NetworkInterfaces"]
        assert [(i["NetworkCardIndex"], i["DeviceIndex"]) for i in interfaces] == [(0, 0), (1, 1), (2, 1), (3, 1)]
        assert {i["InterfaceType"] for i in interfaces} == {"efa"}
        assert all(i["Groups"] == group_id and i["DeleteOnTermination"] for i in interfaces)
        assert not any("AssociatePublicIpAddress" in i for i in interfaces)  # EC2 refuses it with several
        assert params["Placement"] == {"GroupName": "rayrig-sprint42"}
        assert instance_tags(params)["rayrig:efa"] == "4"
    assert len(result.instances) == 3


def test_p5_workers_reached_at_public_addresses_get_the_primary_efa_interface_only(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, calls: Calls,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    bring_up(write_spec(efa_spec(keys[0], "p5.48xlarge")), no_ssh)

    out = capsys.readouterr().out
    assert "gpu: 1 EFA interface(s) per p5.48xlarge of its 32: EC2 gives no public address" in out
    assert "set network.bastion" in out
    for params in launches(calls, "p5.48xlarge"):
        (interface,) = params["NetworkInterfaces"]
        assert interface["InterfaceType"] == "efa" and interface["AssociatePublicIpAddress"] is True
        assert (interface["NetworkCardIndex"], interface["DeviceIndex"]) == (0, 0)
        assert instance_tags(params)["rayrig:efa"] == "1"


#: The single interface every instance got before EFA, as RunInstances received it.
PLAIN_INTERFACE_KEYS = ["DeviceIndex", "SubnetId", "Groups", "AssociatePublicIpAddress", "DeleteOnTermination"]


@pytest.mark.parametrize(
    ("instance_type", "efa"),
    [
        ("g5.xlarge", "auto"),  # no EFA at all
        ("g5.12xlarge", "auto"),  # EFA possible, not built for it: "auto" leaves it alone
        ("p4d.24xlarge", "off"),
    ],
)
def test_other_types_keep_the_single_interface_unchanged(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, calls: Calls, instance_type: str, efa: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    bring_up(write_spec(efa_spec(keys[0], instance_type, efa=efa)), no_ssh)

    assert "EFA" not in capsys.readouterr().out
    for params in calls.params("RunInstances"):
        (interface,) = params["NetworkInterfaces"]
        assert list(interface) == PLAIN_INTERFACE_KEYS
        assert interface["DeviceIndex"] == 0 and interface["AssociatePublicIpAddress"] is True
        assert "rayrig:efa" not in instance_tags(params)


def test_efa_on_for_the_head_outside_the_placement_group(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, calls: Calls
) -> None:
    data = base_spec(keys[0], workers=[])
    data["head"] = {"instance_type": "g5.12xlarge", "efa": "on"}
    bring_up(write_spec(data), no_ssh)
    ((interface,),) = [p["NetworkInterfaces"] for p in calls.params("RunInstances")]
    assert interface["InterfaceType"] == "efa" and interface["AssociatePublicIpAddress"] is True


def test_efa_on_for_a_type_without_efa_is_refused_before_anything_exists(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, calls: Calls, aws: str
) -> None:
    with pytest.raises(ec2.CloudError) as failure:
        bring_up(write_spec(efa_spec(keys[0], "g5.xlarge", efa="on")), no_ssh)

    message = str(failure.value)
    assert 'workers[0].efa = "on"' in message and "group gpu's instance type g5.xlarge does not support EFA" in message
    assert "nothing was created" in message
    assert calls.mutating() == []
    client = raw_client("ec2", aws)
    assert client.describe_vpcs(Filters=[{"Name": "tag:rayrig:cluster", "Values": ["sprint42"]}])["Vpcs"] == []


def test_an_unknown_efa_value_is_a_spec_error(write_spec: Callable[..., Path], keys: tuple[Path, Path]) -> None:
    with pytest.raises(SpecError) as failure:
        load_spec(write_spec(efa_spec(keys[0], "p4d.24xlarge", efa="yes")))
    assert "workers[0].efa = 'yes': expected \"auto\"" in str(failure.value)


def test_an_efa_cluster_s_group_sends_all_traffic_to_itself(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, aws: str
) -> None:
    """EFA's own traffic needs the self-referencing egress rule as well as the ingress one (AWS's EFA guide).
    rayrig keeps it on every cluster: it opens nothing beyond the group's own members."""
    bring_up(write_spec(efa_spec(keys[0], "p4d.24xlarge")), no_ssh)
    client = raw_client("ec2", aws)
    flt = [{"Name": "tag:rayrig:cluster", "Values": ["sprint42"]}]
    (group,) = client.describe_security_groups(Filters=flt)["SecurityGroups"]
    own = [group["GroupId"]]
    for rules in (group["IpPermissions"], group["IpPermissionsEgress"]):
        assert any(r["IpProtocol"] == "-1" and [p["GroupId"] for p in r["UserIdGroupPairs"]] == own for r in rules)


def test_the_inventory_marks_efa_hosts(write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any) -> None:
    bring_up(write_spec(efa_spec(keys[0], "p4d.24xlarge")), no_ssh)
    ((_, head),), workers = ec2.cluster_hosts()
    assert "ray_efa" not in head
    assert [(w["ray_efa"], w["ray_efa_device_rdma"]) for _, w in workers] == [(True, True), (True, True)]


def test_the_spec_s_host_data_can_turn_ray_efa_off(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any
) -> None:
    data = efa_spec(keys[0], "p4d.24xlarge", host_data={"ray_efa": False})
    bring_up(write_spec(data), no_ssh)
    _, workers = ec2.cluster_hosts()
    assert [w["ray_efa"] for _, w in workers] == [False, False]


def test_a_failover_to_another_efa_type_gets_that_types_interfaces(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, calls: Calls, inject: Any, aws: str
) -> None:
    """No p5 capacity: the workers launch as p4d.24xlarge, each with p4d's 4 EFA interfaces, not p5's 32."""
    inject.fail("RunInstances", "InsufficientInstanceCapacity", when=lambda p: p["InstanceType"] == "p5.48xlarge")
    data = base_spec(keys[0])
    data["workers"] = [{"name": "gpu", "instance_types": ["p5.48xlarge", "p4d.24xlarge"], "count": 2}]
    data["network"] = {"public_ips": False, "bastion": "ec2-user@bastion.example.com"}
    bring_up(write_spec(data), no_ssh)

    tried = launches(calls, "p5.48xlarge")
    assert tried and all(len(p["NetworkInterfaces"]) == 32 for p in tried)
    workers = launches(calls, "p4d.24xlarge")
    assert len(workers) == 2
    for params in workers:
        assert len(params["NetworkInterfaces"]) == 4 and instance_tags(params)["rayrig:efa"] == "4"
