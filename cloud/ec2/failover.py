"""Capacity failover for ``rayrig cloud up``: where to try each instance, in which order, and what was tried.

GPU capacity is scarce: AWS may refuse a launch for want of capacity for one
instance type in one zone (``CAPACITY_CODES``). Rather than give up, each slot
of a group tries its options in order until one launches:

- the group's market first (spot or on-demand); a spot group with
  ``spot_fallback = "on-demand"`` tries every option again on-demand once no
  spot option is left, and only then;
- within a market, each instance type in order of preference, and for each
  type each zone of ``network.availability_zones``, zones that already hold an
  instance of the cluster first (a cluster in one zone pays no cross-zone
  traffic);
- the workers of a cluster placement group, which lives in one zone, try only
  the zone of the first worker that launched.

An option refused once is not tried again in the same run. Each refusal is
said as it happens; ``Tries.summary`` says what was tried and what was chosen,
and when a slot has no option left, ``NoCapacity`` lists every attempt.

>>> gpu = GroupSpec("gpu", "worker", "g5.12xlarge", 2, instance_types=("g5.12xlarge", "g6e.12xlarge"))
>>> [str(o) for o in options(gpu, ["us-east-1a", "us-east-1b"])]  # doctest: +NORMALIZE_WHITESPACE
['g5.12xlarge on-demand in us-east-1a', 'g5.12xlarge on-demand in us-east-1b',
 'g6e.12xlarge on-demand in us-east-1a', 'g6e.12xlarge on-demand in us-east-1b']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from cloud.ec2.aws import Aws, CloudError, Progress, aws_step, error_code
from cloud.ec2.spec import ClusterSpec, GroupSpec

#: What RunInstances answers when AWS lacks the capacity for one option (type, zone, market), but
#: another option may launch: the capacity errors proper, a type not offered in the zone
#: (``Unsupported``), and spot's own refusals (which on-demand does not meet).
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientSpotInstanceCapacity",
        "UnfulfillableCapacity",
        "Unsupported",
        "SpotMaxPriceTooLow",
        "MaxSpotInstanceCountExceeded",
        "InsufficientFreeAddressesInSubnet",
    }
)


@dataclass(frozen=True)
class Option:
    """One place to launch an instance: its type, zone and market."""

    instance_type: str
    zone: str
    market: str

    def __str__(self) -> str:
        return f"{self.instance_type} {self.market} in {self.zone}"


def option_of(instance: Mapping[str, Any]) -> Option:
    """Where a described instance actually runs."""
    market = "spot" if instance.get("InstanceLifecycle") == "spot" else "on-demand"
    return Option(instance["InstanceType"], instance.get("Placement", {}).get("AvailabilityZone", "?"), market)


def markets(group: GroupSpec) -> tuple[str, ...]:
    """The markets a group may launch in, in order: on-demand after spot only with ``spot_fallback``."""
    if group.spot and group.spot_fallback == "on-demand":
        return ("spot", "on-demand")
    return (group.market,)


def options(
    group: GroupSpec, zones: Sequence[str], *, holding: Iterable[str] = (), only: str | None = None
) -> list[Option]:
    """Where one instance of ``group`` may go, in the order to try: market, then type, then zone.

    Zones in ``holding`` (those that already hold the cluster's instances) come first, in
    ``zones``' order; ``only`` restricts the zones to one (a placement group's).
    """
    held = set(holding)
    order = [only] if only else [z for z in zones if z in held] + [z for z in zones if z not in held]
    return [Option(t, z, m) for m in markets(group) for t in group.preferences for z in order]


def choices_text(group: GroupSpec, zones: Sequence[str]) -> str:
    """A group's options as the plan shows them: ``g5.12xlarge spot, else g6e.12xlarge; in us-east-1a, else ...``."""
    text = f"{', else '.join(group.preferences)} {group.market}"
    if markets(group) != (group.market,):
        text += ", else on-demand"
    if zones:
        text += f"; in {', else '.join(zones)}"
    return text


@dataclass(frozen=True)
class Attempt:
    """One launch tried: the group's slot, the option, and AWS's error code ('' when it launched)."""

    group: str
    slot: int
    option: Option
    code: str = ""

    def __str__(self) -> str:
        return f"{self.group} slot {self.slot}: {self.option}" + (f" ({self.code})" if self.code else "")


class NoCapacity(CloudError):
    """Every option of a slot was refused for want of capacity; the message lists every attempt."""


@dataclass
class Tries:
    """What a run tried and where its instances went."""

    region: str
    refused: list[Attempt] = field(default_factory=list)
    placed: list[Attempt] = field(default_factory=list)

    def was_refused(self, option: Option) -> bool:
        """Whether ``option`` was refused earlier in this run (it is not tried again)."""
        return any(a.option == option for a in self.refused)

    def zones(self, role: str | None = None, roles: Mapping[str, str] | None = None) -> list[str]:
        """The zones this run placed instances in (of groups with ``role``, given each group's role)."""
        return [a.option.zone for a in self.placed if role is None or (roles or {}).get(a.group) == role]

    def summary(self) -> list[str]:
        """What was tried without capacity, and what was chosen for each group."""
        lines = [f"  no capacity: {attempt}" for attempt in self.refused]
        chosen: dict[tuple[str, Option], int] = {}
        for attempt in self.placed:
            chosen[attempt.group, attempt.option] = chosen.get((attempt.group, attempt.option), 0) + 1
        if chosen:
            lines.append("  chosen: " + "; ".join(f"{g}: {n} x {o}" for (g, o), n in chosen.items()))
        return lines

    def give_up(self, group: GroupSpec, slot: int, left_out: int) -> NoCapacity:
        """The error of a slot that has no option left: every attempt of the run, and what to change."""
        hints = ["availability zones (network.availability_zones)", f"instance types (instance_types of {group.name})"]
        if group.spot and group.spot_fallback != "on-demand":
            hints.append(f'spot_fallback = "on-demand" to {group.name}')
        skipped = " (an option refused once is not asked for again)" if left_out else ""
        return NoCapacity(
            f"AWS has no capacity for {group.name} slot {slot} in {self.region} right now: "
            f"tried {'; '.join(str(a) for a in self.refused)}{skipped}; "
            f"retry later, or add {', '.join(hints)}"
        )


def place(
    group: GroupSpec,
    slot: int,
    candidates: Sequence[Option],
    launch: Callable[[Option], tuple[dict[str, Any], bool]],
    tries: Tries,
    say: Progress,
) -> tuple[dict[str, Any], bool]:
    """Launch one instance of ``group`` into ``slot`` at the first of ``candidates`` that has capacity.

    ``launch(option)`` returns ``(instance, whether this run launched it)`` or raises AWS's
    ``ClientError``; a capacity refusal moves on to the next option, any other error ends the
    run as before. Raises ``NoCapacity`` when no option is left.
    """
    fresh = [option for option in candidates if not tries.was_refused(option)]
    for i, option in enumerate(fresh):
        try:
            instance, ours = launch(option)
        except ClientError as exc:
            code = error_code(exc)
            if code not in CAPACITY_CODES:
                raise
            tries.refused.append(Attempt(group.name, slot, option, code))
            then = f"trying {fresh[i + 1]}" if i + 1 < len(fresh) else "no option left"
            # Unsupported says what is not offered (a type in a zone, or a combination) only in its message.
            message = exc.response.get("Error", {}).get("Message", "")[:200] if code == "Unsupported" else ""
            why = f"{code}: {message}" if message else code
            say(f"  {group.name} slot {slot}: no capacity for {option} ({why}); {then}")
            continue
        tries.placed.append(Attempt(group.name, slot, option_of(instance)))
        return instance, ours
    raise tries.give_up(group, slot, len(candidates) - len(fresh))


def check_zones(aws: Aws, spec: ClusterSpec) -> None:
    """Raise ``CloudError`` naming the spec's key unless every zone it lists is a zone of its region."""
    if not spec.network.zones:
        return
    with aws_step("reading the availability zones", spec.region):
        found = aws.ec2.describe_availability_zones()["AvailabilityZones"]
    known = sorted(z["ZoneName"] for z in found if z.get("ZoneType", "availability-zone") == "availability-zone")
    key = "availability_zones" if spec.network.availability_zones else "availability_zone"
    for i, zone in enumerate(spec.network.zones):
        if zone not in known:
            label = f"network.{key}[{i}]" if key == "availability_zones" else f"network.{key}"
            raise CloudError(
                f"{spec.path}: {label} = {zone!r}: expected an availability zone of {spec.region} ({', '.join(known)})"
            )
