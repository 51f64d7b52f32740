"""Tags are no proof of ownership, against moto: ``down``, ``reap``, ``extend`` and a second ``up`` act on what
this machine's record lists, and name and leave what only carries a cluster's tags.

Anyone allowed to tag resources in the account can tag theirs into a cluster or move its expiry; the
instance-side timer's refusal of a tag moved earlier runs in tests/unit/test_expiry_timer.py, the
inventory's refusal of a hand-tagged instance in test_inventory.py.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cloud import ec2
from cloud.ec2.aws import TAG_EXPIRES, tags_of, utc_now
from cloud.ec2.expiry import extend
from cloud.ec2.spec import load_spec
from cloud.ec2.state import state_path
from tests.cloud.conftest import raw_client, record_expiry_at, run_cli

pytestmark = pytest.mark.cloud

PAST = "2020-01-01T00:00:00Z"


def bring_up(write_spec: Callable[..., Path], no_ssh: Any, **changes: Any) -> ec2.UpResult:
    return ec2.up(load_spec(write_spec(**changes)), assume_yes=True, ssh_probe=no_ssh, say=lambda _: None)


def cluster_tags(role: str, expires_at: str = PAST) -> list[dict[str, str]]:
    """The tags rayrig puts on a resource of cluster sprint42 that it created."""
    tags = {"rayrig:cluster": "sprint42", "rayrig:created": "true", "rayrig:role": role, TAG_EXPIRES: expires_at}
    return [{"Key": k, "Value": v} for k, v in tags.items()]


class Strangers:
    """Someone else's VPC, subnet, security group and instance, each tagged by hand as cluster sprint42's."""

    def __init__(self, aws: str, image: str, instance_tags: dict[str, str]):
        self.client = client = raw_client("ec2", aws)
        self.vpc = client.create_vpc(CidrBlock="10.77.0.0/16")["Vpc"]["VpcId"]  # theirs, left untagged
        self.subnet = client.create_subnet(
            VpcId=self.vpc, CidrBlock="10.77.1.0/24",
            TagSpecifications=[{"ResourceType": "subnet", "Tags": cluster_tags("subnet")}],
        )["Subnet"]["SubnetId"]  # fmt: skip
        self.group = client.create_security_group(
            GroupName="theirs", Description="someone else's", VpcId=self.vpc,
            TagSpecifications=[{"ResourceType": "security-group", "Tags": cluster_tags("security-group")}],
        )["GroupId"]  # fmt: skip
        self.instance = client.run_instances(
            ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1, SubnetId=self.subnet,
            TagSpecifications=[{"ResourceType": "instance", "Tags": [
                {"Key": k, "Value": v} for k, v in {**instance_tags, TAG_EXPIRES: PAST}.items()
            ]}],
        )["Instances"][0]["InstanceId"]  # fmt: skip

    def all_there(self) -> None:
        """Each is as its owner left it: the instance running, the rest in place."""
        client = self.client
        instance = client.describe_instances(InstanceIds=[self.instance])["Reservations"][0]["Instances"][0]
        assert instance["State"]["Name"] == "running"
        assert client.describe_subnets(SubnetIds=[self.subnet])["Subnets"]
        assert client.describe_security_groups(GroupIds=[self.group])["SecurityGroups"]
        assert client.describe_vpcs(VpcIds=[self.vpc])["Vpcs"]

    def named_in(self, out: str) -> None:
        """Each is named as not the cluster's."""
        for what in (f"instance {self.instance}", f"subnet {self.subnet}", f"security group {self.group}"):
            assert f"{what} carries the tags of cluster sprint42, but {state_path('sprint42')} does not record" in out
        assert out.count("left alone") >= 3


@pytest.fixture
def strangers(write_spec: Callable[..., Path], no_ssh: Any, aws: str) -> tuple[ec2.UpResult, Strangers]:
    """Cluster sprint42 brought up here, then someone else's resources tagged into it."""
    result = bring_up(write_spec, no_ssh)
    worker = next(i for i in result.instances if tags_of(i)["rayrig:role"] == "worker")
    return result, Strangers(aws, worker["ImageId"], tags_of(worker))


def states(aws: str, ids: list[str]) -> set[str]:
    reservations = raw_client("ec2", aws).describe_instances(InstanceIds=ids)["Reservations"]
    return {i["State"]["Name"] for r in reservations for i in r["Instances"]}


def test_down_deletes_what_the_record_lists_and_leaves_what_is_only_tagged(
    strangers: tuple[ec2.UpResult, Strangers], aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result, theirs = strangers
    capsys.readouterr()
    assert run_cli("cloud", "down", "sprint42", "--yes") == 1  # they still carry the cluster's tag
    out = capsys.readouterr().out
    theirs.named_in(out)
    theirs.all_there()
    assert states(aws, [i["InstanceId"] for i in result.instances]) == {"terminated"}
    assert f"subnet {theirs.subnet}" in out.split("Still tagged rayrig:cluster=sprint42")[1]
    assert state_path("sprint42").is_file()  # kept: without it, the next down would go by the tags


def test_reap_takes_down_an_expired_cluster_and_leaves_what_is_only_tagged(
    strangers: tuple[ec2.UpResult, Strangers], aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result, theirs = strangers
    record_expiry_at("sprint42", PAST)
    capsys.readouterr()
    assert run_cli("cloud", "reap", "--yes") == 1  # something still carries the cluster's tag
    out = capsys.readouterr().out
    assert "expired: sprint42" in out
    theirs.named_in(out)
    theirs.all_there()
    assert states(aws, [i["InstanceId"] for i in result.instances]) == {"terminated"}


def test_reap_goes_by_the_recorded_expiry_never_by_a_moved_tag(
    write_spec: Callable[..., Path], no_ssh: Any, aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tag moved earlier does not end the cluster; one moved later does not spare it."""
    result = bring_up(write_spec, no_ssh)
    ids = [i["InstanceId"] for i in result.instances]
    client = raw_client("ec2", aws)
    tagged = client.describe_tags(Filters=[{"Name": "key", "Values": [TAG_EXPIRES]}])["Tags"]
    resources = sorted({t["ResourceId"] for t in tagged})
    recorded = json.loads(state_path("sprint42").read_text())["expires_at"]
    client.create_tags(Resources=resources, Tags=[{"Key": TAG_EXPIRES, "Value": PAST}])
    capsys.readouterr()

    assert run_cli("cloud", "reap", "--yes") == 0
    out = capsys.readouterr().out
    assert f"sprint42: its tag {TAG_EXPIRES} says '{PAST}', but {state_path('sprint42')} records {recorded}" in out
    assert "reap goes by the record" in out and "No expired cluster in us-east-1 (1 cluster(s) checked)." in out
    assert states(aws, ids) == {"running"}

    client.create_tags(Resources=resources, Tags=[{"Key": TAG_EXPIRES, "Value": "2099-01-01T00:00:00Z"}])
    record_expiry_at("sprint42", PAST)  # its time has come
    assert run_cli("cloud", "reap", "--yes") == 0
    out = capsys.readouterr().out
    assert "expired: sprint42" in out and "Nothing is left with the tag rayrig:cluster=sprint42" in out
    assert states(aws, ids) == {"terminated"}


def test_extend_moves_the_recorded_expiry_that_reap_goes_by(
    write_spec: Callable[..., Path], no_ssh: Any, aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = bring_up(write_spec, no_ssh, ttl="1h")
    extension = extend("sprint42", dt.timedelta(days=1), say=print)
    assert json.loads(state_path("sprint42").read_text())["expires_at"] == extension.new.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert ec2.reap(assume_yes=True, now=utc_now() + dt.timedelta(hours=2), say=print) == 0
    assert states(aws, [i["InstanceId"] for i in result.instances]) == {"running"}


def test_extend_leaves_what_is_only_tagged(
    strangers: tuple[ec2.UpResult, Strangers], aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, theirs = strangers
    capsys.readouterr()
    assert run_cli("cloud", "extend", "sprint42", "1d") == 0
    theirs.named_in(capsys.readouterr().out)
    for rid in (theirs.instance, theirs.subnet, theirs.group):
        tags = theirs.client.describe_tags(Filters=[{"Name": "resource-id", "Values": [rid]}])["Tags"]
        assert {t["Key"]: t["Value"] for t in tags}[TAG_EXPIRES] == PAST, rid


def test_a_second_up_neither_adopts_nor_rewrites_a_hand_tagged_security_group(
    strangers: tuple[ec2.UpResult, Strangers], write_spec: Callable[..., Path], no_ssh: Any, aws: str
) -> None:
    _, theirs = strangers
    theirs.client.authorize_security_group_ingress(
        GroupId=theirs.group, IpPermissions=[{"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443,
                                              "IpRanges": [{"CidrIp": "203.0.113.0/24"}]}],
    )  # fmt: skip
    said: list[str] = []
    ec2.up(load_spec(write_spec()), assume_yes=True, ssh_probe=no_ssh, say=said.append)
    assert any(f"security group {theirs.group} carries the tags of cluster sprint42" in line for line in said)
    group = theirs.client.describe_security_groups(GroupIds=[theirs.group])["SecurityGroups"][0]
    assert [p["FromPort"] for p in group["IpPermissions"]] == [443]


def test_down_deletes_a_recorded_resource_whose_tags_were_removed(
    write_spec: Callable[..., Path], no_ssh: Any, aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The record, not the tags, says what is the cluster's: removing its tags hides nothing from ``down``."""
    bring_up(write_spec, no_ssh)
    client = raw_client("ec2", aws)
    group = json.loads(state_path("sprint42").read_text())["resources"]["security_groups"][0]
    client.delete_tags(Resources=[group], Tags=[{"Key": "rayrig:cluster"}, {"Key": "rayrig:created"}])
    assert run_cli("cloud", "down", "sprint42", "--yes") == 0
    assert f"deleting security group {group}" in capsys.readouterr().out
    assert not client.describe_security_groups(Filters=[{"Name": "group-id", "Values": [group]}])["SecurityGroups"]
