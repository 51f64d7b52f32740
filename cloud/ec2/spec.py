"""The cluster spec of an EC2 sprint cluster: a TOML file, validated and loaded (the schema:
spec_schema.py; its zones: spec_zones.py; its S3 buckets and the mounts they must cover: spec_s3.py).

``load_spec(path)`` reads and validates a spec completely (schema, then the rules that span keys,
then the host data against ``deploy/contract/schema.py``) before anything talks to AWS, and raises
``SpecError`` listing every problem. Every key, with an example: docs/design/ec2-spec.md and
``examples/sprint42.toml``.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import difflib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10 needs the tomli backport
    import tomli as tomllib  # type: ignore[no-redef]

from cloud.ec2.spec_s3 import S3Bucket, parse_buckets, s3_mount_problems
from cloud.ec2.spec_schema import SCHEMA, TTL_PATTERN
from cloud.ec2.spec_zones import parse_zones
from deploy.contract.admin_networks import narrow_expected, too_wide
from deploy.contract.schema import StrictValidator, redact, validate_host

MAX_TTL = dt.timedelta(days=30)

#: Host data keys that inventories/ec2.py sets itself; a spec may not set them.
RESERVED_HOST_DATA = (
    "ray_role",
    "ray_num_gpus",
    "ray_node_ip",
    "ssh_user",
    "ssh_key",
    "ssh_hostname",
    "ssh_port",
    "ssh_config_file",
    "ssh_password",
)

#: Key types EC2's ImportKeyPair accepts.
KEY_TYPES = ("ssh-ed25519", "ssh-rsa")

_VALIDATOR = StrictValidator(SCHEMA)


class SpecError(ValueError):
    """A cluster spec is invalid; ``problems`` holds one line per finding."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        count = len(problems)
        lines = [f"invalid cluster spec {source} ({count} problem{'s' if count != 1 else ''}):"]
        lines += [f"  - {p}" for p in problems]
        lines.append("Nothing was created and AWS was not contacted.")
        super().__init__("\n".join(lines))


@dataclass(frozen=True)
class GroupSpec:
    """One group of identical instances: the head, or a group of workers."""

    name: str
    role: str
    instance_type: str
    count: int
    market: str = "on-demand"
    root_volume_gb: int = 100
    host_data: dict[str, Any] = field(default_factory=dict)
    # --- capacity failover (cloud/ec2/failover.py) ---
    instance_types: tuple[str, ...] = ()  # the preference list, if given; instance_type is its first entry
    spot_fallback: str = "none"  # "on-demand": a spot group may launch on-demand once spot capacity is gone
    efa: str = "auto"  # EFA interfaces: "auto", "on" or "off" (cloud/ec2/efa.py)

    @property
    def spot(self) -> bool:
        """Whether the group runs on spot instances."""
        return self.market == "spot"

    @property
    def preferences(self) -> tuple[str, ...]:
        """The instance types to try, the preferred first (``instance_type`` alone when no list was given)."""
        return self.instance_types or (self.instance_type,)


@dataclass(frozen=True)
class AmiSpec:
    """The image: an explicit id or an SSM parameter holding one, and an optional SSH user."""

    id: str | None = None
    ssm_parameter: str | None = None
    ssh_user: str | None = None


@dataclass(frozen=True)
class NetworkSpec:
    """Where the instances live and how they are reached."""

    vpc_id: str | None = None
    subnet_id: str | None = None
    vpc_cidr: str = "10.42.0.0/16"
    subnet_cidr: str = "10.42.0.0/20"
    availability_zone: str | None = None
    public_ips: bool = True
    bastion: str | None = None
    bastion_ssh_key: Path | None = None
    internet_egress: bool = True
    # --- capacity failover: the zones to try, the preferred first; availability_zone is the first of them ---
    availability_zones: tuple[str, ...] = ()

    @property
    def zones(self) -> tuple[str, ...]:
        """The availability zones to try, in order; empty when AWS chooses the zone."""
        return self.availability_zones or ((self.availability_zone,) if self.availability_zone else ())

    @property
    def existing(self) -> bool:
        """Whether the spec names an existing VPC and subnet (rayrig then creates no network)."""
        return self.vpc_id is not None


@dataclass(frozen=True)
class ClusterSpec:
    """A validated cluster spec (see the module docstring for the file format)."""

    path: Path
    name: str
    region: str
    owner: str
    ttl: dt.timedelta
    ttl_text: str
    admin_cidrs: tuple[str, ...]
    allow_ssh_from_anywhere: bool
    ssh_public_key: Path
    ssh_private_key: Path | None
    ami: AmiSpec
    head: GroupSpec
    workers: tuple[GroupSpec, ...]
    network: NetworkSpec
    placement_group: bool
    host_data: dict[str, Any]
    # --- instance profile (cloud/ec2/iam.py) ---
    iam_instance_profile: str | None = None
    s3_buckets: tuple[S3Bucket, ...] = ()

    @property
    def groups(self) -> tuple[GroupSpec, ...]:
        """The head group first, then the worker groups."""
        return (self.head, *self.workers)

    def public_key_material(self) -> bytes:
        """The SSH public key's line, as EC2's ImportKeyPair takes it."""
        return self.ssh_public_key.read_bytes().strip()


def parse_ttl(text: str) -> dt.timedelta:
    """A duration such as ``"12h"``, ``"7d"``, ``"1d12h"`` or ``"90m"`` as a timedelta.

    >>> parse_ttl("1d12h")
    datetime.timedelta(days=1, seconds=43200)
    """
    match = re.fullmatch(TTL_PATTERN, text)
    if not match:
        raise ValueError(f"expected a duration such as '12h' or '7d', found {text!r}")
    days, hours, minutes = (int(g[:-1]) if g else 0 for g in match.groups())
    try:
        return dt.timedelta(days=days, hours=hours, minutes=minutes)
    except OverflowError:
        raise ValueError(f"expected a duration such as '12h' or '7d', found {text!r}, which is too long") from None


def load_spec(path: str | Path) -> ClusterSpec:
    """Read and validate the cluster spec at ``path``; raise ``SpecError`` listing every problem."""
    path = Path(path).expanduser()
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(source, [f"{source}: no such file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(source, [f"{source}: cannot read it ({exc})"]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(source, [f"{source}: not valid TOML: {exc}"]) from None
    return parse_spec(data, path)


def parse_spec(data: Mapping[str, Any], path: Path) -> ClusterSpec:
    """Validate already-parsed spec ``data`` (read from ``path``) and build a ``ClusterSpec``."""
    source = str(path)
    problems = _schema_problems(data, source)
    if problems:
        raise SpecError(source, problems)
    problems = []
    base = path.parent

    def where(key: str, value: Any, expected: str) -> None:
        if value is ...:
            problems.append(f"{source}: {key}: missing; expected {expected}")
        else:
            problems.append(f"{source}: {key} = {_show(value)}: expected {expected}")

    ttl = _ttl(data["ttl"], where)
    allow_anywhere = bool(data.get("allow_ssh_from_anywhere", False))
    cidrs = _admin_cidrs(data["admin_cidrs"], allow_anywhere, where)
    public_key, private_key = _ssh_keys(data, base, where)

    # --- AMI ---
    ami_data = data["ami"]
    if ("id" in ami_data) == ("ssm_parameter" in ami_data):
        where("ami", dict(ami_data), "exactly one of ami.id or ami.ssm_parameter")
    ami = AmiSpec(ami_data.get("id"), ami_data.get("ssm_parameter"), ami_data.get("ssh_user"))

    # --- network ---
    network = _network(data.get("network", {}), data["region"], base, where)

    # --- groups ---
    head = _group(data["head"], "head", "head", "head", where)
    workers = tuple(
        _group(w, w["name"], "worker", f"workers[{i}]", where) for i, w in enumerate(data.get("workers", []))
    )
    seen: set[str] = set()
    for i, worker in enumerate(workers):
        if worker.name == "head" or worker.name in seen:
            where(f"workers[{i}].name", worker.name, "a name used by no other group (and not 'head')")
        seen.add(worker.name)

    # --- host data ---
    host_data = dict(data.get("host_data", {}))
    problems += _host_data_problems(source, "host_data", host_data, {})
    problems += _host_data_problems(source, "head.host_data", head.host_data, host_data)
    for i, worker in enumerate(workers):
        problems += _host_data_problems(source, f"workers[{i}].host_data", worker.host_data, host_data)

    iam_profile, buckets = _instance_role(data, where)
    if not problems:
        groups = [("host_data", {}), ("head.host_data", head.host_data)]
        groups += [(f"workers[{i}].host_data", w.host_data) for i, w in enumerate(workers)]
        problems += s3_mount_problems(source, host_data, groups, iam_profile, buckets)

    if problems:
        raise SpecError(source, problems)
    return ClusterSpec(
        path=path.resolve(),
        name=data["name"],
        region=data["region"],
        owner=data["owner"],
        ttl=ttl,
        ttl_text=data["ttl"],
        admin_cidrs=tuple(cidrs),
        allow_ssh_from_anywhere=allow_anywhere,
        ssh_public_key=public_key or Path(data["ssh_public_key"]),
        ssh_private_key=private_key,
        ami=ami,
        head=head,
        workers=workers,
        network=network,
        placement_group=bool(data.get("placement_group", True)),
        host_data=host_data,
        iam_instance_profile=iam_profile,
        s3_buckets=buckets,
    )


def _instance_role(data: Mapping[str, Any], where: Any) -> tuple[str | None, Any]:
    """(``iam_instance_profile``, ``s3_buckets``): an existing profile, or the buckets of a role rayrig creates."""
    iam_profile = data.get("iam_instance_profile")
    buckets = parse_buckets(data.get("s3_buckets", []), where)
    if iam_profile is not None and buckets:
        where(
            "iam_instance_profile",
            iam_profile,
            "either iam_instance_profile (an existing profile) or s3_buckets (a role rayrig creates), not both",
        )
    return iam_profile, buckets


def _ttl(text: Any, where: Any) -> dt.timedelta:
    """The spec's ``ttl``, or a problem said through ``where``."""
    try:
        ttl = parse_ttl(text)
    except ValueError:
        ttl = MAX_TTL + dt.timedelta(days=1)  # far beyond any timedelta: only "too long" can be said
    if not dt.timedelta(0) < ttl <= MAX_TTL:
        where("ttl", text, "a duration above 0 and at most 30d")
    return ttl


def _admin_cidrs(texts: list[Any], allow_anywhere: bool, where: Any) -> list[str]:
    """The spec's ``admin_cidrs``, each a network no wider than allowed, or a problem said through ``where``."""
    cidrs: list[str] = []
    for i, text in enumerate(texts):
        try:
            net = ipaddress.ip_network(text, strict=True)
        except ValueError as exc:
            hint = ""
            with contextlib.suppress(ValueError):
                hint = f" (did you mean {str(ipaddress.ip_network(text, strict=False))!r}?)"
            where(f"admin_cidrs[{i}]", text, f"a CIDR such as '198.51.100.0/24' ({exc}){hint}")
            continue
        if too_wide(net) and not allow_anywhere:
            where(f"admin_cidrs[{i}]", text, narrow_expected(net.version, "allow_ssh_from_anywhere = true"))
        cidrs.append(str(net))
    return cidrs


def _ssh_keys(data: Mapping[str, Any], base: Path, where: Any) -> tuple[Path | None, Path | None]:
    """(the public key, the private key: given, or the public key's path without .pub when there is one)."""
    public_key = _resolve(base, data["ssh_public_key"])
    key_problem = _public_key_problem(public_key) if public_key else _HOME_PROBLEM
    if key_problem:
        where("ssh_public_key", data["ssh_public_key"], key_problem)
    private_key: Path | None = None
    if "ssh_private_key" in data:
        private_key = _key_file(base, data["ssh_private_key"], "ssh_private_key", "private key file", where)
    elif public_key and public_key.suffix == ".pub" and public_key.with_suffix("").is_file():
        private_key = public_key.with_suffix("")
    return public_key, private_key


_HOME_PROBLEM = "a path whose ~ names your home or an existing user's (that user's home is unknown here)"


def _resolve(base: Path, text: str) -> Path | None:
    """``text`` as an absolute path (relative to ``base``); None when its ~user has no home here."""
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # "Could not determine home directory": ~nosuchuser
        return None
    return path if path.is_absolute() else (base / path).resolve()


def _key_file(base: Path, text: str, key: str, what: str, where: Any) -> Path | None:
    """The key file ``text`` names (relative to ``base``); a problem for ``key`` when it is not there."""
    path = _resolve(base, text)
    if path is None:
        where(key, text, _HOME_PROBLEM)
    elif not path.is_file():
        where(key, text, f"an existing {what} ({path} is missing)")
    return path


def _public_key_problem(path: Path) -> str | None:
    if not path.is_file():
        return f"an existing SSH public key file ({path} is missing)"
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return f"a readable SSH public key file ({path} cannot be read as text)"
    if text.startswith("-----BEGIN"):
        return f"a public key (.pub): {path} holds a private key, which must never leave your machine"
    parts = text.split()
    if len(parts) < 2 or parts[0] not in KEY_TYPES:
        found = parts[0] if parts else "an empty file"
        return f"an ssh-ed25519 or ssh-rsa public key (EC2 imports only these), found {found[:40]!r}"
    try:
        base64.b64decode(parts[1], validate=True)
    except ValueError:
        return "a public key line 'TYPE BASE64 [comment]' (the key's base64 part is damaged)"
    return None


def _network(data: Mapping[str, Any], region: str, base: Path, where: Any) -> NetworkSpec:
    vpc_id, subnet_id = data.get("vpc_id"), data.get("subnet_id")
    if (vpc_id is None) != (subnet_id is None):
        missing = "network.subnet_id" if subnet_id is None else "network.vpc_id"
        where(missing, ..., "both network.vpc_id and network.subnet_id, or neither (rayrig then creates a VPC)")
    if vpc_id is not None:
        for key in ("vpc_cidr", "subnet_cidr", "availability_zone", "availability_zones"):
            if key in data:
                where(f"network.{key}", data[key], "no value: it applies only to a VPC that rayrig creates")
    vpc_cidr = data.get("vpc_cidr", NetworkSpec.vpc_cidr)
    subnet_cidr = data.get("subnet_cidr", NetworkSpec.subnet_cidr)
    vpc_net = _ipv4_net(vpc_cidr, 16, 24)
    if vpc_net is None:
        where("network.vpc_cidr", vpc_cidr, "an IPv4 CIDR from /16 to /24, such as '10.42.0.0/16'")
    subnet_net = _ipv4_net(subnet_cidr, 16, 28)
    if subnet_net is None or (vpc_net is not None and not subnet_net.subnet_of(vpc_net)):
        where("network.subnet_cidr", subnet_cidr, f"an IPv4 CIDR (/16 to /28) inside vpc_cidr {vpc_cidr}")
    zones = parse_zones(data, region, vpc_net, subnet_net, where)
    public_ips = data.get("public_ips", True)
    bastion = data.get("bastion")
    if not public_ips and bastion is None and subnet_id is None:
        where(
            "network.public_ips",
            public_ips,
            "true, unless network.bastion is set or your own subnet (network.subnet_id) is reachable from you",
        )
    bastion_key = None
    if "bastion_ssh_key" in data:
        bastion_key = _key_file(base, data["bastion_ssh_key"], "network.bastion_ssh_key", "key file", where)
    return NetworkSpec(
        vpc_id=vpc_id,
        subnet_id=subnet_id,
        vpc_cidr=vpc_cidr,
        subnet_cidr=subnet_cidr,
        availability_zone=zones[0] if zones else None,
        availability_zones=zones if "availability_zones" in data else (),
        public_ips=public_ips,
        bastion=bastion,
        bastion_ssh_key=bastion_key,
        internet_egress=data.get("internet_egress", True),
    )


def _ipv4_net(text: str, shortest: int, longest: int) -> ipaddress.IPv4Network | None:
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError:
        return None
    if not isinstance(net, ipaddress.IPv4Network) or not shortest <= net.prefixlen <= longest:
        return None
    return net


def _group(data: Mapping[str, Any], name: str, role: str, label: str, where: Any) -> GroupSpec:
    types = _instance_types(data, name, label, where)
    market = data.get("market", "on-demand")
    fallback = data.get("spot_fallback", "none")
    if fallback != "none" and market != "spot":
        where(
            f"{label}.spot_fallback", fallback, 'no value unless market = "spot" (an on-demand group has no fallback)'
        )
    return GroupSpec(
        name=name,
        role=role,
        instance_type=types[0],
        count=data.get("count", 1),
        market=market,
        root_volume_gb=data.get("root_volume_gb", 100),
        host_data=dict(data.get("host_data", {})),
        instance_types=types if "instance_types" in data else (),
        spot_fallback=fallback,
        efa=data.get("efa", "auto"),
    )


def _instance_types(data: Mapping[str, Any], name: str, label: str, where: Any) -> tuple[str, ...]:
    """A group's instance types in order of preference: ``instance_types``, or ``instance_type`` alone."""
    if "instance_type" in data and "instance_types" in data:
        where(
            f"{label}.instance_type",
            data["instance_type"],
            f"no value next to {label}.instance_types in group {name!r}: one of them (put it first in the list)",
        )
    if "instance_types" in data:
        types = tuple(data["instance_types"])
        twice = sorted({t for t in types if types.count(t) > 1})
        if twice:
            where(f"{label}.instance_types", list(types), f"each instance type once ({', '.join(twice)} repeated)")
        return types
    if "instance_type" in data:
        return (data["instance_type"],)
    where(
        f"{label}.instance_type", ..., 'an EC2 instance type such as "g5.12xlarge", or instance_types, a list of them'
    )
    return ("?",)


def _host_data_problems(source: str, key: str, data: Mapping[str, Any], under: Mapping[str, Any]) -> list[str]:
    """Reserved keys, then the deploy's own schema (deploy/contract/schema.py) on the merged data."""
    problems = [
        f"{source}: {key}.{k} = {redact(k, data[k])!r}: expected no value: inventories/ec2.py sets {k} itself"
        for k in data
        if k in RESERVED_HOST_DATA
    ]
    merged = {**under, **{k: v for k, v in data.items() if k not in RESERVED_HOST_DATA}}
    for problem in validate_host(key, merged):
        if problem.key.split("[")[0] in data:  # report each key once, where it is set
            problems.append(f"{source}: {key}.{problem.key} = {problem.value!r}: expected {problem.expected}")
    return problems


def _show(value: Any) -> str:
    """A value as the spec's author wrote it (TOML's true/false, not Python's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _label(path: Any) -> str:
    label = ""
    for part in path:
        label += f"[{part}]" if isinstance(part, int) else (f".{part}" if label else str(part))
    return label or "(top level)"


def _schema_problems(data: Mapping[str, Any], source: str) -> list[str]:
    problems = []
    for error in sorted(_VALIDATOR.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path]):
        label = _label(error.absolute_path)
        if error.validator == "required":
            missing = error.message.split("'")[1]
            schema = error.schema.get("properties", {}).get(missing, {})
            where = f"{label}.{missing}" if error.absolute_path else missing
            problems.append(f"{source}: {where}: missing; expected {schema.get('x-expected', 'a value')}")
        elif error.validator == "additionalProperties":
            known = sorted(error.schema.get("properties", {}))
            for extra in sorted(set(error.instance) - set(known)):
                close = difflib.get_close_matches(extra, known, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}? " if close else ""
                where = f"{label}.{extra}" if error.absolute_path else extra
                problems.append(f"{source}: {where}: unknown key; {hint}expected one of {', '.join(known)}")
        elif error.validator == "propertyNames":
            problems.append(
                f"{source}: {label}: key {error.instance!r}: expected a lower-case name (letters, digits, _)"
            )
        else:
            expected = error.schema.get("x-expected", error.message)
            problems.append(f"{source}: {label} = {_show(error.instance)}: expected {expected}")
    return problems
