"""AWS access for EC2 clusters: clients, errors as one line, pagination, rayrig's tags.

Every boto3 client comes from ``Aws.client``: credentials from boto3's usual
chain, the endpoint from ``RAYRIG_AWS_ENDPOINT_URL`` (or boto3's own
``AWS_ENDPOINT_URL``; the Pricing API's from ``RAYRIG_AWS_PRICING_ENDPOINT_URL``
first), retries with backoff for throttling. AWS errors become
``CloudError``: one line that says what failed and what to do, never a secret.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

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
from botocore.parsers import ResponseParserError

#: Where a long operation reports its progress, one line at a time.
Progress = Callable[[str], None]
#: Asks the user a yes/no question.
Confirm = Callable[[str], bool]

TAG_CLUSTER = "rayrig:cluster"
TAG_ROLE = "rayrig:role"
TAG_OWNER = "rayrig:owner"
TAG_EXPIRES = "rayrig:expires-at"
TAG_CREATED = "rayrig:created"
TAG_CREATED_AT = "rayrig:created-at"
TAG_GROUP = "rayrig:group"
TAG_SSH_USER = "rayrig:ssh-user"
TAG_SLOT = "rayrig:slot"

#: Instance states that still cost money or can come back.
LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]

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
    "InvalidNetworkInterfaceID.NotFound", "NoSuchEntity",
}  # fmt: skip
#: What an endpoint answers for an action it does not implement (AWS, LocalStack, moto).
_UNIMPLEMENTED_CODES = {"InvalidAction", "UnsupportedOperation", "NotImplemented"}
#: Error codes of a deletion that may succeed once what uses the resource is gone.
IN_USE_CODES = {"DependencyViolation", "InvalidGroup.InUse", "InvalidPlacementGroup.InUse", "VolumeInUse"}


class CloudError(RuntimeError):
    """An EC2 operation failed. The message is one line that says what and what to do."""


#: Endpoint overrides of one service each, which take precedence over ``RAYRIG_AWS_ENDPOINT_URL``.
SERVICE_ENDPOINT_VARS = {"pricing": "RAYRIG_AWS_PRICING_ENDPOINT_URL"}


def endpoint_url(service: str | None = None) -> str | None:
    """The AWS endpoint override of ``service``: its own variable (``SERVICE_ENDPOINT_VARS``), else
    ``RAYRIG_AWS_ENDPOINT_URL``, else None (boto3 then honours its own ``AWS_ENDPOINT_URL``, else
    talks to AWS)."""
    own = SERVICE_ENDPOINT_VARS.get(service or "")
    return (os.environ.get(own) if own else None) or os.environ.get("RAYRIG_AWS_ENDPOINT_URL") or None


def aws_session(region: str | None) -> boto3.session.Session:
    """A boto3 session for ``region``; credentials come from boto3's usual chain."""
    return boto3.session.Session(region_name=region)


@dataclass
class Aws:
    """A boto3 session for one region and the clients made from it (the one place clients are made)."""

    session: boto3.session.Session
    region: str
    _clients: dict[str, Any] = field(default_factory=dict)

    def client(self, service: str, *, region: str | None = None, quick: bool = False) -> Any:
        """The ``service`` client: endpoint override, retries with backoff (throttling, 5xx), timeouts.

        ``RAYRIG_AWS_MAX_ATTEMPTS`` (default 8) bounds the attempts per call. ``region`` is the
        session's unless given (the Pricing API answers in a few regions only). A ``quick`` client
        gives up within seconds (two attempts, short timeouts): for lookups that have a fallback.
        """
        key = f"{service}@{region or self.region}" + ("/quick" if quick else "")
        if key not in self._clients:
            attempts = min(2, _max_attempts()) if quick else _max_attempts()
            config = Config(
                retries={"mode": "standard", "total_max_attempts": attempts},
                connect_timeout=3 if quick else 10,
                read_timeout=10 if quick else 60,
                user_agent_extra="rayrig",
            )
            with aws_step(f"setting up the {service} client"):
                self._clients[key] = self.session.client(
                    service, region_name=region or self.region, endpoint_url=endpoint_url(service), config=config
                )
        return self._clients[key]

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


def default_region() -> str | None:
    """boto3's own region (``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile's), or None; asks no one."""
    try:
        return aws_session(None).region_name
    except ProfileNotFound as exc:
        raise CloudError(f"AWS profile not found: {exc.kwargs.get('profile')} (check AWS_PROFILE)") from None


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


def error_code(exc: BaseException) -> str:
    """The AWS error code of a ``ClientError`` (such as ``InvalidVpcID.NotFound``), else ''."""
    return exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""


def is_gone(exc: ClientError) -> bool:
    """Whether the error says the resource does not exist (any more)."""
    code = error_code(exc)
    return code in _GONE_CODES or code.endswith(".NotFound")


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
        line = _explain_client_error(exc, doing, where)
    elif isinstance(exc, ResponseParserError):
        # botocore could not read the answer: not AWS's XML or JSON but, say, an HTML error page of an
        # endpoint that does not implement the call (moto's server answers so for what it lacks).
        line = (
            f"{doing}: {endpoint_url() or 'the AWS endpoint'} answered with something that is not an AWS "
            f"response ({str(exc).splitlines()[0][:200]}); it may not implement this call: "
            "check RAYRIG_AWS_ENDPOINT_URL, or use AWS itself"
        )
    else:
        line = f"{doing}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return _scrub(line)


def _explain_client_error(exc: ClientError, doing: str, where: str) -> str:
    error = exc.response.get("Error", {})
    code = error.get("Code", "Unknown")
    message = (error.get("Message") or "").strip().splitlines()[0] if error.get("Message") else ""
    message = message.split(" Encoded authorization failure message:")[0][:300]
    attempts = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) + 1
    if code in _CREDENTIAL_CODES:
        return (
            f"{doing}: AWS rejected the credentials ({code}); check which ones boto3 picks up "
            "(AWS_PROFILE, the environment, ~/.aws); they are not shown here"
        )
    if code in _THROTTLE_CODES:
        return f"{doing}: AWS kept throttling the requests ({code}, {attempts} attempts); wait a minute and retry"
    if code in _CAPACITY_CODES:
        return (
            f"{doing}: AWS has no capacity for it{where} right now ({code}: {message}); list more availability "
            'zones (network.availability_zones) or instance types (instance_types), or spot_fallback = "on-demand"'
        )
    if code in _QUOTA_CODES:
        return (
            f"{doing}: an account quota is reached{where} ({code}: {message}); ask for more in the "
            "Service Quotas console (EC2 vCPU quotas are per instance family and per market)"
        )
    if code in _AMI_CODES:
        return f"{doing}: the AMI is not available{where} ({code}: {message}); check [ami] in the spec"
    if code in _DENIED_CODES:
        return f"{doing}: not permitted ({code}); the IAM policy of these credentials must allow it"
    if code in _UNIMPLEMENTED_CODES:
        return (
            f"{doing}: {endpoint_url() or 'AWS'} does not implement {exc.operation_name} ({code}: {message}); "
            "check RAYRIG_AWS_ENDPOINT_URL, or use an endpoint that implements it"
        )
    return f"{doing}: AWS error {code}: {message}"


@contextlib.contextmanager
def aws_step(doing: str, region: str | None = None) -> Iterator[None]:
    """Turn boto3/botocore errors raised inside the block into a one-line ``CloudError``."""
    try:
        yield
    except (ClientError, BotoCoreError, ResponseParserError) as exc:
        raise CloudError(explain_error(exc, doing, region)) from None


def paginate(client: Any, operation: str, key: str, **kwargs: Any) -> list[dict[str, Any]]:
    """Every item under ``key`` of every page of ``operation``."""
    items: list[dict[str, Any]] = []
    for page in client.get_paginator(operation).paginate(**kwargs):
        items.extend(page.get(key, []))
    return items


def tags_of(resource: Mapping[str, Any]) -> dict[str, str]:
    """A described resource's tags as a dict."""
    return {t["Key"]: t["Value"] for t in resource.get("Tags", []) or []}


def tag_filter(key: str, *values: str) -> dict[str, Any]:
    """An EC2 filter: tag ``key`` holds one of ``values``."""
    return {"Name": f"tag:{key}", "Values": list(values)}


def created_filters(name: str, role: str | None = None) -> list[dict[str, Any]]:
    """Filters for what rayrig created for cluster ``name`` (of one ``rayrig:role`` if given)."""
    filters = [tag_filter(TAG_CLUSTER, name), tag_filter(TAG_CREATED, "true")]
    if role:
        filters.append(tag_filter(TAG_ROLE, role))
    return filters


def instances_matching(aws: Aws, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The described instances that match ``filters``, across reservations."""
    reservations = paginate(aws.ec2, "describe_instances", "Reservations", Filters=filters)
    return [i for r in reservations for i in r.get("Instances", [])]


def address(instance: Mapping[str, Any], public: bool) -> str:
    """Where to reach ``instance``: its public address if ``public`` and it has one, else its private one."""
    if public and instance.get("PublicIpAddress"):
        return instance["PublicIpAddress"]
    return instance.get("PrivateIpAddress", "")


def utc_now() -> dt.datetime:
    """Now, in UTC, to the second."""
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def iso(when: dt.datetime) -> str:
    """``when`` as a tag value: ``2026-01-31T12:00:00Z``."""
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
