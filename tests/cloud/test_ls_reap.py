"""``rayrig cloud ls`` and ``rayrig cloud reap`` against moto."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cloud import ec2
from cloud.ec2.aws import utc_now
from cloud.ec2.pricing import PriceBook
from cloud.ec2.spec import load_spec
from cloud.ec2.teardown import find_created, reap_lock
from rayrig.commands import cloud as cloud_commands
from tests.cloud.conftest import PlacementGroups, base_spec, raw_client, record_expiry_at, run_cli

pytestmark = pytest.mark.cloud


@pytest.fixture
def two_clusters(write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any) -> None:
    """``short`` (ttl 1h, one on-demand g5.xlarge worker) and ``sprint42`` (ttl 7d, two spot g5.12xlarge), in a
    zone where moto has a spot price of g5.12xlarge (not every zone has one)."""
    short = base_spec(keys[0], name="short", ttl="1h")
    short["workers"] = [{"name": "gpu", "instance_type": "g5.xlarge", "count": 1}]
    short["network"] = {"vpc_cidr": "10.43.0.0/16", "subnet_cidr": "10.43.0.0/24"}
    for data in (short, base_spec(keys[0], network={"availability_zone": "us-east-1a"})):
        ec2.up(load_spec(write_spec(data)), assume_yes=True, ssh_probe=no_ssh, say=lambda _: None)


def cluster_tagged(aws: str, name: str) -> bool:
    client = raw_client("ec2", aws)
    flt = [{"Name": "tag:rayrig:cluster", "Values": [name]}]
    live = [
        i
        for r in client.describe_instances(Filters=flt)["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] != "terminated"
    ]
    return bool(live or client.describe_vpcs(Filters=flt)["Vpcs"] or client.describe_key_pairs(Filters=flt)["KeyPairs"])


def test_ls_lists_clusters_with_age_expiry_types_and_cost(
    two_clusters: None, capsys: pytest.CaptureFixture[str]
) -> None:
    aws = ec2.connect("us-east-1")
    clusters = ec2.list_clusters(aws, PriceBook(aws))
    assert [c.name for c in clusters] == ["short", "sprint42"]
    short, sprint = clusters
    assert short.running == {"m5.2xlarge": 1, "g5.xlarge": 1} and short.spot == 0
    assert sprint.running == {"m5.2xlarge": 1, "g5.12xlarge": 2} and sprint.spot == 2
    assert short.cost.hourly_usd == pytest.approx(0.384 + 1.006)  # on demand, from the Pricing API
    assert sprint.cost.hourly_usd == pytest.approx(0.384 + 2 * 0.00001)  # the workers at moto's spot price
    assert sprint.owner == "aiko@example.com"
    assert sprint.expires_at - sprint.created_at == dt.timedelta(days=7)
    assert short.expires_at - short.created_at == dt.timedelta(hours=1)

    capsys.readouterr()
    assert run_cli("cloud", "ls") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "NAME", "OWNER", "LAUNCHED", "(UTC)", "UP", "EXPIRES", "(UTC)", "LEFT", "RUNNING", "$/H", "COST"
    ]  # fmt: skip
    row = next(line for line in out if line.startswith("sprint42"))
    assert "aiko@example.com" in row and "2 x g5.12xlarge" in row and "(2 spot)" in row and " 0.38 " in row
    assert "6d23h" in row or "7d00h" in row  # time left
    assert out[-1].endswith("(prices: AWS Pricing, spot price history)")


def test_ls_in_an_empty_region(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("cloud", "ls", "--region", "eu-west-1") == 0
    assert "No rayrig cluster in eu-west-1." in capsys.readouterr().out


def test_reap_takes_down_the_expired_cluster_only(
    two_clusters: None, aws: str, placement_groups: PlacementGroups, capsys: pytest.CaptureFixture[str]
) -> None:
    later = utc_now() + dt.timedelta(hours=2)
    assert ec2.reap(assume_yes=True, now=later, say=print) == 0
    assert not cluster_tagged(aws, "short")
    assert cluster_tagged(aws, "sprint42")
    assert len(find_created(ec2.connect("us-east-1"), "sprint42").instances) == 3
    assert [g["GroupName"] for g in placement_groups.groups.values()] == ["rayrig-sprint42"]
    out = capsys.readouterr().out
    assert "expired: short" in out and "Nothing is left with the tag rayrig:cluster=short" in out
    assert "sprint42" not in out.replace("rayrig-sprint42", "")


def test_reap_from_cron(two_clusters: None, aws: str, capsys: pytest.CaptureFixture[str]) -> None:
    """What cron runs: ``rayrig cloud reap --yes``, once the expiry tag is in the past."""
    client = raw_client("ec2", aws)
    short = [{"Name": "tag:rayrig:cluster", "Values": ["short"]}]
    reservations = client.describe_instances(Filters=short)["Reservations"]
    resources = [i["InstanceId"] for r in reservations for i in r["Instances"]]
    resources += [v["VpcId"] for v in client.describe_vpcs(Filters=short)["Vpcs"]]
    client.create_tags(Resources=resources, Tags=[{"Key": "rayrig:expires-at", "Value": "2020-01-01T00:00:00Z"}])
    record_expiry_at("short", "2020-01-01T00:00:00Z")  # the record and the tags, once that time has come

    assert run_cli("cloud", "reap") == 0  # no --yes and no terminal: a dry run
    assert "Dry run: pass --yes" in capsys.readouterr().out
    assert cluster_tagged(aws, "short")

    assert run_cli("cloud", "reap", "--yes") == 0
    assert not cluster_tagged(aws, "short") and cluster_tagged(aws, "sprint42")
    assert run_cli("cloud", "reap", "--yes") == 0  # the next night: nothing to do
    assert "No expired cluster in us-east-1 (1 cluster(s) checked)." in capsys.readouterr().out


def test_reap_never_touches_a_cluster_it_has_no_record_of(aws: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Tags alone (here with no readable expiry, or one long past) never get a cluster reaped: it says whose it is
    and how to remove it by hand."""
    client = raw_client("ec2", aws)
    vpc = client.create_vpc(
        CidrBlock="10.9.0.0/16",
        TagSpecifications=[
            {
                "ResourceType": "vpc",
                "Tags": [{"Key": "rayrig:cluster", "Value": "handmade"}, {"Key": "rayrig:expires-at", "Value": "soon"}],
            }
        ],
    )["Vpc"]["VpcId"]
    assert ec2.reap(assume_yes=True, now=utc_now() + dt.timedelta(days=365), say=print) == 0
    assert client.describe_vpcs(VpcIds=[vpc])["Vpcs"]
    out = capsys.readouterr().out
    assert "not ours to reap: handmade carries rayrig's tags in us-east-1, but this machine has no record of it" in out
    assert "To take it down by hand: 'rayrig cloud down handmade --region us-east-1'" in out


def test_two_reaps_do_not_run_at_once(aws: str) -> None:
    with reap_lock(), pytest.raises(ec2.CloudError, match="another 'rayrig cloud reap' is running"):
        ec2.reap(assume_yes=True, say=print)


def test_the_rayrig_command_has_the_cloud_commands(capsys: pytest.CaptureFixture[str]) -> None:
    from rayrig.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["cloud", "up", "spec.toml", "--yes", "--no-wait-ssh"])
    assert args.func is cloud_commands.up_cmd and args.yes and args.no_wait_ssh
    assert parser.parse_args(["cloud", "down", "sprint42", "--region", "eu-west-1"]).region == "eu-west-1"
    assert parser.parse_args(["cloud", "ls"]).func is cloud_commands.ls_cmd
    assert parser.parse_args(["cloud", "reap", "--yes"]).func is cloud_commands.reap_cmd
