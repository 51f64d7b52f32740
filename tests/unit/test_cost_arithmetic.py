"""What a cluster costs, worked out: hours since each launch x each rate, AWS's price lists read, run times shown."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from cloud.ec2.pricing import (
    Rate,
    Running,
    cost_of,
    hours,
    latest_spot_by_zone,
    offline_rate,
    on_demand_usd,
    running_of,
    span,
    usd,
)

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
RECORDED = Path(__file__).parents[1] / "cloud" / "recorded" / "pricing_get_products.json"


def at(**delta: float) -> dt.datetime:
    return T0 + dt.timedelta(**delta)


def test_hours_since_a_launch() -> None:
    assert hours(T0, at(minutes=90)) == 1.5
    assert hours(None, at(hours=5)) == 0.0  # unknown launch: nothing counted
    assert hours(at(hours=1), T0) == 0.0  # a clock behind the launch: never negative


def test_cost_so_far_is_each_instances_hours_times_its_own_rate() -> None:
    instances = [
        Running("i-head", "m5.2xlarge", "on-demand", "us-east-1a", T0),
        Running("i-w1", "g5.12xlarge", "spot", "us-east-1a", at(hours=1)),
        Running("i-w2", "g5.12xlarge", "spot", "us-east-1b", at(hours=2)),
        Running("i-new", "x9.new", "on-demand", "us-east-1a", T0),
    ]
    rates = {
        ("m5.2xlarge", "us-east-1a"): Rate(0.384, "AWS Pricing"),
        ("g5.12xlarge", "us-east-1a"): Rate(2.0, "spot price history"),
        ("g5.12xlarge", "us-east-1b"): Rate(3.0, "spot price history"),
        ("x9.new", "us-east-1a"): Rate(None, "offline table"),
    }

    cost = cost_of(instances, lambda r: rates[r.instance_type, r.zone], at(hours=4))

    assert cost.hourly_usd == pytest.approx(0.384 + 2.0 + 3.0)
    assert cost.so_far_usd == pytest.approx(4 * 0.384 + 3 * 2.0 + 2 * 3.0)
    assert cost.instances == 4 and cost.unpriced == ["x9.new"]
    assert cost.sources == ["AWS Pricing", "offline table", "spot price history"]


def test_run_times_and_dollars_as_shown() -> None:
    assert span(dt.timedelta(minutes=59, seconds=59)) == "0h59m"
    assert span(dt.timedelta(hours=26, minutes=30)) == "1d02h"
    assert span(dt.timedelta(seconds=-5)) == "0h00m"
    assert usd(1234.565) == "$1,234.57" and usd(0.00002) == "$0.00"


def test_the_on_demand_price_is_read_from_the_on_demand_term_only() -> None:
    (g5,) = [
        p for p in json.loads(RECORDED.read_text())["PriceList"]
        if p["product"]["attributes"]["instanceType"] == "g5.12xlarge"
    ]  # fmt: skip
    assert "Reserved" in g5["terms"]  # a 1-year rate of 3.573/h, lower, which must not be taken
    assert on_demand_usd([json.dumps(g5)]) == 5.672  # as AWS sends it: each product a JSON text
    assert on_demand_usd([g5]) == 5.672
    assert on_demand_usd([]) is None
    reserved_only = {**g5, "terms": {"Reserved": g5["terms"]["Reserved"]}}
    assert on_demand_usd([json.dumps(reserved_only)]) is None


def test_a_zero_or_non_hourly_price_is_no_price() -> None:
    def product(unit: str, price: str) -> str:
        dimension = {"unit": unit, "pricePerUnit": {"USD": price}}
        return json.dumps({"terms": {"OnDemand": {"T": {"priceDimensions": {"D": dimension}}}}})

    assert on_demand_usd([product("Hrs", "0.0000000000")]) is None
    assert on_demand_usd([product("Quantity", "12.0")]) is None
    assert on_demand_usd([product("Hrs", "0.5"), product("Hrs", "0.7")]) == 0.7  # ambiguous: the higher


def test_the_latest_spot_price_per_zone_wins_not_the_highest() -> None:
    history = [
        {"AvailabilityZone": "us-east-1a", "SpotPrice": "2.5", "Timestamp": at(hours=-3)},
        {"AvailabilityZone": "us-east-1a", "SpotPrice": "1.9", "Timestamp": at(hours=-1)},
        {"AvailabilityZone": "us-east-1b", "SpotPrice": "2.1", "Timestamp": at(hours=-2)},
    ]
    assert latest_spot_by_zone(history) == {"us-east-1a": 1.9, "us-east-1b": 2.1}
    assert latest_spot_by_zone([]) == {}


def test_a_described_instance_is_priced_in_its_market_and_zone() -> None:
    spot = running_of(
        {
            "InstanceId": "i-1",
            "InstanceType": "g5.xlarge",
            "InstanceLifecycle": "spot",
            "Placement": {"AvailabilityZone": "eu-west-1b"},
            "LaunchTime": at(hours=1),
            "Tags": [{"Key": "rayrig:created-at", "Value": "2026-03-01T12:00:00Z"}],
        }
    )
    assert (spot.market, spot.zone, spot.launched, spot.created_at) == ("spot", "eu-west-1b", at(hours=1), T0)
    plain = running_of({"InstanceId": "i-2", "InstanceType": "m5.large"})
    assert (plain.market, plain.zone, plain.launched, plain.created_at) == ("on-demand", None, None, None)


def test_the_offline_table_alone() -> None:
    assert offline_rate("g5.12xlarge", "on-demand") == Rate(5.672, "offline table")
    assert offline_rate("g5.12xlarge", "spot") == Rate(5.672, "offline table, on-demand rate")
    assert offline_rate("x9.new", "spot") == Rate(None, "offline table")
