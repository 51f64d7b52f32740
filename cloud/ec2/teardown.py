"""What a cluster has, taking it down, listing clusters, and reaping the expired ones.

``down`` says the cluster's run time and cost so far (``bill``) and asks,
deletes what this machine's record of the cluster lists (by ID; without a
record, what carries ``rayrig:created=true`` and the cluster's tag), names what
carries the tags unrecorded and leaves it, then lists whatever still carries
the tag. ``list_clusters`` gathers clusters from their tags (and their cost so
far); ``reap`` takes down the clusters recorded here whose recorded expiry
passed, without asking per cluster: tags, which anyone allowed to tag can set,
never decide what it deletes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cloud.ec2 import iam
from cloud.ec2.aws import (
    LIVE_STATES,
    TAG_CLUSTER,
    TAG_CREATED_AT,
    TAG_EXPIRES,
    TAG_OWNER,
    Aws,
    CloudError,
    Confirm,
    Progress,
    aws_step,
    connect,
    created_filters,
    instances_matching,
    paginate,
    parse_time,
    tag_filter,
    tags_of,
    utc_now,
)
from cloud.ec2.pricing import Cost, PriceBook, Running, cost_of, running_of, sources_text, span, usd
from cloud.ec2.state import (
    RECORDED_KINDS,
    cluster_lock,
    foreign_line,
    forget_state,
    load_state,
    private_state_dir,
    recorded_clusters,
    recorded_expiry,
    recorded_instances,
    recorded_resources,
    split_recorded,
    state_path,
    stranger_line,
)
from cloud.ec2.waits import WAIT_TIMEOUT_S, delete_when_free, wait_instances


@dataclass
class Resources:
    """Resources by kind, in the order they must be deleted."""

    instances: list[str] = field(default_factory=list)
    placement_groups: list[str] = field(default_factory=list)
    security_groups: list[str] = field(default_factory=list)
    key_pairs: list[str] = field(default_factory=list)
    route_tables: list[str] = field(default_factory=list)
    subnets: list[str] = field(default_factory=list)
    internet_gateways: list[str] = field(default_factory=list)
    vpcs: list[str] = field(default_factory=list)
    instance_profiles: list[str] = field(default_factory=list)  # IAM: global, after the instances
    iam_roles: list[str] = field(default_factory=list)

    def add(self, kind: str, resource_id: str) -> None:
        """Record one resource of ``kind`` (a field name)."""
        getattr(self, kind).append(resource_id)

    def items(self) -> list[tuple[str, str]]:
        """(kind, id) pairs in deletion order."""
        return [(kind, rid) for kind in self.__dataclass_fields__ for rid in getattr(self, kind)]

    def __bool__(self) -> bool:
        return bool(self.items())


def find_created(aws: Aws, name: str, strangers: list[str] | None = None) -> Resources:
    """What rayrig created for cluster ``name``, as this machine recorded it, by ID (``rayrig cloud up`` records
    everything it creates); what carries the cluster's tags without being recorded is named in ``strangers``
    (when given) and left out: whoever may tag resources could otherwise have theirs deleted by ``down``.

    Without a record of the cluster's resources here (another machine brought it up, or an older rayrig
    recorded the instances only), the tags ``rayrig:cluster=name`` and ``rayrig:created=true`` decide what
    is not recorded.
    """
    state = load_state(name)
    recorded = recorded_resources(state, aws.region)
    tagged = _tagged_created(aws, name, state)
    if strangers is not None:
        strangers += tagged.strangers
    if recorded is None:
        return tagged.res
    res = Resources(instances=tagged.res.instances)
    for kind in RECORDED_KINDS:
        ours = recorded[kind]
        getattr(res, kind).extend(sorted(rid for rid in getattr(tagged.res, kind) if rid in ours))
        if strangers is not None:
            strangers += [foreign_line(name, f"{KIND_TEXT[kind]} {rid}")
                          for rid in getattr(tagged.res, kind) if rid not in ours]  # fmt: skip
    with aws_step(f"looking up the recorded resources of cluster {name}", aws.region):
        for kind, lookup in _BY_ID.items():
            missing = sorted(recorded[kind] - set(getattr(res, kind)))
            if missing:  # recorded, no longer tagged: the record, not the tags, says it is the cluster's
                getattr(res, kind).extend(lookup(aws, missing))
    return res


#: What each kind is called in what rayrig says.
KIND_TEXT = {
    "instances": "instance",
    "placement_groups": "placement group",
    "security_groups": "security group",
    "key_pairs": "key pair",
    "route_tables": "route table",
    "subnets": "subnet",
    "internet_gateways": "internet gateway",
    "vpcs": "VPC",
    "instance_profiles": "instance profile",
    "iam_roles": "IAM role",
}


def _by_id(operation: str, key: str, id_key: str, filter_name: str) -> Callable[[Aws, list[str]], list[str]]:
    """A lookup of which of the given IDs of one kind still exist (a filter, where naming a gone ID fails)."""

    def lookup(aws: Aws, ids: list[str]) -> list[str]:
        found = paginate(aws.ec2, operation, key, Filters=[{"Name": filter_name, "Values": ids}])
        return sorted({r[id_key] for r in found} & set(ids))

    return lookup


#: The kinds whose recorded resources are looked up by ID even without the cluster's tags (IDs are never
#: reused; names are, so a key pair, placement group or IAM entity must also carry the tags).
_BY_ID = {
    "security_groups": _by_id("describe_security_groups", "SecurityGroups", "GroupId", "group-id"),
    "route_tables": _by_id("describe_route_tables", "RouteTables", "RouteTableId", "route-table-id"),
    "subnets": _by_id("describe_subnets", "Subnets", "SubnetId", "subnet-id"),
    "internet_gateways": _by_id(
        "describe_internet_gateways", "InternetGateways", "InternetGatewayId", "internet-gateway-id"
    ),
    "vpcs": _by_id("describe_vpcs", "Vpcs", "VpcId", "vpc-id"),
}


@dataclass
class _Tagged:
    res: Resources
    strangers: list[str]


def _tagged_created(aws: Aws, name: str, state: Mapping[str, Any]) -> _Tagged:
    """What carries ``rayrig:cluster=name`` and ``rayrig:created=true``; of the instances, those ``state``
    records (the others as lines), plus recorded live instances whose tags are gone."""
    ec2 = aws.ec2
    filters = created_filters(name)
    res = Resources()
    with aws_step(f"listing the resources of cluster {name}", aws.region):
        live = [*filters, {"Name": "instance-state-name", "Values": LIVE_STATES}]
        members, others = split_recorded(state, aws.region, instances_matching(aws, live))
        res.instances = [i["InstanceId"] for i in members]
        untagged = sorted((recorded_instances(state, aws.region) or set()) - set(res.instances))
        if untagged:
            by_id = [{"Name": "instance-id", "Values": untagged}]
            by_id.append({"Name": "instance-state-name", "Values": LIVE_STATES})
            res.instances += [i["InstanceId"] for i in instances_matching(aws, by_id)]
        pgs = ec2.describe_placement_groups(Filters=filters).get("PlacementGroups", [])
        res.placement_groups = [p["GroupName"] for p in pgs if p.get("State") not in ("deleted", "deleting")]
        res.security_groups = [
            g["GroupId"] for g in paginate(ec2, "describe_security_groups", "SecurityGroups", Filters=filters)
        ]
        res.key_pairs = [k["KeyName"] for k in ec2.describe_key_pairs(Filters=filters).get("KeyPairs", [])]
        res.route_tables = [
            r["RouteTableId"] for r in paginate(ec2, "describe_route_tables", "RouteTables", Filters=filters)
        ]
        res.subnets = [s["SubnetId"] for s in paginate(ec2, "describe_subnets", "Subnets", Filters=filters)]
        res.internet_gateways = [
            g["InternetGatewayId"]
            for g in paginate(ec2, "describe_internet_gateways", "InternetGateways", Filters=filters)
        ]
        res.vpcs = [v["VpcId"] for v in paginate(ec2, "describe_vpcs", "Vpcs", Filters=filters)]
        res.instance_profiles, res.iam_roles = iam.created_iam(aws, name)
    return _Tagged(res, [stranger_line(name, i) for i in others])


def tagged_leftovers(aws: Aws, name: str) -> list[str]:
    """Everything that still carries ``rayrig:cluster=name``, created by rayrig or not, as lines."""
    ec2 = aws.ec2
    filters = [tag_filter(TAG_CLUSTER, name)]
    found: list[str] = []
    with aws_step(f"listing what carries the tag {TAG_CLUSTER}={name}", aws.region):
        for i in instances_matching(aws, filters):
            if i["State"]["Name"] != "terminated":
                found.append(f"instance {i['InstanceId']} ({i['State']['Name']})")
        for p in ec2.describe_placement_groups(Filters=filters).get("PlacementGroups", []):
            if p.get("State") != "deleted":
                found.append(f"placement group {p['GroupName']}")
        for g in paginate(ec2, "describe_security_groups", "SecurityGroups", Filters=filters):
            found.append(f"security group {g['GroupId']} ({g.get('GroupName')})")
        for k in ec2.describe_key_pairs(Filters=filters).get("KeyPairs", []):
            found.append(f"key pair {k['KeyName']}")
        for r in paginate(ec2, "describe_route_tables", "RouteTables", Filters=filters):
            found.append(f"route table {r['RouteTableId']}")
        for s in paginate(ec2, "describe_subnets", "Subnets", Filters=filters):
            found.append(f"subnet {s['SubnetId']}")
        for g in paginate(ec2, "describe_internet_gateways", "InternetGateways", Filters=filters):
            found.append(f"internet gateway {g['InternetGatewayId']}")
        for v in paginate(ec2, "describe_vpcs", "Vpcs", Filters=filters):
            found.append(f"VPC {v['VpcId']}")
        for v in paginate(ec2, "describe_volumes", "Volumes", Filters=filters):
            found.append(f"volume {v['VolumeId']} ({v.get('State')})")
        for n in paginate(ec2, "describe_network_interfaces", "NetworkInterfaces", Filters=filters):
            found.append(f"network interface {n['NetworkInterfaceId']} ({n.get('Status')})")
        found += iam.tagged_iam(aws, name)
    return found


def delete_resources(aws: Aws, res: Resources, *, say: Progress, timeout_s: float = WAIT_TIMEOUT_S) -> list[str]:
    """Delete ``res`` in dependency order; return one line per thing that could not be deleted."""
    ec2 = aws.ec2
    failures: list[str] = []
    if res.instances:
        say(f"  terminating {len(res.instances)} instance(s): {', '.join(res.instances)}")
        try:
            with aws_step("terminating instances", aws.region):
                ec2.terminate_instances(InstanceIds=res.instances)
            wait_instances(aws, res.instances, "terminated", timeout_s)
        except CloudError as exc:
            failures.append(str(exc))
    # After the instances, in dependency order: what each kind is called, its ids, how to delete one.
    kinds: list[tuple[str, list[str], Callable[[str], Any]]] = [
        ("placement group", res.placement_groups, lambda n: ec2.delete_placement_group(GroupName=n)),
        ("security group", res.security_groups, lambda g: ec2.delete_security_group(GroupId=g)),
        ("key pair", res.key_pairs, lambda k: ec2.delete_key_pair(KeyName=k)),
        ("route table", res.route_tables, lambda r: _delete_route_table(aws, r)),
        ("subnet", res.subnets, lambda s: ec2.delete_subnet(SubnetId=s)),
        ("internet gateway", res.internet_gateways, lambda g: _delete_internet_gateway(aws, g)),
        ("VPC", res.vpcs, lambda v: ec2.delete_vpc(VpcId=v)),
        ("instance profile", res.instance_profiles, lambda p: iam.delete_instance_profile(aws, p)),
        ("IAM role", res.iam_roles, lambda r: iam.delete_role(aws, r)),
    ]
    for kind, ids, delete in kinds:
        for rid in ids:
            say(f"  deleting {kind} {rid}")
            delete_when_free(aws, f"{kind} {rid}", lambda d=delete, r=rid: d(r), timeout_s, failures)
    return failures


def _delete_route_table(aws: Aws, rtb: str) -> None:
    tables = aws.ec2.describe_route_tables(RouteTableIds=[rtb])["RouteTables"]
    for assoc in tables[0].get("Associations", []) if tables else []:
        if not assoc.get("Main"):
            aws.ec2.disassociate_route_table(AssociationId=assoc["RouteTableAssociationId"])
    aws.ec2.delete_route_table(RouteTableId=rtb)


def _delete_internet_gateway(aws: Aws, igw: str) -> None:
    gateways = aws.ec2.describe_internet_gateways(InternetGatewayIds=[igw])["InternetGateways"]
    for attachment in gateways[0].get("Attachments", []) if gateways else []:
        aws.ec2.detach_internet_gateway(InternetGatewayId=igw, VpcId=attachment["VpcId"])
    aws.ec2.delete_internet_gateway(InternetGatewayId=igw)


_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$")


def down(name: str, region: str | None = None, *, aws: Aws | None = None, assume_yes: bool = False,
         confirm: Confirm | None = None, book: PriceBook | None = None, say: Progress,
         timeout_s: float = WAIT_TIMEOUT_S) -> int:  # fmt: skip
    """Delete what rayrig created for cluster ``name``; return 0 if nothing carries its tag afterwards, else 1.

    The region is ``aws``'s, else ``region``, else the one ``up`` recorded here,
    else boto3's. A region other than the recorded one where nothing of the
    cluster is found is refused (``CloudError``): the cluster runs elsewhere.
    Before deleting anything it says how long the cluster has run and what its
    instances have cost (prices from ``book``); unless ``assume_yes``,
    ``confirm`` must accept (``CloudError`` when nobody can be asked or the
    answer is no). The record is forgotten only once nothing is left in the
    region it names.
    """
    if not _NAME.match(name):
        raise CloudError(f"cluster name {name!r}: expected 2-32 lower-case letters, digits and '-'")
    with cluster_lock(name, say):
        recorded = load_state(name).get("region")
        if aws is None:
            aws = connect(region or recorded)
        elsewhere = recorded is not None and recorded != aws.region
        strangers: list[str] = []
        res = find_created(aws, name, strangers)
        for line in strangers:
            say(line)
        if elsewhere and not res and not tagged_leftovers(aws, name):
            raise CloudError(
                f"nothing of cluster {name} is in {aws.region}, and {state_path(name)} records it in {recorded}: "
                f"run 'rayrig cloud down {name}' without --region (or with --region {recorded})"
            )
        if res:
            for line in bill(aws, name, book or PriceBook(aws)):
                say(line)
            if recorded_resources(load_state(name), aws.region) is None:
                say(
                    f"{state_path(name)} records no resources of cluster {name} in {aws.region}: what carries its tags "
                    f"{TAG_CLUSTER}={name} and rayrig:created=true is taken for the cluster's; check the list:"
                )
                for kind, rid in res.items():
                    say(f"  {KIND_TEXT[kind]} {rid}")
            if not assume_yes:
                if confirm is None:
                    raise CloudError(f"not confirmed: nobody to ask; pass --yes to take cluster {name} down")
                if not confirm(f"Take down cluster {name} ({len(res.items())} resource(s))?"):
                    raise CloudError(f"not confirmed; nothing of cluster {name} was deleted")
            say(f"Taking down cluster {name} in {aws.region}: {len(res.items())} resource(s)")
            failures = delete_resources(aws, res, say=say, timeout_s=timeout_s)
            for failure in failures:
                say(f"  could not delete: {failure}")
        elif recorded is None:
            say(
                f"rayrig created nothing for cluster {name} in {aws.region} (or it is gone already); "
                f"this machine has no record of it, so only {aws.region} was searched"
            )
        else:
            say(f"rayrig created nothing for cluster {name} in {aws.region} (or it is gone already)")
        left = tagged_leftovers(aws, name)
        if left:
            say(f"Still tagged {TAG_CLUSTER}={name} in {aws.region} ({len(left)}):")
            for line in left:
                say(f"  {line}")
            return 1
        say(f"Nothing is left with the tag {TAG_CLUSTER}={name} in {aws.region}.")
        if elsewhere:
            say(f"Kept {state_path(name)}: it records cluster {name} in {recorded}, which was not searched.")
        else:
            forget_state(name)
        return 0


def bill(aws: Aws, name: str, book: PriceBook, now: dt.datetime | None = None) -> list[str]:
    """What cluster ``name`` has run for and cost so far, as ``down`` says it before deleting."""
    now = now or utc_now()
    known = len(book.notices)  # a book shared by several clusters says each failure once
    live = [*created_filters(name), {"Name": "instance-state-name", "Values": ["pending", "running"]}]
    with aws_step(f"listing the running instances of cluster {name}", aws.region):
        running = [running_of(i) for i in instances_matching(aws, live)]
    if not running:
        return [f"Cluster {name} in {aws.region}: none of its instances is running; they cost nothing now."]
    births = [r.created_at or r.launched for r in running if r.created_at or r.launched]
    born = min(births) if births else None
    cost = cost_of(running, book.instance_rate, now)
    unknown = f" plus {', '.join(cost.unpriced)} (price unknown)" if cost.unpriced else ""
    since = f"launched {born:%Y-%m-%d %H:%M} UTC, up {span(now - born)}" if born else "launch time unknown"
    return [
        f"Cluster {name} in {aws.region}: {since}; {cost.instances} instance(s) running at "
        f"{usd(cost.hourly_usd)}/h{unknown}",
        f"Estimated cost so far: {usd(cost.so_far_usd)} (instances only, each since its launch; "
        f"prices: {sources_text(cost.sources)})",
        *book.notices[known:],
    ]


@dataclass
class ClusterInfo:
    """A cluster as ``rayrig cloud ls`` shows it, gathered from tags."""

    name: str
    region: str
    owner: str | None = None
    created_at: dt.datetime | None = None
    expires_at: dt.datetime | None = None
    expiry_text: str | None = None
    running: dict[str, int] = field(default_factory=dict)
    spot: int = 0
    instances: list[Running] = field(default_factory=list)  # the pending and running ones
    cost: Cost | None = None  # when listed with a price book
    resources: int = 0

    def expired(self, now: dt.datetime) -> bool:
        """Whether the cluster's expiry has passed (a cluster without a readable expiry never expires)."""
        return self.expires_at is not None and self.expires_at <= now


def list_clusters(aws: Aws, book: PriceBook | None = None, now: dt.datetime | None = None) -> list[ClusterInfo]:
    """Every cluster in the region that carries rayrig's tags, sorted by name; with ``book``, each with what
    its instances cost per hour and have cost since their launch (at ``now``)."""
    ec2 = aws.ec2
    tagged = [{"Name": "tag-key", "Values": [TAG_CLUSTER]}]
    clusters: dict[str, ClusterInfo] = {}
    expiries: dict[str, list[str]] = {}

    def note(resource: Mapping[str, Any], launched: dt.datetime | None = None) -> ClusterInfo:
        tags = tags_of(resource)
        info = clusters.setdefault(tags[TAG_CLUSTER], ClusterInfo(tags[TAG_CLUSTER], aws.region))
        info.resources += 1
        info.owner = info.owner or tags.get(TAG_OWNER)
        if TAG_EXPIRES in tags:
            expiries.setdefault(info.name, []).append(tags[TAG_EXPIRES])
        born = parse_time(tags.get(TAG_CREATED_AT)) or launched
        if born and (info.created_at is None or born < info.created_at):
            info.created_at = born
        return info

    with aws_step("listing clusters", aws.region):
        for instance in instances_matching(aws, tagged):
            if instance["State"]["Name"] == "terminated":
                continue
            info = note(instance, instance.get("LaunchTime"))
            if instance["State"]["Name"] in ("pending", "running"):
                itype = instance["InstanceType"]
                info.running[itype] = info.running.get(itype, 0) + 1
                info.spot += instance.get("InstanceLifecycle") == "spot"
                info.instances.append(running_of(instance))
        for group in paginate(ec2, "describe_security_groups", "SecurityGroups", Filters=tagged):
            note(group)
        for vpc in paginate(ec2, "describe_vpcs", "Vpcs", Filters=tagged):
            note(vpc)
        for key in ec2.describe_key_pairs(Filters=tagged).get("KeyPairs", []):
            note(key)
        for pg in ec2.describe_placement_groups(Filters=tagged).get("PlacementGroups", []):
            if pg.get("State") not in ("deleted", "deleting"):
                note(pg)
    for info in clusters.values():
        texts = expiries.get(info.name, [])
        parsed = [t for t in map(parse_time, texts) if t]
        info.expires_at = min(parsed) if parsed else None
        info.expiry_text = min(texts) if texts else None
        if book is not None:
            info.cost = cost_of(info.instances, book.instance_rate, now or utc_now())
    return [clusters[n] for n in sorted(clusters)]


@contextlib.contextmanager
def reap_lock() -> Iterator[None]:
    """Hold the reap lock (``<state>/ec2/reap.lock``) for the block; ``CloudError`` if another reap holds it."""
    folder = private_state_dir()
    fd = os.open(folder / "reap.lock", os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(fd, "r+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CloudError(f"another 'rayrig cloud reap' is running (lock {folder / 'reap.lock'})") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def reap(
    region: str | None = None,
    *,
    assume_yes: bool = False,
    confirm: Confirm | None = None,
    now: dt.datetime | None = None,
    say: Progress,
    timeout_s: float = WAIT_TIMEOUT_S,
) -> int:
    """Take down every expired cluster in the region that this machine brought up; 0 when all of them are gone,
    else 1.

    Safe from cron (with ``assume_yes``): it goes by this machine's record, never by tags alone. A cluster is
    expired when the expiry its record holds (``up`` wrote it, ``extend`` moves it) has passed; a
    ``rayrig:expires-at`` tag that says otherwise neither spares nor ends it, and is named. Taking a cluster
    down deletes what its record lists (see ``down``). A cluster that carries rayrig's tags without a record
    here is named as not this machine's to reap, and left. Two reaps do not run at once. Without
    ``assume_yes`` it asks ``confirm``; without either it only lists what it would take down.
    """
    now = now or utc_now()
    with reap_lock():
        aws = connect(region)
        tagged = {c.name: c for c in list_clusters(aws)}
        names = sorted(set(tagged) | set(recorded_clusters(aws.region)))
        expired: list[tuple[str, dt.datetime, str | None]] = []
        for name in names:
            when, lines = reap_verdict(name, tagged.get(name), load_state(name), aws.region)
            for line in lines:
                say(line)
            if when is not None and when <= now:
                expired.append((name, when, tagged[name].owner if name in tagged else None))
        if not expired:
            say(f"No expired cluster in {aws.region} ({len(names)} cluster(s) checked).")
            return 0
        for name, when, owner in expired:
            say(f"expired: {name} (owner {owner or '?'}, expired {when:%Y-%m-%d %H:%M} UTC, as its record says)")
        if not assume_yes:
            if confirm is None:
                say("Dry run: pass --yes to take these down.")
                return 0
            if not confirm(f"Take down {len(expired)} expired cluster(s)?"):
                say("Nothing was taken down.")
                return 0
        status = 0
        book = PriceBook(aws)
        for name, _, _ in expired:
            try:
                status |= down(name, aws=aws, assume_yes=True, book=book, say=say, timeout_s=timeout_s)
            except CloudError as exc:
                say(f"could not take down {name}: {exc}")
                status = 1
        return status


def reap_verdict(
    name: str, info: ClusterInfo | None, state: Mapping[str, Any], region: str
) -> tuple[dt.datetime | None, list[str]]:
    """The expiry ``reap`` goes by for cluster ``name`` (None: leave it) and what to say about it.

    ``info`` is the cluster as its tags show it (None: nothing carries them), ``state`` this machine's record.
    """
    path = state_path(name)
    if not state or state.get("region") != region:
        return None, [
            f"not ours to reap: {name} carries rayrig's tags in {region}, but this machine has no record of it "
            f"({path}); the machine that brought it up reaps it. To take it down by hand: "
            f"'rayrig cloud down {name} --region {region}' (it lists what it would delete, and asks)"
        ]
    when = recorded_expiry(state, region)
    if when is None:
        return None, [
            f"skipping {name}: {path} records no expiry (an older rayrig wrote it); "
            f"'rayrig cloud extend {name} DURATION' records one, 'rayrig cloud down {name}' takes it down"
        ]
    lines = []
    if info is not None and info.expiry_text is not None and info.expires_at != when:
        lines.append(
            f"{name}: its tag {TAG_EXPIRES} says {info.expiry_text!r}, but {path} records {state['expires_at']}: "
            f"reap goes by the record (anyone allowed to tag the cluster's resources can move the tag)"
        )
    return when, lines
