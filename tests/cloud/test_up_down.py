"""``rayrig cloud up`` and ``down`` against moto: what is created, exactly; idempotency;
the security group; failures that roll back; AWS errors as one clear line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from cloud import ec2
from cloud.ec2.aws import forget_connections, parse_time
from cloud.ec2.rules import Rule, exposed_ray_ports, rules_of
from cloud.ec2.spec import load_spec
from deploy.contract.settings import defaults
from tests.cloud.conftest import REGION, UBUNTU_AMI, Calls, Injector, PlacementGroups, base_spec, raw_client, run_cli

pytestmark = pytest.mark.cloud

TAGS = ("rayrig:cluster", "rayrig:role", "rayrig:owner", "rayrig:expires-at", "rayrig:created")


@pytest.fixture
def client(aws: str) -> Any:
    """A plain boto3 EC2 client on moto, for the tests' own look at what exists."""
    return raw_client("ec2", aws)


def tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


def tagged(client: Any, name: str) -> dict[str, list[dict[str, Any]]]:
    """Every resource carrying rayrig:cluster=name, by kind (terminated instances left out)."""
    flt = [{"Name": "tag:rayrig:cluster", "Values": [name]}]
    instances = [
        i
        for r in client.describe_instances(Filters=flt)["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] != "terminated"
    ]
    return {
        "vpc": client.describe_vpcs(Filters=flt)["Vpcs"],
        "subnet": client.describe_subnets(Filters=flt)["Subnets"],
        "internet-gateway": client.describe_internet_gateways(Filters=flt)["InternetGateways"],
        "route-table": client.describe_route_tables(Filters=flt)["RouteTables"],
        "security-group": client.describe_security_groups(Filters=flt)["SecurityGroups"],
        "key-pair": client.describe_key_pairs(Filters=flt)["KeyPairs"],
        "instance": instances,
        "volume": client.describe_volumes(Filters=flt)["Volumes"],
        "network-interface": client.describe_network_interfaces(Filters=flt)["NetworkInterfaces"],
    }


def snapshot(client: Any) -> dict[str, set[str]]:
    """The ids of everything in the region (terminated instances left out)."""
    return {
        "vpcs": {v["VpcId"] for v in client.describe_vpcs()["Vpcs"]},
        "subnets": {s["SubnetId"] for s in client.describe_subnets()["Subnets"]},
        "igws": {g["InternetGatewayId"] for g in client.describe_internet_gateways()["InternetGateways"]},
        "route tables": {r["RouteTableId"] for r in client.describe_route_tables()["RouteTables"]},
        "security groups": {g["GroupId"] for g in client.describe_security_groups()["SecurityGroups"]},
        "key pairs": {k["KeyName"] for k in client.describe_key_pairs()["KeyPairs"]},
        "instances": {
            i["InstanceId"]
            for r in client.describe_instances()["Reservations"]
            for i in r["Instances"]
            if i["State"]["Name"] != "terminated"
        },
        "volumes": {v["VolumeId"] for v in client.describe_volumes()["Volumes"]},
        "network interfaces": {
            n["NetworkInterfaceId"] for n in client.describe_network_interfaces()["NetworkInterfaces"]
        },
    }


def bring_up(path: Path, probe: Callable[..., bool], **kwargs: Any) -> ec2.UpResult:
    return ec2.up(load_spec(path), assume_yes=True, ssh_probe=probe, say=print, **kwargs)


# --------------------------------------------------------------------------- up


def test_up_creates_exactly_the_resources_tagged(
    write_spec: Callable[..., Path],
    no_ssh: Any,
    client: Any,
    placement_groups: PlacementGroups,
    calls: Calls,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = snapshot(client)
    result = bring_up(write_spec(), no_ssh)
    out = capsys.readouterr().out

    found = tagged(client, "sprint42")
    # rayrig asks for its network interfaces to be tagged too; moto does not apply those tags, AWS does.
    assert calls.params("RunInstances")[0]["TagSpecifications"][2]["ResourceType"] == "network-interface"
    del found["network-interface"]
    assert {kind: len(items) for kind, items in found.items()} == {
        "vpc": 1,
        "subnet": 1,
        "internet-gateway": 1,
        "route-table": 1,
        "security-group": 1,
        "key-pair": 1,
        "instance": 3,
        "volume": 3,
    }
    assert [g["GroupName"] for g in placement_groups.groups.values()] == ["rayrig-sprint42"]
    every = [r for items in found.values() for r in items] + list(placement_groups.groups.values())
    for resource in every:
        resource_tags = tags(resource)
        assert all(t in resource_tags for t in TAGS), resource_tags
        assert resource_tags["rayrig:cluster"] == "sprint42"
        assert resource_tags["rayrig:owner"] == "aiko@example.com"
        assert resource_tags["rayrig:created"] == "true"
    expires = {tags(r)["rayrig:expires-at"] for r in every}
    assert len(expires) == 1  # one expiry for the whole cluster: first up + ttl
    created_at = parse_time(tags(found["vpc"][0])["rayrig:created-at"])
    assert parse_time(expires.pop()) - created_at == load_spec(write_spec()).ttl

    # Nothing else appeared, except what AWS makes with every VPC (main route table, default group).
    after = snapshot(client)
    vpc = found["vpc"][0]["VpcId"]
    new_untagged_rtbs = (after["route tables"] - before["route tables"]) - {found["route-table"][0]["RouteTableId"]}
    assert [
        r["Associations"][0]["Main"]
        for r in client.describe_route_tables(RouteTableIds=list(new_untagged_rtbs))["RouteTables"]
    ] == [True]
    new_untagged_sgs = (after["security groups"] - before["security groups"]) - {found["security-group"][0]["GroupId"]}
    assert [
        g["GroupName"] for g in client.describe_security_groups(GroupIds=list(new_untagged_sgs))["SecurityGroups"]
    ] == ["default"]
    assert after["vpcs"] - before["vpcs"] == {vpc}

    # The network: the gateway attached, the default route through it, the subnet associated.
    igw = found["internet-gateway"][0]
    assert igw["Attachments"][0]["VpcId"] == vpc
    rtb = found["route-table"][0]
    assert any(
        r.get("GatewayId") == igw["InternetGatewayId"] and r["DestinationCidrBlock"] == "0.0.0.0/0"
        for r in rtb["Routes"]
    )
    assert [a["SubnetId"] for a in rtb["Associations"]] == [found["subnet"][0]["SubnetId"]]
    assert found["subnet"][0]["CidrBlock"] == "10.42.0.0/20" and found["vpc"][0]["CidrBlock"] == "10.42.0.0/16"

    # The instances: roles, groups, IMDSv2, encrypted gp3 root volumes, spot where asked, placement group.
    instances = found["instance"]
    by_role = sorted((tags(i)["rayrig:role"], tags(i)["rayrig:group"], i["InstanceType"]) for i in instances)
    assert by_role == [
        ("head", "head", "m5.2xlarge"),
        ("worker", "gpu", "g5.12xlarge"),
        ("worker", "gpu", "g5.12xlarge"),
    ]
    sg = found["security-group"][0]["GroupId"]
    for instance in instances:
        role = tags(instance)["rayrig:role"]
        assert instance["MetadataOptions"]["HttpTokens"] == "required"
        assert instance["KeyName"] == "rayrig-sprint42"
        assert instance["SubnetId"] == found["subnet"][0]["SubnetId"]
        assert [g["GroupId"] for g in instance["NetworkInterfaces"][0]["Groups"]] == [sg]
        assert instance.get("PublicIpAddress")
        assert (instance.get("InstanceLifecycle") == "spot") == (role == "worker")
        volume_id = instance["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]
        volume = client.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
        assert volume["Encrypted"] and volume["VolumeType"] == "gp3"
        assert volume["Size"] == (50 if role == "head" else 200)
        assert instance["BlockDeviceMappings"][0]["Ebs"]["DeleteOnTermination"]
    launches = calls.params("RunInstances")
    assert [p.get("Placement") for p in launches] == [None] + [{"GroupName": "rayrig-sprint42"}] * 2
    # One instance per launch, each in its own slot, with a token every run derives alike.
    assert [(p["MinCount"], p["MaxCount"]) for p in launches] == [(1, 1)] * 3
    slots = sorted((tags(i)["rayrig:group"], tags(i)["rayrig:slot"]) for i in instances)
    assert slots == [("gpu", "0"), ("gpu", "1"), ("head", "0")]
    assert len({p["ClientToken"] for p in launches}) == 3
    assert all(p["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] for p in launches)

    # It waited for SSH on every public address, and recorded the cluster as the current one.
    assert sorted(no_ssh.probed) == sorted(i["PublicIpAddress"] for i in instances)
    state = json.loads(result.state_file.read_text())
    assert state["region"] == REGION and state["spec"].endswith(".toml")
    assert (result.state_file.parent / "current").read_text().strip() == "sprint42"

    # The summary came first, with the cost: 1 x m5.2xlarge on demand + 2 x g5.12xlarge at moto's spot price.
    assert out.index("create  VPC 10.42.0.0/16") < out.index("created VPC")
    assert "Estimated cost: $0.38/h" in out and "prices: AWS Pricing, spot price history" in out


def test_security_group_rules_are_exactly_as_specified(
    write_spec: Callable[..., Path], no_ssh: Any, client: Any
) -> None:
    bring_up(write_spec(), no_ssh)
    group = tagged(client, "sprint42")["security-group"][0]
    gid = group["GroupId"]

    def peers(perms: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
        found = set()
        for p in perms:
            ports = (p.get("FromPort"), p.get("ToPort")) if p["IpProtocol"] != "-1" else (None, None)
            found |= {(p["IpProtocol"], *ports, "sg", g["GroupId"]) for g in p.get("UserIdGroupPairs", [])}
            found |= {(p["IpProtocol"], *ports, "cidr", r["CidrIp"]) for r in p.get("IpRanges", [])}
            found |= {(p["IpProtocol"], *ports, "cidr6", r["CidrIpv6"]) for r in p.get("Ipv6Ranges", [])}
        return found

    assert peers(group["IpPermissions"]) == {
        ("-1", None, None, "sg", gid),  # the cluster talks to itself on every port (Ray, NCCL, EFA)
        ("tcp", 22, 22, "cidr", "198.51.100.0/24"),  # SSH from the admin CIDR only
    }
    assert peers(group["IpPermissionsEgress"]) == {
        ("-1", None, None, "sg", gid),  # EFA needs the self-referencing egress rule too
        ("-1", None, None, "cidr", "0.0.0.0/0"),  # package and image pulls
    }

    # No Ray port is open to any address range, let alone 0.0.0.0/0.
    ports = defaults()["ray_ports"]
    ray_ports = [p for k, p in ports.items() if not k.startswith("worker_")] + [
        ports["worker_min"],
        ports["worker_max"],
    ]
    for proto, lo, hi, kind, peer in peers(group["IpPermissions"]):
        if kind != "sg":
            assert proto == "tcp" and not any(lo <= port <= hi for port in ray_ports), (proto, lo, hi, peer)


def test_ssh_from_anywhere_only_when_the_spec_says_so(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, client: Any
) -> None:
    data = base_spec(keys[0], admin_cidrs=["0.0.0.0/0"], allow_ssh_from_anywhere=True)
    data["network"] = {"internet_egress": False}
    bring_up(write_spec(data), no_ssh)
    group = tagged(client, "sprint42")["security-group"][0]
    rules = rules_of(group)
    assert Rule("ingress", "tcp", 22, 22, "cidr", "0.0.0.0/0") in rules
    assert [
        r for r in rules if r.peer in ("0.0.0.0/0", "::/0") and r != Rule("ingress", "tcp", 22, 22, "cidr", "0.0.0.0/0")
    ] == []
    assert exposed_ray_ports(rules, defaults()["ray_ports"]) == []


def test_second_up_creates_nothing(
    write_spec: Callable[..., Path], no_ssh: Any, client: Any, calls: Calls, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_spec()
    bring_up(path, no_ssh)
    before = snapshot(client)
    first_tags = {i["InstanceId"]: tags(i) for i in tagged(client, "sprint42")["instance"]}
    calls.clear()
    capsys.readouterr()

    bring_up(path, no_ssh)

    assert calls.mutating() == []
    assert snapshot(client) == before
    assert {i["InstanceId"]: tags(i) for i in tagged(client, "sprint42")["instance"]} == first_tags
    out = capsys.readouterr().out
    assert "Nothing to create" in out and "  create " not in out and "created " not in out


def test_up_puts_back_the_exact_rules_after_drift(
    write_spec: Callable[..., Path], no_ssh: Any, client: Any, calls: Calls
) -> None:
    path = write_spec()
    bring_up(path, no_ssh)
    gid = tagged(client, "sprint42")["security-group"][0]["GroupId"]
    client.authorize_security_group_ingress(
        GroupId=gid,
        IpPermissions=[{"IpProtocol": "tcp", "FromPort": 6379, "ToPort": 6379, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
    )
    calls.clear()

    bring_up(path, no_ssh)

    assert calls.mutating() == ["RevokeSecurityGroupIngress"]
    rules = rules_of(client.describe_security_groups(GroupIds=[gid])["SecurityGroups"][0])
    assert exposed_ray_ports(rules, defaults()["ray_ports"]) == []


def test_up_replaces_a_lost_worker_only(
    write_spec: Callable[..., Path], no_ssh: Any, client: Any, calls: Calls
) -> None:
    path = write_spec()
    bring_up(path, no_ssh)
    worker = next(i for i in tagged(client, "sprint42")["instance"] if tags(i)["rayrig:role"] == "worker")
    client.terminate_instances(InstanceIds=[worker["InstanceId"]])  # a spot reclaim
    calls.clear()

    bring_up(path, no_ssh)

    assert calls.mutating() == ["RunInstances"]
    assert calls.params("RunInstances")[0]["MinCount"] == 1
    assert len(tagged(client, "sprint42")["instance"]) == 3
    workers = [i for i in tagged(client, "sprint42")["instance"] if tags(i)["rayrig:role"] == "worker"]
    assert sorted(tags(i)["rayrig:slot"] for i in workers) == ["0", "1"]  # the new one took the lost one's slot


def test_the_ami_can_come_from_an_ssm_parameter(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, client: Any, aws: str
) -> None:
    raw_client("ssm", aws).put_parameter(Name="/rayrig-test/deeplearning/ami-id", Value=UBUNTU_AMI, Type="String")
    bring_up(write_spec(base_spec(keys[0], ami={"ssm_parameter": "/rayrig-test/deeplearning/ami-id"})), no_ssh)
    instances = tagged(client, "sprint42")["instance"]
    assert {i["ImageId"] for i in instances} == {UBUNTU_AMI}
    assert {tags(i)["rayrig:ssh-user"] for i in instances} == {"ubuntu"}
    assert {i["BlockDeviceMappings"][0]["DeviceName"] for i in instances} == {"/dev/sda1"}


def test_a_declined_confirmation_creates_nothing(write_spec: Callable[..., Path], no_ssh: Any, calls: Calls) -> None:
    questions: list[str] = []

    def decline(question: str) -> bool:
        questions.append(question)
        return False

    with pytest.raises(ec2.CloudError, match="not confirmed; nothing was created"):
        ec2.up(load_spec(write_spec()), confirm=decline, ssh_probe=no_ssh, say=print)
    assert questions == ["Create these resources?"] and calls.mutating() == []


def test_without_yes_and_without_a_terminal_it_asks_for_yes(
    write_spec: Callable[..., Path], calls: Calls, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli("cloud", "up", str(write_spec()), "--no-wait-ssh") == 1
    assert "pass --yes" in capsys.readouterr().err
    assert calls.mutating() == []


# --------------------------------------------------------------------------- failures


def test_capacity_failure_during_launch_removes_what_the_run_created(
    write_spec: Callable[..., Path],
    no_ssh: Any,
    client: Any,
    inject: Injector,
    placement_groups: PlacementGroups,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    before = snapshot(client)
    # The head launches; the workers' launch fails (HTTP 500, as AWS sends it; botocore retries it).
    inject.fail(
        "RunInstances",
        "InsufficientInstanceCapacity",
        "We currently do not have sufficient g5.12xlarge capacity in the Availability Zone you requested.",
        status=500,
        after=1,
    )

    with pytest.raises(ec2.CloudError) as caught:
        bring_up(write_spec(), no_ssh)

    message = str(caught.value)
    assert "\n" not in message
    assert "InsufficientInstanceCapacity" in message and "no capacity" in message
    assert "removed what this run created" in message
    out = capsys.readouterr().out
    assert "created head instance" in out and "terminating 1 instance(s)" in out
    assert all(not items for items in tagged(client, "sprint42").values())
    assert placement_groups.groups == {}
    assert snapshot(client) == before
    assert not (tmp_path / "state" / "ec2" / "sprint42.json").exists()


def test_a_failed_up_leaves_an_existing_cluster_alone(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, client: Any, inject: Injector, tmp_path: Path
) -> None:
    bring_up(write_spec(), no_ssh)
    before = snapshot(client)
    data = base_spec(keys[0])
    data["workers"][0]["count"] = 4  # two more workers, but there is no quota for them
    inject.fail("RunInstances", "VcpuLimitExceeded", "You have requested more vCPU capacity than your current limit")

    with pytest.raises(ec2.CloudError, match=r"an account quota is reached .*VcpuLimitExceeded.*Service Quotas"):
        bring_up(write_spec(data), no_ssh)

    assert snapshot(client) == before  # the first run's resources are all still there


def test_a_key_pair_with_another_key_is_refused(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, client: Any, tmp_path: Path
) -> None:
    bring_up(write_spec(), no_ssh)
    other = tmp_path / "other.pub"
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    other.write_bytes(rsa_key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    before = snapshot(client)
    with pytest.raises(ec2.CloudError, match="holds another public key than"):
        bring_up(write_spec(base_spec(other)), no_ssh)
    assert snapshot(client) == before


def test_a_missing_ami_fails_before_anything_is_created(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, calls: Calls
) -> None:
    path = write_spec(base_spec(keys[0], ami={"id": "ami-0123456789abcdef0"}))
    with pytest.raises(ec2.CloudError) as caught:
        bring_up(path, no_ssh)
    message = str(caught.value)
    assert str(path) in message and "ami-0123456789abcdef0" in message and "InvalidAMIID.NotFound" in message
    assert calls.mutating() == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"head": {"instance_type": "x9.bogus"}}, "InvalidInstanceType"),
        (
            {"head": {"instance_type": "m5.xlarge", "root_volume_gb": 10}},
            "head.root_volume_gb = 10: expected at least 15",
        ),
        ({"ami": {"id": "ami-03cf127a"}}, "is a Windows AMI"),
    ],
    ids=["unknown-type", "volume-below-snapshot", "windows-ami"],
)
def test_aws_side_problems_are_found_before_anything_is_created(
    change: dict[str, Any],
    expected: str,
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    calls: Calls,
) -> None:
    with pytest.raises(ec2.CloudError, match=expected):
        bring_up(write_spec(base_spec(keys[0], **change)), no_ssh)
    assert calls.mutating() == []


def test_throttling_is_retried(write_spec: Callable[..., Path], no_ssh: Any, client: Any, inject: Injector) -> None:
    inject.fail("DescribeVpcs", "RequestLimitExceeded", "Request limit exceeded.", status=503, times=2)
    bring_up(write_spec(), no_ssh)
    assert inject.rules[0]["times"] == 0  # both throttled answers were used, and up went on
    assert len(tagged(client, "sprint42")["instance"]) == 3


def test_persistent_throttling_is_one_clear_line(
    write_spec: Callable[..., Path], inject: Injector, capsys: pytest.CaptureFixture[str]
) -> None:
    inject.fail("DescribeImages", "RequestLimitExceeded", "Request limit exceeded.", status=503)
    assert run_cli("cloud", "up", str(write_spec()), "--yes", "--no-wait-ssh") == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert "kept throttling" in err and "RequestLimitExceeded, 3 attempts" in err


def test_rejected_credentials_are_one_line_and_never_shown(
    write_spec: Callable[..., Path],
    inject: Injector,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key_id, secret = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    inject.fail("GetParameter", "UnrecognizedClientException", f"The security token {key_id} {secret} is invalid.")

    assert run_cli("cloud", "up", str(write_spec()), "--yes") == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.count("\n") == 0
    assert "AWS rejected the credentials (UnrecognizedClientException)" in err
    assert key_id not in captured.out + captured.err and secret not in captured.out + captured.err


def test_missing_credentials_are_one_line(
    write_spec: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert run_cli("cloud", "up", str(write_spec()), "--yes") == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no AWS credentials found" in err


# --------------------------------------------------------------------------- down


def test_down_leaves_nothing_with_the_cluster_tag(
    write_spec: Callable[..., Path],
    no_ssh: Any,
    client: Any,
    placement_groups: PlacementGroups,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = snapshot(client)
    bring_up(write_spec(), no_ssh)
    capsys.readouterr()

    assert run_cli("cloud", "down", "sprint42", "--yes") == 0

    assert all(not items for items in tagged(client, "sprint42").values())
    assert placement_groups.groups == {}
    assert snapshot(client) == before
    out = capsys.readouterr().out
    assert "Nothing is left with the tag rayrig:cluster=sprint42" in out
    assert not (tmp_path / "state" / "ec2" / "sprint42.json").exists()
    assert not (tmp_path / "state" / "ec2" / "current").exists()
    assert run_cli("cloud", "down", "sprint42", "--yes") == 0  # again: nothing to do, still nothing left


def test_down_never_deletes_what_it_did_not_create(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    client: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    vpc = client.create_vpc(CidrBlock="10.77.0.0/16")["Vpc"]["VpcId"]
    subnet = client.create_subnet(VpcId=vpc, CidrBlock="10.77.1.0/24")["Subnet"]["SubnetId"]
    data = base_spec(keys[0])
    data["network"] = {"vpc_id": vpc, "subnet_id": subnet}
    bring_up(write_spec(data), no_ssh)
    found = tagged(client, "sprint42")
    assert (found["vpc"], found["subnet"], found["internet-gateway"], found["route-table"]) == ([], [], [], [])
    assert {i["SubnetId"] for i in found["instance"]} == {subnet}
    # Someone tags a group of their own with the cluster's name: down must not delete it, and must say so.
    theirs = client.create_security_group(
        GroupName="theirs",
        Description="not rayrig's",
        VpcId=vpc,
        TagSpecifications=[
            {"ResourceType": "security-group", "Tags": [{"Key": "rayrig:cluster", "Value": "sprint42"}]}
        ],
    )["GroupId"]
    capsys.readouterr()

    assert run_cli("cloud", "down", "sprint42", "--yes") == 1

    out = capsys.readouterr().out
    assert f"security group {theirs} (theirs)" in out and "Still tagged rayrig:cluster=sprint42" in out
    assert client.describe_vpcs(VpcIds=[vpc])["Vpcs"] and client.describe_subnets(SubnetIds=[subnet])["Subnets"]
    assert client.describe_security_groups(GroupIds=[theirs])["SecurityGroups"]
    assert [kind for kind, items in tagged(client, "sprint42").items() if items] == ["security-group"]


def test_down_without_a_region_uses_the_recorded_one(
    write_spec: Callable[..., Path], no_ssh: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bring_up(write_spec(), no_ssh)
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    forget_connections()
    assert run_cli("cloud", "down", "sprint42", "--yes") == 0


def test_down_refuses_a_bad_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("cloud", "down", "Not A Name") == 1
    assert "expected 2-32 lower-case letters" in capsys.readouterr().err


# --------------------------------------------------------------------------- the command line


def test_cli_up_probes_ssh_for_real_and_keeps_the_cluster_when_it_does_not_answer(
    write_spec: Callable[..., Path], client: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # moto's instances have public addresses but no sshd behind them: the real probe never gets a banner.
    assert run_cli("cloud", "up", str(write_spec()), "--yes", "--timeout", "1") == 1
    err = capsys.readouterr().err
    assert "SSH did not answer within 1s on" in err and "'rayrig cloud down sprint42' removes it" in err
    assert len(tagged(client, "sprint42")["instance"]) == 3
    assert (tmp_path / "state" / "ec2" / "sprint42.json").is_file()

    assert run_cli("cloud", "up", str(write_spec()), "--yes", "--no-wait-ssh") == 0
    assert run_cli("cloud", "down", "sprint42", "--yes") == 0
