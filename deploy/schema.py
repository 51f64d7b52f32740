"""Validation of rayrig host data: one JSON Schema for every host, plus the
rules that span hosts (one head, unique addresses, one Ray version, ...).

``validate_cluster`` returns every problem at once, each naming the host, the
key, the value and what is expected, so that a user fixes the inventory in one
pass. ``deploy/cluster.py`` calls ``check_inventory`` before any operation is
planned on any host.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
from pyinfra.api.exceptions import PyinfraError

from deploy import settings

_COUNT = {
    "oneOf": [{"type": "integer", "minimum": 0}, {"const": "auto"}],
    "x-expected": 'a non-negative integer or "auto"',
}
_PORT = {"type": "integer", "minimum": 1, "maximum": 65535, "x-expected": "a port number 1-65535"}
_STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1}, "x-expected": "a list of strings"}
_FRACTION = {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "x-expected": "a fraction in (0, 1]"}
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
_SIZE = r"^[0-9]+[bkmgBKMG]?$"

PORT_NAMES = (
    "gcs", "client_server", "dashboard", "dashboard_agent_grpc", "dashboard_agent_http",
    "node_manager", "object_manager", "runtime_env_agent", "metrics_export", "worker_min", "worker_max",
)  # fmt: skip

#: Keys whose value must be the same on every host of a cluster.
CLUSTER_WIDE = ("ray_version", "ray_ports", "ray_image", "ray_container_name", "checks_enabled")

PROPERTIES: dict[str, dict[str, Any]] = {
    "ray_role": {"enum": ["head", "worker"], "x-expected": '"head" or "worker"'},
    "ray_num_gpus": _COUNT,
    "ray_num_cpus": _COUNT,
    "ray_resources": {
        "type": "object",
        "additionalProperties": {"type": "number", "minimum": 0},
        "propertyNames": {"pattern": _NAME},
        "x-expected": "a mapping of resource name to a non-negative number",
    },
    "ray_object_store_bytes": {
        "oneOf": [{"type": "null"}, {"type": "integer", "minimum": 78643200}],
        "x-expected": "null or a number of bytes of at least 75 MiB (Ray's minimum)",
    },
    "ray_node_ip": {
        "type": ["string", "null"],
        "minLength": 1,
        "x-expected": "null or an address the other nodes can reach",
    },
    "ray_version": {
        "type": "string",
        "pattern": r"^[0-9]+\.[0-9]+\.[0-9]+$",
        "x-expected": 'a Ray version such as "2.60.0"',
    },
    "ray_image": {
        "type": "string",
        "pattern": r"^[^\s]+$",
        "minLength": 1,
        "x-expected": "an image reference (registry/name:tag or @sha256:digest)",
    },
    "ray_image_pull": {"enum": ["missing", "always"], "x-expected": '"missing" or "always"'},
    "ray_container_name": {"type": "string", "pattern": _NAME, "x-expected": "a container name"},
    "ray_shm_size": {
        "oneOf": [{"const": "auto"}, {"type": "string", "pattern": _SIZE}],
        "x-expected": '"auto" or a size such as "16g"',
    },
    "ray_ulimit_nofile": {
        "oneOf": [{"type": "null"}, {"type": "integer", "minimum": 1024}],
        "x-expected": "null (the image's default) or an integer of at least 1024",
    },
    "ray_dashboard_host": {
        "type": "string",
        "minLength": 1,
        "x-expected": 'an address to bind the dashboard to, such as "127.0.0.1"',
    },
    "ray_ports": {
        "type": "object",
        "properties": {name: _PORT for name in PORT_NAMES},
        "required": list(PORT_NAMES),
        "additionalProperties": False,
        "x-expected": "a mapping of " + ", ".join(PORT_NAMES) + " to port numbers 1-65535",
    },
    "ray_env": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "propertyNames": {"pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
        "x-expected": "a mapping of environment variable names to strings",
    },
    "ray_head_wait_s": {"type": "integer", "minimum": 0, "x-expected": "a non-negative number of seconds"},
    "docker_source": {"enum": ["distro", "docker"], "x-expected": '"distro" or "docker"'},
    "docker_repo_url": {
        "type": "string",
        "pattern": r"^https?://[^\s]+$",
        "x-expected": "an http(s) URL",
    },
    "docker_registry_mirrors": {
        "type": "array",
        "items": {"type": "string", "pattern": r"^https?://[^\s]+$"},
        "x-expected": "a list of http(s) URLs",
    },
    "docker_insecure_registries": _STRINGS,
    "docker_log_opts": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "x-expected": "a mapping of json-file log options to strings",
    },
    "docker_daemon_options": {"type": "object", "x-expected": "a mapping of daemon.json keys"},
    "docker_registry_auth": {
        "oneOf": [
            {"type": "null"},
            {
                "type": "object",
                "properties": {
                    "registry": {"type": "string", "minLength": 1},
                    "username": {"type": "string", "minLength": 1},
                    "password": {"type": "string", "minLength": 1},
                },
                "required": ["registry", "username", "password"],
                "additionalProperties": False,
            },
        ],
        "x-expected": "null or {registry, username, password}",
    },
    "nvidia_driver": {"enum": ["preinstalled", "install"], "x-expected": '"preinstalled" or "install"'},
    "nvidia_driver_branch": {
        "type": "string",
        "pattern": r"^[0-9]{3}$",
        "x-expected": 'a driver branch such as "550"',
    },
    "nvidia_allow_reboot": {"type": "boolean", "x-expected": "true or false"},
    "nvidia_reboot_timeout_s": {"type": "integer", "minimum": 60, "x-expected": "a number of seconds of at least 60"},
    "nvidia_toolkit_version": {
        "type": "string",
        "pattern": r"^[0-9]+\.[0-9]+\.[0-9]+$",
        "x-expected": 'a toolkit version such as "1.17.8"',
    },
    "nvidia_toolkit_repo_url": {"type": "string", "pattern": r"^https?://[^\s]+$", "x-expected": "an http(s) URL"},
    "nvidia_cuda_repo_url": {"type": "string", "pattern": r"^https?://[^\s]+$", "x-expected": "an http(s) URL"},
    "nvidia_visible_devices": {
        "oneOf": [
            {"const": "all"},
            {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1, "uniqueItems": True},
        ],
        "x-expected": '"all" or a list of distinct GPU indices, e.g. [0, 1]',
    },
    "base_extra_packages": _STRINGS,
    "checks_enabled": {"type": "boolean", "x-expected": "true or false"},
    "checks_profile": {"enum": ["full", "quick"], "x-expected": '"full" or "quick"'},
    "checks_matmul_min_fraction": _FRACTION,
    "checks_membw_min_fraction": _FRACTION,
    "checks_outlier_fraction": _FRACTION,
    "checks_timeout_s": {"type": "integer", "minimum": 30, "x-expected": "a number of seconds of at least 30"},
    "checks_report_dir": {"type": "string", "minLength": 1, "x-expected": "a folder path"},
    "checks_cluster_name": {"type": "string", "pattern": _NAME, "x-expected": "a name of letters, digits, . _ -"},
    "base_wait_timeout_s": {"type": "integer", "minimum": 0, "x-expected": "a non-negative number of seconds"},
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": PROPERTIES,
}

_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


_SECRET_NAME = re.compile(r"pa?s+w|pwd|secret|token", re.IGNORECASE)
_AUTH_PUBLIC = ("registry", "username")


def _redact(key: str, value: Any) -> Any:
    """``value`` with secrets replaced by "***": whatever sits under a secret-looking
    name, anything but a mapping under an ``*auth*`` name, and in an ``*auth*``
    mapping everything but registry and username."""
    is_auth = "auth" in key.lower()
    if _SECRET_NAME.search(key) or (is_auth and value is not None and not isinstance(value, Mapping)):
        return "***"
    if isinstance(value, Mapping):
        return {k: "***" if is_auth and k not in _AUTH_PUBLIC else _redact(str(k), v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the inventory (secrets in the value are masked)."""

    host: str
    key: str
    value: Any
    expected: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _redact(self.key, self.value))

    def __str__(self) -> str:
        return f"host {self.host}: {self.key} = {self.value!r}: expected {self.expected}"


class InventoryError(PyinfraError):
    """The inventory's data is invalid; ``problems`` lists every finding."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = [f"invalid inventory data ({len(problems)} problem{'s' if len(problems) != 1 else ''}):"]
        lines += [f"  - {p}" for p in problems]
        lines.append("Nothing was changed on any host.")
        super().__init__("\n".join(lines))


def _expected(key: str, error: jsonschema.ValidationError) -> str:
    spec = PROPERTIES.get(key, {})
    if len(error.path) > 1 and key == "ray_ports":
        return "a port number 1-65535"
    if error.validator == "additionalProperties" and key == "ray_ports":
        return error.message.replace("Additional properties are not allowed", "known port names only") + (
            f"; the names are {', '.join(PORT_NAMES)}"
        )
    return spec.get("x-expected", error.message)


def validate_host(name: str, data: Mapping[str, Any]) -> list[Problem]:
    """Problems with one host's own data (schema and unknown keys)."""
    problems: list[Problem] = []
    known = settings.defaults()
    for key in sorted(k for k in data if settings.is_rayrig_key(k) and k not in known):
        close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
        hint = f"a known rayrig key (did you mean {close[0]!r}?)" if close else "a known rayrig key"
        problems.append(Problem(name, key, data[key], hint))

    merged = settings.merge(data)
    for error in sorted(_VALIDATOR.iter_errors(merged), key=lambda e: list(map(str, e.path))):
        path = list(error.path)
        key = str(path[0]) if path else "(data)"
        label = key + "".join(f"[{p!r}]" for p in path[1:])
        problems.append(Problem(name, label, error.instance, _expected(key, error)))
    return problems


def _port_problems(name: str, ports: Mapping[str, int]) -> list[Problem]:
    problems = []
    lo, hi = ports["worker_min"], ports["worker_max"]
    if lo > hi:
        problems.append(Problem(name, "ray_ports", {"worker_min": lo, "worker_max": hi}, "worker_min <= worker_max"))
    seen: dict[int, str] = {}
    for port_name in PORT_NAMES:
        if port_name in ("worker_min", "worker_max"):
            continue
        port = ports[port_name]
        if port in seen:
            problems.append(
                Problem(name, f"ray_ports[{port_name!r}]", port, f"a port not already used by {seen[port]!r}")
            )
        seen.setdefault(port, port_name)
        if lo <= port <= hi:
            problems.append(
                Problem(name, f"ray_ports[{port_name!r}]", port, f"a port outside the worker range {lo}-{hi}")
            )
    return problems


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def validate_cluster(hosts: Iterable[tuple[str, Mapping[str, Any], str]]) -> list[Problem]:
    """Every problem with a cluster's inventory.

    ``hosts`` yields (host name, host data, address other nodes dial).
    """
    hosts = list(hosts)
    problems: list[Problem] = []
    merged: dict[str, dict[str, Any]] = {}
    for name, data, _address in hosts:
        host_problems = validate_host(name, data)
        problems += host_problems
        if not host_problems:
            merged[name] = settings.merge(data)
            problems += _port_problems(name, merged[name]["ray_ports"])

    if len(merged) < len(hosts):
        return problems  # cross-host rules need every host's data to be valid

    heads = [name for name, s in merged.items() if s["ray_role"] == "head"]
    if not heads:
        names = ", ".join(merged) or "(none)"
        problems.append(Problem(names, "ray_role", "worker", 'exactly one host with ray_role = "head"'))
    elif len(heads) > 1:
        problems.append(
            Problem(", ".join(heads), "ray_role", "head", 'exactly one head; the others must be "worker"')
        )

    by_address: dict[str, list[str]] = {}
    for name, _data, address in hosts:
        by_address.setdefault(address, []).append(name)
    for address, names in by_address.items():
        if len(names) > 1:
            problems.append(Problem(", ".join(names), "ray_node_ip", address, "a different address for every host"))

    if len(heads) == 1 and len(hosts) > 1:
        head_address = next(address for name, _d, address in hosts if name == heads[0])
        if _is_loopback(head_address) or head_address.startswith("@"):
            problems.append(
                Problem(
                    heads[0],
                    "ray_node_ip",
                    head_address,
                    "an address the workers can reach (set ray_node_ip on the head)",
                )
            )

    for key in CLUSTER_WIDE:
        values: dict[str, list[str]] = {}
        for name, s in merged.items():
            values.setdefault(repr(s[key]), []).append(name)
        if len(values) > 1:
            detail = "; ".join(f"{', '.join(names)}: {value}" for value, names in values.items())
            first = next(iter(merged))
            problems.append(Problem(first, key, detail, "the same value on every host of the cluster"))
    return problems


def check_inventory(inventory: Any) -> None:
    """Validate every host of a pyinfra inventory; raise ``InventoryError`` on any problem."""
    hosts = [(h.name, settings.host_data(h), settings.node_address(h)) for h in inventory]
    problems = validate_cluster(hosts)
    if problems:
        raise InventoryError(problems)
