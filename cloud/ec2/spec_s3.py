"""A spec's ``s3_buckets`` (the buckets rayrig's instance role may read, and write) and the S3 mounts of its
host data that the instance profile must cover (``cloud/ec2/spec.py`` reads the spec)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class S3Bucket:
    """A bucket the cluster's instance role may read (``s3_buckets``), and write when ``write``."""

    name: str
    write: bool = False


#: What S3's bucket naming rules forbid at a name's start and end (AWS's "General purpose bucket naming rules").
_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def bucket_name_problem(name: str) -> str | None:
    """What is wrong with ``name`` as a general purpose S3 bucket name (what is expected instead), or None.

    >>> bucket_name_problem("data..sets")
    'a bucket name without two adjacent dots'
    """
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name):
        return (
            "a bucket name: 3-63 lower-case letters, digits, dots and hyphens, "
            "starting and ending with a letter or digit"
        )
    if ".." in name:
        return "a bucket name without two adjacent dots"
    if re.fullmatch(r"[0-9]{1,3}(\.[0-9]{1,3}){3}", name):
        return "a bucket name that is not formatted as an IP address"
    if name.startswith(_BUCKET_PREFIXES) or name.endswith(_BUCKET_SUFFIXES):
        return (
            f"a bucket name without the prefixes {', '.join(_BUCKET_PREFIXES)} "
            f"and the suffixes {', '.join(_BUCKET_SUFFIXES)}"
        )
    return None


def parse_buckets(items: list[Any], where: Any) -> tuple[S3Bucket, ...]:
    """``s3_buckets`` as ``S3Bucket``s: each name valid and listed once."""
    buckets: list[S3Bucket] = []
    for i, item in enumerate(items):
        bucket = S3Bucket(item) if isinstance(item, str) else S3Bucket(item["name"], bool(item.get("write", False)))
        problem = bucket_name_problem(bucket.name)
        if problem:
            where(f"s3_buckets[{i}]", bucket.name, problem)
        elif any(b.name == bucket.name for b in buckets):
            where(f"s3_buckets[{i}]", bucket.name, "each bucket listed once (write = true where it may be written)")
        else:
            buckets.append(bucket)
    return tuple(buckets)


def s3_mount_problems(
    source: str,
    shared: Mapping[str, Any],
    groups: list[tuple[str, Mapping[str, Any]]],
    iam_profile: str | None,
    buckets: tuple[S3Bucket, ...],
) -> list[str]:
    """S3 mounts that would use the instance profile (no ``storage_s3_credentials``, no ``endpoint_url``)
    must have one: ``s3_buckets`` listing the bucket (with write for a writable mount) or ``iam_instance_profile``."""
    if iam_profile is not None:
        return []  # what an existing profile allows is its owner's business
    allowed = {b.name: b for b in buckets}
    problems: list[str] = []
    for key, data in groups:
        merged = {**shared, **data}
        if merged.get("storage_s3_credentials") is not None:
            continue
        where = key if "storage_s3_mounts" in data else "host_data"
        for index, mount in enumerate(merged.get("storage_s3_mounts") or []):
            if not isinstance(mount, Mapping) or mount.get("endpoint_url") or "bucket" not in mount:
                continue
            bucket, label = mount["bucket"], f"{source}: {where}.storage_s3_mounts[{index}]"
            if not buckets:
                expected = (
                    f"an instance profile to read bucket {bucket!r} with (storage_s3_credentials is unset): "
                    f's3_buckets = ["{bucket}"] (rayrig creates the role), iam_instance_profile, '
                    "or storage_s3_credentials in the host data"
                )
            elif bucket not in allowed:
                expected = (
                    f"bucket {bucket!r} listed in s3_buckets (the instance role reaches only the buckets listed there)"
                )
            elif not mount.get("read_only") and not allowed[bucket].write:
                expected = (
                    f"write = true for bucket {bucket!r} in s3_buckets (the mount is writable), "
                    'or "read_only": true on the mount'
                )
            else:
                continue
            line = f"{label} = bucket {bucket!r}: expected {expected}"
            if line not in problems:
                problems.append(line)
    return problems
