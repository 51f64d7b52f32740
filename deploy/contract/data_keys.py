r"""Every data key rayrig knows, as JSON Schema: its type, its pattern and, in ``x-expected``,
what an error message says is expected; in ``description`` (from :mod:`deploy.contract.descriptions`), what
it means. ``inventories/group_data/all.py`` gives each its default.

The rules that span keys or hosts, and the validation itself, are in :mod:`deploy.contract.schema`.
Every pattern ends with ``\Z``: Python's ``$`` would accept a trailing newline.
"""

from __future__ import annotations

from typing import Any

from deploy.contract.descriptions import DESCRIPTIONS, MONITORING_PORTS, RAY_PORTS

_COUNT = {
    "oneOf": [{"type": "integer", "minimum": 0}, {"const": "auto"}],
    "x-expected": 'a non-negative integer or "auto"',
}
_PORT = {"type": "integer", "minimum": 1, "maximum": 65535, "x-expected": "a port number 1-65535"}
#: Ports Ray itself refuses below 1024 (ray/_private/parameter.py).
_HIGH_PORT = {"type": "integer", "minimum": 1024, "maximum": 65535, "x-expected": "a port number 1024-65535"}
_FRACTION = {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "x-expected": "a fraction in (0, 1]"}
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z"
_SIZE = r"^0*[1-9][0-9]*[bkmgBKMG]?\Z"  # docker's --shm-size, never 0

_MOUNT_POINT = r"^(/[A-Za-z0-9_][A-Za-z0-9_.-]*)+\Z"
#: An absolute path of plain names: no "." or ".." step, nothing a shell or an exports file reads as syntax.
_ABS_PATH = r"^(/(?!\.\.?(/|\Z))[A-Za-z0-9_.@+=,-]+)+\Z"
_BUCKET = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z"
#: An http(s) URL of a host (name, IPv4 or [IPv6]), an optional port and a plain path: nothing
#: a shell or a repository line would read as syntax (no quotes, spaces, ?, &, ;, $, `).
_URL = r"^https?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?(/[A-Za-z0-9._~%+@=:,-]*)*\Z"
#: An S3 key prefix: names separated by '/', none of them "." or "..".
_PREFIX = r"^(?!\.\.?(/|\Z))[A-Za-z0-9_.-]+(/(?!\.\.?(/|\Z))[A-Za-z0-9_.-]+)*/?\Z"
#: Mount and export options: option[=value], comma-separated.
_OPTIONS = r"^[A-Za-z0-9_=,.:-]+\Z"
#: An inventory host's name (pyinfra's @connector/names included) or an address: never an option.
_HOST_NAME = r"^[A-Za-z0-9@\[][A-Za-z0-9_.:/@%\[\]-]*\Z"
#: What an address key accepts: an IP address (a zone on IPv6 only) or an RFC 1123 host name.
ADDRESS_FORMAT = "rayrig-address"
#: Debian/RPM package names (with an optional =version): never an option.
_PACKAGE = r"^[A-Za-z0-9][A-Za-z0-9+._:=~*-]*\Z"
#: A container image reference (registry/name:tag or @sha256:digest): never an option.
_IMAGE = r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*\Z"
#: A path on the operator's machine: one line, no control characters.
_LOCAL_PATH = r"^[^\x00-\x1f\x7f]+\Z"
#: Free text (an environment value, a password): anything but NUL, which no process argument,
#: environment variable or file name can hold.
_TEXT = r"^[^\x00]*\Z"
#: A secret or a user name: one line (they are written to files as one line).
_LINE = r"^[^\x00\r\n]+\Z"
#: A key id or a user name: one line, and no ':' (it separates the two in the files written).
_KEY_ID = r"^[^\x00\r\n:]+\Z"
#: A registry as Docker's config.json names it: host[:port][/path], or an https:// URL.
_REGISTRY = r"^[A-Za-z0-9\[][A-Za-z0-9._:/\[\]-]*\Z"
#: Ray's largest resource quantity (ray_constants.MAX_RESOURCE_QUANTITY).
MAX_RESOURCE_QUANTITY = 100 * 10**12
#: Resource names Ray sets itself; ``ray start`` refuses them in --resources.
RESERVED_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")
_TCP_PORTS = {
    "type": "array",
    "items": {
        "oneOf": [
            {"type": "integer", "minimum": 1, "maximum": 65535},
            {"type": "string", "pattern": r"^[0-9]{1,5}-[0-9]{1,5}\Z"},
        ]
    },
    "x-expected": 'a list of ports 1-65535 or "first-last" ranges',
}


def _null_or_strings(keys: dict[str, str], expected: str) -> dict[str, Any]:
    """null, or a mapping of exactly ``keys`` to strings matching their patterns (credentials)."""
    strings = {
        "type": "object",
        "properties": {key: {"type": "string", "pattern": pattern} for key, pattern in keys.items()},
        "required": list(keys),
        "additionalProperties": False,
    }
    return {"oneOf": [{"type": "null"}, strings], "x-expected": expected}


PORT_NAMES = (
    "gcs", "client_server", "dashboard", "dashboard_agent_grpc", "dashboard_agent_http",
    "node_manager", "object_manager", "runtime_env_agent", "metrics_export", "worker_min", "worker_max",
    "dashboard_metrics", "autoscaler_metrics",
)  # fmt: skip

#: Ports ``ray start`` refuses below 1024 (ray/_private/parameter.py).
HIGH_PORT_NAMES = ("client_server", "runtime_env_agent", "worker_min", "worker_max")

#: Keys whose value must be the same on every host of a cluster.
CLUSTER_WIDE = (
    "ray_version", "ray_ports", "ray_image", "ray_container_name", "checks_enabled", "checks_mode",
    "ray_cluster_name", "ray_auth", "ray_auth_allow_none", "storage_nfs_server", "storage_nfs_exports",
    "ray_rolling_batch", "ray_gcs_fault_tolerance", "image_mirror", "image_mirror_port",
)  # fmt: skip
# monitoring (exporters): one Prometheus scrapes every host at the same ports, through one firewall rule set.
CLUSTER_WIDE += ("monitoring_enabled", "monitoring_host", "monitoring_ports", "monitoring_gpu_exporter")

#: The exporters of ``monitoring_ports``: the node exporter on every host, the GPU exporter on GPU hosts.
MONITORING_PORT_NAMES = ("node_exporter", "gpu_exporter")

PROPERTIES: dict[str, dict[str, Any]] = {
    "ray_role": {"enum": ["head", "worker"], "x-expected": '"head" or "worker"'},
    "ray_num_gpus": _COUNT,
    "ray_num_cpus": _COUNT,
    "ray_resources": {
        "type": "object",
        "additionalProperties": {"type": "integer", "minimum": 0, "maximum": MAX_RESOURCE_QUANTITY},
        "propertyNames": {"pattern": _NAME},
        "x-expected": "a mapping of resource name to a whole number of at least 0 (Ray refuses fractions)",
    },
    "ray_object_store_bytes": {
        "oneOf": [{"type": "null"}, {"type": "integer", "minimum": 78643200}],
        "x-expected": "null or a number of bytes of at least 75 MiB (Ray's minimum)",
    },
    "ray_node_ip": {
        "type": ["string", "null"],
        "format": ADDRESS_FORMAT,
        "x-expected": "null or an address the other nodes can reach: an IP address or a host name",
    },
    "ray_version": {
        "type": "string",
        "pattern": r"^[0-9]+\.[0-9]+\.[0-9]+\Z",
        "x-expected": 'a Ray version such as "2.60.0"',
    },
    "ray_image": {
        "type": "string",
        "pattern": _IMAGE,
        "x-expected": "an image reference (registry/name:tag or @sha256:digest)",
    },
    "ray_image_pull": {"enum": ["missing", "always"], "x-expected": '"missing" or "always"'},
    "ray_image_pull_timeout_s": {
        "type": "integer",
        "minimum": 30,
        "maximum": 86400,
        "x-expected": "a number of seconds from 30 to 86400",
    },
    "image_mirror": {"enum": ["off", "head"], "x-expected": '"off" or "head"'},
    "image_mirror_port": {"type": "integer", "minimum": 1, "maximum": 65535, "x-expected": "a TCP port (1-65535)"},
    "ray_container_name": {"type": "string", "pattern": _NAME, "x-expected": "a container name"},
    "ray_container_hardened": {"type": "boolean", "x-expected": "true or false"},
    "ray_shm_size": {
        "oneOf": [{"const": "auto"}, {"type": "string", "pattern": _SIZE}],
        "x-expected": '"auto" or a size above 0 such as "16g"',
    },
    "ray_ulimit_nofile": {
        "oneOf": [{"type": "null"}, {"type": "integer", "minimum": 1024}],
        "x-expected": "null (the image's default) or an integer of at least 1024",
    },
    "ray_dashboard_host": {
        "type": "string",
        "format": ADDRESS_FORMAT,
        "x-expected": 'an address to bind the dashboard to, such as "127.0.0.1"',
    },
    "ray_ports": {
        "type": "object",
        "properties": {name: _HIGH_PORT if name in HIGH_PORT_NAMES else _PORT for name in PORT_NAMES},
        "required": list(PORT_NAMES),
        "additionalProperties": False,
        "x-expected": "a mapping of "
        + ", ".join(PORT_NAMES)
        + " to port numbers 1-65535 ("
        + ", ".join(HIGH_PORT_NAMES)
        + ": 1024-65535)",
    },
    "ray_env": {
        "type": "object",
        "additionalProperties": {"type": "string", "pattern": _TEXT},
        "propertyNames": {"pattern": r"^[A-Za-z_][A-Za-z0-9_]*\Z"},
        "x-expected": "a mapping of environment variable names to strings",
    },
    "ray_temp_dir": {
        "type": "string",
        "pattern": _MOUNT_POINT,
        "x-expected": "an absolute path of plain names, such as /var/lib/rayrig/ray",
    },
    "ray_head_wait_s": {"type": "integer", "minimum": 0, "x-expected": "a non-negative number of seconds"},
    "ray_replace_timeout_s": {"type": "integer", "minimum": 1, "x-expected": "a positive number of seconds"},
    "ray_state": {"enum": ["present", "absent"], "x-expected": '"present" or "absent" (drained and removed)'},
    "ray_drain_timeout_s": {"type": "integer", "minimum": 0, "x-expected": "a non-negative number of seconds"},
    "ray_rolling_batch": {
        "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": r"^([1-9][0-9]?|100)%\Z"}],
        "x-expected": 'a number of workers of at least 1, or a percentage of the workers from "1%" to "100%"',
    },
    "ray_gcs_fault_tolerance": {"type": "boolean", "x-expected": "true or false"},
    "ray_efa": {"type": "boolean", "x-expected": "true or false"},  # deploy/host/efa.py
    "ray_efa_device_rdma": {"type": "boolean", "x-expected": "true or false"},
    "ray_gcs_storage_path": {"type": "string", "pattern": _ABS_PATH, "x-expected": "an absolute folder path"},
    "ray_auth": {"enum": ["token", "none"], "x-expected": '"token" or "none"'},
    "ray_auth_allow_none": {"type": "boolean", "x-expected": "true or false"},
    "ray_auth_token_file": {
        "type": ["string", "null"],
        "pattern": _LOCAL_PATH,
        "x-expected": "null or the path of the token file on the operator's machine",
    },
    "firewall_enabled": {"type": "boolean", "x-expected": "true or false"},
    "firewall_members_all_ports": {"type": "boolean", "x-expected": "true or false"},
    "firewall_admin_cidrs": {
        "type": "array",
        "items": {"type": "string", "pattern": r"^[0-9A-Fa-f.:/]+\Z"},
        "x-expected": 'a list of addresses or networks such as "203.0.113.0/24"',
    },
    "firewall_allow_ssh_from_anywhere": {"type": "boolean", "x-expected": "true or false"},
    "firewall_extra_tcp_ports": _TCP_PORTS,
    "firewall_member_cidrs": {
        "type": "array",
        "items": {"type": "string", "pattern": r"\A[0-9A-Fa-f:.]+(/[0-9]{1,3})?\Z"},
        "x-expected": 'a list of IP addresses or networks such as "192.168.100.0/24" (the host\'s other NICs)',
    },
    "storage_nfs_server": {
        "type": ["string", "null"],
        "pattern": _HOST_NAME,
        "x-expected": "null or the name of the inventory host that serves the NFS exports",
    },
    "storage_nfs_exports": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "pattern": _ABS_PATH},
                "options": {"type": "string", "pattern": _OPTIONS},
                "allow_unsafe": {"type": "boolean"},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
        "x-expected": (
            'a list of {"path": "/srv/shared", "options": "rw,sync,..."} (options optional; '
            '"allow_unsafe": true to export a system folder or with no_root_squash/insecure)'
        ),
    },
    "storage_nfs_mounts": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "server": {"type": "string", "pattern": _HOST_NAME},
                "export": {"type": "string", "pattern": _ABS_PATH},
                "path": {"type": "string", "pattern": _MOUNT_POINT},
                "options": {"type": "string", "pattern": _OPTIONS},
            },
            "required": ["server", "export", "path"],
            "additionalProperties": False,
        },
        "x-expected": 'a list of {"server": ..., "export": "/srv/shared", "path": "/mnt/shared", "options": ...}',
    },
    "storage_s3_mounts": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "bucket": {"type": "string", "pattern": _BUCKET},
                "path": {"type": "string", "pattern": _MOUNT_POINT},
                "prefix": {"type": "string", "pattern": _PREFIX},
                "read_only": {"type": "boolean"},
                "endpoint_url": {"type": ["string", "null"], "pattern": _URL},
                "path_style": {"type": "boolean"},
                "region": {"type": ["string", "null"], "pattern": r"^[a-z0-9][a-z0-9-]*\Z"},  # never an option
                "driver": {"enum": ["s3fs", "mountpoint-s3"]},
            },
            "required": ["bucket", "path"],
            "additionalProperties": False,
        },
        "x-expected": (
            'a list of {"bucket": ..., "path": "/mnt/...", and optionally "prefix", "read_only", '
            '"endpoint_url", "path_style", "region", "driver" ("s3fs" or "mountpoint-s3")}'
        ),
    },
    "storage_shared_dir": {
        "type": ["string", "null"],
        "pattern": _MOUNT_POINT,
        "x-expected": "null or a shared mount point (or a folder under one), e.g. /mnt/shared",
    },
    "storage_s3_credentials": _null_or_strings(
        {"access_key_id": _KEY_ID, "secret_access_key": _LINE},
        "null (the EC2 instance profile) or {access_key_id, secret_access_key}, each one line (the id without ':')",
    ),
    "docker_source": {"enum": ["distro", "docker"], "x-expected": '"distro" or "docker"'},
    "docker_repo_url": {
        "type": "string",
        "pattern": _URL,
        "x-expected": "an http(s) URL",
    },
    "docker_ce_version": {
        "type": "string",
        "pattern": r"^[0-9]+\.[0-9]+\.[0-9]+\Z",
        "x-expected": 'a Docker CE version such as "28.5.2"',
    },
    "docker_registry_mirrors": {
        "type": "array",
        "items": {"type": "string", "pattern": _URL},
        "x-expected": "a list of http(s) URLs",
    },
    "docker_insecure_registries": {
        "type": "array",
        "items": {"type": "string", "pattern": r"^[A-Za-z0-9\[][A-Za-z0-9.:/\[\]-]*\Z"},
        "x-expected": 'a list of registries (host:port) or networks, e.g. ["10.0.0.5:5000"]',
    },
    "docker_log_opts": {
        "type": "object",
        "additionalProperties": {"type": "string", "pattern": _TEXT},
        "x-expected": "a mapping of json-file log options to strings",
    },
    "docker_daemon_options": {"type": "object", "x-expected": "a mapping of daemon.json keys"},
    "docker_registry_auth": _null_or_strings(
        {"registry": _REGISTRY, "username": _KEY_ID, "password": _LINE},
        "null or {registry (host[:port]), username (without ':'), password}, each one line",
    ),
    "nvidia_driver": {"enum": ["preinstalled", "install"], "x-expected": '"preinstalled" or "install"'},
    "nvidia_driver_branch": {
        "type": "string",
        "pattern": r"^[0-9]{3}\Z",
        "x-expected": 'a driver branch such as "550"',
    },
    "nvidia_allow_reboot": {"type": "boolean", "x-expected": "true or false"},
    "nvidia_reboot_timeout_s": {"type": "integer", "minimum": 60, "x-expected": "a number of seconds of at least 60"},
    "nvidia_toolkit_version": {
        "type": "string",
        "pattern": r"^[0-9]+\.[0-9]+\.[0-9]+\Z",
        "x-expected": 'a toolkit version such as "1.17.8"',
    },
    "nvidia_toolkit_repo_url": {"type": "string", "pattern": _URL, "x-expected": "an http(s) URL"},
    "nvidia_cuda_repo_url": {"type": "string", "pattern": _URL, "x-expected": "an http(s) URL"},
    "nvidia_visible_devices": {
        "oneOf": [
            {"const": "all"},
            {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1, "uniqueItems": True},
        ],
        "x-expected": '"all" or a list of distinct GPU indices, e.g. [0, 1]',
    },
    "base_extra_packages": {
        "type": "array",
        "items": {"type": "string", "pattern": _PACKAGE},
        "x-expected": "a list of package names (letters, digits, + . _ : = ~ * -; never starting with -)",
    },
    "checks_enabled": {"type": "boolean", "x-expected": "true or false"},
    "checks_mode": {"enum": ["auto", "full", "quick"], "x-expected": '"auto", "full" or "quick"'},
    "checks_profile": {"enum": ["full", "quick"], "x-expected": '"full" or "quick"'},
    "checks_matmul_min_fraction": _FRACTION,
    "checks_membw_min_fraction": _FRACTION,
    "checks_outlier_fraction": _FRACTION,
    "checks_timeout_s": {"type": "integer", "minimum": 30, "x-expected": "a number of seconds of at least 30"},
    "checks_peer_timeout_factor": {
        "type": "number",
        "minimum": 1.5,
        "x-expected": "a number of at least 1.5 (times the peers' median)",
    },
    "checks_node_timeout_s": {"type": "integer", "minimum": 10, "x-expected": "a number of seconds of at least 10"},
    "checks_report_dir": {"type": "string", "pattern": _LOCAL_PATH, "x-expected": "a folder path"},
    "checks_monitoring": {"type": "boolean", "x-expected": "true or false"},
    "checks_monitoring_window_s": {
        "type": "integer",
        "minimum": 60,
        "maximum": 31 * 86400,
        "x-expected": "a number of seconds from 60 to 31 days (how far back the checks read Prometheus)",
    },
    "ray_cluster_name": {"type": "string", "pattern": _NAME, "x-expected": "a name of letters, digits, . _ -"},
    "base_wait_timeout_s": {"type": "integer", "minimum": 0, "x-expected": "a non-negative number of seconds"},
    # Secrets in transit and what is installed unverified: workload secrets in a 0600 env file, Mountpoint pinned.
    "ray_env_secret": {
        "type": "object",
        "additionalProperties": {"type": "string", "pattern": r"^[^\n\r\x00]*\Z"},
        "propertyNames": {"pattern": r"^[A-Za-z_][A-Za-z0-9_]*\Z"},
        "x-expected": "a mapping of environment variable names to one-line strings",
    },
    "storage_mountpoint_version": {
        "type": "string",
        "pattern": r"^[0-9]+\.[0-9]+\.[0-9]+\Z",
        "x-expected": 'a Mountpoint for Amazon S3 version such as "1.24.0"',
    },
    "storage_mountpoint_url": {
        "type": "string",
        "pattern": r"^https?://[A-Za-z0-9._~:/?#@!$&*+,;=%{}-]+\Z",
        "x-expected": "an http(s) URL of the package, with {version}, {arch} and {ext} where they go",
    },
    "storage_mountpoint_sha256": {
        "type": "object",
        "propertyNames": {"pattern": r"^(x86_64|arm64)\.(deb|rpm)\Z"},
        "additionalProperties": {"type": "string", "pattern": r"^[0-9a-f]{64}\Z"},
        "x-expected": 'a mapping of "x86_64.deb", "x86_64.rpm", "arm64.deb", "arm64.rpm" to sha256 hex digests',
    },
    # monitoring (exporters)
    "monitoring_enabled": {"type": "boolean", "x-expected": "true or false"},
    "monitoring_host": {
        "type": ["string", "null"],
        "pattern": _HOST_NAME,
        "x-expected": "null (the head) or the name or address of the inventory host that runs Prometheus",
    },
    "monitoring_ports": {
        "type": "object",
        "properties": {name: _PORT for name in MONITORING_PORT_NAMES},
        "required": list(MONITORING_PORT_NAMES),
        "additionalProperties": False,
        "x-expected": "a mapping of " + " and ".join(MONITORING_PORT_NAMES) + " to port numbers 1-65535",
    },
    "monitoring_node_exporter_image": {
        "type": "string",
        "pattern": _IMAGE,
        "x-expected": "an image reference (registry/name:tag or @sha256:digest)",
    },
    "monitoring_gpu_exporter": {"enum": ["dcgm", "none"], "x-expected": '"dcgm" or "none"'},
    "monitoring_gpu_exporter_image": {
        "type": "string",
        "pattern": _IMAGE,
        "x-expected": "an image reference (registry/name:tag or @sha256:digest)",
    },
}

# monitoring (server): Prometheus and Grafana on the monitoring host (deploy/monitoring/server.py)
#: A Prometheus duration, one unit: "15d", "12h", "2w".
_DURATION = r"^[1-9][0-9]*(ms|s|m|h|d|w|y)\Z"
#: A Prometheus size: "10GB", "512MB".
_BYTES = r"^[1-9][0-9]*(B|KB|MB|GB|TB|PB)\Z"
PROPERTIES.update(
    {
        "monitoring_prometheus_port": _HIGH_PORT,
        "monitoring_grafana_port": _HIGH_PORT,
        "monitoring_prometheus_image": {
            "type": "string",
            "pattern": _IMAGE,
            "x-expected": "an image reference (registry/name:tag or @sha256:digest)",
        },
        "monitoring_grafana": {"type": "boolean", "x-expected": "true or false"},
        "monitoring_grafana_image": {
            "type": "string",
            "pattern": _IMAGE,
            "x-expected": "an image reference (registry/name:tag or @sha256:digest)",
        },
        "monitoring_retention_time": {
            "type": "string",
            "pattern": _DURATION,
            "x-expected": 'a Prometheus duration such as "15d", "12h" or "2w"',
        },
        "monitoring_retention_size": {
            "type": ["string", "null"],
            "pattern": _BYTES,
            "x-expected": 'null (no size limit) or a size such as "10GB" or "512MB"',
        },
    }
)

# Ray TLS between nodes (deploy/ray/tls_ca.py): one CA per cluster, a certificate per node.
CLUSTER_WIDE += ("ray_tls", "ray_tls_ca_validity_days")
PROPERTIES.update(
    {
        "ray_tls": {"enum": ["off", "on"], "x-expected": '"off" or "on"'},
        "ray_tls_renew_days": {
            "type": "integer",
            "minimum": 1,
            "x-expected": "a number of days of at least 1 (a certificate expiring within it is reissued)",
        },
        "ray_tls_validity_days": {
            "type": "integer",
            "minimum": 2,
            "maximum": 3650,
            "x-expected": "a number of days from 2 to 3650 (how long node and client certificates last)",
        },
        "ray_tls_ca_validity_days": {
            "type": "integer",
            "minimum": 2,
            "maximum": 36500,
            "x-expected": "a number of days from 2 to 36500 (how long the cluster's CA lasts)",
        },
    }
)


# The health gate (deploy/monitoring/health.py, checks/health_gate.py): one service for the cluster.
CLUSTER_WIDE += (
    "health_gate", "health_interval_s", "health_probe_interval_s", "health_probe_deadline_s", "health_probe_work",
    "health_probe_fraction", "health_min_free_fraction", "health_fail_after", "health_pass_after",
    "health_drain_timeout_s", "health_max_quarantined", "health_metrics_port",
)  # fmt: skip
_SECONDS_AT_LEAST_5 = {"type": "integer", "minimum": 5, "x-expected": "a number of seconds of at least 5"}
PROPERTIES.update(
    {
        "health_gate": {"type": "boolean", "x-expected": "true or false"},
        "health_interval_s": _SECONDS_AT_LEAST_5,
        "health_probe_interval_s": _SECONDS_AT_LEAST_5,
        "health_probe_deadline_s": _SECONDS_AT_LEAST_5,
        "health_probe_work": {
            "type": "integer",
            "minimum": 1,
            "maximum": 100000,
            "x-expected": "a whole number 1-100000",
        },
        "health_probe_fraction": _FRACTION,
        "health_min_free_fraction": {
            "type": "number",
            "minimum": 0,
            "exclusiveMaximum": 1,
            "x-expected": "a fraction in [0, 1)",
        },
        "health_fail_after": {"type": "integer", "minimum": 1, "x-expected": "a number of rounds of at least 1"},
        "health_pass_after": {"type": "integer", "minimum": 1, "x-expected": "a number of rounds of at least 1"},
        "health_drain_timeout_s": {"type": "integer", "minimum": 0, "x-expected": "a non-negative number of seconds"},
        "health_max_quarantined": {
            "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": r"^([1-9][0-9]?|100)%\Z"}],
            "x-expected": 'a number of workers of at least 1, or a percentage of the workers from "1%" to "100%"',
        },
        "health_metrics_port": _HIGH_PORT,
    }
)


def _described(spec: dict[str, Any], text: str) -> dict[str, Any]:
    """``spec`` with its ``description``: a copy, since several keys share one spec (``_COUNT``, ``_PORT`` ...)."""
    return {**spec, "description": text}


# Every key's description (deploy/contract/descriptions.py), and each port's: what the reference pages say.
for _key, _spec in PROPERTIES.items():
    PROPERTIES[_key] = _described(_spec, DESCRIPTIONS[_key])
for _key, _ports in (("ray_ports", RAY_PORTS), ("monitoring_ports", MONITORING_PORTS)):
    PROPERTIES[_key]["properties"] = {n: _described(s, _ports[n]) for n, s in PROPERTIES[_key]["properties"].items()}
