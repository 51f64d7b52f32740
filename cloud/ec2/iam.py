"""The cluster's instance profile: an existing one the spec names, or a role rayrig makes for ``s3_buckets``.

With ``iam_instance_profile`` the instances get that profile and rayrig never
changes or deletes it. With ``s3_buckets`` ``up`` ensures, under the IAM path
``/rayrig/`` and tagged like the cluster's other resources:

- the role ``rayrig-NAME``, which only EC2 may assume;
- its inline policy ``rayrig-s3``: ``s3:ListBucket`` and ``s3:GetBucketLocation``
  on each listed bucket, ``s3:GetObject`` on its objects, and for a bucket with
  ``write = true`` also ``s3:PutObject``, ``s3:DeleteObject``,
  ``s3:AbortMultipartUpload`` and ``s3:ListMultipartUploadParts``; nothing else.
  A changed bucket list replaces the policy on the next ``up``;
- the instance profile ``rayrig-NAME`` holding the role.

IAM is global, so both also carry ``rayrig:region``: ``down`` in another
region leaves them alone, and a cluster of the same name in another region
is refused rather than given the same role.

``down`` deletes the profile (the role out of it first), the role's policies
and the role. IAM is global and eventually consistent: a profile made a moment
ago may be refused by ``RunInstances`` for some seconds (``waits.settled``
retries that).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from cloud.ec2.aws import TAG_CLUSTER, TAG_CREATED, Aws, CloudError, aws_step, error_code, is_gone, tags_of
from cloud.ec2.spec import ClusterSpec
from cloud.ec2.spec_s3 import S3Bucket

#: IAM resources are global: this tag says which region's cluster they serve.
TAG_REGION = "rayrig:region"
#: Answers of an account whose credentials may not use IAM (it then has nothing of rayrig's there either).
_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"}
#: The IAM path of what rayrig creates, so that listing it stays short.
IAM_PATH = "/rayrig/"
#: The name of the role's inline policy.
POLICY_NAME = "rayrig-s3"
READ_BUCKET = ("s3:ListBucket", "s3:GetBucketLocation")
READ_OBJECTS = ("s3:GetObject",)
WRITE_OBJECTS = ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts")

#: Only EC2 may assume the role.
TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"},
    ],
}


def iam_name(cluster: str) -> str:
    """The name of the cluster's role and instance profile: ``rayrig-NAME``."""
    return f"rayrig-{cluster}"


def bucket_policy(buckets: tuple[S3Bucket, ...]) -> dict[str, Any]:
    """The role's inline policy: read on every bucket listed, write on those with ``write``, nothing else.

    >>> bucket_policy((S3Bucket("datasets"),))["Statement"][1]
    {'Sid': 'ReadObjects', 'Effect': 'Allow', 'Action': ['s3:GetObject'], 'Resource': ['arn:aws:s3:::datasets/*']}
    """
    names = sorted(b.name for b in buckets)
    writable = sorted(b.name for b in buckets if b.write)
    statements: list[dict[str, Any]] = [
        {
            "Sid": "ListBuckets",
            "Effect": "Allow",
            "Action": list(READ_BUCKET),
            "Resource": [f"arn:aws:s3:::{n}" for n in names],
        },
        {
            "Sid": "ReadObjects",
            "Effect": "Allow",
            "Action": list(READ_OBJECTS),
            "Resource": [f"arn:aws:s3:::{n}/*" for n in names],
        },
    ]
    if writable:
        statements.append(
            {
                "Sid": "WriteObjects",
                "Effect": "Allow",
                "Action": list(WRITE_OBJECTS),
                "Resource": [f"arn:aws:s3:::{n}/*" for n in writable],
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def buckets_text(buckets: tuple[S3Bucket, ...]) -> str:
    """``read datasets, logs; write checkpoints`` for the plan."""
    read = [b.name for b in buckets if not b.write]
    write = [b.name for b in buckets if b.write]
    return "; ".join(part for part in (f"read {', '.join(read)}" if read else "",
                                       f"read and write {', '.join(write)}" if write else "") if part)  # fmt: skip


@dataclass
class IamFound:
    """The cluster's IAM resources as ``up`` finds them: role, its inline policy, profile (None: missing)."""

    role: dict[str, Any] | None = None
    policy: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None


def _ours(resource: Mapping[str, Any], cluster: str, region: str) -> bool:
    tags = tags_of(resource)
    return tags.get(TAG_CLUSTER) == cluster and tags.get(TAG_CREATED) == "true" and _here(tags, region)


def _here(tags: Mapping[str, str], region: str) -> bool:
    return tags.get(TAG_REGION, region) == region


def _get(call: Any, key: str, **kwargs: Any) -> dict[str, Any] | None:
    """``call(**kwargs)[key]``, or None when IAM says there is no such entity."""
    try:
        return call(**kwargs)[key]
    except ClientError as exc:
        if is_gone(exc):
            return None
        raise


def discover_iam(aws: Aws, spec: ClusterSpec) -> IamFound:
    """What the spec's instance profile needs that exists already; ``CloudError`` for a named profile
    that does not exist, a role or profile named ``rayrig-NAME`` that rayrig did not create, or such a role
    whose trust policy lets anyone but EC2 assume it (tags alone do not make a role rayrig's: whoever may tag
    it could have the cluster's S3 access granted to a principal of theirs)."""
    iam, found = aws.client("iam"), IamFound()
    if spec.iam_instance_profile:
        name = spec.iam_instance_profile.rsplit("/", 1)[-1]
        with aws_step(f"looking up instance profile {name}", spec.region):
            found.profile = _get(iam.get_instance_profile, "InstanceProfile", InstanceProfileName=name)
        if found.profile is None:
            raise CloudError(
                f"{spec.path}: iam_instance_profile = {spec.iam_instance_profile!r}: expected an existing instance "
                f"profile; IAM has none named {name!r} (create it, or list s3_buckets to have rayrig create one)"
            )
        return found
    if not spec.s3_buckets:
        return found
    name = iam_name(spec.name)
    with aws_step(f"looking up the IAM role and instance profile {name}", spec.region):
        found.role = _get(iam.get_role, "Role", RoleName=name)
        found.profile = _get(iam.get_instance_profile, "InstanceProfile", InstanceProfileName=name)
        if found.role is not None:
            found.policy = _get(iam.get_role_policy, "PolicyDocument", RoleName=name, PolicyName=POLICY_NAME)
    for what, resource in (("IAM role", found.role), ("instance profile", found.profile)):
        if resource is not None and not _ours(resource, spec.name, spec.region):
            tags = tags_of(resource)
            owner = (
                f"cluster {spec.name} in {tags[TAG_REGION]} uses it"
                if not _here(tags, spec.region) and tags.get(TAG_CLUSTER) == spec.name
                else f"rayrig did not create it for cluster {spec.name}"
            )
            raise CloudError(
                f"an {what} named {name} exists (IAM names are global) but {owner}; "
                "choose another cluster name, or delete that one first"
            )
    trust = _trust_policy(found.role)
    if found.role is not None and trust != TRUST_POLICY:
        raise CloudError(
            f"the IAM role {name} carries rayrig's tags but its trust policy is not rayrig's (EC2 alone may assume "
            f"it): {json.dumps(trust, sort_keys=True)}; rayrig will not give it the cluster's S3 access: delete the "
            "role (rayrig cloud up makes it again) or choose another cluster name"
        )
    return found


def _trust_policy(role: Mapping[str, Any] | None) -> Any:
    """The role's trust policy as a document (IAM returns it decoded, or as URL-encoded JSON text)."""
    document = (role or {}).get("AssumeRolePolicyDocument")
    if isinstance(document, str):
        try:
            return json.loads(urllib.parse.unquote(document))
        except ValueError:
            return document
    return document


def plan_lines(spec: ClusterSpec, found: IamFound) -> list[tuple[str, str]]:
    """The plan's lines for the instance profile: (action, text)."""
    if spec.iam_instance_profile:
        return [("use", f"instance profile {spec.iam_instance_profile} (exists; rayrig never changes or deletes it)")]
    if not spec.s3_buckets:
        return []
    name = iam_name(spec.name)
    if found.role is None:
        role_action = "create"
    elif found.policy != bucket_policy(spec.s3_buckets):
        role_action = "update"
    else:
        role_action = "reuse"
    return [
        (role_action, f"IAM role {name} for EC2: S3 {buckets_text(spec.s3_buckets)}, nothing else"),
        ("reuse" if found.profile else "create", f"instance profile {name} holding the role"),
    ]


def ensure_instance_profile(aws: Aws, spec: ClusterSpec, found: IamFound, tags: Mapping[str, str],
                            created: Any) -> dict[str, str] | None:  # fmt: skip
    """The ``IamInstanceProfile`` parameter of the cluster's instances (None: none), making what is missing.

    ``created(kind, name, text)`` records what this run made (the ledger).
    """
    if spec.iam_instance_profile:
        profile = spec.iam_instance_profile
        return {"Arn": profile} if profile.startswith("arn:") else {"Name": profile}
    if not spec.s3_buckets:
        return None
    iam, name = aws.client("iam"), iam_name(spec.name)
    tag_list = [{"Key": k, "Value": v} for k, v in {**tags, TAG_REGION: spec.region}.items()]
    with aws_step(f"creating the IAM role and instance profile {name}", spec.region):
        if found.role is None:
            iam.create_role(
                RoleName=name,
                Path=IAM_PATH,
                AssumeRolePolicyDocument=json.dumps(TRUST_POLICY),
                Description=f"rayrig cluster {spec.name}: S3 access to the buckets its spec lists",
                Tags=tag_list,
            )
            created("iam_roles", name, "IAM role")
        policy = bucket_policy(spec.s3_buckets)
        if found.policy != policy:
            iam.put_role_policy(RoleName=name, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(policy))
        profile = found.profile
        if profile is None:
            profile = iam.create_instance_profile(InstanceProfileName=name, Path=IAM_PATH, Tags=tag_list)[
                "InstanceProfile"
            ]
            created("instance_profiles", name, "instance profile")
        if not any(r.get("RoleName") == name for r in profile.get("Roles", [])):
            iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    return {"Arn": profile["Arn"]}


def created_iam(aws: Aws, cluster: str) -> tuple[list[str], list[str]]:
    """The names of the instance profiles and roles rayrig created for ``cluster``: (profiles, roles)."""
    iam, name = aws.client("iam"), iam_name(cluster)
    with aws_step(f"looking up the IAM role and instance profile {name}", aws.region):
        try:
            profile = _get(iam.get_instance_profile, "InstanceProfile", InstanceProfileName=name)
            role = _get(iam.get_role, "Role", RoleName=name)
        except ClientError as exc:
            if error_code(exc) in _DENIED:
                return [], []
            raise
    return (
        [name] if profile is not None and _ours(profile, cluster, aws.region) else [],
        [name] if role is not None and _ours(role, cluster, aws.region) else [],
    )


def tagged_iam(aws: Aws, cluster: str) -> list[str]:
    """The roles and instance profiles under ``/rayrig/`` (or named ``rayrig-NAME``) that carry the cluster's tag
    and serve this region, as lines; none when the credentials may not read IAM."""
    try:
        return _tagged_iam(aws, cluster)
    except ClientError as exc:
        if error_code(exc) in _DENIED:
            return []
        raise


def _tagged_iam(aws: Aws, cluster: str) -> list[str]:
    iam, name = aws.client("iam"), iam_name(cluster)
    found: list[str] = []
    roles = {r["RoleName"] for page in iam.get_paginator("list_roles").paginate(PathPrefix=IAM_PATH)
             for r in page["Roles"]} | {name}  # fmt: skip
    for role_name in sorted(roles):
        role = _get(iam.get_role, "Role", RoleName=role_name)
        if role is not None and tags_of(role).get(TAG_CLUSTER) == cluster and _here(tags_of(role), aws.region):
            found.append(f"IAM role {role_name}")
    profiles = {p["InstanceProfileName"] for page in iam.get_paginator("list_instance_profiles").paginate(
                PathPrefix=IAM_PATH) for p in page["InstanceProfiles"]} | {name}  # fmt: skip
    for profile_name in sorted(profiles):
        profile = _get(iam.get_instance_profile, "InstanceProfile", InstanceProfileName=profile_name)
        tags = tags_of(profile or {})
        if profile is not None and tags.get(TAG_CLUSTER) == cluster and _here(tags, aws.region):
            found.append(f"instance profile {profile_name}")
    return found


def delete_instance_profile(aws: Aws, name: str) -> None:
    """Take every role out of instance profile ``name``, then delete it."""
    iam = aws.client("iam")
    profile = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    for role in profile.get("Roles", []):
        iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=role["RoleName"])
    iam.delete_instance_profile(InstanceProfileName=name)


def delete_role(aws: Aws, name: str) -> None:
    """Delete role ``name``: out of its instance profiles, its inline and attached policies first."""
    iam = aws.client("iam")
    for page in iam.get_paginator("list_instance_profiles_for_role").paginate(RoleName=name):
        for profile in page["InstanceProfiles"]:
            iam.remove_role_from_instance_profile(InstanceProfileName=profile["InstanceProfileName"], RoleName=name)
    for page in iam.get_paginator("list_role_policies").paginate(RoleName=name):
        for policy in page["PolicyNames"]:
            iam.delete_role_policy(RoleName=name, PolicyName=policy)
    for page in iam.get_paginator("list_attached_role_policies").paginate(RoleName=name):
        for policy in page["AttachedPolicies"]:
            iam.detach_role_policy(RoleName=name, PolicyArn=policy["PolicyArn"])
    iam.delete_role(RoleName=name)


def profile_not_ready(exc: ClientError) -> bool:
    """Whether ``RunInstances`` refused an instance profile made a moment ago (IAM is eventually consistent)."""
    message = exc.response.get("Error", {}).get("Message", "")
    return error_code(exc) == "InvalidParameterValue" and "iam instance profile" in message.lower()
