"""EC2 clusters for a sprint: create, inventory, tear down, list and reap (``rayrig cloud``).

``rayrig cloud up SPEC`` ensures, idempotently, what a cluster spec
(``cloud/spec.py``) describes:

1. a VPC with an internet gateway, a route table and a subnet (or the VPC and
   subnet the spec names, which rayrig never tags as its own nor deletes);
2. a security group ``rayrig-NAME``: everything within the group (the Ray ports,
   NCCL and EFA included) in and out, SSH (tcp 22) from the admin CIDRs only,
   and outbound internet unless the spec turns it off;
3. the key pair ``rayrig-NAME`` imported from the spec's public key;
4. a cluster placement group ``rayrig-NAME`` for the workers (when asked for);
5. the head and the workers: IMDSv2 required, an encrypted gp3 root volume,
   spot or on-demand;

then waits until the instances run and SSH answers. Before it creates anything
it prints what it will create with an hourly cost estimate and asks (``--yes``
skips the question). Whatever a run creates is tagged ``rayrig:cluster``,
``rayrig:role``, ``rayrig:owner``, ``rayrig:expires-at`` and
``rayrig:created=true``; a second run finds it by those tags and creates
nothing. A run that fails half way removes what it created and says what failed.

``rayrig cloud down NAME`` deletes what carries ``rayrig:created=true`` and the
cluster's tag, then lists whatever still carries the tag (exit 1 if anything
does). ``rayrig cloud ls`` lists clusters; ``rayrig cloud reap`` takes down the
expired ones. ``inventories/ec2.py`` turns a cluster's instances into pyinfra
hosts (``cluster_hosts``).

Every boto3 client comes from ``Aws.client``: credentials from boto3's usual
chain, the endpoint from ``RAYRIG_AWS_ENDPOINT_URL`` (or boto3's own
``AWS_ENDPOINT_URL``), retries with backoff for throttling. AWS errors become
``CloudError``: one line that says what failed and what to do, never a secret.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
    ProfileNotFound,
    ReadTimeoutError,
    SSOError,
    TokenRetrievalError,
)

from cloud import prices
from cloud.spec import ClusterSpec, GroupSpec, SpecError, load_spec
from cloud.ssh import ssh_answers
from deploy.paths import state_dir
from deploy.ports import ray_port_ranges

Progress = Callable[[str], None]
Confirm = Callable[[str], bool]
SshProbe = Callable[[str, int, float], bool]

TAG_CLUSTER = "rayrig:cluster"
TAG_ROLE = "rayrig:role"
TAG_OWNER = "rayrig:owner"
TAG_EXPIRES = "rayrig:expires-at"
TAG_CREATED = "rayrig:created"
TAG_CREATED_AT = "rayrig:created-at"
TAG_GROUP = "rayrig:group"
TAG_SSH_USER = "rayrig:ssh-user"

#: Instance states that still cost money or can come back.
LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]

#: Seconds between two polls of AWS while waiting (tests lower it).
POLL_S = 5.0
#: Seconds between two rounds of SSH probes.
SSH_POLL_S = 5.0
#: Default limit for each wait (instances running, SSH, termination, deletions).
WAIT_TIMEOUT_S = 900.0

_CREDENTIAL_CODES = {
    "AuthFailure", "UnrecognizedClientException", "InvalidClientTokenId", "SignatureDoesNotMatch",
    "ExpiredToken", "ExpiredTokenException", "RequestExpired", "InvalidAccessKeyId", "IncompleteSignature",
    "MissingAuthenticationToken",
}  # fmt: skip
_THROTTLE_CODES = {
    "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException",
    "RequestThrottled", "RequestThrottledException", "SlowDown", "EC2ThrottledException",
}  # fmt: skip
_CAPACITY_CODES = {
    "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity", "InsufficientCapacityOnOutpost", "SpotMaxPriceTooLow",
    "InsufficientFreeAddressesInSubnet", "Unsupported",
}  # fmt: skip
_QUOTA_CODES = {
    "InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "VpcLimitExceeded",
    "InternetGatewayLimitExceeded", "SecurityGroupLimitExceeded", "RulesPerSecurityGroupLimitExceeded",
    "ResourceLimitExceeded", "RouteTableLimitExceeded", "SubnetLimitExceeded", "KeyPairLimitExceeded",
    "PlacementGroupLimitExceeded", "VolumeLimitExceeded", "MaxIOPSLimitExceeded", "ServiceQuotaExceededException",
}  # fmt: skip
_AMI_CODES = {"InvalidAMIID.NotFound", "InvalidAMIID.Malformed", "InvalidAMIID.Unavailable", "ParameterNotFound"}
_DENIED_CODES = {"UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "OptInRequired", "Blocked"}
_GONE_CODES = {
    "InvalidInstanceID.NotFound", "InvalidGroup.NotFound", "InvalidKeyPair.NotFound", "InvalidPlacementGroup.Unknown",
    "InvalidRouteTableID.NotFound", "InvalidSubnetID.NotFound", "InvalidInternetGatewayID.NotFound",
    "InvalidVpcID.NotFound", "InvalidAssociationID.NotFound", "Gateway.NotAttached", "InvalidVolume.NotFound",
    "InvalidNetworkInterfaceID.NotFound",
}  # fmt: skip
_IN_USE_CODES = {"DependencyViolation", "InvalidGroup.InUse", "InvalidPlacementGroup.InUse", "VolumeInUse"}


class CloudError(RuntimeError):
    """An EC2 operation failed. The message is one line that says what and what to do."""


# --------------------------------------------------------------------------- AWS access


def endpoint_url() -> str | None:
    """The AWS endpoint override: ``RAYRIG_AWS_ENDPOINT_URL``, else None (boto3 then honours
    its own ``AWS_ENDPOINT_URL``, else talks to AWS)."""
    return os.environ.get("RAYRIG_AWS_ENDPOINT_URL") or None


def aws_session(region: str | None) -> boto3.session.Session:
    """A boto3 session for ``region``; credentials come from boto3's usual chain."""
    return boto3.session.Session(region_name=region)


@dataclass
class Aws:
    """A boto3 session for one region and the clients made from it (the one place clients are made)."""

    session: boto3.session.Session
    region: str
    _clients: dict[str, Any] = field(default_factory=dict)

    def client(self, service: str) -> Any:
        """The ``service`` client: endpoint override, retries with backoff (throttling, 5xx), timeouts.

        ``RAYRIG_AWS_MAX_ATTEMPTS`` (default 8) bounds the attempts per call.
        """
        if service not in self._clients:
            config = Config(
                retries={"mode": "standard", "total_max_attempts": _max_attempts()},
                connect_timeout=10,
                read_timeout=60,
                user_agent_extra="rayrig",
            )
            with aws_step(f"setting up the {service} client"):
                self._clients[service] = self.session.client(
                    service, region_name=self.region, endpoint_url=endpoint_url(), config=config
                )
        return self._clients[service]

    @property
    def ec2(self) -> Any:
        """The EC2 client."""
        return self.client("ec2")

    @property
    def ssm(self) -> Any:
        """The SSM client (to resolve AMI parameters)."""
        return self.client("ssm")


#: One ``Aws`` per (region, endpoint) and process: sessions and clients are costly to make
#: (botocore parses the EC2 API model for each) and safe to share.
_CONNECTIONS: dict[tuple[str | None, str | None], Aws] = {}


def connect(region: str | None) -> Aws:
    """The ``Aws`` for ``region`` (boto3's configured region when None), made once per process."""
    key = (region, endpoint_url())
    if key in _CONNECTIONS:
        return _CONNECTIONS[key]
    try:
        session = aws_session(region)
    except ProfileNotFound as exc:
        raise CloudError(f"AWS profile not found: {exc.kwargs.get('profile')} (check AWS_PROFILE)") from None
    resolved = region or session.region_name
    if not resolved:
        raise CloudError("no AWS region: pass --region or set AWS_REGION (or a region in ~/.aws/config)")
    aws = _CONNECTIONS.setdefault((resolved, key[1]), Aws(session, resolved))
    _CONNECTIONS[key] = aws
    return aws


def forget_connections() -> None:
    """Drop the cached sessions and clients (the next ``connect`` makes new ones)."""
    _CONNECTIONS.clear()


def _max_attempts() -> int:
    try:
        return max(1, int(os.environ.get("RAYRIG_AWS_MAX_ATTEMPTS", "8")))
    except ValueError:
        return 8


def _scrub(text: str) -> str:
    """``text`` without anything that looks like a credential."""
    for var in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ACCESS_KEY_ID"):
        value = os.environ.get(var)
        if value and len(value) >= 8:
            text = text.replace(value, "***")
    return re.sub(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b", "***", text)


def _error_code(exc: BaseException) -> str:
    return exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""


def explain_error(exc: BaseException, doing: str, region: str | None = None) -> str:
    """One line for a boto3/botocore error: what failed, why, and what to do. Never a credential."""
    where = f" in {region}" if region else ""
    if isinstance(exc, NoCredentialsError):
        line = (
            f"{doing}: no AWS credentials found (boto3 looks at AWS_PROFILE, the AWS_* environment variables, "
            "~/.aws/credentials and config, SSO and instance roles)"
        )
    elif isinstance(exc, PartialCredentialsError):
        line = f"{doing}: incomplete AWS credentials ({exc.kwargs.get('cred_var', 'a value')} is missing)"
    elif isinstance(exc, (SSOError, TokenRetrievalError)):
        line = f"{doing}: the AWS SSO session has expired or is missing; run 'aws sso login'"
    elif isinstance(exc, NoRegionError):
        line = f"{doing}: no AWS region; pass --region or set AWS_REGION"
    elif isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ConnectionClosedError, ReadTimeoutError)):
        url = exc.kwargs.get("endpoint_url", "the AWS endpoint")
        line = f"{doing}: cannot reach {url}; check the network (and RAYRIG_AWS_ENDPOINT_URL if set)"
    elif isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code", "Unknown")
        message = (error.get("Message") or "").strip().splitlines()[0] if error.get("Message") else ""
        message = message.split(" Encoded authorization failure message:")[0][:300]
        attempts = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) + 1
        if code in _CREDENTIAL_CODES:
            line = (
                f"{doing}: AWS rejected the credentials ({code}); check which ones boto3 picks up "
                "(AWS_PROFILE, the environment, ~/.aws); they are not shown here"
            )
        elif code in _THROTTLE_CODES:
            line = f"{doing}: AWS kept throttling the requests ({code}, {attempts} attempts); wait a minute and retry"
        elif code in _CAPACITY_CODES:
            line = (
                f"{doing}: AWS has no capacity for it{where} right now ({code}: {message}); try another "
                "availability zone (network.availability_zone), another instance type, or on-demand instead of spot"
            )
        elif code in _QUOTA_CODES:
            line = (
                f"{doing}: an account quota is reached{where} ({code}: {message}); ask for more in the "
                "Service Quotas console (EC2 vCPU quotas are per instance family and per market)"
            )
        elif code in _AMI_CODES:
            line = f"{doing}: the AMI is not available{where} ({code}: {message}); check [ami] in the spec"
        elif code in _DENIED_CODES:
            line = f"{doing}: not permitted ({code}); the IAM policy of these credentials must allow it"
        else:
            line = f"{doing}: AWS error {code}: {message}"
    else:
        line = f"{doing}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return _scrub(line)


@contextlib.contextmanager
def aws_step(doing: str, region: str | None = None) -> Iterator[None]:
    """Turn boto3/botocore errors raised inside the block into a one-line ``CloudError``."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise CloudError(explain_error(exc, doing, region)) from None


def _paginate(client: Any, operation: str, key: str, **kwargs: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in client.get_paginator(operation).paginate(**kwargs):
        items.extend(page.get(key, []))
    return items


def _tags(resource: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", []) or []}


def _tag_filter(key: str, *values: str) -> dict[str, Any]:
    return {"Name": f"tag:{key}", "Values": list(values)}


def _created_filters(name: str, role: str | None = None) -> list[dict[str, Any]]:
    filters = [_tag_filter(TAG_CLUSTER, name), _tag_filter(TAG_CREATED, "true")]
    if role:
        filters.append(_tag_filter(TAG_ROLE, role))
    return filters


def _instances(aws: Aws, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    reservations = _paginate(aws.ec2, "describe_instances", "Reservations", Filters=filters)
    return [i for r in reservations for i in r.get("Instances", [])]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def _iso(when: dt.datetime) -> str:
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> dt.datetime | None:
    """A ``rayrig:expires-at`` / ``rayrig:created-at`` tag value as an aware datetime, or None."""
    if not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


# --------------------------------------------------------------------------- Ray ports and rules


def ray_ports(host_data: Mapping[str, Any] | None = None) -> dict[str, int]:
    """The cluster's Ray ports: ``ray_ports`` from inventories/group_data/all.py, with the spec's overrides."""
    from deploy.settings import merge

    return dict(merge(host_data or {})["ray_ports"])


class Rule(NamedTuple):
    """One security group rule, normalised: direction, protocol, ports and one peer."""

    direction: str  # "ingress" or "egress"
    protocol: str  # "-1" (all), "tcp", "udp", "icmp", ...
    from_port: int | None
    to_port: int | None
    peer_kind: str  # "sg", "cidr", "cidr6" or "prefix-list"
    peer: str

    def covers(self, lo: int, hi: int) -> bool:
        """Whether this rule admits any TCP or UDP port in lo..hi."""
        if self.protocol == "-1":
            return True
        if self.protocol not in ("tcp", "udp", "6", "17") or self.from_port is None or self.to_port is None:
            return False
        return self.from_port <= hi and self.to_port >= lo

    def permission(self, description: str | None = None) -> dict[str, Any]:
        """The rule as an EC2 ``IpPermissions`` entry."""
        perm: dict[str, Any] = {"IpProtocol": self.protocol}
        if self.protocol != "-1" and self.from_port is not None:
            perm["FromPort"], perm["ToPort"] = self.from_port, self.to_port
        extra = {"Description": description} if description else {}
        if self.peer_kind == "sg":
            perm["UserIdGroupPairs"] = [{"GroupId": self.peer, **extra}]
        elif self.peer_kind == "cidr":
            perm["IpRanges"] = [{"CidrIp": self.peer, **extra}]
        elif self.peer_kind == "cidr6":
            perm["Ipv6Ranges"] = [{"CidrIpv6": self.peer, **extra}]
        else:
            perm["PrefixListIds"] = [{"PrefixListId": self.peer, **extra}]
        return perm

    def __str__(self) -> str:
        ports = "all traffic" if self.protocol == "-1" else f"{self.protocol} {self.from_port}-{self.to_port}"
        word = "from" if self.direction == "ingress" else "to"
        return f"{self.direction} {ports} {word} {self.peer}"


def rules_of(group: Mapping[str, Any]) -> set[Rule]:
    """The rules of a described security group, normalised."""
    rules: set[Rule] = set()
    for direction, key in (("ingress", "IpPermissions"), ("egress", "IpPermissionsEgress")):
        for perm in group.get(key, []):
            proto = str(perm.get("IpProtocol", "-1"))
            lo = perm.get("FromPort") if proto != "-1" else None
            hi = perm.get("ToPort") if proto != "-1" else None
            peers = [("sg", p["GroupId"]) for p in perm.get("UserIdGroupPairs", [])]
            peers += [("cidr", p["CidrIp"]) for p in perm.get("IpRanges", [])]
            peers += [("cidr6", p["CidrIpv6"]) for p in perm.get("Ipv6Ranges", [])]
            peers += [("prefix-list", p["PrefixListId"]) for p in perm.get("PrefixListIds", [])]
            rules.update(Rule(direction, proto, lo, hi, kind, peer) for kind, peer in peers)
    return rules


def desired_rules(group_id: str, spec: ClusterSpec) -> dict[Rule, str]:
    """The exact rules of the cluster's security group, each with its description.

    Everything within the group (the Ray ports, NCCL and EFA included) in and
    out; SSH from the admin CIDRs only; outbound internet if the spec keeps it.
    """
    rules = {
        Rule("ingress", "-1", None, None, "sg", group_id): "rayrig: all traffic within the cluster (Ray, NCCL, EFA)",
        Rule("egress", "-1", None, None, "sg", group_id): "rayrig: all traffic within the cluster (EFA needs it)",
    }
    for cidr in spec.admin_cidrs:
        kind = "cidr6" if ":" in cidr else "cidr"
        rules[Rule("ingress", "tcp", 22, 22, kind, cidr)] = "rayrig: SSH from an admin CIDR"
    if spec.network.internet_egress:
        rules[Rule("egress", "-1", None, None, "cidr", "0.0.0.0/0")] = "rayrig: outbound internet (packages, images)"
    return rules


def exposed_ray_ports(rules: Iterable[Rule], ports: Mapping[str, int]) -> list[str]:
    """Every ingress rule that lets an address range (not the group itself) reach a Ray port."""
    problems = []
    for rule in sorted(rules):
        if rule.direction != "ingress" or rule.peer_kind == "sg":
            continue
        for lo, hi in ray_port_ranges(ports):
            if rule.covers(lo, hi):
                problems.append(f"{rule} reaches Ray port(s) {lo}-{hi}")
    return problems


# --------------------------------------------------------------------------- SSH


def wait_for_ssh(
    hosts: Iterable[str],
    probe: SshProbe = ssh_answers,
    timeout_s: float = WAIT_TIMEOUT_S,
    port: int = 22,
    say: Progress = print,
) -> list[str]:
    """Probe ``hosts`` until each answers; return those that did not within ``timeout_s``."""
    pending = list(dict.fromkeys(hosts))
    deadline = time.monotonic() + timeout_s
    while pending:
        pending = [h for h in pending if not probe(h, port, min(5.0, max(timeout_s, 0.1)))]
        if not pending or time.monotonic() >= deadline:
            break
        say(f"  SSH not answering yet on {', '.join(pending)}")
        time.sleep(SSH_POLL_S)
    return pending


# --------------------------------------------------------------------------- state


def ec2_state_dir() -> Path:
    """``<state>/ec2``: one ``NAME.json`` per cluster brought up here, and ``current``."""
    return state_dir() / "ec2"


def save_state(spec: ClusterSpec, ssh_user: str) -> Path:
    """Record the cluster (spec path, region, keys) and make it the current cluster."""
    folder = ec2_state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{spec.name}.json"
    record = {
        "name": spec.name,
        "region": spec.region,
        "spec": str(spec.path),
        "ssh_user": ssh_user,
        "ssh_private_key": str(spec.ssh_private_key) if spec.ssh_private_key else None,
        "public_ips": spec.network.public_ips,
        "bastion": spec.network.bastion,
        "bastion_ssh_key": str(spec.network.bastion_ssh_key) if spec.network.bastion_ssh_key else None,
        "host_data": spec.host_data,
        "group_host_data": {g.name: g.host_data for g in spec.groups},
        "admin_cidrs": list(spec.admin_cidrs),
    }
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (folder / "current").write_text(spec.name + "\n", encoding="utf-8")
    return path


def load_state(name: str) -> dict[str, Any]:
    """The recorded state of cluster ``name``, or {} when this machine has none."""
    path = ec2_state_dir() / f"{name}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CloudError(f"cannot read {path}: {exc}") from None


def forget_state(name: str) -> None:
    """Remove the record of cluster ``name`` (and ``current`` if it names it)."""
    folder = ec2_state_dir()
    (folder / f"{name}.json").unlink(missing_ok=True)
    (folder / f"{name}.ssh_config").unlink(missing_ok=True)
    current = folder / "current"
    if current.is_file() and current.read_text(encoding="utf-8").strip() == name:
        current.unlink()


def current_cluster() -> str:
    """The cluster ``RAYRIG_CLUSTER`` names, else the one the last ``rayrig cloud up`` here brought up."""
    name = os.environ.get("RAYRIG_CLUSTER", "").strip()
    if name:
        return name
    current = ec2_state_dir() / "current"
    if current.is_file():
        name = current.read_text(encoding="utf-8").strip()
        if name:
            return name
    raise CloudError(
        f"no EC2 cluster named: set RAYRIG_CLUSTER=NAME, or run 'rayrig cloud up SPEC' (which records {current})"
    )


# --------------------------------------------------------------------------- AMI


#: (substring of an AMI's name or description, lower case) -> its default SSH user. First match wins.
AMI_FAMILIES: tuple[tuple[str, str], ...] = (
    ("ubuntu", "ubuntu"),
    ("debian", "admin"),
    ("al2023", "ec2-user"),
    ("amazon linux", "ec2-user"),
    ("amzn", "ec2-user"),
    ("rocky", "rocky"),
    ("almalinux", "ec2-user"),
    ("rhel", "ec2-user"),
    ("red hat", "ec2-user"),
    ("centos", "centos"),
    ("fedora", "fedora"),
    ("suse", "ec2-user"),
)


def ssh_user_for_image(image: Mapping[str, Any]) -> str | None:
    """The default SSH user of a described AMI, from its family (name/description), or None.

    >>> ssh_user_for_image({"Name": "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20250101"})
    'ubuntu'
    """
    text = f"{image.get('Name', '')} {image.get('Description', '')}".lower()
    for needle, user in AMI_FAMILIES:
        if needle in text:
            return user
    return None


@dataclass(frozen=True)
class Image:
    """The AMI a cluster runs: id, name, root device and size, architecture, SSH user."""

    id: str
    name: str
    root_device: str
    root_size_gb: int
    architecture: str
    ssh_user: str


def resolve_image(aws: Aws, spec: ClusterSpec) -> Image:
    """Resolve the spec's AMI (through SSM if asked) and check that it can run the cluster."""
    ami_id = spec.ami.id
    if spec.ami.ssm_parameter:
        try:
            with aws_step(f"reading SSM parameter {spec.ami.ssm_parameter}", spec.region):
                ami_id = aws.ssm.get_parameter(Name=spec.ami.ssm_parameter)["Parameter"]["Value"]
        except CloudError as exc:
            raise CloudError(f"{spec.path}: ami.ssm_parameter: {exc}") from None
    try:
        with aws_step(f"reading AMI {ami_id}", spec.region):
            images = aws.ec2.describe_images(ImageIds=[ami_id])["Images"]
    except CloudError as exc:
        raise CloudError(f"{spec.path}: ami: {exc}") from None
    if not images:
        raise CloudError(f"{spec.path}: ami: AMI {ami_id} does not exist in {spec.region}")
    image = images[0]
    if image.get("Platform") == "windows":
        raise CloudError(f"{spec.path}: ami: {ami_id} ({image.get('Name')}) is a Windows AMI; rayrig needs Linux")
    user = spec.ami.ssh_user or ssh_user_for_image(image)
    if not user:
        raise CloudError(
            f"{spec.path}: ami.ssh_user: cannot tell the SSH user of {ami_id} ({image.get('Name')!r}); "
            'set ami.ssh_user, e.g. "ubuntu" or "ec2-user"'
        )
    root_device = image.get("RootDeviceName") or "/dev/xvda"
    root_size = 8
    for mapping in image.get("BlockDeviceMappings", []):
        if mapping.get("DeviceName") == root_device and "Ebs" in mapping:
            root_size = int(mapping["Ebs"].get("VolumeSize") or root_size)
    return Image(ami_id, image.get("Name", ""), root_device, root_size, image.get("Architecture", "x86_64"), user)


def instance_type_info(aws: Aws, types: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Described instance types by name; a type the region does not offer raises ``CloudError``."""
    types = sorted(set(types))
    try:
        with aws_step("reading instance types", aws.region):
            found = aws.ec2.describe_instance_types(InstanceTypes=types)["InstanceTypes"]
    except CloudError as exc:
        raise CloudError(f"{exc} (instance types {', '.join(types)})") from None
    info = {t["InstanceType"]: t for t in found}
    missing = [t for t in types if t not in info]
    if missing:
        raise CloudError(f"instance type(s) {', '.join(missing)} not offered in {aws.region}")
    return info


def gpus_of(instance_type: str, info: Mapping[str, Any] | None = None) -> int | None:
    """GPUs of an instance type: from the price table, else from a described type, else None."""
    known = prices.gpu_count(instance_type)
    if known is not None:
        return known
    if info is not None:
        return sum(int(g.get("Count", 0)) for g in info.get("GpuInfo", {}).get("Gpus", []))
    return None


# --------------------------------------------------------------------------- what a cluster has


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

    def add(self, kind: str, resource_id: str) -> None:
        """Record one resource of ``kind`` (a field name)."""
        getattr(self, kind).append(resource_id)

    def items(self) -> list[tuple[str, str]]:
        """(kind, id) pairs in deletion order."""
        return [(kind, rid) for kind in self.__dataclass_fields__ for rid in getattr(self, kind)]

    def __bool__(self) -> bool:
        return bool(self.items())


def find_created(aws: Aws, name: str) -> Resources:
    """What rayrig created for cluster ``name`` (tags ``rayrig:cluster=name`` and ``rayrig:created=true``)."""
    ec2 = aws.ec2
    filters = _created_filters(name)
    res = Resources()
    with aws_step(f"listing the resources of cluster {name}", aws.region):
        live = [*filters, {"Name": "instance-state-name", "Values": LIVE_STATES}]
        res.instances = [i["InstanceId"] for i in _instances(aws, live)]
        pgs = ec2.describe_placement_groups(Filters=filters).get("PlacementGroups", [])
        res.placement_groups = [p["GroupName"] for p in pgs if p.get("State") not in ("deleted", "deleting")]
        res.security_groups = [
            g["GroupId"] for g in _paginate(ec2, "describe_security_groups", "SecurityGroups", Filters=filters)
        ]
        res.key_pairs = [k["KeyName"] for k in ec2.describe_key_pairs(Filters=filters).get("KeyPairs", [])]
        res.route_tables = [
            r["RouteTableId"] for r in _paginate(ec2, "describe_route_tables", "RouteTables", Filters=filters)
        ]
        res.subnets = [s["SubnetId"] for s in _paginate(ec2, "describe_subnets", "Subnets", Filters=filters)]
        res.internet_gateways = [
            g["InternetGatewayId"]
            for g in _paginate(ec2, "describe_internet_gateways", "InternetGateways", Filters=filters)
        ]
        res.vpcs = [v["VpcId"] for v in _paginate(ec2, "describe_vpcs", "Vpcs", Filters=filters)]
    return res


def tagged_leftovers(aws: Aws, name: str) -> list[str]:
    """Everything that still carries ``rayrig:cluster=name``, created by rayrig or not, as lines."""
    ec2 = aws.ec2
    filters = [_tag_filter(TAG_CLUSTER, name)]
    found: list[str] = []
    with aws_step(f"listing what carries the tag {TAG_CLUSTER}={name}", aws.region):
        for i in _instances(aws, filters):
            if i["State"]["Name"] != "terminated":
                found.append(f"instance {i['InstanceId']} ({i['State']['Name']})")
        for p in ec2.describe_placement_groups(Filters=filters).get("PlacementGroups", []):
            if p.get("State") != "deleted":
                found.append(f"placement group {p['GroupName']}")
        for g in _paginate(ec2, "describe_security_groups", "SecurityGroups", Filters=filters):
            found.append(f"security group {g['GroupId']} ({g.get('GroupName')})")
        for k in ec2.describe_key_pairs(Filters=filters).get("KeyPairs", []):
            found.append(f"key pair {k['KeyName']}")
        for r in _paginate(ec2, "describe_route_tables", "RouteTables", Filters=filters):
            found.append(f"route table {r['RouteTableId']}")
        for s in _paginate(ec2, "describe_subnets", "Subnets", Filters=filters):
            found.append(f"subnet {s['SubnetId']}")
        for g in _paginate(ec2, "describe_internet_gateways", "InternetGateways", Filters=filters):
            found.append(f"internet gateway {g['InternetGatewayId']}")
        for v in _paginate(ec2, "describe_vpcs", "Vpcs", Filters=filters):
            found.append(f"VPC {v['VpcId']}")
        for v in _paginate(ec2, "describe_volumes", "Volumes", Filters=filters):
            found.append(f"volume {v['VolumeId']} ({v.get('State')})")
        for n in _paginate(ec2, "describe_network_interfaces", "NetworkInterfaces", Filters=filters):
            found.append(f"network interface {n['NetworkInterfaceId']} ({n.get('Status')})")
    return found


# --------------------------------------------------------------------------- deleting


def _gone_or(exc: ClientError) -> bool:
    code = _error_code(exc)
    return code in _GONE_CODES or code.endswith(".NotFound")


#: How long a call about a resource made a moment ago is retried while EC2 says it does not exist yet.
SETTLE_S = 60.0


def _settled(call: Callable[..., Any], /, **kwargs: Any) -> Any:
    """Run ``call(**kwargs)``, which refers to resources made a moment ago: EC2 is eventually
    consistent, so a '...NotFound' answer is retried for up to ``SETTLE_S`` seconds."""
    deadline = time.monotonic() + SETTLE_S
    delay = min(POLL_S, 1.0)
    while True:
        try:
            return call(**kwargs)
        except ClientError as exc:
            code = _error_code(exc)
            settling = (code.endswith(".NotFound") or code == "InvalidPlacementGroup.Unknown") and not code.startswith(
                "InvalidAMIID"
            )
            if not settling or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def _delete(aws: Aws, what: str, call: Callable[[], Any], timeout_s: float, failures: list[str]) -> None:
    """Run one deletion; 'not found' counts as done, 'in use' is retried until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    delay = POLL_S
    while True:
        try:
            call()
            return
        except ClientError as exc:
            if _gone_or(exc):
                return
            if _error_code(exc) in _IN_USE_CODES and time.monotonic() < deadline:
                time.sleep(delay)
                delay = min(delay * 1.5 + 0.01, 30.0)
                continue
            failures.append(explain_error(exc, f"deleting {what}", aws.region))
            return
        except BotoCoreError as exc:
            failures.append(explain_error(exc, f"deleting {what}", aws.region))
            return


def wait_instances(
    aws: Aws,
    ids: list[str],
    want: str,
    timeout_s: float = WAIT_TIMEOUT_S,
    fail_states: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """Poll until every instance in ``ids`` is in state ``want``; return them described.

    An instance that reaches one of ``fail_states`` (a spot reclaim, a capacity
    loss) raises ``CloudError`` at once, with AWS's reason.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        # A filter, not InstanceIds=: an instance launched a moment ago is simply not listed yet.
        with aws_step(f"waiting for {len(ids)} instance(s) to be {want}", aws.region):
            described = _instances(aws, [{"Name": "instance-id", "Values": ids}])
        states = {i["InstanceId"]: i["State"]["Name"] for i in described}
        for instance in described:
            if instance["State"]["Name"] in fail_states:
                reason = instance.get("StateReason", {}).get("Message") or "no reason given"
                raise CloudError(
                    f"instance {instance['InstanceId']} ({instance.get('InstanceType')}) went "
                    f"{instance['State']['Name']} instead of {want}: {reason}"
                )
        if len(described) == len(ids) and all(s == want for s in states.values()):
            return described
        if time.monotonic() >= deadline:
            late = ", ".join(f"{i} {states.get(i, 'unknown')}" for i in ids if states.get(i) != want)
            raise CloudError(f"timed out after {timeout_s:.0f}s waiting for instances to be {want}: {late}")
        time.sleep(POLL_S)


def delete_resources(aws: Aws, res: Resources, say: Progress = print, timeout_s: float = WAIT_TIMEOUT_S) -> list[str]:
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
    ]
    for kind, ids, delete in kinds:
        for rid in ids:
            say(f"  deleting {kind} {rid}")
            _delete(aws, f"{kind} {rid}", lambda d=delete, r=rid: d(r), timeout_s, failures)
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


# --------------------------------------------------------------------------- up


@dataclass
class Existing:
    """What a cluster already has, found by its tags."""

    vpc: dict[str, Any] | None = None
    subnet: dict[str, Any] | None = None
    internet_gateway: dict[str, Any] | None = None
    route_table: dict[str, Any] | None = None
    security_group: dict[str, Any] | None = None
    key_pair: dict[str, Any] | None = None
    placement_group: dict[str, Any] | None = None
    instances: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    expires_at: dt.datetime | None = None
    created_at: dt.datetime | None = None


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


def discover(aws: Aws, spec: ClusterSpec) -> Existing:
    """Find what the cluster of ``spec`` already has (by tag), and check the spec's own VPC/subnet."""
    ec2, name, net = aws.ec2, spec.name, spec.network
    found = Existing()
    stamps: list[dict[str, str]] = []
    with aws_step(f"looking for the existing resources of cluster {name}", spec.region):
        if net.existing:
            try:
                found.vpc = ec2.describe_vpcs(VpcIds=[net.vpc_id])["Vpcs"][0]
                found.subnet = ec2.describe_subnets(SubnetIds=[net.subnet_id])["Subnets"][0]
            except ClientError as exc:
                if not _gone_or(exc):
                    raise
                raise CloudError(
                    f"{spec.path}: network: {explain_error(exc, 'checking network.vpc_id and subnet_id')}"
                ) from None
            if found.subnet["VpcId"] != net.vpc_id:
                raise CloudError(
                    f"{spec.path}: network.subnet_id = {net.subnet_id!r}: expected a subnet of {net.vpc_id}, "
                    f"found one of {found.subnet['VpcId']}"
                )
        else:
            found.vpc = _one(
                _paginate(ec2, "describe_vpcs", "Vpcs", Filters=_created_filters(name, "vpc")), "VPC", name, "VpcId"
            )
            found.subnet = _one(
                _paginate(ec2, "describe_subnets", "Subnets", Filters=_created_filters(name, "subnet")),
                "subnet",
                name,
                "SubnetId",
            )
            found.internet_gateway = _one(
                _paginate(
                    ec2,
                    "describe_internet_gateways",
                    "InternetGateways",
                    Filters=_created_filters(name, "internet-gateway"),
                ),
                "internet gateway",
                name,
                "InternetGatewayId",
            )
            found.route_table = _one(
                _paginate(ec2, "describe_route_tables", "RouteTables", Filters=_created_filters(name, "route-table")),
                "route table",
                name,
                "RouteTableId",
            )
            stamps += [_tags(r) for r in (found.vpc, found.subnet, found.internet_gateway, found.route_table) if r]
        found.security_group = _one(
            _paginate(
                ec2, "describe_security_groups", "SecurityGroups", Filters=_created_filters(name, "security-group")
            ),
            "security group",
            name,
            "GroupId",
        )
        try:
            keys = ec2.describe_key_pairs(KeyNames=[resource_name(spec)], IncludePublicKey=True)["KeyPairs"]
        except ClientError as exc:
            if not _gone_or(exc):
                raise
            keys = []
        if keys:
            tags = _tags(keys[0])
            if tags.get(TAG_CLUSTER) != name or tags.get(TAG_CREATED) != "true":
                raise CloudError(
                    f"a key pair named {resource_name(spec)} exists in {spec.region} but rayrig did not create it "
                    f"for cluster {name}; delete or rename it, or choose another cluster name"
                )
            found.key_pair = keys[0]
        if spec.placement_group and spec.workers:
            found.placement_group = _one(
                [
                    p
                    for p in ec2.describe_placement_groups(Filters=_created_filters(name)).get("PlacementGroups", [])
                    if p.get("State") not in ("deleted", "deleting")
                ],
                "placement group",
                name,
                "GroupName",
            )
        live = [*_created_filters(name), {"Name": "instance-state-name", "Values": LIVE_STATES}]
        for instance in _instances(aws, live):
            tags = _tags(instance)
            found.instances.setdefault(tags.get(TAG_GROUP, "?"), []).append(instance)
            stamps.append(tags)
    stamps += [_tags(r) for r in (found.security_group, found.key_pair, found.placement_group) if r]
    expiries = [t for t in (parse_time(s.get(TAG_EXPIRES)) for s in stamps) if t]
    births = [t for t in (parse_time(s.get(TAG_CREATED_AT)) for s in stamps) if t]
    found.expires_at = min(expiries) if expiries else None
    found.created_at = min(births) if births else None
    return found


@dataclass
class Plan:
    """What ``up`` will do: one line per resource, the launches, and the cost."""

    lines: list[tuple[str, str]] = field(default_factory=list)  # (action, text)
    launches: list[tuple[GroupSpec, int]] = field(default_factory=list)
    starts: list[str] = field(default_factory=list)
    hourly_usd: float = 0.0
    unpriced: list[str] = field(default_factory=list)

    @property
    def creates(self) -> bool:
        """Whether the plan creates anything (or starts stopped instances)."""
        return any(action in ("create", "start") for action, _ in self.lines)


def _ports_text(ports: Mapping[str, int]) -> str:
    return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ray_port_ranges(ports))


def make_plan(spec: ClusterSpec, image: Image, existing: Existing, ports: Mapping[str, int]) -> Plan:
    """Work out what ``up`` creates, reuses and starts, and what the cluster costs per hour."""
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
            (
                existing.subnet,
                "SubnetId",
                f"subnet {net.subnet_cidr}" + (f" in {net.availability_zone}" if net.availability_zone else ""),
            ),
            (existing.route_table, "RouteTableId", "route table with a default route to the internet gateway"),
        ):
            line("reuse" if res else "create", text + (f" ({res[key]})" if res else ""))
    ssh_from = ", ".join(spec.admin_cidrs)
    rules = (
        f"SSH (tcp 22) from {ssh_from} only; all traffic within the group, Ray ports {_ports_text(ports)} included; "
        + ("outbound internet" if net.internet_egress else "no outbound internet")
    )
    sg = existing.security_group
    line("reuse" if sg else "create", f"security group {name}" + (f" ({sg['GroupId']})" if sg else "") + f": {rules}")
    line("reuse" if existing.key_pair else "create", f"key pair {name} from {spec.ssh_public_key}")
    if spec.placement_group and spec.workers:
        line(
            "reuse" if existing.placement_group else "create",
            f"placement group {name} (cluster strategy) for the workers",
        )

    counts: dict[str, int] = {}
    for group in spec.groups:
        have = existing.instances.get(group.name, [])
        stopped = [i["InstanceId"] for i in have if i["State"]["Name"] in ("stopped", "stopping")]
        missing = group.count - len(have)
        rate = prices.hourly_usd(group.instance_type)
        cost = f"${rate * group.count:,.2f}/h" if rate is not None else "price unknown"
        what = (
            f"{group.name}: {group.count} x {group.instance_type} {group.market}, "
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
        counts[group.instance_type] = counts.get(group.instance_type, 0) + max(group.count, len(have))
    plan.hourly_usd, plan.unpriced = prices.estimate(counts)
    return plan


def print_plan(spec: ClusterSpec, image: Image, plan: Plan, expires_at: dt.datetime, say: Progress = print) -> None:
    """Print the plan: what is created or reused, the AMI, the expiry and the cost estimate."""
    say(
        f"Cluster {spec.name} in {spec.region}, owner {spec.owner}, "
        f"expires {expires_at:%Y-%m-%d %H:%M} UTC (ttl {spec.ttl_text} from the first up)"
    )
    for action, text in plan.lines:
        say(f"  {action:7s} {text}")
    say(f"  AMI     {image.id} ({image.name or 'no name'}), SSH user {image.ssh_user}")
    hours = spec.ttl.total_seconds() / 3600
    unknown = f" plus {', '.join(plan.unpriced)} (not in the price table)" if plan.unpriced else ""
    say(
        f"Estimated cost: ${plan.hourly_usd:,.2f}/h{unknown}, about ${plan.hourly_usd * hours:,.0f} "
        f"if it runs for the whole ttl ({prices.PRICE_NOTE})."
    )


def _ask(question: str) -> bool:
    if not sys.stdin.isatty():
        raise CloudError("not confirmed: stdin is not a terminal; pass --yes to create without asking")
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


@dataclass
class UpResult:
    """What ``up`` did: what it created, the instances, and whether SSH answered everywhere."""

    name: str
    region: str
    created: list[tuple[str, str]]
    instances: list[dict[str, Any]]
    ssh_pending: list[str]
    state_file: Path | None


class _Ledger:
    """What this run created, so that a failure removes exactly that."""

    def __init__(self, say: Progress):
        self.created: list[tuple[str, str]] = []
        self.say = say

    def add(self, kind: str, resource_id: str, text: str) -> None:
        self.created.append((kind, resource_id))
        self.say(f"  created {text} {resource_id}")

    def resources(self) -> Resources:
        res = Resources()
        for kind, rid in self.created:
            res.add(kind, rid)
        return res


def up(
    spec: ClusterSpec,
    *,
    assume_yes: bool = False,
    confirm: Confirm | None = None,
    wait_ssh: bool = True,
    ssh_probe: SshProbe = ssh_answers,
    timeout_s: float = WAIT_TIMEOUT_S,
    say: Progress = print,
) -> UpResult:
    """Bring the cluster of ``spec`` up (see the module docstring); idempotent.

    >>> up(load_spec("examples/sprint42.toml"), assume_yes=True)  # doctest: +SKIP
    """
    aws = connect(spec.region)
    ports = ray_ports(spec.host_data)
    image = resolve_image(aws, spec)
    types = instance_type_info(aws, {g.instance_type for g in spec.groups})
    _check_groups(spec, image, types)
    existing = discover(aws, spec)
    now = _now()
    expires_at = existing.expires_at or now + spec.ttl
    created_at = existing.created_at or now
    plan = make_plan(spec, image, existing, ports)
    print_plan(spec, image, plan, expires_at, say)

    if plan.creates and not assume_yes:
        if not (confirm or _ask)("Create these resources?"):
            raise CloudError("not confirmed; nothing was created")
    elif not plan.creates:
        say("Nothing to create: every resource of the cluster exists.")

    base_tags = {
        TAG_CLUSTER: spec.name,
        TAG_OWNER: spec.owner,
        TAG_EXPIRES: _iso(expires_at),
        TAG_CREATED: "true",
        TAG_CREATED_AT: _iso(created_at),
    }
    ledger = _Ledger(say)
    try:
        instances = _apply(aws, spec, image, existing, plan, base_tags, ports, ledger, timeout_s, say)
    except (CloudError, ClientError, BotoCoreError, KeyboardInterrupt) as exc:
        if isinstance(exc, (ClientError, BotoCoreError)):
            reason = explain_error(exc, "bringing the cluster up", spec.region)
        elif isinstance(exc, KeyboardInterrupt):
            reason = "interrupted"
        else:
            reason = str(exc)
        left = _roll_back(aws, ledger, reason, timeout_s, say)
        if left:
            raise CloudError(
                f"{reason}; could not remove {len(left)} resource(s) this run created (listed above): "
                f"run 'rayrig cloud down {spec.name}'"
            ) from None
        raise CloudError(f"{reason}; removed what this run created") from None

    state_file = save_state(spec, image.ssh_user)
    addresses = [_address(i, spec.network.public_ips and not spec.network.bastion) for i in instances]
    pending: list[str] = []
    if wait_ssh and spec.network.bastion:
        say(f"  not probing SSH: the hosts are reached through the bastion {spec.network.bastion}")
    elif wait_ssh:
        say(f"  waiting for SSH on {len(addresses)} host(s)")
        pending = wait_for_ssh(addresses, ssh_probe, timeout_s, say=say)
    head = [_address(i, spec.network.public_ips) for i in instances if _tags(i).get(TAG_ROLE) == "head"]
    say(
        f"Cluster {spec.name} is up: {len(instances)} instance(s), head {', '.join(head) or '?'}. "
        f"Next: RAYRIG_CLUSTER={spec.name} pyinfra inventories/ec2.py deploy/cluster.py"
    )
    return UpResult(spec.name, spec.region, ledger.created, instances, pending, state_file)


def _check_groups(spec: ClusterSpec, image: Image, types: Mapping[str, Mapping[str, Any]]) -> None:
    problems = []
    for where, group in [("head", spec.head)] + [(f"workers[{i}]", g) for i, g in enumerate(spec.workers)]:
        archs = types[group.instance_type].get("ProcessorInfo", {}).get("SupportedArchitectures", [])
        if archs and image.architecture not in archs:
            problems.append(
                f"{where}.instance_type = {group.instance_type!r}: expected a type that runs "
                f"{image.architecture} AMIs like {image.id} (it runs {', '.join(archs)})"
            )
        if group.root_volume_gb < image.root_size_gb:
            problems.append(
                f"{where}.root_volume_gb = {group.root_volume_gb}: expected at least {image.root_size_gb}, "
                f"the size of the AMI's root snapshot"
            )
    if problems:
        raise CloudError(f"{spec.path}: " + "; ".join(problems))


def _tag_spec(resource_type: str, tags: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"ResourceType": resource_type, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def _apply(
    aws: Aws,
    spec: ClusterSpec,
    image: Image,
    existing: Existing,
    plan: Plan,
    base_tags: Mapping[str, str],
    ports: Mapping[str, int],
    ledger: _Ledger,
    timeout_s: float,
    say: Progress,
) -> list[dict[str, Any]]:
    ec2, name = aws.ec2, resource_name(spec)

    def tags(role: str, **extra: str) -> dict[str, str]:
        return {"Name": f"{name}-{role}", **base_tags, TAG_ROLE: role, **extra}

    # --- network ---
    if spec.network.existing:
        vpc_id, subnet_id = spec.network.vpc_id, spec.network.subnet_id
    else:
        with aws_step("creating the network", spec.region):
            vpc_id = existing.vpc["VpcId"] if existing.vpc else None
            if vpc_id is None:
                vpc_id = ec2.create_vpc(
                    CidrBlock=spec.network.vpc_cidr, TagSpecifications=_tag_spec("vpc", tags("vpc"))
                )["Vpc"]["VpcId"]
                ledger.add("vpcs", vpc_id, "VPC")
                ec2.get_waiter("vpc_available").wait(VpcIds=[vpc_id], WaiterConfig={"Delay": max(POLL_S, 0.1)})
                _settled(ec2.modify_vpc_attribute, VpcId=vpc_id, EnableDnsSupport={"Value": True})
                _settled(ec2.modify_vpc_attribute, VpcId=vpc_id, EnableDnsHostnames={"Value": True})
            igw = existing.internet_gateway
            igw_id = igw["InternetGatewayId"] if igw else None
            if igw_id is None:
                igw_id = ec2.create_internet_gateway(
                    TagSpecifications=_tag_spec("internet-gateway", tags("internet-gateway"))
                )["InternetGateway"]["InternetGatewayId"]
                ledger.add("internet_gateways", igw_id, "internet gateway")
            if not any(a.get("VpcId") == vpc_id for a in (igw or {}).get("Attachments", [])):
                _settled(ec2.attach_internet_gateway, InternetGatewayId=igw_id, VpcId=vpc_id)
            subnet_id = existing.subnet["SubnetId"] if existing.subnet else None
            if subnet_id is None:
                kwargs: dict[str, Any] = (
                    {"AvailabilityZone": spec.network.availability_zone} if spec.network.availability_zone else {}
                )
                subnet_id = _settled(
                    ec2.create_subnet,
                    VpcId=vpc_id,
                    CidrBlock=spec.network.subnet_cidr,
                    TagSpecifications=_tag_spec("subnet", tags("subnet")),
                    **kwargs,
                )["Subnet"]["SubnetId"]
                ledger.add("subnets", subnet_id, "subnet")
            rtb = existing.route_table
            rtb_id = rtb["RouteTableId"] if rtb else None
            if rtb_id is None:
                rtb = _settled(
                    ec2.create_route_table,
                    VpcId=vpc_id,
                    TagSpecifications=_tag_spec("route-table", tags("route-table")),
                )["RouteTable"]
                rtb_id = rtb["RouteTableId"]
                ledger.add("route_tables", rtb_id, "route table")
            if not any(
                r.get("DestinationCidrBlock") == "0.0.0.0/0" and r.get("GatewayId") == igw_id
                for r in rtb.get("Routes", [])
            ):
                _settled(ec2.create_route, RouteTableId=rtb_id, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw_id)
            if not any(a.get("SubnetId") == subnet_id for a in rtb.get("Associations", [])):
                _settled(ec2.associate_route_table, RouteTableId=rtb_id, SubnetId=subnet_id)

    # --- security group ---
    with aws_step("creating the security group", spec.region):
        sg = existing.security_group
        if sg and sg["VpcId"] != vpc_id:
            raise CloudError(
                f"the cluster's security group {sg['GroupId']} is in {sg['VpcId']}, not in {vpc_id}: "
                f"run 'rayrig cloud down {spec.name}' before moving the cluster"
            )
        if sg is None:
            group_id = _settled(
                ec2.create_security_group,
                GroupName=name,
                Description=f"rayrig cluster {spec.name}: SSH from admin CIDRs, everything else only within the group",
                VpcId=vpc_id,
                TagSpecifications=_tag_spec("security-group", tags("security-group")),
            )["GroupId"]
            ledger.add("security_groups", group_id, "security group")
            sg = _settled(ec2.describe_security_groups, GroupIds=[group_id])["SecurityGroups"][0]
        group_id = sg["GroupId"]
        _reconcile_rules(aws, sg, desired_rules(group_id, spec), say)
        actual = rules_of(ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0])
    exposed = exposed_ray_ports(actual, ports)
    if exposed:
        raise CloudError(f"security group {group_id} exposes Ray ports: {'; '.join(exposed)}")

    # --- key pair ---
    with aws_step("importing the key pair", spec.region):
        if existing.key_pair:
            theirs = (existing.key_pair.get("PublicKey") or "").split()[:2]
            ours = spec.public_key_material().decode().split()[:2]
            if theirs and theirs != ours:
                raise CloudError(
                    f"key pair {name} holds another public key than {spec.ssh_public_key}; use the key it was "
                    f"created with, or 'rayrig cloud down {spec.name}' first"
                )
        else:
            key_id = ec2.import_key_pair(
                KeyName=name,
                PublicKeyMaterial=spec.public_key_material(),
                TagSpecifications=_tag_spec("key-pair", tags("key-pair")),
            )["KeyPairId"]
            ledger.add("key_pairs", name, f"key pair ({key_id})")

    # --- placement group ---
    placement = None
    if spec.placement_group and spec.workers:
        with aws_step("creating the placement group", spec.region):
            if existing.placement_group is None:
                ec2.create_placement_group(
                    GroupName=name,
                    Strategy="cluster",
                    TagSpecifications=_tag_spec("placement-group", tags("placement-group")),
                )
                ledger.add("placement_groups", name, "placement group")
            placement = name

    # --- instances ---
    for group, count in plan.launches:
        role_tags = tags(group.role, **{TAG_GROUP: group.name, TAG_SSH_USER: image.ssh_user})
        role_tags["Name"] = f"{name}-{group.name}"
        params: dict[str, Any] = {
            "ImageId": image.id,
            "InstanceType": group.instance_type,
            "MinCount": count,
            "MaxCount": count,
            "KeyName": name,
            "ClientToken": f"rayrig-{spec.name}-{group.name}-{uuid.uuid4().hex[:16]}",
            "NetworkInterfaces": [
                {
                    "DeviceIndex": 0,
                    "SubnetId": subnet_id,
                    "Groups": [group_id],
                    "AssociatePublicIpAddress": spec.network.public_ips,
                    "DeleteOnTermination": True,
                }
            ],
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1},
            "BlockDeviceMappings": [
                {
                    "DeviceName": image.root_device,
                    "Ebs": {
                        "VolumeSize": group.root_volume_gb,
                        "VolumeType": "gp3",
                        "Encrypted": True,
                        "DeleteOnTermination": True,
                    },
                }
            ],
            "TagSpecifications": [
                *_tag_spec("instance", role_tags),
                *_tag_spec("volume", role_tags),
                *_tag_spec("network-interface", role_tags),
            ],
        }
        if group.spot:
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
            }
        if placement and group.role == "worker":
            params["Placement"] = {"GroupName": placement}
        say(f"  launching {count} x {group.instance_type} ({group.market}) for {group.name}")
        with aws_step(f"launching {count} x {group.instance_type} for {group.name}", spec.region):
            launched = _settled(ec2.run_instances, **params)["Instances"]
        for instance in launched:
            ledger.add("instances", instance["InstanceId"], f"{group.name} instance")
    if plan.starts:
        with aws_step("starting stopped instances", spec.region):
            ec2.start_instances(InstanceIds=plan.starts)

    # --- wait until they run ---
    live = [*_created_filters(spec.name), {"Name": "instance-state-name", "Values": LIVE_STATES}]
    with aws_step("listing the cluster's instances", spec.region):
        ids = [i["InstanceId"] for i in _instances(aws, live)]
    say(f"  waiting for {len(ids)} instance(s) to run")
    return wait_instances(aws, ids, "running", timeout_s, fail_states=("shutting-down", "terminated"))


def _reconcile_rules(aws: Aws, group: Mapping[str, Any], desired: Mapping[Rule, str], say: Progress) -> None:
    """Make the group's rules exactly ``desired``: add what is missing, revoke what is extra."""
    ec2, group_id = aws.ec2, group["GroupId"]
    actual = rules_of(group)
    for rule in sorted(set(desired) - actual):
        call = (
            ec2.authorize_security_group_ingress if rule.direction == "ingress" else ec2.authorize_security_group_egress
        )
        _settled(call, GroupId=group_id, IpPermissions=[rule.permission(desired[rule])])
    extra = sorted(actual - set(desired))
    for rule in extra:
        say(f"  revoking a rule rayrig did not ask for: {rule}")
        call = ec2.revoke_security_group_ingress if rule.direction == "ingress" else ec2.revoke_security_group_egress
        call(GroupId=group_id, IpPermissions=[rule.permission()])


def _roll_back(aws: Aws, ledger: _Ledger, reason: str, timeout_s: float, say: Progress) -> list[str]:
    """Delete what this run created; return what could not be deleted."""
    say(f"up failed: {reason}")
    res = ledger.resources()
    if not res:
        say("  this run had created nothing")
        return []
    say("  removing what this run created")
    failures = delete_resources(aws, res, say, timeout_s)
    for failure in failures:
        say(f"  could not remove: {failure}")
    return failures


def _address(instance: Mapping[str, Any], public: bool) -> str:
    if public and instance.get("PublicIpAddress"):
        return instance["PublicIpAddress"]
    return instance.get("PrivateIpAddress", "")


# --------------------------------------------------------------------------- down, ls, reap


_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$")


def down(name: str, region: str | None = None, *, aws: Aws | None = None, say: Progress = print,
         timeout_s: float = WAIT_TIMEOUT_S) -> int:  # fmt: skip
    """Delete what rayrig created for cluster ``name``; return 0 if nothing carries its tag afterwards, else 1."""
    if not _NAME.match(name):
        raise CloudError(f"cluster name {name!r}: expected 2-32 lower-case letters, digits and '-'")
    if aws is None:
        aws = connect(region or load_state(name).get("region"))
    res = find_created(aws, name)
    if res:
        say(f"Taking down cluster {name} in {aws.region}: {len(res.items())} resource(s)")
        failures = delete_resources(aws, res, say, timeout_s)
        for failure in failures:
            say(f"  could not delete: {failure}")
    else:
        say(f"rayrig created nothing for cluster {name} in {aws.region} (or it is gone already)")
    left = tagged_leftovers(aws, name)
    if left:
        say(f"Still tagged {TAG_CLUSTER}={name} in {aws.region} ({len(left)}):")
        for line in left:
            say(f"  {line}")
        return 1
    say(f"Nothing is left with the tag {TAG_CLUSTER}={name} in {aws.region}.")
    forget_state(name)
    return 0


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
    hourly_usd: float = 0.0
    unpriced: list[str] = field(default_factory=list)
    resources: int = 0

    def expired(self, now: dt.datetime) -> bool:
        """Whether the cluster's expiry has passed (a cluster without a readable expiry never expires)."""
        return self.expires_at is not None and self.expires_at <= now


def list_clusters(aws: Aws) -> list[ClusterInfo]:
    """Every cluster in the region that carries rayrig's tags, sorted by name."""
    ec2 = aws.ec2
    tagged = [{"Name": "tag-key", "Values": [TAG_CLUSTER]}]
    clusters: dict[str, ClusterInfo] = {}
    expiries: dict[str, list[str]] = {}

    def note(resource: Mapping[str, Any], launched: dt.datetime | None = None) -> ClusterInfo:
        tags = _tags(resource)
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
        for instance in _instances(aws, tagged):
            if instance["State"]["Name"] == "terminated":
                continue
            info = note(instance, instance.get("LaunchTime"))
            if instance["State"]["Name"] in ("pending", "running"):
                itype = instance["InstanceType"]
                info.running[itype] = info.running.get(itype, 0) + 1
                info.spot += instance.get("InstanceLifecycle") == "spot"
        for group in _paginate(ec2, "describe_security_groups", "SecurityGroups", Filters=tagged):
            note(group)
        for vpc in _paginate(ec2, "describe_vpcs", "Vpcs", Filters=tagged):
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
        info.hourly_usd, info.unpriced = prices.estimate(info.running)
    return [clusters[n] for n in sorted(clusters)]


def _span(delta: dt.timedelta) -> str:
    seconds = int(abs(delta.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    text = f"{days}d{hours:02d}h" if days else f"{hours}h{rest // 60:02d}m"
    return f"-{text}" if delta.total_seconds() < 0 else text


def format_clusters(clusters: list[ClusterInfo], now: dt.datetime) -> list[str]:
    """``rayrig cloud ls`` lines: name, owner, age, expiry, instance types, running cost."""
    rows = [("NAME", "OWNER", "AGE", "EXPIRES (UTC)", "LEFT", "RUNNING", "$/H")]
    for c in clusters:
        running = ", ".join(f"{n} x {t}" for t, n in sorted(c.running.items())) or "-"
        if c.spot:
            running += f" ({c.spot} spot)"
        cost = f"{c.hourly_usd:,.2f}" + ("+?" if c.unpriced else "") + ("*" if c.spot else "")
        rows.append(
            (
                c.name,
                c.owner or "?",
                _span(now - c.created_at) if c.created_at else "?",
                f"{c.expires_at:%Y-%m-%d %H:%M}" if c.expires_at else f"unreadable: {c.expiry_text!r}",
                ("EXPIRED" if c.expired(now) else _span(c.expires_at - now)) if c.expires_at else "never",
                running,
                cost,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    if any(c.spot for c in clusters):
        lines.append(f"* spot instances priced at the on-demand rate, an upper bound ({prices.PRICE_NOTE})")
    else:
        lines.append(f"$/h: {prices.PRICE_NOTE}")
    return lines


@contextlib.contextmanager
def _reap_lock() -> Iterator[None]:
    folder = ec2_state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "reap.lock", "w", encoding="utf-8") as handle:
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
    say: Progress = print,
    timeout_s: float = WAIT_TIMEOUT_S,
) -> int:
    """Take down every expired cluster in the region; 0 when all of them are gone, else 1.

    Safe from cron (with ``--yes``): it touches only clusters whose
    ``rayrig:expires-at`` has passed, never one without a readable expiry, and
    two reaps do not run at once. Without ``--yes`` and without a terminal it
    only lists what it would take down.
    """
    now = now or _now()
    with _reap_lock():
        aws = connect(region)
        clusters = list_clusters(aws)
        for c in clusters:
            if c.expires_at is None:
                say(f"skipping {c.name}: no readable {TAG_EXPIRES} tag ({c.expiry_text!r}); take it down by hand")
        expired = [c for c in clusters if c.expired(now)]
        if not expired:
            say(f"No expired cluster in {aws.region} ({len(clusters)} cluster(s) checked).")
            return 0
        for c in expired:
            say(f"expired: {c.name} (owner {c.owner or '?'}, expired {c.expires_at:%Y-%m-%d %H:%M} UTC)")
        if not assume_yes:
            if confirm is None and not sys.stdin.isatty():
                say("Dry run: pass --yes to take these down.")
                return 0
            if not (confirm or _ask)(f"Take down {len(expired)} expired cluster(s)?"):
                say("Nothing was taken down.")
                return 0
        status = 0
        for c in expired:
            try:
                status |= down(c.name, aws=aws, say=say, timeout_s=timeout_s)
            except CloudError as exc:
                say(f"could not take down {c.name}: {exc}")
                status = 1
        return status


# --------------------------------------------------------------------------- inventory


def _spec_for_state(state: Mapping[str, Any]) -> ClusterSpec | None:
    path = state.get("spec")
    if path and Path(path).is_file():
        return load_spec(path)
    return None


def write_ssh_config(name: str, bastion: str, addresses: Iterable[str], key: str | None) -> Path:
    """An ssh_config that reaches ``addresses`` through ``bastion`` (ProxyJump); pyinfra and ssh -F read it."""
    user, _, hostport = bastion.rpartition("@")
    host, _, port = hostport.partition(":")
    lines = [f"# written by rayrig for cluster {name}; rewritten on every inventory load", f"Host {host}"]
    if user:
        lines.append(f"  User {user}")
    if port:
        lines.append(f"  Port {port}")
    if key:
        lines.append(f"  IdentityFile {key}")
    lines += [f"Host {' '.join(addresses)}", f"  ProxyJump {bastion}", ""]
    path = ec2_state_dir() / f"{name}.ssh_config"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


HostList = list[tuple[str, dict[str, Any]]]


def cluster_hosts(name: str | None = None, region: str | None = None) -> tuple[HostList, HostList]:
    """The pyinfra hosts ``(heads, workers)`` of a cluster, found by its tags.

    The cluster is ``name``, else ``RAYRIG_CLUSTER``, else the state directory's
    current cluster; the region is ``region``, else ``RAYRIG_REGION``, else the
    one recorded by ``up``, else boto3's. Each host's data: ``ssh_user`` (from
    the AMI's family), ``ssh_key`` (the spec's private key), ``ray_role``,
    ``ray_num_gpus`` (from the instance type), ``ray_node_ip`` (the private
    address), ``ssh_config_file`` (ProxyJump through the bastion, if any), and
    the spec's ``host_data``.
    """
    name = name or current_cluster()
    state = load_state(name)
    spec = _spec_for_state(state)
    if spec is not None and spec.name != name:
        spec = None
    region = region or os.environ.get("RAYRIG_REGION") or state.get("region") or (spec.region if spec else None)
    aws = connect(region)
    running = [*_created_filters(name), {"Name": "instance-state-name", "Values": ["running"]}]
    with aws_step(f"listing the instances of cluster {name}", aws.region):
        instances = _instances(aws, running)
    if not instances:
        raise CloudError(f"cluster {name} has no running instances in {aws.region} ('rayrig cloud ls' lists clusters)")

    unknown_types = {i["InstanceType"] for i in instances if prices.gpu_count(i["InstanceType"]) is None}
    type_info = instance_type_info(aws, unknown_types) if unknown_types else {}
    users = _ssh_users(aws, instances, spec.ami.ssh_user if spec else None)

    if spec is not None:
        public = spec.network.public_ips
        bastion, bastion_key = spec.network.bastion, spec.network.bastion_ssh_key
        key = spec.ssh_private_key
        shared, per_group = spec.host_data, {g.name: g.host_data for g in spec.groups}
        admins = list(spec.admin_cidrs)
    else:
        public = state.get("public_ips", True)
        bastion, bastion_key = state.get("bastion"), state.get("bastion_ssh_key")
        key = state.get("ssh_private_key")
        shared, per_group = state.get("host_data", {}), state.get("group_host_data", {})
        admins = state.get("admin_cidrs", [])

    def order(i: Mapping[str, Any]) -> tuple[str, str]:
        return (_tags(i).get(TAG_GROUP, ""), i.get("PrivateIpAddress", ""))

    hosts: dict[str, HostList] = {"head": [], "worker": []}
    addresses = []
    for instance in sorted(instances, key=order):
        tags = _tags(instance)
        role = tags.get(TAG_ROLE, "worker")
        gpus = gpus_of(instance["InstanceType"], type_info.get(instance["InstanceType"]))
        data: dict[str, Any] = {
            # The cluster's own token, and SSH for the spec's admins only (the security group agrees).
            "ray_cluster_name": name,
            "firewall_admin_cidrs": admins,
            **shared,
            **per_group.get(tags.get(TAG_GROUP, ""), {}),
            "ray_role": role,
            "ray_num_gpus": gpus if gpus is not None else "auto",
            "ray_node_ip": instance.get("PrivateIpAddress"),
            "ssh_user": users[instance["InstanceId"]],
        }
        if key:
            data["ssh_key"] = str(key)
        address = _address(instance, public and not bastion)
        addresses.append(address)
        hosts.setdefault(role, []).append((address, data))
    if bastion:
        config = write_ssh_config(name, bastion, addresses, str(bastion_key) if bastion_key else None)
        for _host, data in hosts["head"] + hosts["worker"]:
            data["ssh_config_file"] = str(config)
    if len(hosts["head"]) != 1:
        raise CloudError(
            f"cluster {name} has {len(hosts['head'])} running head instances in {aws.region}, expected 1 "
            f"(tag {TAG_ROLE}=head)"
        )
    return hosts["head"], hosts["worker"]


def _ssh_users(aws: Aws, instances: list[dict[str, Any]], override: str | None) -> dict[str, str]:
    """The SSH user of each instance: the spec's, else the up-time tag, else from its AMI's family."""
    users: dict[str, str] = {}
    unknown: dict[str, list[str]] = {}
    for instance in instances:
        user = override or _tags(instance).get(TAG_SSH_USER)
        if user:
            users[instance["InstanceId"]] = user
        else:
            unknown.setdefault(instance["ImageId"], []).append(instance["InstanceId"])
    if unknown:
        with aws_step("reading the instances' AMIs", aws.region):
            images = {i["ImageId"]: i for i in aws.ec2.describe_images(ImageIds=sorted(unknown))["Images"]}
        for image_id, ids in unknown.items():
            user = ssh_user_for_image(images.get(image_id, {}))
            if not user:
                raise CloudError(f"cannot tell the SSH user of AMI {image_id}; set ami.ssh_user in the spec")
            users.update(dict.fromkeys(ids, user))
    return users


# --------------------------------------------------------------------------- CLI


def _cmd_up(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        result = up(spec, assume_yes=args.yes, wait_ssh=not args.no_wait_ssh, timeout_s=args.timeout)
    except CloudError as exc:
        print(f"rayrig cloud up: {exc}", file=sys.stderr)
        return 1
    if result.ssh_pending:
        print(
            f"rayrig cloud up: SSH did not answer within {args.timeout:.0f}s on {', '.join(result.ssh_pending)}; "
            f"check that admin_cidrs holds your address. The cluster stays up; "
            f"'rayrig cloud down {spec.name}' removes it.",
            file=sys.stderr,
        )
        return 1
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    try:
        return down(args.name, args.region, timeout_s=args.timeout)
    except CloudError as exc:
        print(f"rayrig cloud down: {exc}", file=sys.stderr)
        return 1


def _cmd_ls(args: argparse.Namespace) -> int:
    try:
        aws = connect(args.region)
        clusters = list_clusters(aws)
    except CloudError as exc:
        print(f"rayrig cloud ls: {exc}", file=sys.stderr)
        return 1
    if not clusters:
        print(f"No rayrig cluster in {aws.region}.")
        return 0
    for line in format_clusters(clusters, _now()):
        print(line)
    return 0


def _cmd_reap(args: argparse.Namespace) -> int:
    try:
        return reap(args.region, assume_yes=args.yes, timeout_s=args.timeout)
    except CloudError as exc:
        print(f"rayrig cloud reap: {exc}", file=sys.stderr)
        return 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig cloud up|down|ls|reap`` to the CLI; each leaf sets ``func`` (args -> exit status)."""
    cloud = subparsers.add_parser("cloud", help="EC2 clusters for a sprint: up, down, ls, reap")
    sub = cloud.add_subparsers(dest="cloud_command", required=True, metavar="COMMAND")

    def timeout(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--timeout", type=float, default=WAIT_TIMEOUT_S, metavar="S",
            help="limit of each wait in seconds (default: %(default).0f)",
        )  # fmt: skip

    up_ = sub.add_parser("up", help="create (or complete) the cluster a spec describes")
    up_.add_argument("spec", type=Path, help="cluster spec (TOML), e.g. examples/sprint42.toml")
    up_.add_argument("--yes", "-y", action="store_true", help="create without asking")
    up_.add_argument("--no-wait-ssh", action="store_true", help="do not wait for SSH to answer")
    timeout(up_)
    up_.set_defaults(func=_cmd_up)

    down_ = sub.add_parser("down", help="delete everything rayrig created for a cluster")
    down_.add_argument("name", help="the cluster's name")
    down_.add_argument("--region", help="default: the region recorded by up, else boto3's")
    timeout(down_)
    down_.set_defaults(func=_cmd_down)

    ls = sub.add_parser("ls", help="list clusters with age, expiry, instances and running cost")
    ls.add_argument("--region", help="default: boto3's region")
    ls.set_defaults(func=_cmd_ls)

    reap_ = sub.add_parser("reap", help="take down every expired cluster (for cron: --yes)")
    reap_.add_argument("--region", help="default: boto3's region")
    reap_.add_argument("--yes", "-y", action="store_true", help="take them down without asking")
    timeout(reap_)
    reap_.set_defaults(func=_cmd_reap)
