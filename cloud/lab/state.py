"""What a lab is: its names, addresses and images, and the ``state.json`` that ``inventories/lab.py`` reads.

Pure functions of a lab's name, subnet and size; nothing here touches Docker.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from pathlib import Path
from typing import Any

from deploy.contract.paths import state_dir
from images import RAY_VERSION

DEFAULT_NAME = "rayrig-lab"
LAB_LABEL = "rayrig.lab"
ROOTFS_IMAGE = "rayrig/lab-rootfs:bookworm"
BASE_IMAGE = "rayrig/lab-base:bookworm"
REGISTRY_IMAGE = "rayrig/lab-registry:bookworm"
#: Prometheus from Debian's package (images/lab-prometheus), pushed to the lab's registry.
PROMETHEUS_REPO = "rayrig/lab-prometheus"
PROMETHEUS_TAG = "bookworm"
PROMETHEUS_IMAGE = f"{PROMETHEUS_REPO}:{PROMETHEUS_TAG}"
LAB_IMAGE_REPO = "rayrig/lab-ray"
#: The mirror of debootstrap; images/lab-base/sources.list names the same.
DEBIAN_MIRROR = "http://deb.debian.org/debian"
SSH_USER = "rayrig"
HOST_NUM_CPUS = 2
HOST_SHM_SIZE = "1g"
PREFERRED_SUBNET = "10.213.0.0/24"
REGISTRY_HOST_OCTET = 2
FIRST_HOST_OCTET = 10
#: The most hosts a lab's /24 holds: .10 to .254.
MAX_HOSTS = 255 - FIRST_HOST_OCTET
#: The registry's port; images/lab-registry (Dockerfile and config.yml) listen on the same.
REGISTRY_PORT = 5000

#: A lab's name prefixes its containers, network and volumes, so it is a name Docker takes.
_LAB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}\Z")


class LabError(RuntimeError):
    """The lab cannot be brought up, inspected or taken down; the message says what failed and what to do."""


def lab_dir(name: str) -> Path:
    """Return the directory of the local lab ``name`` (its key, known_hosts and state.json)."""
    if not _LAB_NAME.match(name):
        raise ValueError(
            f"invalid lab name {name!r}: expected a plain name like 'rayrig-lab' "
            "(letters, digits, '-', '_' and '.', starting with a letter or digit, at most 40)"
        )
    return state_dir() / "labs" / name


def state_path(name: str = DEFAULT_NAME) -> Path:
    """Return the path of lab ``name``'s state.json."""
    return lab_dir(name) / "state.json"


def load_state(name: str = DEFAULT_NAME) -> dict[str, Any] | None:
    """Return lab ``name``'s state (see :func:`make_state`), or None when the lab is not up.

    ``LabError`` when the file is there but unreadable.
    """
    path = state_path(name)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LabError(
            f"{path}: cannot read the lab's state ({exc}); `rayrig lab down --name {name}` removes the lab"
        ) from None


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    """Replace ``path`` with ``text`` (atomically, with ``mode``) unless it holds it already; return whether it did."""
    if path.exists() and path.read_text() == text:
        return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)
    return True


def lab_image_tag(ray_version: str = RAY_VERSION) -> str:
    """Return the local tag of the lab's Ray image."""
    return f"{LAB_IMAGE_REPO}:{ray_version}"


def host_address(subnet: str, index: int) -> str:
    """Return the address of host ``index`` (1-based): .10, .11, ... in ``subnet``."""
    net = ipaddress.ip_network(subnet)
    addr = net.network_address + FIRST_HOST_OCTET + index - 1
    if addr not in net or addr == net.broadcast_address:
        raise ValueError(f"host {index} does not fit in lab subnet {subnet}")
    return str(addr)


def registry_address(subnet: str) -> str:
    """Return the lab-side address of the registry (``.2:5000``)."""
    return f"{ipaddress.ip_network(subnet).network_address + REGISTRY_HOST_OCTET}:{REGISTRY_PORT}"


def make_state(
    name: str,
    subnet: str,
    hosts: int,
    key_path: Path | str,
    known_hosts_path: Path | str,
    ray_version: str = RAY_VERSION,
    registry_local: str | None = None,
) -> dict[str, Any]:
    """Return the lab's state (what ``state.json`` holds and ``inventories/lab.py`` reads)."""
    registry = registry_address(subnet)
    host_list = []
    for k in range(1, hosts + 1):
        hostname = f"{name}-{k}"
        host_list.append(
            {
                "name": hostname,
                "container": f"{name}-host-{k}",
                "address": host_address(subnet, k),
                "role": "head" if k == 1 else "worker",
                "num_cpus": HOST_NUM_CPUS,
                "resources": {hostname: 1},
            }
        )
    return {
        "name": name,
        "network": f"{name}-net",
        "subnet": subnet,
        "gateway": str(ipaddress.ip_network(subnet).network_address + 1),
        "registry": registry,
        "registry_container": f"{name}-registry",
        "registry_local": registry_local,
        "image": f"{registry}/{lab_image_tag(ray_version)}",
        "ray_version": ray_version,
        "ssh_user": SSH_USER,
        "ssh_key": str(key_path),
        "known_hosts": str(known_hosts_path),
        "hosts": host_list,
    }


def inventory_groups(state: dict[str, Any]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Return pyinfra inventory groups ``{"heads": [...], "workers": [...]}`` for a lab's state.

    Hosts are named by their lab address, so pyinfra connects to it; their
    data follows the contract in ``inventories/group_data/all.py``.
    """
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {"heads": [], "workers": []}
    for host in state["hosts"]:
        data = {
            "ssh_user": state["ssh_user"],
            "ssh_key": state["ssh_key"],
            "ssh_known_hosts_file": state["known_hosts"],
            "ssh_strict_host_key_checking": "yes",
            "_sudo": True,
            "ray_role": host["role"],
            "ray_node_ip": host["address"],
            "ray_num_cpus": host["num_cpus"],
            "ray_num_gpus": 0,
            "ray_resources": dict(host["resources"]),
            "ray_image": state["image"],
            "ray_shm_size": HOST_SHM_SIZE,
            "docker_insecure_registries": [state["registry"]],
            "checks_profile": "quick",
            # The lab's hosts share this machine's cores with whatever else runs on it, so
            # their CPU figures wander (healthy hosts measured 44-49% of their peers under
            # load); a node is flagged only below 30% of its peers' speed. A host throttled
            # to a tenth of a CPU measures 3-12% and is still named.
            "checks_outlier_fraction": 0.3,
            "ray_cluster_name": state["name"],
            # monitoring (server): the lab reaches no registry but its own, where its Prometheus (Debian's
            # package) is; Grafana and NVIDIA's DCGM exporter cannot be fetched here (and no host has a GPU).
            "monitoring_prometheus_image": f"{state['registry']}/{PROMETHEUS_IMAGE}",
            "monitoring_grafana": False,
            "monitoring_gpu_exporter": "none",
        }
        groups["heads" if host["role"] == "head" else "workers"].append((host["address"], data))
    return groups
