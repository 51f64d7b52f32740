"""Capacity failover of ``rayrig cloud up`` against moto: AWS refuses launches (injected capacity
errors for chosen zones, types or markets) and the cluster comes up elsewhere, or not at all.

What a user sees: the cluster in the second zone or with the second type, the workers of the
placement group in one zone, every attempt said as it happens and summed up at the end, the
inventory's GPUs from the type that launched, and nothing left behind when no option had capacity.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from cloud import ec2
from cloud.ec2 import apply as ec2_apply
from cloud.ec2.failover import CAPACITY_CODES, NoCapacity, Option, Tries, place
from cloud.ec2.spec import GroupSpec, load_spec
from tests.cloud.conftest import Calls, Injector, PlacementGroups, base_spec, raw_client, run_cli

pytestmark = pytest.mark.cloud

CAPACITY_MESSAGE = "We currently do not have sufficient capacity in the Availability Zone you requested."


@pytest.fixture
def client(aws: str) -> Any:
    return raw_client("ec2", aws)


def bring_up(path: Path, probe: Any) -> ec2.UpResult:
    return ec2.up(load_spec(path), assume_yes=True, ssh_probe=probe, say=print)


def live_instances(client: Any, name: str = "sprint42") -> list[dict[str, Any]]:
    flt = [
        {"Name": "tag:rayrig:cluster", "Values": [name]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
    ]
    return [i for r in client.describe_instances(Filters=flt)["Reservations"] for i in r["Instances"]]


def where(instance: dict[str, Any]) -> tuple[str, str, str, str]:
    """(group, instance type, zone, market) of a described instance."""
    group = next(t["Value"] for t in instance["Tags"] if t["Key"] == "rayrig:group")
    market = "spot" if instance.get("InstanceLifecycle") == "spot" else "on-demand"
    return group, instance["InstanceType"], instance["Placement"]["AvailabilityZone"], market


def subnets_of(client: Any, name: str = "sprint42") -> dict[str, str]:
    """The cluster's subnets by zone."""
    flt = [{"Name": "tag:rayrig:cluster", "Values": [name]}]
    return {s["AvailabilityZone"]: s["SubnetId"] for s in client.describe_subnets(Filters=flt)["Subnets"]}


class Zones:
    """The zone of a subnet, as RunInstances names it (``NetworkInterface.1.SubnetId``)."""

    def __init__(self, client: Any):
        self.client = client

    def of(self, params: dict[str, str]) -> str:
        subnet = params["NetworkInterface.1.SubnetId"]
        return self.client.describe_subnets(SubnetIds=[subnet])["Subnets"][0]["AvailabilityZone"]


def launches(calls: Calls, zones: Zones) -> list[tuple[str, str, str, str]]:
    """Every RunInstances the run sent: (group, instance type, zone, market), in order."""
    found = []
    for params in calls.params("RunInstances"):
        tags = {t["Key"]: t["Value"] for t in params["TagSpecifications"][0]["Tags"]}
        zone = zones.of({"NetworkInterface.1.SubnetId": params["NetworkInterfaces"][0]["SubnetId"]})
        market = params.get("InstanceMarketOptions", {}).get("MarketType", "on-demand")
        found.append((tags["rayrig:group"], params["InstanceType"], zone, market))
    return found


def spec_with(public_key: Path, zones: list[str] | None = None, **worker: Any) -> dict[str, Any]:
    data = base_spec(public_key)
    if zones:
        data["network"] = {"availability_zones": zones}
    if "instance_types" in worker:
        del data["workers"][0]["instance_type"]
    data["workers"][0].update(worker)
    return data


# --------------------------------------------------------------------------- zones


def test_no_capacity_in_the_first_zone_brings_the_cluster_up_in_the_second(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    client: Any,
    inject: Injector,
    calls: Calls,
    capsys: pytest.CaptureFixture[str],
) -> None:
    zones = Zones(client)
    # AWS answers a capacity refusal with HTTP 500, which botocore retries with the same token first.
    inject.fail(
        "RunInstances",
        "InsufficientInstanceCapacity",
        CAPACITY_MESSAGE,
        status=500,
        when=lambda p: zones.of(p) == "us-east-1a",
    )

    bring_up(write_spec(spec_with(keys[0], ["us-east-1a", "us-east-1b"])), no_ssh)

    assert sorted(where(i) for i in live_instances(client)) == [
        ("gpu", "g5.12xlarge", "us-east-1b", "spot"),
        ("gpu", "g5.12xlarge", "us-east-1b", "spot"),
        ("head", "m5.2xlarge", "us-east-1b", "on-demand"),
    ]
    # The head tried a, then b; the workers went where the head is, and never tried a.
    assert launches(calls, zones) == [
        ("head", "m5.2xlarge", "us-east-1a", "on-demand"),
        ("head", "m5.2xlarge", "us-east-1b", "on-demand"),
        ("gpu", "g5.12xlarge", "us-east-1b", "spot"),
        ("gpu", "g5.12xlarge", "us-east-1b", "spot"),
    ]
    tokens = [p["ClientToken"] for p in calls.params("RunInstances")]
    assert len(set(tokens)) == 4  # the second zone is a new request, not the first one's answer
    out = capsys.readouterr().out
    assert (
        "head slot 0: no capacity for m5.2xlarge on-demand in us-east-1a (InsufficientInstanceCapacity); "
        "trying m5.2xlarge on-demand in us-east-1b" in out
    )
    assert "  no capacity: head slot 0: m5.2xlarge on-demand in us-east-1a (InsufficientInstanceCapacity)" in out
    assert "  chosen: head: 1 x m5.2xlarge on-demand in us-east-1b; gpu: 2 x g5.12xlarge spot in us-east-1b" in out


def test_a_re_run_reuses_every_subnet_and_down_deletes_them_all(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    client: Any,
    inject: Injector,
    calls: Calls,
    capsys: pytest.CaptureFixture[str],
) -> None:
    zones = Zones(client)
    inject.fail("RunInstances", "InsufficientInstanceCapacity", when=lambda p: zones.of(p) == "us-east-1a")
    path = write_spec(spec_with(keys[0], ["us-east-1a", "us-east-1b"]))
    bring_up(path, no_ssh)
    made = subnets_of(client)
    assert sorted(made) == ["us-east-1a", "us-east-1b"]  # one per zone a launch tried
    rtb = client.describe_route_tables(Filters=[{"Name": "tag:rayrig:cluster", "Values": ["sprint42"]}])
    associated = {a["SubnetId"] for a in rtb["RouteTables"][0]["Associations"] if not a.get("Main")}
    assert associated == set(made.values())  # each subnet routes through the internet gateway
    out = capsys.readouterr().out
    assert "create  a /20 subnet of 10.42.0.0/16 in each zone a launch tries, as needed: us-east-1a, us-east-1b" in out
    assert (
        "created subnet (10.42.0.0/20 in us-east-1a)" in out and "created subnet (10.42.16.0/20 in us-east-1b)" in out
    )
    inject.rules.clear()
    calls.clear()

    # Again, with one more zone listed: nothing is launched, so no subnet is made for it either.
    bring_up(write_spec(spec_with(keys[0], ["us-east-1a", "us-east-1b", "us-east-1c"])), no_ssh)

    assert calls.mutating() == []
    out = capsys.readouterr().out
    assert "Nothing to create: every resource of the cluster exists." in out
    for zone, subnet in made.items():
        assert "reuse   subnet 10.42." in out and f"in {zone} ({subnet})" in out
    assert run_cli("cloud", "down", "sprint42", "--yes") == 0
    assert subnets_of(client) == {}


def test_the_workers_of_a_placement_group_stay_in_its_zone(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    client: Any,
    inject: Injector,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The head lands in a; the first worker finds no g5 capacity there and lands in b.
    inject.fail(
        "RunInstances", "InsufficientInstanceCapacity", times=1, when=lambda p: p["InstanceType"] == "g5.12xlarge"
    )
    data = spec_with(keys[0], ["us-east-1a", "us-east-1b"])
    bring_up(write_spec(data), no_ssh)
    assert sorted(where(i)[:3] for i in live_instances(client)) == [
        ("gpu", "g5.12xlarge", "us-east-1b"),
        ("gpu", "g5.12xlarge", "us-east-1b"),
        ("head", "m5.2xlarge", "us-east-1a"),
    ]

    # A third worker: a has capacity again and holds the head, but the placement group is in b.
    data["workers"][0]["count"] = 3
    bring_up(write_spec(data), no_ssh)

    workers = [where(i) for i in live_instances(client) if where(i)[0] == "gpu"]
    assert {zone for _, _, zone, _ in workers} == {"us-east-1b"} and len(workers) == 3


def test_without_a_placement_group_a_new_worker_goes_to_the_first_zone_that_has_room(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, client: Any, inject: Injector
) -> None:
    # The same story as above without a placement group: nothing holds the workers to b.
    inject.fail(
        "RunInstances", "InsufficientInstanceCapacity", times=1, when=lambda p: p["InstanceType"] == "g5.12xlarge"
    )
    data = spec_with(keys[0], ["us-east-1a", "us-east-1b"])
    data["placement_group"] = False
    bring_up(write_spec(data), no_ssh)

    data["workers"][0]["count"] = 3
    bring_up(write_spec(data), no_ssh)

    workers = sorted(where(i)[2] for i in live_instances(client) if where(i)[0] == "gpu")
    assert workers == ["us-east-1a", "us-east-1b", "us-east-1b"]


def test_a_zone_the_region_lacks_is_refused_before_anything_is_created(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, calls: Calls
) -> None:
    path = write_spec(spec_with(keys[0], ["us-east-1a", "us-east-1z"]))

    with pytest.raises(ec2.CloudError, match=r"network\.availability_zones\[1\] = 'us-east-1z': expected an avail"):
        bring_up(path, no_ssh)
    assert calls.mutating() == []


# --------------------------------------------------------------------------- instance types


def test_no_capacity_for_the_first_type_launches_the_second_and_the_inventory_follows(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    client: Any,
    inject: Injector,
    calls: Calls,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    zones = Zones(client)
    inject.fail(
        "RunInstances",
        "InsufficientInstanceCapacity",
        CAPACITY_MESSAGE,
        when=lambda p: p["InstanceType"] == "g5.12xlarge",
    )
    data = spec_with(keys[0], ["us-east-1a", "us-east-1b"], instance_types=["g5.12xlarge", "g5.48xlarge"])

    bring_up(write_spec(data), no_ssh)

    # Each zone of the first type, then the second type, where the head is; the second worker
    # skips what was refused a moment ago and joins the first in the placement group's zone.
    assert [launch for launch in launches(calls, zones) if launch[0] == "gpu"] == [
        ("gpu", "g5.12xlarge", "us-east-1a", "spot"),
        ("gpu", "g5.12xlarge", "us-east-1b", "spot"),
        ("gpu", "g5.48xlarge", "us-east-1a", "spot"),
        ("gpu", "g5.48xlarge", "us-east-1a", "spot"),
    ]
    out = capsys.readouterr().out
    assert "launching 2 for gpu: g5.12xlarge, else g5.48xlarge spot; in us-east-1a, else us-east-1b" in out
    assert "gpu: 2 x g5.12xlarge, else g5.48xlarge spot, 200 GB" in out  # the plan
    assert "  chosen: head: 1 x m5.2xlarge on-demand in us-east-1a; gpu: 2 x g5.48xlarge spot in us-east-1a" in out

    # The state and the inventory know the type that launched: 8 GPUs on a g5.48xlarge, not 4.
    state = json.loads((tmp_path / "state" / "ec2" / "sprint42.json").read_text())
    assert sorted((i["group"], i["instance_type"], i["zone"], i["market"]) for i in state["instances"]) == [
        ("gpu", "g5.48xlarge", "us-east-1a", "spot"),
        ("gpu", "g5.48xlarge", "us-east-1a", "spot"),
        ("head", "m5.2xlarge", "us-east-1a", "on-demand"),
    ]
    heads, workers = ec2.cluster_hosts("sprint42")
    assert [data["ray_num_gpus"] for _, data in workers] == [8, 8]
    assert heads[0][1]["ray_num_gpus"] == 0


def test_a_type_the_zone_does_not_offer_is_passed_over(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    client: Any,
    inject: Injector,
    capsys: pytest.CaptureFixture[str],
) -> None:
    inject.fail(
        "RunInstances",
        "Unsupported",
        "Your requested instance type (g6e.12xlarge) is not supported in your requested Availability Zone.",
        when=lambda p: p["InstanceType"] == "g6e.12xlarge",
    )
    data = spec_with(keys[0], ["us-east-1a"], instance_types=["g6e.12xlarge", "g5.12xlarge"])

    bring_up(write_spec(data), no_ssh)

    assert {where(i)[1] for i in live_instances(client) if where(i)[0] == "gpu"} == {"g5.12xlarge"}
    assert (
        "gpu slot 0: no capacity for g6e.12xlarge spot in us-east-1a (Unsupported: Your requested instance type "
        "(g6e.12xlarge) is not supported in your requested Availability Zone.); trying g5.12xlarge spot in us-east-1a"
    ) in capsys.readouterr().out


# --------------------------------------------------------------------------- spot and on-demand


def test_a_spot_group_never_launches_on_demand_without_spot_fallback(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    client: Any,
    inject: Injector,
    calls: Calls,
    placement_groups: PlacementGroups,
) -> None:
    spot = "InstanceMarketOptions.MarketType"
    inject.fail("RunInstances", "InsufficientInstanceCapacity", when=lambda p: p.get(spot) == "spot")
    before = {s["SubnetId"] for s in client.describe_subnets()["Subnets"]}

    with pytest.raises(ec2.CloudError) as caught:
        bring_up(write_spec(spec_with(keys[0], ["us-east-1a", "us-east-1b"])), no_ssh)

    markets = [p.get("InstanceMarketOptions", {}).get("MarketType", "on-demand") for p in calls.params("RunInstances")]
    assert markets == ["on-demand", "spot", "spot"]  # the head, then the workers in each zone: spot only
    message = str(caught.value)
    assert 'spot_fallback = "on-demand" to gpu' in message and "removed what this run created" in message
    assert live_instances(client) == [] and placement_groups.groups == {}
    assert {s["SubnetId"] for s in client.describe_subnets()["Subnets"]} == before


def test_spot_fallback_launches_on_demand_once_every_spot_option_is_refused(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    client: Any,
    inject: Injector,
    calls: Calls,
    capsys: pytest.CaptureFixture[str],
) -> None:
    zones = Zones(client)
    spot = "InstanceMarketOptions.MarketType"
    inject.fail("RunInstances", "InsufficientInstanceCapacity", when=lambda p: p.get(spot) == "spot")
    data = spec_with(
        keys[0], ["us-east-1a", "us-east-1b"], instance_types=["g5.12xlarge", "g5.24xlarge"], spot_fallback="on-demand"
    )

    bring_up(write_spec(data), no_ssh)

    assert [launch for launch in launches(calls, zones) if launch[0] == "gpu"] == [
        ("gpu", "g5.12xlarge", "us-east-1a", "spot"),
        ("gpu", "g5.12xlarge", "us-east-1b", "spot"),
        ("gpu", "g5.24xlarge", "us-east-1a", "spot"),
        ("gpu", "g5.24xlarge", "us-east-1b", "spot"),
        ("gpu", "g5.12xlarge", "us-east-1a", "on-demand"),
        ("gpu", "g5.12xlarge", "us-east-1a", "on-demand"),
    ]
    assert sorted(where(i) for i in live_instances(client) if where(i)[0] == "gpu") == [
        ("gpu", "g5.12xlarge", "us-east-1a", "on-demand"),
        ("gpu", "g5.12xlarge", "us-east-1a", "on-demand"),
    ]
    assert "gpu: 2 x g5.12xlarge on-demand in us-east-1a" in capsys.readouterr().out


# --------------------------------------------------------------------------- every option refused


def test_when_every_option_is_refused_nothing_tagged_is_left_and_the_error_lists_every_attempt(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    client: Any,
    inject: Injector,
    placement_groups: PlacementGroups,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    before_subnets = {s["SubnetId"] for s in client.describe_subnets()["Subnets"]}
    inject.fail(
        "RunInstances",
        "InsufficientInstanceCapacity",
        CAPACITY_MESSAGE,
        status=500,
        when=lambda p: p["InstanceType"] != "m5.2xlarge",  # the head launches, no worker does
    )
    data = spec_with(keys[0], ["us-east-1a", "us-east-1b"], instance_types=["g5.12xlarge", "g6e.12xlarge"])

    with pytest.raises(ec2.CloudError) as caught:
        bring_up(write_spec(data), no_ssh)

    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("AWS has no capacity for gpu slot 0 in us-east-1 right now: tried ")
    for option in (
        "g5.12xlarge spot in us-east-1a",
        "g5.12xlarge spot in us-east-1b",
        "g6e.12xlarge spot in us-east-1a",
        "g6e.12xlarge spot in us-east-1b",
    ):
        assert f"gpu slot 0: {option} (InsufficientInstanceCapacity)" in message
    assert "removed what this run created" in message
    out = capsys.readouterr().out
    assert "created head instance" in out and "no option left" in out
    flt = [{"Name": "tag:rayrig:cluster", "Values": ["sprint42"]}]
    assert live_instances(client) == []
    assert client.describe_subnets(Filters=flt)["Subnets"] == []
    assert client.describe_vpcs(Filters=flt)["Vpcs"] == []
    assert client.describe_security_groups(Filters=flt)["SecurityGroups"] == []
    assert {s["SubnetId"] for s in client.describe_subnets()["Subnets"]} == before_subnets
    assert placement_groups.groups == {}
    assert not (tmp_path / "state" / "ec2" / "sprint42.json").exists()


# --------------------------------------------------------------------------- idempotency


def test_a_re_run_after_a_crash_finds_the_instance_a_later_option_launched(
    write_spec: Callable[..., Path],
    keys: tuple[Path, Path],
    no_ssh: Any,
    client: Any,
    inject: Injector,
    calls: Calls,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    zones = Zones(client)
    inject.fail("RunInstances", "InsufficientInstanceCapacity", when=lambda p: zones.of(p) == "us-east-1a")
    path = write_spec(spec_with(keys[0], ["us-east-1a", "us-east-1b"]))

    def crash(build: Any) -> Any:
        raise SystemExit("the machine running up went away")  # no roll-back: what was launched stays

    with monkeypatch.context() as patch:
        patch.setattr(ec2_apply, "wait_running", crash)
        with pytest.raises(SystemExit):
            bring_up(path, no_ssh)
    first = sorted(i["InstanceId"] for i in live_instances(client))
    assert len(first) == 3
    inject.rules.clear()  # a has capacity again: still, nothing is launched twice
    calls.clear()

    bring_up(path, no_ssh)

    assert calls.params("RunInstances") == []
    assert sorted(i["InstanceId"] for i in live_instances(client)) == first


# --------------------------------------------------------------------------- place(), without AWS


def _capacity_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "no"}}, "RunInstances")


@pytest.mark.parametrize("code", sorted(CAPACITY_CODES))
def test_every_capacity_code_moves_on_to_the_next_option(code: str) -> None:
    group = GroupSpec("gpu", "worker", "g5.12xlarge", 1)
    first, second = Option("g5.12xlarge", "us-east-1a", "on-demand"), Option("g5.12xlarge", "us-east-1b", "on-demand")
    tried: list[Option] = []

    def launch(option: Option) -> tuple[dict[str, Any], bool]:
        tried.append(option)
        if option == first:
            raise _capacity_error(code)
        return {
            "InstanceId": "i-1",
            "InstanceType": option.instance_type,
            "Placement": {"AvailabilityZone": "us-east-1b"},
        }, True

    said: list[str] = []
    instance, ours = place(group, 0, [first, second], launch, Tries("us-east-1"), said.append)

    assert tried == [first, second] and instance["InstanceId"] == "i-1" and ours
    why = f"{code}: no" if code == "Unsupported" else code  # what is not offered is in Unsupported's message
    assert said == [f"  gpu slot 0: no capacity for {first} ({why}); trying {second}"]


@pytest.mark.parametrize("code", ["VcpuLimitExceeded", "InvalidParameterValue", "UnauthorizedOperation"])
def test_an_error_that_is_not_about_capacity_ends_the_run_at_once(code: str) -> None:
    group = GroupSpec("gpu", "worker", "g5.12xlarge", 1)
    options = [Option("g5.12xlarge", z, "on-demand") for z in ("us-east-1a", "us-east-1b")]
    tried: list[Option] = []

    def launch(option: Option) -> tuple[dict[str, Any], bool]:
        tried.append(option)
        raise _capacity_error(code)

    with pytest.raises(ClientError):
        place(group, 0, options, launch, Tries("us-east-1"), lambda line: None)
    assert tried == options[:1]


def test_no_option_left_names_every_attempt_and_what_to_change() -> None:
    group = GroupSpec("gpu", "worker", "g5.12xlarge", 2, market="spot")
    options = [Option("g5.12xlarge", "us-east-1a", "spot")]
    tries = Tries("us-east-1")

    def launch(option: Option) -> tuple[dict[str, Any], bool]:
        raise _capacity_error("InsufficientInstanceCapacity")

    with pytest.raises(NoCapacity):
        place(group, 0, options, launch, tries, lambda line: None)
    with pytest.raises(NoCapacity) as caught:  # the next slot does not ask again for what was just refused
        place(group, 1, options, launch, tries, lambda line: None)

    assert str(caught.value) == (
        "AWS has no capacity for gpu slot 1 in us-east-1 right now: tried gpu slot 0: g5.12xlarge spot in "
        "us-east-1a (InsufficientInstanceCapacity) (an option refused once is not asked for again); retry later, "
        "or add availability zones (network.availability_zones), instance types (instance_types of gpu), "
        'spot_fallback = "on-demand" to gpu'
    )
