"""Clusters that end on time by themselves, against moto: what each instance is launched with, and
``rayrig cloud extend`` moving the expiry that the instances' timers and ``reap`` read.

The timer's script itself runs in tests/unit/test_expiry_timer.py.
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloud import ec2
from cloud.ec2.aws import TAG_EXPIRES, parse_time, tags_of, utc_now
from cloud.ec2.expiry import CHECK_PATH, extend, resource_text
from cloud.ec2.spec import load_spec
from tests.cloud.conftest import Calls, PlacementGroups, raw_client, record_expiry_at, run_cli

pytestmark = pytest.mark.cloud

#: What IMDS allows in the key of a tag it shows (AWS: "Work with instance tags in instance metadata");
#: with InstanceMetadataTags enabled, a launch with any other instance tag key fails.
IMDS_TAG_KEY = re.compile(r"[A-Za-z0-9+\-=.,_:@]+\Z")


def bring_up(write_spec: Callable[..., Path], no_ssh: Any, **changes: Any) -> ec2.UpResult:
    return ec2.up(load_spec(write_spec(**changes)), assume_yes=True, ssh_probe=no_ssh, say=lambda _: None)


def live_instances(aws: str, name: str = "sprint42", region: str = "us-east-1") -> list[dict[str, Any]]:
    client = raw_client("ec2", aws)
    client.meta.config.region_name = region
    flt = [{"Name": "tag:rayrig:cluster", "Values": [name]}]
    reservations = client.describe_instances(Filters=flt)["Reservations"]
    return [i for r in reservations for i in r["Instances"] if i["State"]["Name"] != "terminated"]


def expiry_tags(aws: str, placement_groups: PlacementGroups) -> dict[str, str]:
    """Every ``rayrig:expires-at`` in the region, by resource id (moto's and the emulated placement groups')."""
    client = raw_client("ec2", aws)
    tags = client.describe_tags(Filters=[{"Name": "key", "Values": [TAG_EXPIRES]}])["Tags"]
    found = {t["ResourceId"]: t["Value"] for t in tags}
    for group in placement_groups.groups.values():
        found[group["GroupId"]] = tags_of(group)[TAG_EXPIRES]
    return found


def test_every_instance_is_launched_to_end_itself_at_its_tagged_expiry(
    write_spec: Callable[..., Path], no_ssh: Any, aws: str, calls: Calls
) -> None:
    bring_up(write_spec, no_ssh)
    launches = calls.params("RunInstances")
    assert len(launches) == 3
    client = raw_client("ec2", aws)
    for params in launches:
        assert params["InstanceInitiatedShutdownBehavior"] == "terminate"
        assert params["MetadataOptions"] == {
            "HttpTokens": "required",
            "HttpEndpoint": "enabled",
            "HttpPutResponseHopLimit": 1,
            "InstanceMetadataTags": "enabled",
        }
        instance_tags = next(s["Tags"] for s in params["TagSpecifications"] if s["ResourceType"] == "instance")
        bad = [t["Key"] for t in instance_tags if not IMDS_TAG_KEY.match(t["Key"])]
        assert bad == [], "IMDS refuses these instance tag keys, and with them the launch"

    for instance in live_instances(aws):
        expires = tags_of(instance)[TAG_EXPIRES]
        attribute = client.describe_instance_attribute(InstanceId=instance["InstanceId"], Attribute="userData")
        text = base64.b64decode(attribute["UserData"]["Value"]).decode()
        assert text.startswith("#cloud-config\n")
        config = yaml.safe_load(text)
        files = {f["path"]: f for f in config["write_files"]}
        assert files[CHECK_PATH]["content"] == resource_text("rayrig-expiry-check")
        assert files[CHECK_PATH]["permissions"] == "0755"
        service = files["/etc/systemd/system/rayrig-expiry.service"]["content"]
        assert f"Environment=RAYRIG_EXPIRY_AT_LAUNCH={expires}\n" in service
        assert f"ExecStart={CHECK_PATH}\n" in service
        timer = files["/etc/systemd/system/rayrig-expiry.timer"]["content"]
        assert "OnUnitActiveSec=1min" in timer and "WantedBy=timers.target" in timer
        assert ["systemctl", "enable", "--now", "--no-block", "rayrig-expiry.timer"] in config["runcmd"]
        behaviour = client.describe_instance_attribute(
            InstanceId=instance["InstanceId"], Attribute="instanceInitiatedShutdownBehavior"
        )
        assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"


def test_extend_moves_the_expiry_everywhere_and_reap_no_longer_takes_the_cluster(
    write_spec: Callable[..., Path],
    no_ssh: Any,
    aws: str,
    placement_groups: PlacementGroups,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bring_up(write_spec, no_ssh, ttl="1h")
    before = expiry_tags(aws, placement_groups)
    assert len(set(before.values())) == 1
    old = parse_time(next(iter(before.values())))
    assert old is not None
    capsys.readouterr()

    assert run_cli("cloud", "extend", "sprint42", "1d") == 0
    out = capsys.readouterr().out
    new = old + dt.timedelta(days=1)
    assert f"Cluster sprint42 in us-east-1: expiry {old:%Y-%m-%d %H:%M} UTC -> {new:%Y-%m-%d %H:%M} UTC." in out
    assert "The timers of its 3 running instance(s) follow within a minute." in out

    after = expiry_tags(aws, placement_groups)
    assert set(after) == set(before)
    assert set(after.values()) == {new.strftime("%Y-%m-%dT%H:%M:%SZ")}
    kinds = {rid.split("-")[0] for rid in after}
    # (moto does not tag the network interfaces RunInstances creates, so they are not here)
    assert {"i", "vol", "vpc", "subnet", "igw", "rtb", "sg", "key", "pg"} <= kinds

    (cluster,) = ec2.list_clusters(ec2.connect("us-east-1"))
    assert cluster.expires_at == new
    assert ec2.reap(assume_yes=True, now=utc_now() + dt.timedelta(hours=2), say=print) == 0
    assert len(live_instances(aws)) == 3
    assert "No expired cluster in us-east-1" in capsys.readouterr().out

    # A later up finds the new expiry and launches with it.
    lines: list[str] = []
    ec2.up(load_spec(write_spec(ttl="1h")), assume_yes=True, ssh_probe=no_ssh, say=lines.append)
    assert f"expires {new:%Y-%m-%d %H:%M} UTC" in lines[0]


def test_an_expired_cluster_is_extended_from_now(
    write_spec: Callable[..., Path], no_ssh: Any, aws: str, placement_groups: PlacementGroups
) -> None:
    bring_up(write_spec, no_ssh, ttl="1h")
    later = utc_now() + dt.timedelta(hours=3)
    result = extend("sprint42", dt.timedelta(hours=12), now=later, say=lambda _: None)
    assert result.old is not None and result.old < later
    assert result.new == later + dt.timedelta(hours=12)
    assert set(expiry_tags(aws, placement_groups).values()) == {result.new.strftime("%Y-%m-%dT%H:%M:%SZ")}


def test_extend_restores_a_removed_expiry_tag(
    write_spec: Callable[..., Path], no_ssh: Any, aws: str, placement_groups: PlacementGroups
) -> None:
    bring_up(write_spec, no_ssh)
    client = raw_client("ec2", aws)
    instance = live_instances(aws)[0]["InstanceId"]
    client.delete_tags(Resources=[instance], Tags=[{"Key": TAG_EXPIRES}])
    result = extend("sprint42", dt.timedelta(hours=1), say=lambda _: None)
    assert expiry_tags(aws, placement_groups)[instance] == result.new.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_extend_takes_the_region_from_the_record(
    write_spec: Callable[..., Path], no_ssh: Any, aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bring_up(write_spec, no_ssh, region="eu-west-1")
    capsys.readouterr()
    assert run_cli("cloud", "extend", "sprint42", "30m") == 0  # boto3's region is us-east-1
    assert "Cluster sprint42 in eu-west-1: expiry" in capsys.readouterr().out


@pytest.mark.parametrize("duration", ["5x", "0h", "1h30", "1.5h", "12h\n", ""])
def test_extend_refuses_a_bad_duration_before_asking_aws(
    duration: str, calls: Calls, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("cloud", "extend", "sprint42", duration) == 2
    err = capsys.readouterr().err
    assert f"DURATION = {duration!r}: expected a duration above 0 such as '12h', '1d' or '30m'" in err
    assert calls.names() == []


def test_extend_refuses_an_unknown_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("cloud", "extend", "nosuch", "1d") == 1
    err = capsys.readouterr().err
    assert "no cluster nosuch in us-east-1: nothing there carries the tag rayrig:cluster=nosuch" in err


def test_extend_refuses_more_than_30_days_and_changes_nothing(
    write_spec: Callable[..., Path],
    no_ssh: Any,
    aws: str,
    placement_groups: PlacementGroups,
    calls: Calls,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bring_up(write_spec, no_ssh)  # ttl 7d
    before = expiry_tags(aws, placement_groups)
    calls.clear()
    assert run_cli("cloud", "extend", "sprint42", "24d") == 1
    err = capsys.readouterr().err
    assert "DURATION: 24d from its expiry" in err and "more than 30 days from now" in err
    assert calls.mutating() == []
    assert expiry_tags(aws, placement_groups) == before


def test_up_refuses_to_launch_into_an_expired_cluster_until_it_is_extended(
    write_spec: Callable[..., Path], no_ssh: Any, aws: str, calls: Calls, capsys: pytest.CaptureFixture[str]
) -> None:
    """New instances would carry the passed expiry and power off within a minute of booting."""
    bring_up(write_spec, no_ssh, ttl="1h")
    client = raw_client("ec2", aws)
    ids = list(expiry_tags(aws, PlacementGroups()))
    client.create_tags(Resources=ids, Tags=[{"Key": TAG_EXPIRES, "Value": "2020-01-01T00:00:00Z"}])
    record_expiry_at("sprint42", "2020-01-01T00:00:00Z")  # the record and the tags, once that time has come
    victim = live_instances(aws)[0]["InstanceId"]
    client.terminate_instances(InstanceIds=[victim])  # ended, as a spot reclaim or the timer would
    calls.clear()
    spec = write_spec(ttl="1h")
    assert run_cli("cloud", "up", str(spec), "--yes", "--no-wait-ssh") == 1
    err = capsys.readouterr().err
    assert "cluster sprint42 expired at 2020-01-01 00:00 UTC" in err
    assert "run 'rayrig cloud extend sprint42 DURATION' first" in err
    assert calls.params("RunInstances") == []

    assert run_cli("cloud", "extend", "sprint42", "2h") == 0
    ec2.up(load_spec(spec), assume_yes=True, ssh_probe=no_ssh, say=lambda _: None)
    assert len(live_instances(aws)) == 3


@pytest.mark.parametrize("name", ["../../etc/x", "Sprint42", "x"])
def test_extend_refuses_a_name_no_cluster_can_have(
    name: str, tmp_path: Path, calls: Calls, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("cloud", "extend", name, "1d") == 2
    assert f"NAME = {name!r}: expected a cluster name" in capsys.readouterr().err
    assert calls.names() == []
    with pytest.raises(ec2.CloudError, match="expected a cluster name"):
        extend(name, dt.timedelta(days=1), say=print)
    assert not list(tmp_path.rglob("*.lock"))
