"""What instances cost: on-demand prices from the AWS Pricing API, spot prices from EC2's spot price history.

A ``PriceBook`` looks each price up once per run, for the cluster's region
(and zones, for spot), with clients that give up within seconds. When a lookup
fails, the rate comes from rayrig's offline table (``instance_types.py``, on-demand
only; spot is then priced at the on-demand rate, an upper bound), and the book
keeps one line saying which lookup failed and why (``notices``), which the
command prints. After one failure of an API the book asks it nothing more.

The arithmetic is here too: what running instances cost per hour and since
each one's launch (``cost_of``), and how a run time reads (``span``).

>>> book = PriceBook(connect("us-east-1"))  # doctest: +SKIP
>>> book.rate("g5.12xlarge", "spot", ["us-east-1a"])  # doctest: +SKIP
Rate(usd_per_hour=2.1437, source='spot price history')
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from cloud.ec2 import instance_types
from cloud.ec2.aws import TAG_CREATED_AT, Aws, CloudError, aws_step, parse_time, tags_of

#: The Pricing API answers in us-east-1 (and ap-south-1, eu-central-1) only, for every region's prices.
PRICING_REGION = "us-east-1"

ON_DEMAND_SOURCE = "AWS Pricing"
SPOT_SOURCE = "spot price history"
TABLE_SOURCE = "offline table"

#: What GetProducts must match besides the instance type and region: Linux on shared hosts, nothing
#: preinstalled, capacity that is used (not an idle reservation).
PRODUCT_FILTERS = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
}


class Rate(NamedTuple):
    """An hourly price in USD (None: unknown) and where it comes from."""

    usd_per_hour: float | None
    source: str


@dataclass(frozen=True)
class Running:
    """One pending or running instance, as its cost is worked out."""

    instance_id: str
    instance_type: str
    market: str  # "on-demand" or "spot"
    zone: str | None
    launched: dt.datetime | None
    created_at: dt.datetime | None = None  # the cluster's rayrig:created-at, as the instance carries it


def running_of(instance: Mapping[str, Any]) -> Running:
    """A described EC2 instance as a ``Running``."""
    return Running(
        instance_id=instance["InstanceId"],
        instance_type=instance["InstanceType"],
        market="spot" if instance.get("InstanceLifecycle") == "spot" else "on-demand",
        zone=(instance.get("Placement") or {}).get("AvailabilityZone"),
        launched=instance.get("LaunchTime"),
        created_at=parse_time(tags_of(instance).get(TAG_CREATED_AT)),
    )


@dataclass
class Cost:
    """What instances cost: per hour now, and since each one's launch (instances only: no volumes, no traffic)."""

    hourly_usd: float = 0.0
    so_far_usd: float = 0.0
    instances: int = 0
    unpriced: list[str] = field(default_factory=list)  # instance types of unknown price
    sources: list[str] = field(default_factory=list)  # where the rates came from


def hours(start: dt.datetime | None, now: dt.datetime) -> float:
    """The hours from ``start`` to ``now`` (0 when ``start`` is unknown or later).

    >>> t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    >>> hours(t0, t0 + dt.timedelta(minutes=90))
    1.5
    """
    if start is None:
        return 0.0
    return max(0.0, (now - start).total_seconds() / 3600)


def cost_of(instances: Iterable[Running], rate: Callable[[Running], Rate], now: dt.datetime) -> Cost:
    """The summed hourly rate of ``instances`` and their cost since each one's launch, at ``rate``.

    >>> t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    >>> two = [Running("i-1", "m5.2xlarge", "on-demand", "us-east-1a", t0),
    ...        Running("i-2", "g5.xlarge", "spot", "us-east-1a", t0 + dt.timedelta(hours=1))]
    >>> cost = cost_of(two, lambda r: Rate(0.4 if r.market == "on-demand" else 0.3, "x"), t0 + dt.timedelta(hours=3))
    >>> round(cost.hourly_usd, 3), round(cost.so_far_usd, 3)
    (0.7, 1.8)
    """
    cost = Cost()
    unpriced: set[str] = set()
    sources: set[str] = set()
    for instance in instances:
        cost.instances += 1
        price = rate(instance)
        sources.add(price.source)
        if price.usd_per_hour is None:
            unpriced.add(instance.instance_type)
            continue
        cost.hourly_usd += price.usd_per_hour
        cost.so_far_usd += price.usd_per_hour * hours(instance.launched, now)
    cost.unpriced, cost.sources = sorted(unpriced), sorted(sources)
    return cost


def span(delta: dt.timedelta) -> str:
    """A run time as ``ls`` and ``down`` show it: ``2h05m``, ``3d04h``.

    >>> span(dt.timedelta(hours=2, minutes=5, seconds=59)), span(dt.timedelta(days=3, hours=4, minutes=30))
    ('2h05m', '3d04h')
    """
    seconds = max(0, int(delta.total_seconds()))
    days, rest = divmod(seconds, 86400)
    return f"{days}d{rest // 3600:02d}h" if days else f"{rest // 3600}h{rest % 3600 // 60:02d}m"


def usd(amount: float) -> str:
    """``amount`` as dollars and cents: ``$1,234.57``."""
    return f"${amount:,.2f}"


def on_demand_usd(price_list: Iterable[str | Mapping[str, Any]]) -> float | None:
    """The hourly USD price in a GetProducts ``PriceList`` (each item a JSON text), or None when it has none.

    Several matching products would be an ambiguity the filters should exclude; the highest price wins then.
    """
    found: list[float] = []
    for item in price_list:
        product = json.loads(item) if isinstance(item, str) else item
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dimension in term.get("priceDimensions", {}).values():
                usd_text = dimension.get("pricePerUnit", {}).get("USD")
                if dimension.get("unit") == "Hrs" and usd_text is not None and float(usd_text) > 0:
                    found.append(float(usd_text))
    return max(found) if found else None


def latest_spot_by_zone(history: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The latest spot price in each zone of a DescribeSpotPriceHistory answer, by zone."""
    latest: dict[str, tuple[dt.datetime, float]] = {}
    for entry in history:
        zone, when, price = entry["AvailabilityZone"], entry["Timestamp"], float(entry["SpotPrice"])
        if zone not in latest or when > latest[zone][0]:
            latest[zone] = (when, price)
    return {zone: price for zone, (_, price) in sorted(latest.items())}


class PriceBook:
    """The prices of one run in one region: each looked up once, the offline table when a lookup fails."""

    def __init__(self, aws: Aws) -> None:
        self.aws = aws
        self.region = aws.region
        self.notices: list[str] = []  # one line per failed lookup, for the command to print
        self._on_demand: dict[str, Rate] = {}
        self._spot: dict[tuple[str, tuple[str, ...]], dict[str, float] | None] = {}
        self._failed: set[str] = set()  # the APIs that failed once in this run: not asked again

    def rate(self, instance_type: str, market: str, zones: Sequence[str] = ()) -> Rate:
        """The hourly rate of one ``instance_type`` instance in ``market``; a spot rate is the highest in
        ``zones`` (every zone of the region when empty: AWS may place the instance in any)."""
        return self.spot(instance_type, zones) if market == "spot" else self.on_demand(instance_type)

    def instance_rate(self, instance: Running) -> Rate:
        """The hourly rate of a running instance, in its own market and zone."""
        return self.rate(instance.instance_type, instance.market, [instance.zone] if instance.zone else [])

    def on_demand(self, instance_type: str) -> Rate:
        """The Linux on-demand rate from the Pricing API, else from the offline table."""
        if instance_type not in self._on_demand:
            self._on_demand[instance_type] = self._look_up_on_demand(instance_type)
        return self._on_demand[instance_type]

    def spot(self, instance_type: str, zones: Sequence[str] = ()) -> Rate:
        """The latest Linux spot price (highest of ``zones``), else the on-demand rate as an upper bound."""
        key = (instance_type, tuple(sorted(set(zones))))
        if key not in self._spot:
            self._spot[key] = self._look_up_spot(instance_type, key[1])
        by_zone = self._spot[key]
        if by_zone:
            return Rate(max(by_zone.values()), SPOT_SOURCE)
        upper = self.on_demand(instance_type)
        if upper.usd_per_hour is None:
            return upper
        return Rate(upper.usd_per_hour, f"{upper.source}, on-demand rate as an upper bound")

    def _look_up_on_demand(self, instance_type: str) -> Rate:
        if "pricing" not in self._failed:
            filters = {"instanceType": instance_type, "regionCode": self.region, **PRODUCT_FILTERS}
            doing = f"asking the AWS Pricing API for the on-demand price of {instance_type} in {self.region}"
            try:
                with aws_step(doing, PRICING_REGION):
                    answer = self.aws.client("pricing", region=PRICING_REGION, quick=True).get_products(
                        ServiceCode="AmazonEC2",
                        Filters=[{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()],
                        FormatVersion="aws_v1",
                        MaxResults=10,
                    )
                found = on_demand_usd(answer.get("PriceList", []))
            except CloudError as exc:
                self._fail("pricing", f"prices: {exc}; on-demand rates below are from the {TABLE_SOURCE} "
                                      f"({instance_types.PRICE_NOTE})")  # fmt: skip
            except (ValueError, TypeError, AttributeError) as exc:
                self._fail("pricing", f"prices: {doing}: the answer is not a price list ({exc}); on-demand rates "
                                      f"below are from the {TABLE_SOURCE} ({instance_types.PRICE_NOTE})")  # fmt: skip
            else:
                if found is not None:
                    return Rate(found, ON_DEMAND_SOURCE)
                self.notices.append(
                    f"prices: the AWS Pricing API lists no Linux on-demand price of {instance_type} in {self.region}; "
                    f"its rate is from the {TABLE_SOURCE} ({instance_types.PRICE_NOTE})"
                )
        return Rate(instance_types.hourly_usd(instance_type), TABLE_SOURCE)

    def _look_up_spot(self, instance_type: str, zones: tuple[str, ...]) -> dict[str, float] | None:
        if "spot" in self._failed:
            return None
        where = f"{', '.join(zones)}" if zones else self.region
        doing = f"reading the spot price history of {instance_type} in {where}"
        try:
            in_zones = {"Filters": [{"Name": "availability-zone", "Values": list(zones)}]} if zones else {}
            with aws_step(doing, self.region):
                answer = self.aws.client("ec2", quick=True).describe_spot_price_history(
                    InstanceTypes=[instance_type],
                    ProductDescriptions=["Linux/UNIX"],
                    StartTime=dt.datetime.now(dt.timezone.utc),  # answers the price in effect then, per zone
                    MaxResults=1000,
                    **in_zones,
                )
            by_zone = latest_spot_by_zone(answer.get("SpotPriceHistory", []))
        except CloudError as exc:
            self._fail("spot", f"prices: {exc}; spot instances are priced at their on-demand rate, an upper bound")
            return None
        except (ValueError, TypeError, KeyError) as exc:
            self._fail("spot", f"prices: {doing}: the answer is not a price history ({exc}); spot instances are "
                               "priced at their on-demand rate, an upper bound")  # fmt: skip
            return None
        if not by_zone:
            self.notices.append(
                f"prices: no spot price of {instance_type} in {where}; priced at its on-demand rate, an upper bound"
            )
        return by_zone

    def _fail(self, api: str, notice: str) -> None:
        self._failed.add(api)
        self.notices.append(notice)


def offline_rate(instance_type: str, market: str, zones: Sequence[str] = ()) -> Rate:
    """A rate from the offline table alone (spot at the on-demand rate), for work that asks AWS nothing."""
    rate = instance_types.hourly_usd(instance_type)
    return Rate(rate, TABLE_SOURCE if market != "spot" or rate is None else f"{TABLE_SOURCE}, on-demand rate")


def sources_text(sources: Iterable[str]) -> str:
    """Where rates came from, as one phrase: ``AWS Pricing, spot price history``."""
    return ", ".join(sorted(set(sources))) or "no instance"
