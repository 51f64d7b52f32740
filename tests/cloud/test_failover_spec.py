"""The spec keys of capacity failover: network.availability_zones, instance_types, spot_fallback.

Good values load (the one-zone and one-type keys are the one-element case); bad ones are
refused before any AWS call, each naming the file, the key, the value and what is expected.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cloud.ec2.spec import load_spec
from tests.cloud.conftest import assert_refused_before_any_aws_call, base_spec

pytestmark = pytest.mark.cloud


def test_zones_and_types_load_in_their_order(keys: tuple[Path, Path], write_spec: Callable[..., Path]) -> None:
    data = base_spec(keys[0], network={"availability_zones": ["us-east-1c", "us-east-1a"]})
    worker = data["workers"][0]
    del worker["instance_type"]
    worker.update(instance_types=["g5.12xlarge", "g6e.12xlarge", "g5.24xlarge"], spot_fallback="on-demand")

    spec = load_spec(write_spec(data))

    assert spec.network.zones == ("us-east-1c", "us-east-1a")
    assert spec.network.availability_zone == "us-east-1c"  # the first, for what reads the one-zone key
    gpu = spec.workers[0]
    assert gpu.preferences == ("g5.12xlarge", "g6e.12xlarge", "g5.24xlarge")
    assert gpu.instance_type == "g5.12xlarge" and gpu.market == "spot" and gpu.spot_fallback == "on-demand"


def test_the_one_zone_and_one_type_keys_are_the_one_element_case(
    keys: tuple[Path, Path], write_spec: Callable[..., Path]
) -> None:
    spec = load_spec(write_spec(base_spec(keys[0], network={"availability_zone": "us-east-1b"})))

    assert spec.network.zones == ("us-east-1b",)
    assert spec.head.preferences == ("m5.2xlarge",) and spec.workers[0].preferences == ("g5.12xlarge",)
    assert spec.workers[0].spot_fallback == "none"  # a spot group stays spot unless the spec says otherwise


def test_no_zone_leaves_the_choice_to_aws(keys: tuple[Path, Path], write_spec: Callable[..., Path]) -> None:
    assert load_spec(write_spec(base_spec(keys[0]))).network.zones == ()


def _network(**network: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        data["network"] = network

    return mutate


def _group(index: int | None, **changes: Any) -> Callable[[dict[str, Any]], None]:
    """Change the head (None) or workers[index]; a value of ... deletes the key."""

    def mutate(data: dict[str, Any]) -> None:
        group = data["head"] if index is None else data["workers"][index]
        for key, value in changes.items():
            if value is ...:
                del group[key]
            else:
                group[key] = value

    return mutate


def _second_worker_group(data: dict[str, Any]) -> None:
    extra = copy.deepcopy(data["workers"][0])
    extra.update(name="big", instance_types=["g5.48xlarge"])
    data["workers"].append(extra)


#: (id, mutation of a valid spec, fragments the error must contain: the key and what is expected)
BAD_SPECS: list[tuple[str, Callable[[dict[str, Any]], None], list[str]]] = [
    (
        "zone-of-another-region",
        _network(availability_zones=["us-east-1a", "eu-west-1b"]),
        ["network.availability_zones[1] = 'eu-west-1b'", "an availability zone of region us-east-1"],
    ),
    (
        "zones-empty",
        _network(availability_zones=[]),
        ["network.availability_zones = []", "a non-empty list of availability zones of the region"],
    ),
    (
        "zones-twice",
        _network(availability_zones=["us-east-1a", "us-east-1b", "us-east-1a"]),
        ["network.availability_zones = ['us-east-1a', 'us-east-1b', 'us-east-1a']", "each zone once (us-east-1a"],
    ),
    (
        "zone-not-a-zone",
        _network(availability_zones=["us-east-1a", "us-east-1"]),
        ["network.availability_zones[1] = 'us-east-1'", 'such as "us-east-1a"'],
    ),
    (
        "zones-not-a-list",
        _network(availability_zones="us-east-1a"),
        ["network.availability_zones = 'us-east-1a'", "a non-empty list of availability zones"],
    ),
    (
        "zone-and-zones",
        _network(availability_zone="us-east-1a", availability_zones=["us-east-1b"]),
        ["network.availability_zone = 'us-east-1a'", "no value next to network.availability_zones"],
    ),
    (
        "one-zone-of-another-region",
        _network(availability_zone="eu-west-1a"),
        ["network.availability_zone = 'eu-west-1a'", "an availability zone of region us-east-1"],
    ),
    (
        "zones-with-own-subnet",
        _network(
            vpc_id="vpc-0123456789abcdef0", subnet_id="subnet-0123456789abcdef0", availability_zones=["us-east-1a"]
        ),
        ["network.availability_zones = ['us-east-1a']", "applies only to a VPC that rayrig creates"],
    ),
    (
        "zones-without-room",
        _network(subnet_cidr="10.42.0.0/17", availability_zones=["us-east-1a", "us-east-1b", "us-east-1c"]),
        ["network.subnet_cidr = '10.42.0.0/17'", "one subnet of this size per availability zone", "room for 2"],
    ),
    (
        "type-and-types-worker",
        _group(0, instance_types=["g6e.12xlarge"]),
        ["workers[0].instance_type = 'g5.12xlarge'", "no value next to workers[0].instance_types in group 'gpu'"],
    ),
    (
        "type-and-types-head",
        _group(None, instance_types=["m5.xlarge"]),
        ["head.instance_type = 'm5.2xlarge'", "no value next to head.instance_types in group 'head'"],
    ),
    (
        "type-and-types-second-group",
        _second_worker_group,
        ["workers[1].instance_type = 'g5.12xlarge'", "in group 'big'"],
    ),
    (
        "types-empty",
        _group(0, instance_type=..., instance_types=[]),
        ["workers[0].instance_types = []", "a non-empty list of EC2 instance types"],
    ),
    (
        "types-twice",
        _group(0, instance_type=..., instance_types=["g5.12xlarge", "g6e.12xlarge", "g5.12xlarge"]),
        ["workers[0].instance_types = ['g5.12xlarge', 'g6e.12xlarge', 'g5.12xlarge']", "each instance type once"],
    ),
    (
        "types-bad-entry",
        _group(0, instance_type=..., instance_types=["g5.12xlarge", "g6e 12xlarge"]),
        ["workers[0].instance_types[1] = 'g6e 12xlarge'", 'an EC2 instance type such as "g5.12xlarge"'],
    ),
    (
        "no-type",
        _group(0, instance_type=...),
        ["workers[0].instance_type: missing", "or instance_types, a list of them"],
    ),
    (
        "no-head-type",
        _group(None, instance_type=...),
        ["head.instance_type: missing", "or instance_types"],
    ),
    (
        "fallback-unknown",
        _group(0, spot_fallback="always"),
        ["workers[0].spot_fallback = 'always'", '"none" (a spot group stays spot) or "on-demand"'],
    ),
    (
        "fallback-on-demand-group",
        _group(None, spot_fallback="on-demand"),
        ["head.spot_fallback = 'on-demand'", 'no value unless market = "spot"'],
    ),
]


@pytest.mark.parametrize(("mutate", "fragments"), [(m, f) for _, m, f in BAD_SPECS], ids=[i for i, _, _ in BAD_SPECS])
def test_a_bad_failover_key_is_refused_before_any_aws_call(
    mutate: Callable[[dict[str, Any]], None],
    fragments: list[str],
    keys: tuple[Path, Path],
    write_spec: Callable[..., Path],
    no_aws: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = base_spec(keys[0])
    mutate(data)
    assert_refused_before_any_aws_call(write_spec(data), fragments, capsys)
    assert no_aws == []
