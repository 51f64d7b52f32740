"""Carry out a plan of ``rayrig cloud up``: one ensure-step per resource, in dependency order.

Every step reads and extends one ``Build``: what the run knows (spec, AMI,
what exists, the tags) and what it has made so far (VPC, subnet, security
group, placement group). Whatever a step creates goes into the ledger, so
that a failed run removes exactly that.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from botocore.exceptions import ClientError

from cloud.ec2 import efa, expiry, failover, iam
from cloud.ec2.ami import Ami
from cloud.ec2.aws import (
    LIVE_STATES,
    TAG_EXPIRES,
    TAG_GROUP,
    TAG_ROLE,
    TAG_SLOT,
    TAG_SSH_USER,
    Aws,
    CloudError,
    Progress,
    aws_step,
    created_filters,
    error_code,
    instances_matching,
    paginate,
    tags_of,
)
from cloud.ec2.plan import Existing, Plan, resource_name
from cloud.ec2.rules import Rule, desired_rules, exposed_ray_ports, rules_of
from cloud.ec2.spec import ClusterSpec, GroupSpec
from cloud.ec2.spec_zones import subnet_blocks
from cloud.ec2.teardown import Resources
from cloud.ec2.waits import settled, wait_instances, wait_vpc_available


class Ledger:
    """What this run created, so that a failure removes exactly that."""

    def __init__(self, say: Progress):
        self.created: list[tuple[str, str]] = []
        self.say = say

    def add(self, kind: str, resource_id: str, text: str) -> None:
        """Record one resource of ``kind`` (a ``Resources`` field) and say so."""
        self.created.append((kind, resource_id))
        self.say(f"  created {text} {resource_id}")

    def resources(self) -> Resources:
        """What was created, in deletion order."""
        res = Resources()
        for kind, rid in self.created:
            res.add(kind, rid)
        return res


@dataclass
class Build:
    """One run of ``up``: its inputs, its ledger, and the ids the steps have settled on so far.

    >>> apply(Build(aws, spec, ami, existing, ports, base_tags, Ledger(print), print, 900.0), plan)  # doctest: +SKIP
    """

    aws: Aws
    spec: ClusterSpec
    ami: Ami
    existing: Existing
    ports: Mapping[str, int]
    base_tags: Mapping[str, str]
    ledger: Ledger
    say: Progress
    timeout_s: float
    vpc_id: str = ""
    subnet_id: str = ""  # the subnet of the zone the current launch tries (one of subnets)
    subnets: dict[str, str] = field(default_factory=dict)  # the cluster's subnet in each zone it uses
    route_table_id: str = ""
    internet_gateway_id: str = ""
    group_id: str = ""
    key_pair_id: str = ""
    placement: str | None = None
    instance_profile: dict[str, str] | None = None  # RunInstances' IamInstanceProfile
    efa: dict[tuple[str, str], int] = field(default_factory=dict)  # EFA interfaces by (group, type) (efa.py)

    @property
    def ec2(self) -> Any:
        """The EC2 client."""
        return self.aws.ec2

    @property
    def name(self) -> str:
        """The name of the security group, key pair and placement group (``rayrig-NAME``)."""
        return resource_name(self.spec)

    @property
    def roles(self) -> dict[str, str]:
        """Each group's role, by group name."""
        return {g.name: g.role for g in self.spec.groups}

    def tags(self, role: str, **extra: str) -> dict[str, str]:
        """The tags of a resource with ``rayrig:role`` ``role``."""
        return {"Name": f"{self.name}-{role}", **self.base_tags, TAG_ROLE: role, **extra}


def owned(build: Build) -> dict[str, list[str]]:
    """What the cluster is made of that rayrig created, by ``Resources`` field (the instances aside): what this
    run created and what it found and used; never the spec's own VPC, subnet or instance profile. ``up``
    records it: ``down`` and ``reap`` delete that, by ID, and nothing else."""
    spec, found = build.spec, Resources()
    if not spec.network.existing:
        for kind, rid in (("vpcs", build.vpc_id), ("internet_gateways", build.internet_gateway_id),
                          ("route_tables", build.route_table_id)):  # fmt: skip
            if rid:
                found.add(kind, rid)
        found.subnets += sorted(build.subnets.values())
    if build.group_id:
        found.add("security_groups", build.group_id)
    found.add("key_pairs", build.name)
    if build.placement:
        found.add("placement_groups", build.placement)
    if spec.s3_buckets and not spec.iam_instance_profile:
        found.add("instance_profiles", iam.iam_name(spec.name))
        found.add("iam_roles", iam.iam_name(spec.name))
    for kind, rid in build.ledger.created:
        if kind != "instances" and rid not in getattr(found, kind):
            found.add(kind, rid)
    return {kind: getattr(found, kind) for kind in found.__dataclass_fields__ if kind != "instances"}


def tag_spec(resource_type: str, tags: Mapping[str, str]) -> list[dict[str, Any]]:
    """``TagSpecifications`` that tag a resource of ``resource_type`` as it is created."""
    return [{"ResourceType": resource_type, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def apply(build: Build, plan: Plan) -> list[dict[str, Any]]:
    """Ensure every resource of the cluster, in order; return its instances, described, once they run."""
    if build.spec.network.existing:
        build.vpc_id = build.spec.network.vpc_id or ""
        build.subnets = {zone: subnet["SubnetId"] for zone, subnet in build.existing.subnets.items()}
    else:
        with aws_step("creating the network", build.spec.region):
            ensure_vpc(build)
            ensure_internet_gateway(build)
            ensure_route_table(build)
            ensure_subnets(build)
    ensure_security_group(build)
    ensure_key_pair(build)
    ensure_placement_group(build)
    ensure_instance_profile(build)
    launch_instances(build, plan)
    start_instances(build, plan)
    return wait_running(build)


def ensure_vpc(build: Build) -> None:
    """The cluster's VPC, with DNS support and host names."""
    ec2, vpc = build.ec2, build.existing.vpc
    if vpc:
        build.vpc_id = vpc["VpcId"]
        return
    build.vpc_id = ec2.create_vpc(
        CidrBlock=build.spec.network.vpc_cidr, TagSpecifications=tag_spec("vpc", build.tags("vpc"))
    )["Vpc"]["VpcId"]
    build.ledger.add("vpcs", build.vpc_id, "VPC")
    wait_vpc_available(build.aws, build.vpc_id)
    settled(ec2.modify_vpc_attribute, VpcId=build.vpc_id, EnableDnsSupport={"Value": True})
    settled(ec2.modify_vpc_attribute, VpcId=build.vpc_id, EnableDnsHostnames={"Value": True})


def ensure_internet_gateway(build: Build) -> None:
    """An internet gateway attached to the VPC."""
    igw = build.existing.internet_gateway
    igw_id = igw["InternetGatewayId"] if igw else None
    if igw_id is None:
        igw_id = build.ec2.create_internet_gateway(
            TagSpecifications=tag_spec("internet-gateway", build.tags("internet-gateway"))
        )["InternetGateway"]["InternetGatewayId"]
        build.ledger.add("internet_gateways", igw_id, "internet gateway")
    if not any(a.get("VpcId") == build.vpc_id for a in (igw or {}).get("Attachments", [])):
        settled(build.ec2.attach_internet_gateway, InternetGatewayId=igw_id, VpcId=build.vpc_id)
    build.internet_gateway_id = igw_id


def ensure_subnets(build: Build) -> None:
    """The cluster's subnets so far, each associated with the route table; one in a zone AWS chooses when the
    spec names no zone. A subnet for each zone of the spec is made when a launch first tries it (``subnet_in``)."""
    for zone, subnet in build.existing.subnets.items():
        build.subnets[zone] = subnet["SubnetId"]
        associate_subnet(build, subnet["SubnetId"])
    if not build.subnets and not build.spec.network.zones:
        create_subnet(build, None)


def subnet_in(build: Build, zone: str) -> str:
    """The cluster's subnet in ``zone``, made (and associated with the route table) if it has none there yet."""
    if zone not in build.subnets:
        with aws_step(f"creating the subnet in {zone}", build.spec.region):
            create_subnet(build, zone)
    return build.subnets[zone]


def create_subnet(build: Build, zone: str | None) -> None:
    """A subnet in ``zone`` (AWS's choice when None): the first block of ``subnet_cidr``'s size in the VPC,
    from ``subnet_cidr`` on, that no subnet of the VPC overlaps."""
    net = build.spec.network
    taken = [
        ipaddress.ip_network(s["CidrBlock"])
        for s in paginate(
            build.ec2, "describe_subnets", "Subnets", Filters=[{"Name": "vpc-id", "Values": [build.vpc_id]}]
        )
    ]
    blocks = subnet_blocks(ipaddress.ip_network(net.vpc_cidr), ipaddress.ip_network(net.subnet_cidr))
    free = [b for b in blocks if not any(b.overlaps(t) for t in taken)]
    if not free:
        raise CloudError(f"VPC {build.vpc_id} ({net.vpc_cidr}) has no room left for a subnet in {zone}")
    where: dict[str, Any] = {"AvailabilityZone": zone} if zone else {}
    subnet = settled(
        build.ec2.create_subnet,
        VpcId=build.vpc_id,
        CidrBlock=str(free[0]),
        TagSpecifications=tag_spec("subnet", build.tags("subnet")),
        **where,
    )["Subnet"]
    build.ledger.add("subnets", subnet["SubnetId"], f"subnet ({free[0]} in {subnet['AvailabilityZone']})")
    build.subnets[subnet["AvailabilityZone"]] = subnet["SubnetId"]
    associate_subnet(build, subnet["SubnetId"])


def associate_subnet(build: Build, subnet_id: str) -> None:
    """The route table associated with ``subnet_id`` (once)."""
    rtb = build.existing.route_table or {}
    if not any(a.get("SubnetId") == subnet_id for a in rtb.get("Associations", [])):
        settled(build.ec2.associate_route_table, RouteTableId=build.route_table_id, SubnetId=subnet_id)


def ensure_route_table(build: Build) -> None:
    """A route table with the default route through the gateway (``associate_subnet`` associates each subnet)."""
    ec2, rtb, igw_id = build.ec2, build.existing.route_table, build.internet_gateway_id
    if rtb is None:
        rtb = settled(
            ec2.create_route_table,
            VpcId=build.vpc_id,
            TagSpecifications=tag_spec("route-table", build.tags("route-table")),
        )["RouteTable"]
        build.ledger.add("route_tables", rtb["RouteTableId"], "route table")
    rtb_id = rtb["RouteTableId"]
    if not any(
        r.get("DestinationCidrBlock") == "0.0.0.0/0" and r.get("GatewayId") == igw_id for r in rtb.get("Routes", [])
    ):
        settled(ec2.create_route, RouteTableId=rtb_id, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw_id)
    build.route_table_id = rtb_id


def ensure_security_group(build: Build) -> None:
    """The security group with exactly the desired rules; refuses one that exposes a Ray port."""
    ec2, spec = build.ec2, build.spec
    with aws_step("creating the security group", spec.region):
        sg = build.existing.security_group
        if sg and sg["VpcId"] != build.vpc_id:
            raise CloudError(
                f"the cluster's security group {sg['GroupId']} is in {sg['VpcId']}, not in {build.vpc_id}: "
                f"run 'rayrig cloud down {spec.name}' before moving the cluster"
            )
        if sg is None:
            group_id = settled(
                ec2.create_security_group,
                GroupName=build.name,
                Description=f"rayrig cluster {spec.name}: SSH from admin CIDRs, everything else only within the group",
                VpcId=build.vpc_id,
                TagSpecifications=tag_spec("security-group", build.tags("security-group")),
            )["GroupId"]
            build.ledger.add("security_groups", group_id, "security group")
            sg = settled(ec2.describe_security_groups, GroupIds=[group_id])["SecurityGroups"][0]
        build.group_id = sg["GroupId"]
        reconcile_rules(build.aws, sg, desired_rules(build.group_id, spec), build.say)
        actual = rules_of(ec2.describe_security_groups(GroupIds=[build.group_id])["SecurityGroups"][0])
    exposed = exposed_ray_ports(actual, build.ports)
    if exposed:
        raise CloudError(f"security group {build.group_id} exposes Ray or metrics ports: {'; '.join(exposed)}")


def reconcile_rules(aws: Aws, group: Mapping[str, Any], desired: Mapping[Rule, str], say: Progress) -> None:
    """Make the group's rules exactly ``desired``: add what is missing, revoke what is extra."""
    ec2, group_id = aws.ec2, group["GroupId"]
    actual = rules_of(group)
    for rule in sorted(set(desired) - actual):
        call = (
            ec2.authorize_security_group_ingress if rule.direction == "ingress" else ec2.authorize_security_group_egress
        )
        settled(call, GroupId=group_id, IpPermissions=[rule.permission(desired[rule])])
    extra = sorted(actual - set(desired))
    for rule in extra:
        say(f"  revoking a rule rayrig did not ask for: {rule}")
        call = ec2.revoke_security_group_ingress if rule.direction == "ingress" else ec2.revoke_security_group_egress
        call(GroupId=group_id, IpPermissions=[rule.permission()])


def ensure_key_pair(build: Build) -> None:
    """The key pair ``rayrig-NAME`` holding the spec's public key."""
    spec = build.spec
    with aws_step("importing the key pair", spec.region):
        if build.existing.key_pair:
            theirs = (build.existing.key_pair.get("PublicKey") or "").split()[:2]
            ours = spec.public_key_material().decode().split()[:2]
            if theirs and theirs != ours:
                raise CloudError(
                    f"key pair {build.name} holds another public key than {spec.ssh_public_key}; use the key it was "
                    f"created with, or 'rayrig cloud down {spec.name}' first"
                )
            build.key_pair_id = build.existing.key_pair.get("KeyPairId", "")
            return
        key_id = build.ec2.import_key_pair(
            KeyName=build.name,
            PublicKeyMaterial=spec.public_key_material(),
            TagSpecifications=tag_spec("key-pair", build.tags("key-pair")),
        )["KeyPairId"]
        build.key_pair_id = key_id
        build.ledger.add("key_pairs", build.name, f"key pair ({key_id})")


def ensure_placement_group(build: Build) -> None:
    """A cluster placement group for the workers, when the spec asks for one and has workers."""
    if not (build.spec.placement_group and build.spec.workers):
        return
    with aws_step("creating the placement group", build.spec.region):
        if build.existing.placement_group is None:
            build.ec2.create_placement_group(
                GroupName=build.name,
                Strategy="cluster",
                TagSpecifications=tag_spec("placement-group", build.tags("placement-group")),
            )
            build.ledger.add("placement_groups", build.name, "placement group")
        build.placement = build.name


def ensure_instance_profile(build: Build) -> None:
    """The instance profile the instances get: the spec's own, or rayrig's role for ``s3_buckets`` (``iam.py``);
    instances launched before the spec asked for one get it attached."""
    # Without the expiry: the role goes with the cluster's network at down or reap, and a tag that
    # ``extend`` does not move would only go stale.
    tags = {key: value for key, value in build.tags("iam").items() if key != TAG_EXPIRES}
    build.instance_profile = iam.ensure_instance_profile(
        build.aws, build.spec, build.existing.iam, tags, build.ledger.add
    )
    if build.instance_profile is None:
        return
    wanted = next(iter(build.instance_profile.values()))
    for group in build.existing.instances.values():
        for instance in group:
            have = instance.get("IamInstanceProfile", {}).get("Arn")
            if have is None:
                build.say(f"  attaching instance profile {wanted} to {instance['InstanceId']}")
                with aws_step(f"attaching instance profile {wanted} to {instance['InstanceId']}", build.spec.region):
                    settled(
                        build.ec2.associate_iam_instance_profile,
                        IamInstanceProfile=build.instance_profile,
                        InstanceId=instance["InstanceId"],
                    )
            elif not (have == wanted or have.endswith(f"/{wanted}")):
                build.say(
                    f"  {instance['InstanceId']} keeps instance profile {have}, not {wanted}: "
                    "replace it in the EC2 console, or take the cluster down and up again"
                )


#: How many spent client tokens one slot may meet before rayrig gives up (each is an instance that ended).
MAX_SLOT_GENERATIONS = 50


def launch_instances(build: Build, plan: Plan) -> None:
    """Launch the instances the plan lacks, group by group, one per free slot, failing over on capacity errors.

    Each slot tries its options (instance type, zone, market; see ``failover``) in order until one
    launches. Each launch is idempotent on AWS's side: its ``ClientToken`` is derived from the
    cluster, its key pair, the group, the slot and the option, so a retried call, or another ``up``
    of the same cluster launching the same slot at the same time, gets the same instance back
    instead of a second one, and the next option is a new request.
    """
    tries = failover.Tries(build.spec.region)
    for group, count in plan.launches:
        slots = free_slots(group, build.existing.instances.get(group.name, []), count)
        build.say(f"  launching {count} for {group.name}: {failover.choices_text(group, launch_zones(build))}")
        with aws_step(f"launching {count} x {group.instance_type} for {group.name}", build.spec.region):
            for slot in slots:
                candidates = failover.options(
                    group, launch_zones(build), holding=held_zones(build, tries), only=pinned_zone(build, group, tries)
                )
                instance, ours = failover.place(
                    group, slot, candidates, functools.partial(launch_option, build, group, slot), tries, build.say
                )
                if ours:
                    build.ledger.add("instances", instance["InstanceId"], f"{group.name} instance")
                else:
                    build.say(f"  {group.name} slot {slot}: another run launched {instance['InstanceId']} meanwhile")
    for line in tries.summary():
        build.say(line)


def launch_zones(build: Build) -> list[str]:
    """The zones launches may try: the spec's, else those of the cluster's subnets (one, in a zone AWS chose)."""
    return list(build.spec.network.zones) or sorted(build.subnets)


def held_zones(build: Build, tries: failover.Tries) -> list[str]:
    """The zones that hold the cluster's instances, from before this run or launched by it."""
    before = [failover.option_of(i).zone for have in build.existing.instances.values() for i in have]
    return before + tries.zones()


def pinned_zone(build: Build, group: GroupSpec, tries: failover.Tries) -> str | None:
    """The zone of the placement group the instances of ``group`` join, once a worker holds it; else None."""
    if not (build.placement and group.role == "worker"):
        return None
    workers = [i for have in build.existing.instances.values() for i in have if tags_of(i).get(TAG_ROLE) == "worker"]
    zones = [failover.option_of(i).zone for i in workers] + tries.zones("worker", build.roles)
    return zones[0] if zones else None


def launch_option(build: Build, group: GroupSpec, slot: int, option: failover.Option) -> tuple[dict[str, Any], bool]:
    """Launch the instance of ``group``'s ``slot`` as ``option`` says: its type, its market, its zone's subnet."""
    build.subnet_id = subnet_in(build, option.zone)
    chosen = replace(
        group, instance_type=option.instance_type, instance_types=(option.instance_type,), market=option.market
    )
    return launch_slot(build, chosen, slot)


def free_slots(group: GroupSpec, have: list[dict[str, Any]], count: int) -> list[int]:
    """The ``count`` lowest slots of ``group`` (0 to count-1) that no live instance holds.

    An instance without a slot tag (launched before slots existed) holds the lowest free slot.
    """
    taken = {int(tag) for tag in (tags_of(i).get(TAG_SLOT, "") for i in have) if tag.isdigit()}
    untagged = sum(1 for i in have if not tags_of(i).get(TAG_SLOT, "").isdigit())
    free = [slot for slot in range(group.count) if slot not in taken]
    return free[untagged : untagged + count]


def client_token(build: Build, group: GroupSpec, slot: int, generation: int) -> str:
    """The ``RunInstances`` token of one slot and option: the same in every run against the same key pair.

    AWS keeps a token for at least a day after its instance ended, so the token
    also names the key pair (a cluster taken down and brought up again gets a
    new one) and the slot's generation (the next one after an instance ended).
    It names the option too (``group``'s instance type and market, the zone's
    subnet): AWS answers a token it has seen with that request's result, so the
    next option after a capacity error must be a new token.
    """
    seed = (
        f"{build.spec.name}/{build.key_pair_id}/{group.name}/{slot}/{generation}/"
        f"{group.instance_type}/{group.market}/{build.subnet_id}"
    )
    return f"rayrig-{hashlib.sha256(seed.encode()).hexdigest()[:40]}"


def launch_slot(build: Build, group: GroupSpec, slot: int) -> tuple[dict[str, Any], bool]:
    """Launch one instance of ``group`` into ``slot``: ``(instance, whether this run launched it)``.

    An instance this slot's token already launched comes back instead of a new
    one; a token whose instance has ended gives way to the next generation's.
    A token used with other parameters (another run's tags, an older spec) is
    the slot's instance when one still lives with it, else spent.
    """
    for generation in range(MAX_SLOT_GENERATIONS):
        token = client_token(build, group, slot, generation)
        try:
            instance = settled(build.ec2.run_instances, **run_instances_params(build, group, slot, token))
        except ClientError as exc:
            if error_code(exc) != "IdempotentParameterMismatch":
                raise
            live = [*created_filters(build.spec.name), {"Name": "instance-state-name", "Values": LIVE_STATES}]
            holders = [i for i in instances_matching(build.aws, live) if i.get("ClientToken") == token]
            if holders:
                return holders[0], False
            continue
        if instance["Instances"][0]["State"]["Name"] not in ("shutting-down", "terminated"):
            return instance["Instances"][0], True
    raise CloudError(
        f"{group.name} slot {slot}: {MAX_SLOT_GENERATIONS} launch tokens are spent on instances that ended; "
        f"run 'rayrig cloud down {build.spec.name}' and up again"
    )


def start_instances(build: Build, plan: Plan) -> None:
    """Start the cluster's stopped instances."""
    if plan.starts:
        with aws_step("starting stopped instances", build.spec.region):
            build.ec2.start_instances(InstanceIds=plan.starts)


def run_instances_params(build: Build, group: GroupSpec, slot: int, token: str) -> dict[str, Any]:
    """The ``RunInstances`` parameters for the instance of ``group`` in ``slot``: IMDSv2 only, encrypted gp3,
    tagged, idempotent by ``token``."""
    role_tags = build.tags(group.role, **{TAG_GROUP: group.name, TAG_SLOT: str(slot), TAG_SSH_USER: build.ami.ssh_user})
    role_tags["Name"] = f"{build.name}-{group.name}"
    params: dict[str, Any] = {
        "ImageId": build.ami.id,
        "InstanceType": group.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "KeyName": build.name,
        "ClientToken": token,
        "NetworkInterfaces": [
            {
                "DeviceIndex": 0,
                "SubnetId": build.subnet_id,
                "Groups": [build.group_id],
                "AssociatePublicIpAddress": build.spec.network.public_ips,
                "DeleteOnTermination": True,
            }
        ],
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1},
        "BlockDeviceMappings": [
            {
                "DeviceName": build.ami.root_device,
                "Ebs": {
                    "VolumeSize": group.root_volume_gb,
                    "VolumeType": "gp3",
                    "Encrypted": True,
                    "DeleteOnTermination": True,
                },
            }
        ],
        "TagSpecifications": [
            *tag_spec("instance", role_tags),
            *tag_spec("volume", role_tags),
            *tag_spec("network-interface", role_tags),
        ],
    }
    if group.spot:
        params["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
        }
    if build.placement and group.role == "worker":
        params["Placement"] = {"GroupName": build.placement}
    efa_count = build.efa.get((group.name, group.instance_type), 0)  # the type this option launches
    if efa_count:  # EFA: one interface per network card instead of the single one above (cloud/ec2/efa.py)
        public = build.spec.network.public_ips
        params["NetworkInterfaces"] = efa.network_interfaces(efa_count, build.subnet_id, build.group_id, public)
        params["TagSpecifications"][0]["Tags"].append({"Key": efa.TAG_EFA, "Value": str(efa_count)})
    # --- instance profile (iam.py) ---
    if build.instance_profile:
        params["IamInstanceProfile"] = build.instance_profile
    # Self-expiry (expiry.py): powering off terminates, the user data's timer powers off at the tag's time,
    # which it reads through IMDS.
    params.update(expiry.launch_params(role_tags[TAG_EXPIRES]))
    params["MetadataOptions"]["InstanceMetadataTags"] = "enabled"
    return params


def wait_running(build: Build) -> list[dict[str, Any]]:
    """Wait until every live instance of the cluster runs (not those that only carry its tags); return them
    described."""
    live = [*created_filters(build.spec.name), {"Name": "instance-state-name", "Values": LIVE_STATES}]
    strangers = {i["InstanceId"] for i in build.existing.strangers}
    with aws_step("listing the cluster's instances", build.spec.region):
        ids = [i["InstanceId"] for i in instances_matching(build.aws, live) if i["InstanceId"] not in strangers]
    build.say(f"  waiting for {len(ids)} instance(s) to run")
    return wait_instances(build.aws, ids, "running", build.timeout_s, fail_states=("shutting-down", "terminated"))
