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
    "instance_type": {**_INSTANCE_TYPE, "description": "The group's instance type (or `instance_types`)."},
    "market": {
        "enum": ["on-demand", "spot"],
        "default": "on-demand",
        "x-expected": '"on-demand" or "spot"',
        "description": "On-demand or spot instances.",
    },
    # --- capacity failover (cloud/ec2/failover.py): exactly one of instance_type / instance_types ---
    "instance_types": {
        "type": "array",
        "minItems": 1,
        "items": _INSTANCE_TYPE,
        "x-expected": (
            'a non-empty list of EC2 instance types, the preferred first, such as ["g5.12xlarge", "g6e.12xlarge"]'
        ),
        "description": (
            "The group's instance types, the preferred first: on a capacity error `up` tries each zone of one "
            "type, then the next type (or `instance_type`)."
        ),
    },
    "spot_fallback": {
        "enum": ["none", "on-demand"],
        "x-expected": '"none" (a spot group stays spot) or "on-demand" (on-demand once no spot capacity is left)',
        "default": "none",
        "description": (
            'With `market = "spot"`: `"on-demand"` launches on-demand once no spot capacity is left; `"none"` '
            "never does."
        ),
    },
    "root_volume_gb": {
        "type": "integer",
        "minimum": 8,
        "maximum": 16384,
        "x-expected": "a root volume size in GB from 8 to 16384",
        "default": 100,
        "description": "The root volume's size in GB.",
    },
    "host_data": {**_HOST_DATA, "description": "Host data of this group's hosts, over the spec's `host_data`."},
    # EFA network interfaces (cloud/ec2/efa.py)
    "efa": {
        "enum": ["auto", "on", "off"],
        "x-expected": '"auto" (EFA on the types built for it, in the placement group), "on" or "off"',
        "default": "auto",
        "description": (
            'EFA network interfaces: `"auto"` on the instance types built for it, in the placement group; '
            '`"on"` or `"off"`.'
        ),
    },
}

_HEAD = {
    "type": "object",
    "properties": {
        **_GROUP_PROPERTIES,
        "count": {
            "const": 1,
            "description": "The head is one instance.",
            "default": 1,
            "x-expected": "1 (a cluster has exactly one head)",
        },
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
            "description": "The group's name: its instances are named `<cluster name>-<name>`.",
            "type": "string",
            "pattern": r"^[a-z][a-z0-9-]{0,19}\Z",
            "x-expected": "a group name: lower-case letters, digits and '-', at most 20 characters",
        },
        "count": {
            "type": "integer",
            "description": "How many instances the group has.",
            "minimum": 1,
            "maximum": 64,
            "x-expected": "an integer from 1 to 64",
        },
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
            "description": (
                "The cluster's name: the tag `rayrig:cluster` on everything `up` creates, and the inventory's "
                "`ray_cluster_name`."
            ),
            "type": "string",
            "pattern": r"^[a-z][a-z0-9-]{0,30}[a-z0-9]\Z",
            "x-expected": "a cluster name: 2-32 lower-case letters, digits and '-', starting with a letter",
        },
        "region": {
            "description": "The AWS region of every resource.",
            "type": "string",
            "pattern": r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]\Z",
            "x-expected": 'an AWS region such as "us-east-1"',
        },
        "owner": {
            "description": "Who owns the cluster (tag `rayrig:owner`), such as an e-mail address.",
            "type": "string",
            "pattern": r"^[A-Za-z0-9_.:/=+@ -]{1,128}\Z",
            "x-expected": "who owns the cluster, such as an e-mail address (1-128 characters)",
        },
        "ttl": {
            "description": (
                "How long the cluster may live: it expires at its first `up` plus this (tag "
                "`rayrig:expires-at`), at most 30 days; `rayrig cloud extend` moves it later."
            ),
            "type": "string",
            "pattern": TTL_PATTERN,
            "x-expected": 'a duration such as "12h", "7d" or "1d12h", at most 30d',
        },
        "admin_cidrs": {
            "description": (
                "The networks that may SSH in; nobody else reaches anything. Also every host's `firewall_admin_cidrs`."
            ),
            "type": "array",
            "minItems": 1,
            "items": {"type": "string"},
            "x-expected": 'a non-empty list of the CIDRs that may SSH in, such as ["198.51.100.0/24"]',
        },
        "allow_ssh_from_anywhere": {
            "description": "Must be true to list a network wider than /8 (IPv6: /16) in `admin_cidrs`.",
            "default": False,
            "type": "boolean",
            "x-expected": "true or false",
        },
        "ssh_public_key": {
            "description": (
                "The SSH public key (`.pub`) the instances accept; `~` is expanded, a relative path is the "
                "spec's folder's."
            ),
            "type": "string",
            "pattern": _PATH,
            "x-expected": "the path of an SSH public key (.pub)",
        },
        "ssh_private_key": {
            "description": "The matching private key. Default: the public key's path without `.pub`.",
            "type": "string",
            "pattern": _PATH,
            "x-expected": "the path of the matching private key",
        },
        "placement_group": {
            "description": "A cluster placement group for the workers.",
            "default": True,
            "type": "boolean",
            "x-expected": "true or false",
        },
        "ami": {
            "type": "object",
            "properties": {
                "id": {
                    "description": "The AMI's id (or `ssm_parameter`).",
                    "type": "string",
                    "pattern": r"^ami-([0-9a-f]{8}|[0-9a-f]{17})\Z",
                    "x-expected": 'an AMI id such as "ami-0123456789abcdef0"',
                },
                "ssm_parameter": {
                    "description": (
                        "An SSM parameter that holds the AMI's id, such as AWS's Deep Learning AMI's "
                        "`.../latest/ami-id` (or `id`)."
                    ),
                    "type": "string",
                    "pattern": r"^/[A-Za-z0-9_.\-/]+\Z",
                    "x-expected": "an SSM parameter name starting with '/' that holds an AMI id",
                },
                "ssh_user": {
                    "description": (
                        "The user SSH logs in as. Default: from the AMI's family (`ubuntu`, `ec2-user`, "
                        "`admin`, `rocky`)."
                    ),
                    "type": "string",
                    "pattern": r"^[a-z_][a-z0-9_-]{0,31}\Z",
                    "x-expected": 'a Unix user name such as "ubuntu"',
                },
            },
            "additionalProperties": False,
            "x-expected": "a table with id or ssm_parameter, and optionally ssh_user",
            "description": "The image of every instance: exactly one of `id` and `ssm_parameter`.",
        },
        "network": {
            "type": "object",
            "properties": {
                "vpc_id": {
                    "description": "An existing VPC to use (with `subnet_id`) instead of one rayrig creates.",
                    "type": "string",
                    "pattern": r"^vpc-[0-9a-f]{8,17}\Z",
                    "x-expected": "a VPC id (vpc-...)",
                },
                "subnet_id": {
                    "description": "An existing subnet of `vpc_id`.",
                    "type": "string",
                    "pattern": r"^subnet-[0-9a-f]{8,17}\Z",
                    "x-expected": "a subnet id (subnet-...)",
                },
                "vpc_cidr": {
                    "description": "The network of the VPC rayrig creates.",
                    "default": "10.42.0.0/16",
                    "type": "string",
                    "x-expected": 'an IPv4 CIDR from /16 to /24, such as "10.42.0.0/16"',
                },
                "subnet_cidr": {
                    "description": "The network of its subnet, inside `vpc_cidr`.",
                    "default": "10.42.0.0/20",
                    "type": "string",
                    "x-expected": "an IPv4 CIDR inside vpc_cidr",
                },
                "availability_zone": {**_ZONE, "description": "The zone of every instance (or `availability_zones`)."},
                # --- capacity failover: the zones to try, in order (availability_zone is the one-zone case) ---
                "availability_zones": {
                    "description": (
                        "The zones to try on a capacity error, the preferred first. Default: the one AWS chooses."
                    ),
                    "type": "array",
                    "minItems": 1,
                    "items": _ZONE,
                    "x-expected": (
                        "a non-empty list of availability zones of the region, the preferred first, such as "
                        '["us-east-1a", "us-east-1b"]'
                    ),
                },
                "public_ips": {
                    "description": (
                        "Public addresses on the instances; false needs `bastion` or a subnet of your own you reach."
                    ),
                    "default": True,
                    "type": "boolean",
                    "x-expected": "true or false",
                },
                "bastion": {
                    "description": "A host to reach the instances through (SSH's ProxyJump).",
                    "type": "string",
                    "pattern": r"^([a-z_][a-z0-9_-]*@)?[A-Za-z0-9.-]+(:[0-9]{1,5})?\Z",
                    "x-expected": 'a bastion host for ProxyJump, such as "ec2-user@bastion.example.com"',
                },
                "bastion_ssh_key": {
                    "description": "The bastion's private key.",
                    "type": "string",
                    "pattern": _PATH,
                    "x-expected": "the path of a private key",
                },
                "internet_egress": {
                    "description": "Outbound internet from the instances (package and image pulls).",
                    "default": True,
                    "type": "boolean",
                    "x-expected": "true or false",
                },
            },
            "additionalProperties": False,
            "x-expected": "a table of network settings",
            "description": "Where the instances live and how they are reached; every key optional.",
        },
        # --- instance profile (cloud/ec2/iam.py) ---
        "iam_instance_profile": {
            "description": (
                "An existing instance profile (name or ARN) attached to every instance, instead of the role "
                "`s3_buckets` makes."
            ),
            "type": "string",
            "pattern": IAM_PROFILE_PATTERN,
            "x-expected": (
                'the name or ARN of an existing instance profile, such as "ml-data-reader" or '
                '"arn:aws:iam::123456789012:instance-profile/ml-data-reader"'
            ),
        },
        "s3_buckets": {
            "description": (
                "The buckets of an instance role rayrig creates: read-only, or read-write with `write = true`; "
                "the S3 mounts of the host data must be among them."
            ),
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
        "head": {**_HEAD, "description": "The head: one instance."},
        "workers": {
            "description": "The groups of workers, each `[[workers]]` table one group of identical instances.",
            "type": "array",
            "items": _WORKER,
            "x-expected": "an array of tables ([[workers]])",
        },
        "host_data": {
            **_HOST_DATA,
            "description": (
                "Host data passed to every host by `inventories/ec2.py`: any inventory setting but the ones it "
                "sets itself (`ray_role`, `ray_num_gpus`, `ray_node_ip`, `ssh_*`)."
            ),
        },
    },
    "required": ["name", "region", "owner", "ttl", "admin_cidrs", "ssh_public_key", "ami", "head"],
    "additionalProperties": False,
}
