"""What ``rayrig cloud up`` finds and what it will do: discover the cluster by its tags, then plan.

``discover`` reads what the cluster already has (and checks the spec's own
VPC and subnet); ``make_plan`` works out what to create, reuse and start, and
the hourly cost; ``plan_summary`` is the text the user confirms.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from cloud.ec2 import iam
from cloud.ec2.ami import Ami
from cloud.ec2.aws import (
    LIVE_STATES,
    TAG_CLUSTER,
    TAG_CREATED,
    TAG_CREATED_AT,
    TAG_EXPIRES,
    TAG_GROUP,
    Aws,
    CloudError,
    aws_step,
    created_filters,
    explain_error,
    instances_matching,
    is_gone,
    paginate,
    parse_time,
    tags_of,
)
from cloud.ec2.failover import choices_text
from cloud.ec2.pricing import Rate, offline_rate, sources_text, usd
from cloud.ec2.rules import ports_text
from cloud.ec2.spec import ClusterSpec, GroupSpec
from cloud.ec2.state import foreign_line, load_state, recorded_resources, split_recorded


@dataclass
class Existing:
    """What a cluster already has, found by its tags."""

    vpc: dict[str, Any] | None = None
    subnets: dict[str, dict[str, Any]] = field(default_factory=dict)  # by availability zone, one per zone
    internet_gateway: dict[str, Any] | None = None
    route_table: dict[str, Any] | None = None
    security_group: dict[str, Any] | None = None
    key_pair: dict[str, Any] | None = None
    placement_group: dict[str, Any] | None = None
    instances: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    strangers: list[dict[str, Any]] = field(default_factory=list)  # tagged, not recorded here: not the cluster's
    foreign: list[str] = field(default_factory=list)  # the same of the other kinds, as lines (``foreign_line``)
    expires_at: dt.datetime | None = None
    created_at: dt.datetime | None = None
    iam: iam.IamFound = field(default_factory=iam.IamFound)  # the instance profile


def resource_name(spec_or_name: ClusterSpec | str) -> str:
    """The name of the cluster's security group, key pair and placement group: ``rayrig-NAME``."""
    name = spec_or_name if isinstance(spec_or_name, str) else spec_or_name.name
    return f"rayrig-{name}"


def _one(items: list[dict[str, Any]], what: str, name: str, key: str) -> dict[str, Any] | None:
    if len(items) > 1:
        ids = ", ".join(str(i.get(key)) for i in items)
        raise CloudError(
            f"cluster {name} has {len(items)} {what}s tagged as its own ({ids}); "
            f"run 'rayrig cloud down {name}' and up again"
        )
    return items[0] if items else None


class _Recorded:
    """Of the resources found by the cluster's tags, those this machine's record lists (all of them when it
    lists none); the others are noted in ``found.foreign`` and left alone."""

    def __init__(self, spec: ClusterSpec, found: Existing):
        self.name, self.found = spec.name, found
        self.kinds = recorded_resources(load_state(spec.name), spec.region)

    def __call__(self, kind: str, text: str, key: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.kinds is None:
            return items
        self.found.foreign += [
            foreign_line(self.name, f"{text} {i[key]}") for i in items if i[key] not in self.kinds[kind]
        ]
        return [i for i in items if i[key] in self.kinds[kind]]


def discover(aws: Aws, spec: ClusterSpec) -> Existing:
    """Find what the cluster of ``spec`` already has (by tag, and of that what this machine recorded when it
    has a record), and check the spec's own VPC/subnet."""
    found = Existing()
    stamps: list[dict[str, str]] = []
    recorded = _Recorded(spec, found)
    with aws_step(f"looking for the existing resources of cluster {spec.name}", spec.region):
        if spec.network.existing:
            _check_own_network(aws, spec, found)
        else:
            _discover_network(aws, spec.name, found, recorded)
            network = (found.vpc, *found.subnets.values(), found.internet_gateway, found.route_table)
            stamps += [tags_of(r) for r in network if r]
        _discover_access(aws, spec, found, recorded)
        live = [*created_filters(spec.name), {"Name": "instance-state-name", "Values": LIVE_STATES}]
        members, strangers = split_recorded(load_state(spec.name), spec.region, instances_matching(aws, live))
        found.strangers = list(strangers)
        for instance in members:
            tags = tags_of(instance)
            found.instances.setdefault(tags.get(TAG_GROUP, "?"), []).append(instance)
            stamps.append(tags)
    found.iam = iam.discover_iam(aws, spec)
    stamps += [tags_of(r) for r in (found.security_group, found.key_pair, found.placement_group) if r]
    stamps += [tags_of(r) for r in (found.iam.role, found.iam.profile) if r and not spec.iam_instance_profile]
    expiries = [t for t in (parse_time(s.get(TAG_EXPIRES)) for s in stamps) if t]
    births = [t for t in (parse_time(s.get(TAG_CREATED_AT)) for s in stamps) if t]
    found.expires_at = min(expiries) if expiries else None
    found.created_at = min(births) if births else None
    return found


def _check_own_network(aws: Aws, spec: ClusterSpec, found: Existing) -> None:
    """The VPC and subnet the spec names: they must exist, the subnet inside the VPC."""
    net = spec.network
    try:
        found.vpc = aws.ec2.describe_vpcs(VpcIds=[net.vpc_id])["Vpcs"][0]
        subnet = aws.ec2.describe_subnets(SubnetIds=[net.subnet_id])["Subnets"][0]
    except ClientError as exc:
        if not is_gone(exc):
            raise
        raise CloudError(
            f"{spec.path}: network: {explain_error(exc, 'checking network.vpc_id and subnet_id')}"
        ) from None
    if subnet["VpcId"] != net.vpc_id:
        raise CloudError(
            f"{spec.path}: network.subnet_id = {net.subnet_id!r}: expected a subnet of {net.vpc_id}, "
            f"found one of {subnet['VpcId']}"
        )
    found.subnets = {subnet["AvailabilityZone"]: subnet}


def _discover_network(aws: Aws, name: str, found: Existing, recorded: _Recorded) -> None:
    """The VPC, subnets (one per zone), internet gateway and route table rayrig made for the cluster, if any."""
    ec2 = aws.ec2
    vpcs = recorded(
        "vpcs", "VPC", "VpcId", paginate(ec2, "describe_vpcs", "Vpcs", Filters=created_filters(name, "vpc"))
    )
    found.vpc = _one(vpcs, "VPC", name, "VpcId")
    by_zone: dict[str, list[dict[str, Any]]] = {}
    subnets = paginate(ec2, "describe_subnets", "Subnets", Filters=created_filters(name, "subnet"))
    for subnet in recorded("subnets", "subnet", "SubnetId", subnets):
        by_zone.setdefault(subnet["AvailabilityZone"], []).append(subnet)
    for zone, subnets in sorted(by_zone.items()):
        if len(subnets) > 1:
            raise CloudError(
                f"cluster {name} has {len(subnets)} subnets in {zone} tagged as its own "
                f"({', '.join(s['SubnetId'] for s in subnets)}); run 'rayrig cloud down {name}' and up again"
            )
        found.subnets[zone] = subnets[0]
    gateways = paginate(
        ec2, "describe_internet_gateways", "InternetGateways", Filters=created_filters(name, "internet-gateway")
    )
    found.internet_gateway = _one(
        recorded("internet_gateways", "internet gateway", "InternetGatewayId", gateways),
        "internet gateway",
        name,
        "InternetGatewayId",
    )
    tables = paginate(ec2, "describe_route_tables", "RouteTables", Filters=created_filters(name, "route-table"))
    found.route_table = _one(
        recorded("route_tables", "route table", "RouteTableId", tables),
        "route table",
        name,
        "RouteTableId",
    )


def _discover_access(aws: Aws, spec: ClusterSpec, found: Existing, recorded: _Recorded) -> None:
    """The cluster's security group, key pair and placement group, if any."""
    ec2, name = aws.ec2, spec.name
    groups = paginate(
        ec2, "describe_security_groups", "SecurityGroups", Filters=created_filters(name, "security-group")
    )
    found.security_group = _one(
        recorded("security_groups", "security group", "GroupId", groups),
        "security group",
        name,
        "GroupId",
    )
    try:
        keys = ec2.describe_key_pairs(KeyNames=[resource_name(spec)], IncludePublicKey=True)["KeyPairs"]
    except ClientError as exc:
        if not is_gone(exc):
            raise
        keys = []
    if keys:
        tags = tags_of(keys[0])
        if tags.get(TAG_CLUSTER) != name or tags.get(TAG_CREATED) != "true":
            raise CloudError(
                f"a key pair named {resource_name(spec)} exists in {spec.region} but rayrig did not create it "
                f"for cluster {name}; delete or rename it, or choose another cluster name"
            )
        found.key_pair = keys[0]
    if spec.placement_group and spec.workers:
        groups = [
            p
            for p in ec2.describe_placement_groups(Filters=created_filters(name)).get("PlacementGroups", [])
            if p.get("State") not in ("deleted", "deleting")
        ]
        found.placement_group = _one(
            recorded("placement_groups", "placement group", "GroupName", groups),
            "placement group",
            name,
            "GroupName",
        )


@dataclass
class Plan:
    """What ``up`` will do: one line per resource, the launches, and the cost."""

    lines: list[tuple[str, str]] = field(default_factory=list)  # (action, text)
    launches: list[tuple[GroupSpec, int]] = field(default_factory=list)
    starts: list[str] = field(default_factory=list)
    hourly_usd: float = 0.0
    unpriced: list[str] = field(default_factory=list)
    price_sources: list[str] = field(default_factory=list)

    @property
    def creates(self) -> bool:
        """Whether the plan creates anything (or starts stopped instances, or changes what a role allows)."""
        return any(action in ("create", "start", "update") for action, _ in self.lines)


#: The hourly rate of one instance: (instance type, market, zones it may run in) -> rate and its source.
RateLookup = Callable[[str, str, Sequence[str]], Rate]


def instance_market(instance: Mapping[str, Any]) -> str:
    """How ``instance`` is billed: "spot" or "on-demand"."""
    return "spot" if instance.get("InstanceLifecycle") == "spot" else "on-demand"


def plan_zones(spec: ClusterSpec, existing: Existing) -> list[str]:
    """The zones the instances may run in, when known: those of the cluster's subnets, then the spec's in
    its order of preference (none: AWS chooses)."""
    return list(dict.fromkeys([*existing.subnets, *spec.network.zones]))


def make_plan(spec: ClusterSpec, existing: Existing, ports: Mapping[str, int], rate: RateLookup = offline_rate) -> Plan:
    """Work out what ``up`` creates, reuses and starts, and what the cluster costs per hour at ``rate``."""
    plan = Plan()
    net = spec.network
    name = resource_name(spec)

    def line(action: str, text: str) -> None:
        plan.lines.append((action, text))

    if net.existing:
        line("use", f"VPC {net.vpc_id} and subnet {net.subnet_id} from the spec (rayrig never deletes them)")
    else:
        for res, key, text in (
            (existing.vpc, "VpcId", f"VPC {net.vpc_cidr}"),
            (existing.internet_gateway, "InternetGatewayId", "internet gateway"),
        ):
            line("reuse" if res else "create", text + (f" ({res[key]})" if res else ""))
        launching = any(g.count > len(existing.instances.get(g.name, [])) for g in spec.groups)
        plan.lines += subnet_lines(spec, existing.subnets, launching)
        rtb = existing.route_table
        text = "route table with a default route to the internet gateway"
        line("reuse" if rtb else "create", text + (f" ({rtb['RouteTableId']})" if rtb else ""))
    ssh_from = ", ".join(spec.admin_cidrs)
    rules = (
        f"SSH (tcp 22) from {ssh_from} only; all traffic within the group, Ray and metrics ports {ports_text(ports)} "
        "included; " + ("outbound internet" if net.internet_egress else "no outbound internet")
    )
    sg = existing.security_group
    line("reuse" if sg else "create", f"security group {name}" + (f" ({sg['GroupId']})" if sg else "") + f": {rules}")
    line("reuse" if existing.key_pair else "create", f"key pair {name} from {spec.ssh_public_key}")
    if spec.placement_group and spec.workers:
        line(
            "reuse" if existing.placement_group else "create",
            f"placement group {name} (cluster strategy) for the workers",
        )

    plan.lines += iam.plan_lines(spec, existing.iam)

    zones = plan_zones(spec, existing)
    for group in spec.groups:
        have = existing.instances.get(group.name, [])
        stopped = [i["InstanceId"] for i in have if i["State"]["Name"] in ("stopped", "stopping")]
        missing = group.count - len(have)
        price = rate(group.instance_type, group.market, zones)
        # What runs is priced as it runs (failover may have launched another type or market), what is
        # missing at the group's first choice.
        running = [(i["InstanceType"], instance_market(i)) for i in have]
        running += [(group.instance_type, group.market)] * max(missing, 0)
        hourly: float | None = 0.0
        for itype, market in running:
            each = price if (itype, market) == (group.instance_type, group.market) else rate(itype, market, zones)
            plan.price_sources.append(each.source)
            if each.usd_per_hour is None:
                plan.unpriced.append(itype)
                hourly = None
            elif hourly is not None:
                hourly += each.usd_per_hour
        if hourly is None:
            cost = f"price unknown, {price.source}"
        else:
            plan.hourly_usd += hourly
            cost = f"{usd(hourly)}/h, {price.source}"
        what = (
            f"{group.name}: {group.count} x {choices_text(group, ())}, "
            f"{group.root_volume_gb} GB encrypted gp3, IMDSv2 only ({cost})"
        )
        if missing > 0:
            plan.launches.append((group, missing))
            line("create", what + (f"; {len(have)} exist, {missing} to launch" if have else ""))
        else:
            line("reuse", what + (f"; {len(have)} exist, up never removes instances" if missing < 0 else ""))
        if stopped:
            plan.starts += stopped
            line("start", f"{group.name}: {len(stopped)} stopped instance(s) {', '.join(stopped)}")
    plan.unpriced = sorted(set(plan.unpriced))
    return plan


def subnet_lines(spec: ClusterSpec, subnets: Mapping[str, dict[str, Any]], launching: bool) -> list[tuple[str, str]]:
    """The plan's lines about the cluster's subnets: one per zone, made when a launch first tries the zone."""
    net = spec.network
    lines = [("reuse", f"subnet {s['CidrBlock']} in {zone} ({s['SubnetId']})") for zone, s in sorted(subnets.items())]
    missing = [zone for zone in net.zones if zone not in subnets]
    if not launching or (subnets and not missing):
        return lines
    if not net.zones:
        lines.append(("create", f"subnet {net.subnet_cidr} (in a zone AWS chooses)"))
    elif len(net.zones) == 1:
        lines.append(("create", f"subnet {net.subnet_cidr} in {missing[0]}"))
    else:
        size = net.subnet_cidr.split("/")[1]
        text = f"a /{size} subnet of {net.vpc_cidr} in each zone a launch tries, as needed: {', '.join(missing)}"
        lines.append(("create", text))
    return lines


def plan_summary(spec: ClusterSpec, ami: Ami, plan: Plan, expires_at: dt.datetime) -> list[str]:
    """The plan as the user reads it: what is created or reused, the AMI, the expiry and the cost estimate."""
    lines = [
        f"Cluster {spec.name} in {spec.region}, owner {spec.owner}, "
        f"expires {expires_at:%Y-%m-%d %H:%M} UTC (ttl {spec.ttl_text} from the first up)"
    ]
    lines += [f"  {action:7s} {text}" for action, text in plan.lines]
    lines.append(f"  AMI     {ami.id} ({ami.name or 'no name'}), SSH user {ami.ssh_user}")
    hours = spec.ttl.total_seconds() / 3600
    unknown = f" plus {', '.join(plan.unpriced)} (price unknown)" if plan.unpriced else ""
    lines.append(
        f"Estimated cost: {usd(plan.hourly_usd)}/h{unknown}, about ${plan.hourly_usd * hours:,.0f} "
        f"if it runs for the whole ttl (instances only; prices: {sources_text(plan.price_sources)})."
    )
    return lines
