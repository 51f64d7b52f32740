"""The cluster's instance profile against moto: the role rayrig makes for ``s3_buckets`` allows
exactly the listed buckets, RunInstances carries it, ``down`` and a rollback delete it, an existing
profile named in the spec is attached and never deleted; and the spec's checks of both keys."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from cloud import ec2
from cloud.ec2 import aws as ec2_aws
from cloud.ec2 import waits
from cloud.ec2.spec import SpecError, load_spec
from cloud.ec2.teardown import tagged_leftovers
from tests.cloud.conftest import REGION, Calls, Injector, base_spec, raw_client, run_cli

pytestmark = pytest.mark.cloud

BUCKETS = ["datasets", {"name": "checkpoints", "write": True}, "logs.example.com"]


@pytest.fixture
def iam(aws: str) -> Any:
    """A plain boto3 IAM client on moto, for the tests' own look at what exists."""
    return raw_client("iam", aws)


def bring_up(path: Path, probe: Callable[..., bool]) -> ec2.UpResult:
    return ec2.up(load_spec(path), assume_yes=True, ssh_probe=probe, say=print)


def allowed(policy: dict[str, Any]) -> dict[str, set[str]]:
    """What a policy document allows: resource -> actions (every statement an Allow)."""
    grants: dict[str, set[str]] = {}
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        for resource in resources:
            grants.setdefault(resource, set()).update(actions)
    return grants


def iam_names(iam: Any) -> tuple[list[str], list[str]]:
    roles = [r["RoleName"] for r in iam.list_roles()["Roles"]]
    profiles = [p["InstanceProfileName"] for p in iam.list_instance_profiles()["InstanceProfiles"]]
    return roles, profiles


READ = {"s3:ListBucket", "s3:GetBucketLocation"}
WRITE = {"s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"}


# --------------------------------------------------------------------------- up with s3_buckets


def test_the_role_allows_exactly_the_listed_buckets_and_the_instances_carry_it(
    write_spec: Callable[..., Path], no_ssh: Any, iam: Any, calls: Calls, capsys: pytest.CaptureFixture[str]
) -> None:
    bring_up(write_spec(s3_buckets=BUCKETS), no_ssh)
    out = capsys.readouterr().out

    role_line = "IAM role rayrig-sprint42 for EC2: S3 read datasets, logs.example.com; read and write checkpoints"
    assert f"create  {role_line}" in out
    role = iam.get_role(RoleName="rayrig-sprint42")["Role"]
    trust = role["AssumeRolePolicyDocument"]
    assert [s["Principal"] for s in trust["Statement"]] == [{"Service": "ec2.amazonaws.com"}]
    assert [s["Action"] for s in trust["Statement"]] == ["sts:AssumeRole"]
    assert iam.list_role_policies(RoleName="rayrig-sprint42")["PolicyNames"] == ["rayrig-s3"]
    assert iam.list_attached_role_policies(RoleName="rayrig-sprint42")["AttachedPolicies"] == []
    policy = iam.get_role_policy(RoleName="rayrig-sprint42", PolicyName="rayrig-s3")["PolicyDocument"]
    assert allowed(policy) == {
        "arn:aws:s3:::datasets": READ,
        "arn:aws:s3:::checkpoints": READ,
        "arn:aws:s3:::logs.example.com": READ,
        "arn:aws:s3:::datasets/*": {"s3:GetObject"},
        "arn:aws:s3:::logs.example.com/*": {"s3:GetObject"},
        "arn:aws:s3:::checkpoints/*": {"s3:GetObject"} | WRITE,
    }

    profile = iam.get_instance_profile(InstanceProfileName="rayrig-sprint42")["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == ["rayrig-sprint42"]
    for resource in (role, profile):
        tags = {t["Key"]: t["Value"] for t in resource["Tags"]}
        assert tags["rayrig:cluster"] == "sprint42" and tags["rayrig:created"] == "true"
        assert tags["rayrig:owner"] == "aiko@example.com" and tags["rayrig:region"] == REGION
        assert "rayrig:expires-at" not in tags  # extend moves the instances' tag; the role has none to go stale
    launches = calls.params("RunInstances")
    assert len(launches) == 3
    assert all(p["IamInstanceProfile"] == {"Arn": profile["Arn"]} for p in launches)


def test_a_second_up_reuses_the_role_and_a_changed_bucket_list_replaces_the_policy(
    write_spec: Callable[..., Path], no_ssh: Any, iam: Any, calls: Calls, capsys: pytest.CaptureFixture[str]
) -> None:
    bring_up(write_spec(s3_buckets=BUCKETS), no_ssh)
    calls.clear()
    bring_up(write_spec(s3_buckets=BUCKETS), no_ssh)
    out = capsys.readouterr().out
    assert "reuse   IAM role rayrig-sprint42" in out and "reuse   instance profile rayrig-sprint42" in out
    assert not [n for n in calls.names() if n.startswith(("Create", "Put", "Add"))]

    bring_up(write_spec(s3_buckets=[{"name": "datasets", "write": True}]), no_ssh)

    assert "update  IAM role rayrig-sprint42 for EC2: S3 read and write datasets" in capsys.readouterr().out
    policy = iam.get_role_policy(RoleName="rayrig-sprint42", PolicyName="rayrig-s3")["PolicyDocument"]
    assert allowed(policy) == {"arn:aws:s3:::datasets": READ, "arn:aws:s3:::datasets/*": {"s3:GetObject"} | WRITE}
    assert iam_names(iam) == (["rayrig-sprint42"], ["rayrig-sprint42"])


def test_down_deletes_the_role_its_policy_and_the_profile(
    write_spec: Callable[..., Path], no_ssh: Any, iam: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    bring_up(write_spec(s3_buckets=BUCKETS), no_ssh)
    capsys.readouterr()

    assert run_cli("cloud", "down", "sprint42", "--yes") == 0

    out = capsys.readouterr().out
    assert "deleting instance profile rayrig-sprint42" in out and "deleting IAM role rayrig-sprint42" in out
    assert "Nothing is left with the tag rayrig:cluster=sprint42" in out
    assert iam_names(iam) == ([], [])
    assert tagged_leftovers(ec2.connect(REGION), "sprint42") == []


def test_what_carries_the_tag_in_iam_is_a_leftover(
    write_spec: Callable[..., Path], no_ssh: Any, iam: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    bring_up(write_spec(), no_ssh)
    # A role someone else made and tagged with the cluster: down must not delete it, and must say so.
    iam.create_role(
        RoleName="theirs",
        Path="/rayrig/",
        AssumeRolePolicyDocument="{}",
        Tags=[{"Key": "rayrig:cluster", "Value": "sprint42"}],
    )
    capsys.readouterr()

    assert run_cli("cloud", "down", "sprint42", "--yes") == 1

    out = capsys.readouterr().out
    assert "Still tagged rayrig:cluster=sprint42" in out and "IAM role theirs" in out
    assert iam_names(iam) == (["theirs"], [])


def test_a_failed_launch_removes_the_role_and_profile_it_created(
    write_spec: Callable[..., Path], no_ssh: Any, iam: Any, inject: Injector, capsys: pytest.CaptureFixture[str]
) -> None:
    inject.fail("RunInstances", "InsufficientInstanceCapacity", "no g5.12xlarge capacity", status=500, after=1)

    with pytest.raises(ec2.CloudError, match="removed what this run created"):
        bring_up(write_spec(s3_buckets=BUCKETS), no_ssh)

    out = capsys.readouterr().out
    assert "created IAM role rayrig-sprint42" in out and "created instance profile rayrig-sprint42" in out
    assert iam_names(iam) == ([], [])
    assert tagged_leftovers(ec2.connect(REGION), "sprint42") == []


def test_a_profile_iam_has_not_spread_yet_is_retried_then_given_up(
    write_spec: Callable[..., Path],
    no_ssh: Any,
    iam: Any,
    inject: Injector,
    calls: Calls,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = (
        "Value (rayrig-sprint42) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name"
    )
    inject.fail("RunInstances", "InvalidParameterValue", message, times=2)

    bring_up(write_spec(s3_buckets=BUCKETS), no_ssh)

    assert len(calls.params("RunInstances")) == 3 + 2
    run_cli("cloud", "down", "sprint42", "--yes")

    # Bounded: a profile that never becomes usable fails the run, which removes what it made.
    monkeypatch.setattr(waits, "SETTLE_S", 0.2)
    inject.fail("RunInstances", "InvalidParameterValue", message)
    with pytest.raises(ec2.CloudError, match="Invalid IAM Instance Profile name.*removed what this run created"):
        bring_up(write_spec(s3_buckets=BUCKETS), no_ssh)
    assert iam_names(iam) == ([], [])


# --------------------------------------------------------------------------- an existing profile


def test_an_existing_profile_is_attached_and_never_deleted(
    write_spec: Callable[..., Path], no_ssh: Any, iam: Any, calls: Calls, capsys: pytest.CaptureFixture[str]
) -> None:
    iam.create_role(RoleName="ml-data", AssumeRolePolicyDocument="{}")
    iam.create_instance_profile(InstanceProfileName="ml-data-reader")
    iam.add_role_to_instance_profile(InstanceProfileName="ml-data-reader", RoleName="ml-data")

    bring_up(write_spec(iam_instance_profile="ml-data-reader"), no_ssh)

    out = capsys.readouterr().out
    assert "use     instance profile ml-data-reader (exists; rayrig never changes or deletes it)" in out
    assert [p["IamInstanceProfile"] for p in calls.params("RunInstances")] == [{"Name": "ml-data-reader"}] * 3
    assert not calls.params("CreateRole") and not calls.params("PutRolePolicy")

    assert run_cli("cloud", "down", "sprint42", "--yes") == 0
    assert iam_names(iam) == (["ml-data"], ["ml-data-reader"])
    profile = iam.get_instance_profile(InstanceProfileName="ml-data-reader")["InstanceProfile"]
    assert [r["RoleName"] for r in profile["Roles"]] == ["ml-data"]


def test_an_existing_profile_by_arn_is_attached_by_arn(
    write_spec: Callable[..., Path], no_ssh: Any, iam: Any, calls: Calls
) -> None:
    arn = iam.create_instance_profile(InstanceProfileName="reader", Path="/ml/")["InstanceProfile"]["Arn"]
    bring_up(write_spec(iam_instance_profile=arn), no_ssh)
    assert {json.dumps(p["IamInstanceProfile"]) for p in calls.params("RunInstances")} == {json.dumps({"Arn": arn})}


def test_a_profile_that_does_not_exist_is_refused_before_anything_is_created(
    write_spec: Callable[..., Path], no_ssh: Any, calls: Calls
) -> None:
    path = write_spec(iam_instance_profile="no-such-profile")
    with pytest.raises(ec2.CloudError) as caught:
        bring_up(path, no_ssh)
    message = str(caught.value)
    assert f"{path}: iam_instance_profile = 'no-such-profile': expected an existing instance profile" in message
    assert calls.mutating() == []


def test_a_role_of_the_same_name_that_rayrig_did_not_make_is_refused(
    write_spec: Callable[..., Path], no_ssh: Any, iam: Any, calls: Calls
) -> None:
    iam.create_role(RoleName="rayrig-sprint42", AssumeRolePolicyDocument="{}")
    with pytest.raises(ec2.CloudError, match="an IAM role named rayrig-sprint42 exists .* rayrig did not create it"):
        bring_up(write_spec(s3_buckets=["datasets"]), no_ssh)
    assert calls.mutating() == []


def test_a_role_with_rayrigs_tags_that_someone_else_may_assume_is_refused(
    write_spec: Callable[..., Path], no_ssh: Any, iam: Any, calls: Calls
) -> None:
    bring_up(write_spec(s3_buckets=["datasets"]), no_ssh)
    foreign = {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::210987654321:root"}, "Action": "sts:AssumeRole"}
    trust = {"Version": "2012-10-17", "Statement": [*ec2_trust(iam)["Statement"], foreign]}
    iam.update_assume_role_policy(RoleName="rayrig-sprint42", PolicyDocument=json.dumps(trust))
    calls.clear()
    with pytest.raises(ec2.CloudError) as caught:
        bring_up(write_spec(s3_buckets=["datasets", "logs.example.com"]), no_ssh)
    message = str(caught.value)
    assert "the IAM role rayrig-sprint42 carries rayrig's tags but its trust policy is not rayrig's" in message
    assert "210987654321" in message and "rayrig will not give it the cluster's S3 access" in message
    assert calls.mutating() == []  # the new bucket's access went nowhere


def ec2_trust(iam: Any) -> dict[str, Any]:
    document = iam.get_role(RoleName="rayrig-sprint42")["Role"]["AssumeRolePolicyDocument"]
    return json.loads(urllib.parse.unquote(document)) if isinstance(document, str) else document


# --------------------------------------------------------------------------- the spec


def spec_problems(write_spec: Callable[..., Path], keys: tuple[Path, Path], **changes: Any) -> str:
    path = write_spec(base_spec(keys[0], **changes))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    return str(caught.value)


def test_the_spec_takes_one_of_the_two_keys_and_valid_values(
    write_spec: Callable[..., Path], keys: tuple[Path, Path]
) -> None:
    both = spec_problems(write_spec, keys, iam_instance_profile="reader", s3_buckets=["datasets"])
    assert "iam_instance_profile = 'reader': expected either iam_instance_profile (an existing profile) " in both
    assert "or s3_buckets (a role rayrig creates), not both" in both

    bad = spec_problems(
        write_spec,
        keys,
        s3_buckets=["Datasets", "data..sets", "192.168.5.4", "xn--bucket", "ok-bucket", "ok-bucket"],
    )
    assert "s3_buckets[0] = 'Datasets': expected a bucket name: 3-63 lower-case letters" in bad
    assert "s3_buckets[1] = 'data..sets': expected a bucket name without two adjacent dots" in bad
    assert "s3_buckets[2] = '192.168.5.4': expected a bucket name that is not formatted as an IP address" in bad
    assert "s3_buckets[3] = 'xn--bucket': expected a bucket name without the prefixes xn--" in bad
    assert "s3_buckets[5] = 'ok-bucket': expected each bucket listed once" in bad
    assert "s3_buckets[4]" not in bad
    malformed = spec_problems(write_spec, keys, s3_buckets=["ok-bucket", {"write": True}])
    assert "s3_buckets[1] = {'write': True}: expected a bucket name such as \"datasets\", or a table" in malformed

    profile = spec_problems(write_spec, keys, iam_instance_profile="arn:aws:iam::12:instance-profile/x")
    assert "iam_instance_profile = 'arn:aws:iam::12:instance-profile/x': expected the name or ARN" in profile
    for good in ("reader", "arn:aws:iam::123456789012:instance-profile/ml/reader"):
        assert load_spec(write_spec(iam_instance_profile=good)).iam_instance_profile == good


def test_an_s3_mount_on_the_instance_profile_needs_one_that_reaches_its_bucket(
    write_spec: Callable[..., Path], keys: tuple[Path, Path]
) -> None:
    mounts = [
        {"bucket": "datasets", "path": "/mnt/datasets", "read_only": True},
        {"bucket": "checkpoints", "path": "/mnt/ckpt"},
    ]
    data = {"ray_image": "registry.example.com/ray:2.60.0-gpu", "storage_s3_mounts": mounts}

    none = spec_problems(write_spec, keys, host_data=data)
    assert (
        "host_data.storage_s3_mounts[0] = bucket 'datasets': expected an instance profile to read bucket 'datasets' "
        'with (storage_s3_credentials is unset): s3_buckets = ["datasets"] (rayrig creates the role), '
        "iam_instance_profile, or storage_s3_credentials in the host data"
    ) in none
    assert none.count("storage_s3_mounts[0]") == 1  # said once, not once per group

    partial = spec_problems(write_spec, keys, host_data=data, s3_buckets=["datasets", "checkpoints"])
    assert "storage_s3_mounts[0]" not in partial
    assert (
        "host_data.storage_s3_mounts[1] = bucket 'checkpoints': expected write = true for bucket 'checkpoints' "
        'in s3_buckets (the mount is writable), or "read_only": true on the mount'
    ) in partial
    missing = spec_problems(write_spec, keys, host_data=data, s3_buckets=["datasets"])
    assert "storage_s3_mounts[1] = bucket 'checkpoints': expected bucket 'checkpoints' listed in s3_buckets" in missing

    ok = ["datasets", {"name": "checkpoints", "write": True}]
    assert [(b.name, b.write) for b in load_spec(write_spec(host_data=data, s3_buckets=ok)).s3_buckets] == [
        ("datasets", False),
        ("checkpoints", True),
    ]
    assert load_spec(write_spec(host_data=data, iam_instance_profile="reader"))
    keyed = {**data, "storage_s3_credentials": {"access_key_id": "AKIAEXAMPLE", "secret_access_key": "x" * 40}}
    assert load_spec(write_spec(host_data=keyed))


def test_instances_launched_without_a_profile_get_it_when_the_spec_asks_for_one(
    write_spec: Callable[..., Path], no_ssh: Any, iam: Any, aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bring_up(write_spec(), no_ssh)
    bring_up(write_spec(s3_buckets=["datasets"]), no_ssh)

    arn = iam.get_instance_profile(InstanceProfileName="rayrig-sprint42")["InstanceProfile"]["Arn"]
    flt = [{"Name": "tag:rayrig:cluster", "Values": ["sprint42"]}]
    described = [
        i for r in raw_client("ec2", aws).describe_instances(Filters=flt)["Reservations"] for i in r["Instances"]
    ]
    assert [i.get("IamInstanceProfile", {}).get("Arn") for i in described] == [arn] * 3
    assert capsys.readouterr().out.count(f"attaching instance profile {arn} to i-") == 3


class _DeniedIam:
    """An IAM client whose every call is refused, as for credentials without IAM permissions."""

    def __getattr__(self, operation: str) -> Any:
        def refuse(*_: Any, **__: Any) -> Any:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not authorized"}}, operation)

        return refuse

    def get_paginator(self, operation: str) -> Any:
        return self


def test_credentials_that_may_not_read_iam_take_down_a_cluster_without_a_role(
    write_spec: Callable[..., Path], no_ssh: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bring_up(write_spec(), no_ssh)
    real_client = ec2_aws.Aws.client
    monkeypatch.setattr(
        ec2_aws.Aws, "client", lambda self, service: _DeniedIam() if service == "iam" else real_client(self, service)
    )
    capsys.readouterr()

    assert run_cli("cloud", "down", "sprint42", "--yes") == 0
    assert "Nothing is left with the tag rayrig:cluster=sprint42" in capsys.readouterr().out


def test_a_changed_bucket_list_is_confirmed_like_a_creation(
    write_spec: Callable[..., Path], no_ssh: Any, iam: Any
) -> None:
    bring_up(write_spec(s3_buckets=["datasets"]), no_ssh)
    changed = load_spec(write_spec(s3_buckets=[{"name": "datasets", "write": True}]))

    with pytest.raises(ec2.CloudError, match="not confirmed"):
        ec2.up(changed, confirm=lambda question: False, ssh_probe=no_ssh, say=print)

    policy = iam.get_role_policy(RoleName="rayrig-sprint42", PolicyName="rayrig-s3")["PolicyDocument"]
    assert allowed(policy)["arn:aws:s3:::datasets/*"] == {"s3:GetObject"}  # still read only
