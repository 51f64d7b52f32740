"""Validation of rayrig host data: one JSON Schema for every host (its keys in
:mod:`deploy.contract.data_keys`), plus the
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
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from deploy.contract import consent, settings
from deploy.contract.admin_networks import narrow_expected, too_wide
from deploy.contract.data_keys import (
    ADDRESS_FORMAT,
    CLUSTER_WIDE,
    MONITORING_PORT_NAMES,
    PORT_NAMES,
    PROPERTIES,
    RESERVED_RESOURCES,
)
from deploy.contract.ports import HEAD_METRICS_ENV, WORKER_RANGE, exporter_ports
from deploy.contract.storage import writable

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": PROPERTIES,
}


def _is_integer(_checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


#: JSON Schema's "integer" also admits 16.0 and 1e9; Ray's command line does not.
_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer)
#: A draft 2020-12 validator whose integers are Python ints only (the EC2 spec's schema uses it too).
StrictValidator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_TYPES)

FORMATS = jsonschema.FormatChecker(formats=())
FORMATS.checks(ADDRESS_FORMAT)(lambda value: not isinstance(value, str) or settings.is_address(value))

_VALIDATOR = StrictValidator(SCHEMA, format_checker=FORMATS)


_SECRET_NAME = re.compile(r"pa?s+w|pwd|secret|token|credential|access_key|aws_|private_key", re.IGNORECASE)
_AUTH_PUBLIC = ("registry", "username")


#: Names that look secret but hold a choice or a path, shown as they are.
_NOT_SECRET = ("ray_auth", "ray_auth_token_file")


def redact(key: str, value: Any) -> Any:
    """``value`` with secrets replaced by "***": whatever sits under a secret-looking
    name, anything but a mapping under an ``*auth*`` name, and in an ``*auth*``
    mapping everything but registry and username."""
    if key in _NOT_SECRET:
        return value
    is_auth = "auth" in key.lower()
    if _SECRET_NAME.search(key) or (is_auth and value is not None and not isinstance(value, Mapping)):
        return "***"
    if isinstance(value, Mapping):
        return {k: "***" if is_auth and k not in _AUTH_PUBLIC else redact(str(k), v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the inventory (secrets in the value are masked)."""

    host: str
    key: str
    value: Any
    expected: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", redact(self.key, self.value))

    def __str__(self) -> str:
        return f"host {self.host}: {self.key} = {self.value!r}: expected {self.expected}"


class InventoryError(ValueError):
    """The inventory's data is invalid; ``problems`` lists every finding."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = [f"invalid inventory data ({len(problems)} problem{'s' if len(problems) != 1 else ''}):"]
        lines += [f"  - {p}" for p in problems]
        lines.append("Nothing was changed on any host.")
        super().__init__("\n".join(lines))


def _expected(key: str, error: jsonschema.ValidationError) -> str:
    spec = PROPERTIES.get(key, {})
    if len(error.path) > 1 and key in ("ray_ports", "monitoring_ports"):
        return "a port number 1-65535"
    if error.validator == "additionalProperties" and key == "ray_ports":
        return error.message.replace("Additional properties are not allowed", "known port names only") + (
            f"; the names are {', '.join(PORT_NAMES)}"
        )
    return spec.get("x-expected", error.message)


def validate_host(name: str, data: Mapping[str, Any], host_names: Collection[str] = ()) -> list[Problem]:
    """Problems with one host's own data: unknown keys, the schema, then (once the schema
    holds) the rules that span keys. ``host_names`` are the inventory's hosts, which NFS
    keys may name; without them (an EC2 spec) NFS servers must be addresses."""
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
    if not problems:
        problems += _ray_problems(name, merged)
        problems += _port_problems(name, merged["ray_ports"])
        problems += _mount_problems(name, merged, set(host_names))
        problems += _export_problems(name, merged)
        problems += _firewall_problems(name, merged)
        problems += _temp_dir_problems(name, merged)
        problems += _monitoring_server_problems(name, merged)
        problems += _health_gate_problems(name, merged)
        problems += _monitoring_problems(name, merged)
        problems += _tls_problems(name, merged)
        problems += [Problem(name, *found) for found in consent.auth_problems(merged)]
        problems += [Problem(name, *found) for found in consent.http_mirror_problems(merged)]
    return problems


def _ray_problems(name: str, merged: Mapping[str, Any]) -> list[Problem]:
    """What ``ray start`` would refuse beyond the schema: Ray's own resource names."""
    return [
        Problem(
            name,
            f"ray_resources[{resource!r}]",
            merged["ray_resources"][resource],
            "a custom resource name: Ray sets CPU, GPU, memory and object_store_memory itself "
            "(use ray_num_cpus, ray_num_gpus, ray_object_store_bytes)",
        )
        for resource in sorted(merged["ray_resources"])
        if resource in RESERVED_RESOURCES
    ]


def _port_problems(name: str, ports: Mapping[str, int]) -> list[Problem]:
    problems = []
    lo, hi = ports["worker_min"], ports["worker_max"]
    if lo >= hi:
        problems.append(
            Problem(name, "ray_ports", {"worker_min": lo, "worker_max": hi}, "worker_min below worker_max (Ray's rule)")
        )
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


#: Folders a shared mount must not cover: the system's own.
_SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr", "/var")


def _mount_problems(name: str, merged: Mapping[str, Any], host_names: set[str]) -> list[Problem]:
    """Shared-storage rules: distinct mount points off the system's folders, an NFS server
    role that names a host with exports, credentials for S3-compatible endpoints."""
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for key in ("storage_nfs_mounts", "storage_s3_mounts"):
        for index, mount in enumerate(merged[key]):
            path = mount["path"]
            label = f"{key}[{index}]['path']"
            if (
                path == "/"
                or any(path == d or path.startswith(d + "/") for d in _SYSTEM_DIRS)
                or path in ("/tmp", "/root", "/home")
            ):
                problems.append(
                    Problem(name, label, path, "a mount point outside the system's folders, e.g. /mnt/shared")
                )
            for other, where in seen.items():
                if path == other or path.startswith(other + "/") or other.startswith(path + "/"):
                    problems.append(Problem(name, label, path, f"a mount point apart from {other} ({where})"))
            seen[path] = label
    for index, mount in enumerate(merged["storage_s3_mounts"]):
        if mount.get("endpoint_url") and merged["storage_s3_credentials"] is None:
            problems.append(
                Problem(
                    name,
                    f"storage_s3_mounts[{index}]['endpoint_url']",
                    mount["endpoint_url"],
                    "storage_s3_credentials set too (an S3-compatible store has no instance profile)",
                )
            )
    for index, mount in enumerate(merged["storage_nfs_mounts"]):
        if mount["server"] not in host_names and not settings.is_address(mount["server"]):
            problems.append(
                Problem(
                    name,
                    f"storage_nfs_mounts[{index}]['server']",
                    mount["server"],
                    "an IP address, a host name, or the name of a host of this inventory",
                )
            )
    chosen = merged["storage_shared_dir"]
    if chosen is not None:
        mounts = [m for key in ("storage_nfs_mounts", "storage_s3_mounts") for m in merged[key]]
        under = [m for m in mounts if chosen == m["path"] or chosen.startswith(m["path"] + "/")]
        if not under or not writable(under[0]):
            problems.append(
                Problem(name, "storage_shared_dir", chosen, "a writable shared mount point, or a folder under one")
            )
    server = merged["storage_nfs_server"]
    if server is not None and host_names and server not in host_names:
        problems.append(Problem(name, "storage_nfs_server", server, "the name of a host of this inventory"))
    elif server is not None and not merged["storage_nfs_exports"]:
        problems.append(Problem(name, "storage_nfs_exports", [], "at least one export for storage_nfs_server"))
    elif server is None and merged["storage_nfs_exports"]:
        problems.append(
            Problem(
                name,
                "storage_nfs_exports",
                merged["storage_nfs_exports"],
                "no exports unless storage_nfs_server names the host that serves them",
            )
        )
    return problems


#: Folders Ray's temp folder may not be or be under, beyond the system's: Docker's own data.
_NOT_RAY_TEMP = ("/tmp", "/var/tmp", "/var/lib/docker", "/var/lib/containerd")


def _temp_dir_problems(name: str, merged: Mapping[str, Any]) -> list[Problem]:
    """Ray's temp folder is made the container user's (recursively), 0700, and pruned: a folder of
    its own, never a system folder, one that holds others' (a home, /var/lib), /tmp, or a shared mount."""
    path = merged["ray_temp_dir"]
    depth = path.count("/")
    under = [d for d in (*_SYSTEM_DIRS, *_NOT_RAY_TEMP) if path == d or path.startswith(d + "/")]
    mounts = [m["path"] for key in ("storage_nfs_mounts", "storage_s3_mounts") for m in merged[key]]
    if (
        depth < 2
        or (path.startswith("/home/") and depth < 3)
        or (under and (under != ["/var"] or depth < 3))
        or any(path == m or path.startswith(m + "/") or m.startswith(path + "/") for m in mounts)
    ):
        expected = (
            "a folder of Ray's own, such as /var/lib/rayrig/ray or /data/ray: at least two levels deep (three "
            "under /var and /home), not under another system folder, /tmp, /var/tmp or Docker's data, apart "
            "from the shared mounts"
        )
        return [Problem(name, "ray_temp_dir", path, expected)]
    return []


#: Folders an NFS export must not be (or be under) without ``allow_unsafe``: the system's own.
_SYSTEM_EXPORTS = (*_SYSTEM_DIRS, "/root")


def _export_problems(name: str, merged: Mapping[str, Any]) -> list[Problem]:
    """NFS exports of system folders, or with options that give clients root, need
    ``"allow_unsafe": true`` on the export."""
    problems: list[Problem] = []
    for index, export in enumerate(merged["storage_nfs_exports"]):
        if export.get("allow_unsafe"):
            continue
        path = export["path"]
        if path in ("/home", "/tmp") or any(path == d or path.startswith(d + "/") for d in _SYSTEM_EXPORTS):
            problems.append(
                Problem(
                    name,
                    f"storage_nfs_exports[{index}]['path']",
                    path,
                    'a folder outside the system\'s (e.g. /srv/shared), or "allow_unsafe": true on this export',
                )
            )
        unsafe = consent.unsafe_export_options(export.get("options", ""))
        if unsafe:
            problems.append(
                Problem(
                    name,
                    f"storage_nfs_exports[{index}]['options']",
                    export["options"],
                    f"options without {' and '.join(unsafe)} (they let clients act as root, from any port or "
                    'unauthenticated), or "allow_unsafe": true on this export',
                )
            )
    return problems


def _firewall_problems(name: str, merged: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = [
        Problem(name, f"ray_env[{key!r}]", merged["ray_env"][key], "no RAY_AUTH_* variable: set ray_auth instead")
        for key in sorted(merged["ray_env"])
        if key.startswith("RAY_AUTH")
    ]
    for index, cidr in enumerate(merged["firewall_admin_cidrs"]):
        try:
            network = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            problems.append(
                Problem(name, f"firewall_admin_cidrs[{index}]", cidr, 'an address or network such as "203.0.113.0/24"')
            )
            continue
        if too_wide(network) and not merged["firewall_allow_ssh_from_anywhere"]:
            expected = narrow_expected(network.version, "firewall_allow_ssh_from_anywhere = True")
            problems.append(Problem(name, f"firewall_admin_cidrs[{index}]", cidr, expected))
    ports = merged["ray_ports"]
    ray_ranges = [(ports[p], ports[p], p) for p in PORT_NAMES if p not in ("worker_min", "worker_max")]
    ray_ranges.append((ports["worker_min"], ports["worker_max"], "the worker range"))
    for index, port in enumerate(merged["firewall_extra_tcp_ports"]):
        first, last = (int(p) for p in port.split("-")) if isinstance(port, str) else (port, port)
        if not 1 <= first <= last <= 65535:
            problems.append(
                Problem(name, f"firewall_extra_tcp_ports[{index}]", port, "a range first-last within 1-65535")
            )
            continue
        hits = [what for lo, hi, what in ray_ranges if first <= hi and lo <= last]
        if hits:
            problems.append(
                Problem(
                    name,
                    f"firewall_extra_tcp_ports[{index}]",
                    port,
                    f"ports apart from Ray's ({', '.join(hits)} in ray_ports): opening them to any source "
                    "would open Ray to the world",
                )
            )
    return problems


HOST_NAME_EXPECTED = (
    "an IP address, a host name (letters, digits, '-' and '.') or a pyinfra connector's @connector/target"
)


def validate_cluster(hosts: Iterable[tuple[str, Mapping[str, Any], str]]) -> list[Problem]:
    """Every problem with a cluster's inventory.

    ``hosts`` yields (host name, host data, address other nodes dial).
    """
    hosts = list(hosts)
    problems = [
        Problem(repr(name), "the host's name", name, HOST_NAME_EXPECTED)
        for name, _data, _address in hosts
        if not settings.is_host_name(name)
    ]
    if problems:
        return problems  # a name that is no name cannot be carried into any other message
    merged: dict[str, dict[str, Any]] = {}
    for name, data, _address in hosts:
        host_problems = validate_host(name, data, [h[0] for h in hosts])
        problems += host_problems
        if not host_problems:
            merged[name] = settings.merge(data)

    if len(merged) < len(hosts):
        return problems  # cross-host rules need every host's data to be valid

    heads = [name for name, s in merged.items() if s["ray_role"] == "head"]
    if not heads:
        names = ", ".join(merged) or "(none)"
        problems.append(Problem(names, "ray_role", "worker", 'exactly one host with ray_role = "head"'))
    elif len(heads) > 1:
        problems.append(Problem(", ".join(heads), "ray_role", "head", 'exactly one head; the others must be "worker"'))

    for name, _data, address in hosts:
        if not settings.is_address(address) and not address.startswith("@"):
            problems.append(
                Problem(name, "ray_node_ip", address, "an IP address or a host name (set ray_node_ip, or ssh_hostname)")
            )
    by_address: dict[str, list[str]] = {}
    for name, _data, address in hosts:
        by_address.setdefault(address, []).append(name)
    for address, names in by_address.items():
        if len(names) > 1:
            problems.append(Problem(", ".join(names), "ray_node_ip", address, "a different address for every host"))

    if len(heads) == 1 and len(hosts) > 1:
        head_address = next(address for name, _d, address in hosts if name == heads[0])
        if settings.is_loopback(head_address) or head_address.startswith("@"):
            problems.append(
                Problem(
                    heads[0],
                    "ray_node_ip",
                    head_address,
                    "an address the workers can reach (set ray_node_ip on the head)",
                )
            )

    problems += _absent_problems(merged)
    problems += _monitoring_host_problems(hosts, merged)

    for key in CLUSTER_WIDE:
        values: dict[str, list[str]] = {}
        for name, s in merged.items():
            values.setdefault(repr(s[key]), []).append(name)
        if len(values) > 1:
            detail = "; ".join(f"{', '.join(names)}: {value}" for value, names in values.items())
            first = next(iter(merged))
            problems.append(Problem(first, key, detail, "the same value on every host of the cluster"))
    return problems


def _absent_problems(merged: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """A host marked ``ray_state = "absent"`` leaves the cluster: it cannot be the head, nor the NFS server
    the other hosts mount."""
    absent = {name for name, s in merged.items() if s["ray_state"] == "absent"}
    problems = [
        Problem(
            name,
            "ray_state",
            "absent",
            '"present" on the head: the cluster cannot lose its head (make another host the head first)',
        )
        for name in sorted(absent)
        if merged[name]["ray_role"] == "head"
    ]
    servers = {s["storage_nfs_server"] for s in merged.values()} & absent
    problems += [
        Problem(
            name,
            "ray_state",
            "absent",
            '"present" on storage_nfs_server: the other hosts mount its exports (move the exports first)',
        )
        for name in sorted(servers)
    ]
    return problems


# the health gate (deploy/monitoring/health.py)


def _health_gate_problems(name: str, merged: Mapping[str, Any]) -> list[Problem]:
    """The gate reads Prometheus: it needs monitoring_enabled."""
    if merged["health_gate"] and not merged["monitoring_enabled"]:
        expected = "false while monitoring_enabled is false (the gate reads Prometheus)"
        return [Problem(name, "health_gate", True, expected)]
    return []


# monitoring (server): Prometheus and Grafana on the monitoring host


def _monitoring_server_problems(name: str, merged: Mapping[str, Any]) -> list[Problem]:
    """Prometheus's and Grafana's ports: two different ones, apart from Ray's and the exporters'
    (every service on the monitoring host shares its port space, loopback included)."""
    ports = merged["ray_ports"]
    taken = {port: f"ray_ports[{key!r}]" for key, port in ports.items() if key not in ("worker_min", "worker_max")}
    taken |= {port: f"monitoring_ports[{key!r}]" for key, port in merged["monitoring_ports"].items()}
    problems = []
    for key in ("monitoring_prometheus_port", "monitoring_grafana_port", "health_metrics_port"):
        port = merged[key]
        if port in taken:
            problems.append(Problem(name, key, port, f"a port not already used by {taken[port]}"))
        elif ports["worker_min"] <= port <= ports["worker_max"]:
            worker_range = f"{ports['worker_min']}-{ports['worker_max']}"
            problems.append(Problem(name, key, port, f"a port outside Ray's worker range {worker_range}"))
        taken.setdefault(port, key)
    return problems


# monitoring (exporters) ------------------------------------------------------------------------------


def _monitoring_problems(name: str, merged: Mapping[str, Any]) -> list[Problem]:
    """The exporters' ports join the members' single port list (``deploy.contract.ports.member_ports``): each
    must be apart from the other's, from every Ray port and the worker range, and from the image
    mirror's; none may be opened to any source by ``firewall_extra_tcp_ports``, nor may NFS's, rpcbind's, the
    mirror's, Prometheus's or Grafana's (:func:`deploy.contract.consent.guarded_ports`). Ray's head metrics
    ports are pinned from ``ray_ports``, never from ``ray_env``."""
    problems = [
        Problem(name, f"ray_env[{key!r}]", merged["ray_env"][key], f"no {key}: set ray_ports[{port!r}] instead")
        for port, key in HEAD_METRICS_ENV.items()
        if key in merged["ray_env"]
    ]
    ray = merged["ray_ports"]
    lo, hi = ray["worker_min"], ray["worker_max"]
    taken = {port: f"ray_ports[{key!r}]" for key, port in reversed(ray.items()) if key not in WORKER_RANGE}
    if merged["image_mirror"] == "head":
        taken.setdefault(merged["image_mirror_port"], "image_mirror_port")
    for key in MONITORING_PORT_NAMES:
        port = merged["monitoring_ports"][key]
        label = f"monitoring_ports[{key!r}]"
        if port in taken:
            problems.append(Problem(name, label, port, f"a port not already used by {taken[port]}"))
        elif lo <= port <= hi:
            problems.append(Problem(name, label, port, f"a port outside Ray's worker range {lo}-{hi}"))
        taken.setdefault(port, label)
    ray_spans = [(p, p) for k, p in ray.items() if k not in WORKER_RANGE] + [(lo, hi)]
    for index, extra in enumerate(merged["firewall_extra_tcp_ports"]):
        first, last = (int(p) for p in extra.split("-")) if isinstance(extra, str) else (extra, extra)
        if any(first <= b and a <= last for a, b in ray_spans):
            continue  # refused already for reaching Ray's ports (_firewall_problems)
        hits = [f"monitoring_ports[{k!r}] = {p}" for k, p in exporter_ports(merged).items() if first <= p <= last]
        services = [f"{what} = {p}" for p, what in sorted(consent.guarded_ports(merged).items()) if first <= p <= last]
        apart = ([f"the exporters' ({', '.join(hits)})"] if hits else []) + services
        why = (["an exporter answers anyone who asks"] if hits else []) + (
            ["anyone could then write the cluster's image, mount its storage or read its metrics"] if services else []
        )
        if apart:
            problems.append(
                Problem(
                    name,
                    f"firewall_extra_tcp_ports[{index}]",
                    extra,
                    f"ports apart from {' and '.join(apart)}: {'; '.join(why)}",
                )
            )
    return problems


def _monitoring_host_problems(
    hosts: list[tuple[str, Mapping[str, Any], str]], merged: Mapping[str, Mapping[str, Any]]
) -> list[Problem]:
    """``monitoring_host`` names a present host of the inventory, by its name or its address."""
    first = next(iter(merged))
    value = merged[first]["monitoring_host"]
    if value is None or not merged[first]["monitoring_enabled"]:
        return []
    present = [(n, address, merged[n]["ray_role"]) for n, _d, address in hosts if merged[n]["ray_state"] == "present"]
    if settings.resolve_monitoring_host(value, present) is None:
        return [Problem(first, "monitoring_host", value, "the name or address of a present host of this inventory")]
    return []


#: ray_env names that would fight ray_tls: rayrig sets Ray's TLS variables itself (deploy/ray/tls_ca.py).
_TLS_ENV_PREFIXES = ("RAY_USE_TLS", "RAY_TLS_")


def _tls_problems(name: str, merged: Mapping[str, Any]) -> list[Problem]:
    """Ray TLS: certificates that outlive their renewal window and their CA; no TLS variable in ray_env.

    ``ray_tls = "on"`` with ``ray_auth = "none"`` is allowed: TLS authenticates nodes by their
    certificates, the token clients; either may be on without the other.
    """
    problems = [
        Problem(name, f"ray_env[{key!r}]", merged["ray_env"][key], f"no {key}: set ray_tls instead")
        for key in sorted(merged["ray_env"])
        if key.startswith(_TLS_ENV_PREFIXES)
    ]
    renew, validity = merged["ray_tls_renew_days"], merged["ray_tls_validity_days"]
    if validity <= renew:
        problems.append(
            Problem(
                name,
                "ray_tls_validity_days",
                validity,
                f"more days than ray_tls_renew_days = {renew} (else every deploy would reissue every certificate)",
            )
        )
    ca_validity = merged["ray_tls_ca_validity_days"]
    if ca_validity <= validity:
        problems.append(
            Problem(
                name,
                "ray_tls_ca_validity_days",
                ca_validity,
                f"more days than ray_tls_validity_days = {validity} (a certificate cannot outlive its CA)",
            )
        )
    return problems


def check_inventory(inventory: Any) -> None:
    """Validate every host of a pyinfra inventory; raise ``InventoryError`` on any problem."""
    hosts = [(h.name, settings.host_data(h), settings.node_address(h)) for h in inventory]
    problems = validate_cluster(hosts)
    if problems:
        raise InventoryError(problems)
