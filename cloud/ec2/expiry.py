"""Clusters that end on time by themselves: each instance powers itself off at its expiry; ``extend`` moves it.

Every instance is launched with ``InstanceInitiatedShutdownBehavior=terminate``,
instance tags readable through IMDS, and user data (cloud-config, which cloud-init
reads on every AMI family rayrig knows) that installs ``rayrig-expiry.timer``.
Once a minute its service reads the instance's own tag ``rayrig:expires-at``
through IMDSv2 and powers the instance off, which terminates it, once that time
has passed (the script: ``templates/expiry/rayrig-expiry-check``). When the tag
cannot be read, or is gone or unreadable, the last value read holds, else the
one baked into the user data at launch.

So ``extend`` only moves the tag, on every resource the record lists (without
a record here, on what rayrig created by the tags), and writes the new expiry
into the record, which ``up`` and ``reap`` go by: no SSH, and the timers follow
within a minute. The timers never follow a tag moved earlier, since ``extend``
never moves it so. ``reap`` remains for what the instances leave behind (the
network, the security group, the key pair, the placement group).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from importlib.resources import files as package_files
from typing import Any

import jinja2

from cloud.ec2.aws import (
    TAG_CLUSTER,
    TAG_CREATED,
    TAG_EXPIRES,
    Aws,
    CloudError,
    Progress,
    aws_step,
    connect,
    instances_matching,
    iso,
    paginate,
    parse_time,
    tag_filter,
    tags_of,
    utc_now,
)
from cloud.ec2.spec import MAX_TTL, parse_ttl
from cloud.ec2.state import (
    cluster_lock,
    foreign_line,
    load_state,
    record_expiry,
    recorded_expiry,
    recorded_resources,
    split_recorded,
    state_path,
    stranger_line,
)

#: Where the timer's script is installed on an instance.
CHECK_PATH = "/usr/local/sbin/rayrig-expiry-check"
#: The units the user data installs, by name.
UNITS = ("rayrig-expiry.service", "rayrig-expiry.timer")
#: How often the timer checks the tag (what ``extend`` tells the user to expect).
CHECK_EVERY = "a minute"
#: A cluster's name, as a spec's ``name`` (spec_schema.py) must be.
CLUSTER_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}[a-z0-9]\Z")
#: Resources per ``CreateTags`` call.
TAG_BATCH = 500

_TEMPLATES = package_files("cloud.ec2") / "templates" / "expiry"
_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


def resource_text(name: str) -> str:
    """The text of ``templates/expiry/NAME`` as shipped."""
    return (_TEMPLATES / name).read_text(encoding="utf-8")


def render_units(expires_at: str) -> dict[str, str]:
    """The units' text by name; the service carries ``expires_at``, the expiry at launch."""
    return {
        "rayrig-expiry.service": _ENV.from_string(resource_text("rayrig-expiry.service.j2")).render(
            expires_at=expires_at
        ),
        "rayrig-expiry.timer": resource_text("rayrig-expiry.timer"),
    }


def user_data(expires_at: str) -> str:
    """The cloud-config that installs the script and the timer, with ``expires_at`` (a tag value) baked in.

    >>> user_data("2026-01-31T12:00:00Z").splitlines()[0]
    '#cloud-config'
    """
    if parse_time(expires_at) is None:
        raise ValueError(f"expected an expiry such as '2026-01-31T12:00:00Z', found {expires_at!r}")
    units = render_units(expires_at)
    return _ENV.from_string(resource_text("user-data.yaml.j2")).render(
        check=resource_text("rayrig-expiry-check"),
        service=units["rayrig-expiry.service"],
        timer=units["rayrig-expiry.timer"],
    )


def launch_params(expires_at: str) -> dict[str, Any]:
    """What ``RunInstances`` gets for self-expiry, besides ``MetadataOptions.InstanceMetadataTags``:
    powering off terminates, and the user data that powers off at ``expires_at`` (or the tag's later value)."""
    return {"InstanceInitiatedShutdownBehavior": "terminate", "UserData": user_data(expires_at)}


def refuse_expired(name: str, expires_at: dt.datetime | None, now: dt.datetime, launches: bool) -> None:
    """``CloudError`` when ``up`` would launch or start instances of a cluster whose expiry has passed:
    their timers would power them off within a minute of booting."""
    if launches and expires_at is not None and expires_at <= now:
        raise CloudError(
            f"cluster {name} expired at {expires_at:%Y-%m-%d %H:%M} UTC: instances launched or started now would "
            f"power themselves off within {CHECK_EVERY}; run 'rayrig cloud extend {name} DURATION' first "
            f"(or 'rayrig cloud down {name}'); nothing was created"
        )


def name_problem(name: str) -> str | None:
    """What is wrong with cluster name ``name`` (as a spec's ``name`` must be), or None."""
    if CLUSTER_NAME.match(name):
        return None
    return f"NAME = {name!r}: expected a cluster name, 2-32 lower-case letters, digits and '-', starting with a letter"


def parse_duration(text: str) -> dt.timedelta:
    """A duration for ``extend`` (``12h``, ``1d``, ``30m``, ``1d12h``) above zero; ``ValueError`` naming it."""
    try:
        delta = parse_ttl(text)
    except ValueError:
        delta = dt.timedelta(0)
    if delta <= dt.timedelta(0):
        raise ValueError(f"DURATION = {text!r}: expected a duration above 0 such as '12h', '1d' or '30m'")
    return delta


@dataclass
class Extension:
    """What ``extend`` did: the expiry before and after, and how many resources of each kind carry it now."""

    name: str
    region: str
    old: dt.datetime | None
    old_text: str | None
    new: dt.datetime
    instances: int
    others: int


def extend(name: str, duration: dt.timedelta, region: str | None = None, *, aws: Aws | None = None,
           now: dt.datetime | None = None, say: Progress) -> Extension:  # fmt: skip
    """Move cluster ``name``'s expiry to ``max(now, current expiry) + duration`` on all of the cluster.

    The current expiry is the one this machine's record holds (what ``reap``
    goes by), else the earliest readable ``rayrig:expires-at`` of the cluster;
    an expired cluster gets ``duration`` from
    now, never less. The new expiry is at most 30 days from now, as a spec's
    ttl. The region is ``aws``'s, else ``region``, else the one ``up`` recorded
    here, else boto3's. A cluster of which nothing is found is a ``CloudError``.
    It holds the cluster's lock, as ``up`` and ``down`` do. A run that failed half
    way is completed by running it again: the earliest expiry still counts.
    """
    problem = name_problem(name)
    if problem:
        raise CloudError(problem)
    with cluster_lock(name, say):  # an up running meanwhile would launch with the old expiry
        return _extend(name, duration, region, aws=aws, now=now or utc_now(), say=say)


def _extend(name: str, duration: dt.timedelta, region: str | None, *, aws: Aws | None, now: dt.datetime,
            say: Progress) -> Extension:  # fmt: skip
    state = load_state(name)
    if aws is None:
        aws = connect(region or state.get("region"))
    found = _tagged(aws, name)
    members, strangers = split_recorded(state, aws.region, [i for _, i in found["instances"]])
    for stranger in strangers:
        say(stranger_line(name, stranger))
    found["instances"] = [(i["InstanceId"], i) for i in members]
    for line in _keep_recorded(name, found, recorded_resources(state, aws.region)):
        say(line)
    if not any(found.values()):
        raise CloudError(
            f"no cluster {name} in {aws.region}: nothing there carries the tag {TAG_CLUSTER}={name} "
            f"('rayrig cloud ls' lists the clusters; pass --region if it runs elsewhere)"
        )
    texts = [tags_of(r).get(TAG_EXPIRES) for kind in found.values() for _, r in kind]
    readable = [t for t in map(parse_time, texts) if t]
    tagged_old = min(readable) if readable else None
    recorded_old = recorded_expiry(state, aws.region)
    if recorded_old is not None and tagged_old not in (None, recorded_old):
        say(
            f"  the tag {TAG_EXPIRES} says {tagged_old:%Y-%m-%d %H:%M} UTC, but {state_path(name)} records "
            f"{recorded_old:%Y-%m-%d %H:%M} UTC: extending from the record"
        )
    old = recorded_old or tagged_old
    new = max(now, old or now) + duration
    if new > now + MAX_TTL:
        since = f"its expiry, {old:%Y-%m-%d %H:%M} UTC" if old and old > now else "now"
        raise CloudError(
            f"DURATION: {_span(duration)} from {since} is {new:%Y-%m-%d %H:%M} UTC, more than 30 days from now; "
            f"expected an expiry of cluster {name} no later than {now + MAX_TTL:%Y-%m-%d %H:%M} UTC"
        )
    value = iso(new)
    with aws_step(f"moving the tag {TAG_EXPIRES} of cluster {name}", aws.region):
        for kind, resources in found.items():
            ids = [rid for rid, _ in resources]
            for start in range(0, len(ids), TAG_BATCH):  # one call per kind, each within CreateTags' limit
                batch = ids[start : start + TAG_BATCH]
                aws.ec2.create_tags(Resources=batch, Tags=[{"Key": TAG_EXPIRES, "Value": value}])
            if ids:
                say(f"  {TAG_EXPIRES}={value} on {len(ids)} {kind}: {', '.join(ids)}")
    if state.get("region") == aws.region:
        record_expiry(name, new)
    else:
        say(
            f"  this machine has no record of cluster {name} in {aws.region}: the machine that brought it up "
            f"still records its old expiry, and its 'rayrig cloud reap' goes by that; extend it there"
        )
    live = sum(1 for _, i in found["instances"] if i["State"]["Name"] in ("pending", "running"))
    others = sum(len(v) for k, v in found.items() if k != "instances")
    return Extension(name, aws.region, old, min((t for t in texts if t), default=None), new, live, others)


def _span(delta: dt.timedelta) -> str:
    """``delta`` as a user wrote it: ``1d12h``, ``30m``."""
    minutes = int(delta.total_seconds()) // 60
    days, rest = divmod(minutes, 1440)
    hours, minutes = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n) or "0m"


#: The kinds ``_tagged`` finds that the record lists, by its kind: (record's kind, the key it records).
_RECORDED_AS = {
    "security groups": ("security_groups", "GroupId"),
    "key pairs": ("key_pairs", "KeyName"),
    "placement groups": ("placement_groups", "GroupName"),
    "route tables": ("route_tables", "RouteTableId"),
    "subnets": ("subnets", "SubnetId"),
    "internet gateways": ("internet_gateways", "InternetGatewayId"),
    "VPCs": ("vpcs", "VpcId"),
}


def _keep_recorded(name: str, found: dict[str, list[tuple[str, dict[str, Any]]]],
                   recorded: dict[str, set[str]] | None) -> list[str]:  # fmt: skip
    """Leave in ``found`` (``_tagged``'s, its instances already the members) what the record lists: volumes and
    network interfaces of the members, and the recorded resources of each other kind; return a line for each
    one left out. Without a record (None), nothing is left out."""
    if recorded is None:
        return []
    members = {rid for rid, _ in found["instances"]}
    attached = {
        "volumes": lambda v: {a.get("InstanceId") for a in v.get("Attachments", [])},
        "network interfaces": lambda n: {n.get("Attachment", {}).get("InstanceId")},
    }
    lines: list[str] = []
    for kind, resources in found.items():
        if kind in attached:
            keep = [(rid, r) for rid, r in resources if attached[kind](r) & members]
        elif kind in _RECORDED_AS:
            field_name, key = _RECORDED_AS[kind]
            keep = [(rid, r) for rid, r in resources if r.get(key) in recorded[field_name]]
        else:
            continue
        lines += [foreign_line(name, f"{kind.rstrip('s')} {rid}") for rid, r in resources if (rid, r) not in keep]
        found[kind] = keep
    return lines


def _tagged(aws: Aws, name: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """The cluster's resources that carry, or were created with, the expiry: ``{kind: [(id, described)]}``.

    Those are what rayrig created (``rayrig:created=true``) and anything else of the
    cluster that carries ``rayrig:expires-at``; terminated instances are left out.
    """
    ec2 = aws.ec2
    filters = [tag_filter(TAG_CLUSTER, name)]

    def ours(resource: dict[str, Any]) -> bool:
        tags = tags_of(resource)
        return tags.get(TAG_CREATED) == "true" or TAG_EXPIRES in tags

    found: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    with aws_step(f"listing the resources of cluster {name}", aws.region):
        found["instances"] = [
            (i["InstanceId"], i) for i in instances_matching(aws, filters)
            if i["State"]["Name"] not in ("shutting-down", "terminated")
        ]  # fmt: skip
        found["volumes"] = [(v["VolumeId"], v) for v in paginate(ec2, "describe_volumes", "Volumes", Filters=filters)]
        found["network interfaces"] = [
            (n["NetworkInterfaceId"], n)
            for n in paginate(ec2, "describe_network_interfaces", "NetworkInterfaces", Filters=filters)
        ]
        found["security groups"] = [
            (g["GroupId"], g) for g in paginate(ec2, "describe_security_groups", "SecurityGroups", Filters=filters)
        ]
        found["key pairs"] = [(k["KeyPairId"], k) for k in ec2.describe_key_pairs(Filters=filters).get("KeyPairs", [])]
        found["placement groups"] = [
            (p["GroupId"], p)
            for p in ec2.describe_placement_groups(Filters=filters).get("PlacementGroups", [])
            if p.get("State") not in ("deleted", "deleting")
        ]
        for kind, operation, key, id_key in (
            ("route tables", "describe_route_tables", "RouteTables", "RouteTableId"),
            ("subnets", "describe_subnets", "Subnets", "SubnetId"),
            ("internet gateways", "describe_internet_gateways", "InternetGateways", "InternetGatewayId"),
            ("VPCs", "describe_vpcs", "Vpcs", "VpcId"),
        ):
            found[kind] = [(r[id_key], r) for r in paginate(ec2, operation, key, Filters=filters)]
    return {kind: [(rid, r) for rid, r in resources if ours(r)] for kind, resources in found.items()}
