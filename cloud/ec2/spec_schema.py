"""The JSON Schema of a cluster spec (``cloud/ec2/spec.py`` reads the file and checks what spans keys).

Each property carries ``x-expected``: what the error message says is expected there.
"""

from __future__ import annotations

from typing import Any

#: A duration such as ``12h``, ``7d`` or ``1d12h``.
TTL_PATTERN = r"^(?=[0-9])([0-9]+d)?([0-9]+h)?([0-9]+m)?\Z"

#: A path on this machine: one line, no control characters.
_PATH = r"^[^\x00-\x1f\x7f]+\Z"

#: An instance profile's name, or its ARN (any partition, an optional path).
IAM_PROFILE_PATTERN = (
    r"^([A-Za-z0-9+=,.@_-]{1,128}"
    r"|arn:aws(-cn|-us-gov|-iso|-iso-b)?:iam::[0-9]{12}:instance-profile/([A-Za-z0-9+=,.@_-]+/)*[A-Za-z0-9+=,.@_-]{1,128})\Z"
)

_ZONE = {
    "type": "string",
    "pattern": r"^[a-z]{2}(-gov)?-[a-z]+-[0-9][a-z]\Z",
    "x-expected": 'an availability zone of the region, such as "us-east-1a"',
}

_HOST_DATA = {
    "type": "object",
    "propertyNames": {"pattern": r"^[a-z][a-z0-9_]*\Z"},
    "x-expected": "a table of host data keys (lower-case names) to values",
}

_INSTANCE_TYPE = {
    "type": "string",
    "pattern": r"^[a-z][a-z0-9-]*\.[a-z0-9-]+\Z",
    "x-expected": 'an EC2 instance type such as "g5.12xlarge"',
}

_GROUP_PROPERTIES: dict[str, Any] = {
    "instance_type": _INSTANCE_TYPE,
    "market": {"enum": ["on-demand", "spot"], "x-expected": '"on-demand" or "spot"'},
    # --- capacity failover (cloud/ec2/failover.py): exactly one of instance_type / instance_types ---
    "instance_types": {
        "type": "array",
        "minItems": 1,
        "items": _INSTANCE_TYPE,
        "x-expected": (
            'a non-empty list of EC2 instance types, the preferred first, such as ["g5.12xlarge", "g6e.12xlarge"]'
        ),
    },
    "spot_fallback": {
        "enum": ["none", "on-demand"],
        "x-expected": '"none" (a spot group stays spot) or "on-demand" (on-demand once no spot capacity is left)',
    },
    "root_volume_gb": {
        "type": "integer",
        "minimum": 8,
        "maximum": 16384,
        "x-expected": "a root volume size in GB from 8 to 16384",
    },
    "host_data": _HOST_DATA,
    # EFA network interfaces (cloud/ec2/efa.py)
    "efa": {
        "enum": ["auto", "on", "off"],
        "x-expected": '"auto" (EFA on the types built for it, in the placement group), "on" or "off"',
    },
}

_HEAD = {
    "type": "object",
    "properties": {
        **_GROUP_PROPERTIES,
        "count": {"const": 1, "x-expected": "1 (a cluster has exactly one head)"},
    },
    "additionalProperties": False,
    "x-expected": (
        "a table with instance_type (or instance_types) and optionally market, spot_fallback, root_volume_gb, host_data"
    ),
}

_WORKER = {
    "type": "object",
    "properties": {
        **_GROUP_PROPERTIES,
        "name": {
            "type": "string",
            "pattern": r"^[a-z][a-z0-9-]{0,19}\Z",
            "x-expected": "a group name: lower-case letters, digits and '-', at most 20 characters",
        },
        "count": {"type": "integer", "minimum": 1, "maximum": 64, "x-expected": "an integer from 1 to 64"},
    },
    "required": ["name", "count"],
    "additionalProperties": False,
    "x-expected": (
        "a table with name, instance_type (or instance_types), count and optionally market, spot_fallback, "
        "root_volume_gb, host_data"
    ),
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "name": {
            "type": "string",
            "pattern": r"^[a-z][a-z0-9-]{0,30}[a-z0-9]\Z",
            "x-expected": "a cluster name: 2-32 lower-case letters, digits and '-', starting with a letter",
        },
        "region": {
            "type": "string",
            "pattern": r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]\Z",
            "x-expected": 'an AWS region such as "us-east-1"',
        },
        "owner": {
            "type": "string",
            "pattern": r"^[A-Za-z0-9_.:/=+@ -]{1,128}\Z",
            "x-expected": "who owns the cluster, such as an e-mail address (1-128 characters)",
        },
        "ttl": {
            "type": "string",
            "pattern": TTL_PATTERN,
            "x-expected": 'a duration such as "12h", "7d" or "1d12h", at most 30d',
        },
        "admin_cidrs": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string"},
            "x-expected": 'a non-empty list of the CIDRs that may SSH in, such as ["198.51.100.0/24"]',
        },
        "allow_ssh_from_anywhere": {"type": "boolean", "x-expected": "true or false"},
        "ssh_public_key": {"type": "string", "pattern": _PATH, "x-expected": "the path of an SSH public key (.pub)"},
        "ssh_private_key": {"type": "string", "pattern": _PATH, "x-expected": "the path of the matching private key"},
        "placement_group": {"type": "boolean", "x-expected": "true or false"},
        "ami": {
            "type": "object",
            "properties": {
                "id": {
                    "type": "string",
                    "pattern": r"^ami-([0-9a-f]{8}|[0-9a-f]{17})\Z",
                    "x-expected": 'an AMI id such as "ami-0123456789abcdef0"',
                },
                "ssm_parameter": {
                    "type": "string",
                    "pattern": r"^/[A-Za-z0-9_.\-/]+\Z",
                    "x-expected": "an SSM parameter name starting with '/' that holds an AMI id",
                },
                "ssh_user": {
                    "type": "string",
                    "pattern": r"^[a-z_][a-z0-9_-]{0,31}\Z",
                    "x-expected": 'a Unix user name such as "ubuntu"',
                },
            },
            "additionalProperties": False,
            "x-expected": "a table with id or ssm_parameter, and optionally ssh_user",
        },
        "network": {
            "type": "object",
            "properties": {
                "vpc_id": {"type": "string", "pattern": r"^vpc-[0-9a-f]{8,17}\Z", "x-expected": "a VPC id (vpc-...)"},
                "subnet_id": {
                    "type": "string",
                    "pattern": r"^subnet-[0-9a-f]{8,17}\Z",
                    "x-expected": "a subnet id (subnet-...)",
                },
                "vpc_cidr": {"type": "string", "x-expected": 'an IPv4 CIDR from /16 to /24, such as "10.42.0.0/16"'},
                "subnet_cidr": {"type": "string", "x-expected": "an IPv4 CIDR inside vpc_cidr"},
                "availability_zone": _ZONE,
                # --- capacity failover: the zones to try, in order (availability_zone is the one-zone case) ---
                "availability_zones": {
                    "type": "array",
                    "minItems": 1,
                    "items": _ZONE,
                    "x-expected": (
                        "a non-empty list of availability zones of the region, the preferred first, such as "
                        '["us-east-1a", "us-east-1b"]'
                    ),
                },
                "public_ips": {"type": "boolean", "x-expected": "true or false"},
                "bastion": {
                    "type": "string",
                    "pattern": r"^([a-z_][a-z0-9_-]*@)?[A-Za-z0-9.-]+(:[0-9]{1,5})?\Z",
                    "x-expected": 'a bastion host for ProxyJump, such as "ec2-user@bastion.example.com"',
                },
                "bastion_ssh_key": {"type": "string", "pattern": _PATH, "x-expected": "the path of a private key"},
                "internet_egress": {"type": "boolean", "x-expected": "true or false"},
            },
            "additionalProperties": False,
            "x-expected": "a table of network settings",
        },
        # --- instance profile (cloud/ec2/iam.py) ---
        "iam_instance_profile": {
            "type": "string",
            "pattern": IAM_PROFILE_PATTERN,
            "x-expected": (
                'the name or ARN of an existing instance profile, such as "ml-data-reader" or '
                '"arn:aws:iam::123456789012:instance-profile/ml-data-reader"'
            ),
        },
        "s3_buckets": {
            "type": "array",
            "minItems": 1,
            "items": {
                "anyOf": [
                    {"type": "string"},
                    {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "write": {"type": "boolean"}},
                        "required": ["name"],
                        "additionalProperties": False,
                    },
                ],
                "x-expected": 'a bucket name such as "datasets", or a table such as { name = "ckpt", write = true }',
            },
            "x-expected": 'a non-empty list of bucket names, or tables such as { name = "ckpt", write = true }',
        },
        "head": _HEAD,
        "workers": {"type": "array", "items": _WORKER, "x-expected": "an array of tables ([[workers]])"},
        "host_data": _HOST_DATA,
    },
    "required": ["name", "region", "owner", "ttl", "admin_cidrs", "ssh_public_key", "ami", "head"],
    "additionalProperties": False,
}
