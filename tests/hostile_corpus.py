"""The hostile strings the input tests feed to every string key, and how to find those keys.

``string_slots(schema)`` walks a JSON Schema for every place a string can go; ``put`` sets one
such place in a data set (``BASE`` for host data, in which every list and mapping has an entry).
No pyinfra here: the cloud tier uses it too.
"""

from __future__ import annotations

from typing import Any

HOSTILE = [
    "it's",
    'say "hi"',
    "$(touch /tmp/P)",
    "`touch /tmp/P`",
    "a;touch /tmp/P",
    "a && touch /tmp/P",
    "a | touch /tmp/P",
    "line\ntouch /tmp/P",
    "ray-node\n",
    "10.0.0.1%x/1);touch /tmp/P;(true",
    "fe80::1%eth0;touch /tmp/P",
    "-oProxyCommand=touch /tmp/P",
    "a b",
    "../../etc",
    "a\x00b",
]

#: A host data set in which every list and mapping the schema knows has an entry to replace.
BASE: dict[str, Any] = {
    "ray_resources": {"nvme": 1},
    "ray_env": {"NCCL_SOCKET_IFNAME": "eth0"},
    "ray_env_secret": {"HF_TOKEN": "hf_example"},
    "ray_auth_token_file": "unused",  # each test gives it a token file of its own
    "firewall_admin_cidrs": ["198.51.100.0/24"],
    "firewall_member_cidrs": ["192.168.100.0/24"],
    "firewall_extra_tcp_ports": ["30000-30010"],
    "storage_nfs_server": "@fake/head",  # the plan tests' fake head
    "storage_nfs_exports": [{"path": "/srv/shared", "options": "rw,sync"}],
    "storage_nfs_mounts": [{"server": "10.0.0.1", "export": "/srv/shared", "path": "/mnt/shared", "options": "ro"}],
    "storage_s3_mounts": [
        {
            "bucket": "datasets",
            "path": "/mnt/datasets",
            "prefix": "imagenet/",
            "endpoint_url": "http://10.0.0.5:9000",
            "region": "us-east-1",
            "driver": "s3fs",
        }
    ],
    "storage_s3_credentials": {"access_key_id": "AKIAIOSFODNN7EXAMPLE", "secret_access_key": "wJalrXUtnFEMI"},
    "docker_registry_mirrors": ["https://mirror.lab.example"],
    "docker_insecure_registries": ["10.0.0.5:5000"],
    "docker_log_opts": {"max-size": "50m"},
    "docker_daemon_options": {"live-restore": True},
    "docker_registry_auth": {"registry": "registry.lab.example:5000", "username": "ray", "password": "pw"},
    "base_extra_packages": ["htop"],
    "storage_mountpoint_sha256": {"x86_64.deb": "0" * 64},
    "ray_gcs_fault_tolerance": True,  # so that ray_gcs_storage_path reaches the head's commands
    "image_mirror": "head",  # so that ray_image reaches the mirror's copy and pull commands
}
#: Paths on the operator's machine: read and written there, never sent to a host. The plan run
#: leaves them out (a token file named by a hostile string would be created in the working tree).
LOCAL_ONLY = ("ray_auth_token_file", "checks_report_dir")
VALUE, KEY = "*", "<key>"  # a slot that is a mapping's value (under a new key), or a new key
NEW_KEY = "x_hostile"


def string_slots(node: dict[str, Any], path: tuple[Any, ...] = ()) -> set[tuple[Any, ...]]:
    """Every place below ``node`` (a JSON Schema) where a string can go, as a path of steps:
    a property name, 0 for a list's item, VALUE for a mapping's value, KEY for a mapping's key."""
    slots: set[tuple[Any, ...]] = set()
    for alternative in node.get("oneOf", []):
        slots |= string_slots(alternative, path)
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else types
    if "string" in types or isinstance(node.get("const"), str) or any(isinstance(e, str) for e in node.get("enum", [])):
        slots.add(path)
    if "object" in types:
        for name, sub in node.get("properties", {}).items():
            slots |= string_slots(sub, (*path, name))
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            slots |= string_slots(extra, (*path, VALUE))
        if "propertyNames" in node or not node.get("properties"):
            slots.add((*path, KEY))
        if "properties" not in node and extra is None:
            slots.add((*path, VALUE))  # a free mapping (docker_daemon_options)
    if "array" in types:
        slots |= string_slots(node["items"], (*path, 0))
    return slots


def put(data: dict[str, Any], slot: tuple[Any, ...], value: str) -> None:
    """Set ``slot`` of ``data`` (a copy of BASE) to ``value``."""
    *parents, last = slot
    node: Any = data
    for step in parents:
        node = node[step]
    if last == VALUE:
        node[next(iter(node), NEW_KEY)] = value  # the entry BASE has (its key may be one of a fixed few)
    elif last == KEY:
        node[value] = 1 if slot[0] == "ray_resources" else "v"
    else:
        node[last] = value


def label(slot: tuple[Any, ...]) -> str:
    return slot[0] + "".join(f"[{step!r}]" for step in slot[1:] if step not in (VALUE, KEY))
