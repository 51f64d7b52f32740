"""What this machine remembers about the EC2 clusters it brought up: ``<state>/ec2``.

One ``NAME.json`` per cluster (spec path, region, keys, host data), ``current``
naming the last cluster brought up, and ``NAME.ssh_config`` when the hosts are
reached through a bastion.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cloud.ec2.aws import CloudError
from cloud.ec2.spec import ClusterSpec
from deploy.paths import state_dir


def ec2_state_dir() -> Path:
    """``<state>/ec2``: one ``NAME.json`` per cluster brought up here, and ``current``."""
    return state_dir() / "ec2"


def save_state(spec: ClusterSpec, ssh_user: str) -> Path:
    """Record the cluster (spec path, region, keys) and make it the current cluster."""
    folder = ec2_state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{spec.name}.json"
    record = {
        "name": spec.name,
        "region": spec.region,
        "spec": str(spec.path),
        "ssh_user": ssh_user,
        "ssh_private_key": str(spec.ssh_private_key) if spec.ssh_private_key else None,
        "public_ips": spec.network.public_ips,
        "bastion": spec.network.bastion,
        "bastion_ssh_key": str(spec.network.bastion_ssh_key) if spec.network.bastion_ssh_key else None,
        "host_data": spec.host_data,
        "group_host_data": {g.name: g.host_data for g in spec.groups},
        "admin_cidrs": list(spec.admin_cidrs),
    }
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (folder / "current").write_text(spec.name + "\n", encoding="utf-8")
    return path


def load_state(name: str) -> dict[str, Any]:
    """The recorded state of cluster ``name``, or {} when this machine has none."""
    path = ec2_state_dir() / f"{name}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CloudError(f"cannot read {path}: {exc}") from None


def forget_state(name: str) -> None:
    """Remove the record of cluster ``name`` (and ``current`` if it names it)."""
    folder = ec2_state_dir()
    (folder / f"{name}.json").unlink(missing_ok=True)
    (folder / f"{name}.ssh_config").unlink(missing_ok=True)
    current = folder / "current"
    if current.is_file() and current.read_text(encoding="utf-8").strip() == name:
        current.unlink()


def current_cluster() -> str:
    """The cluster ``RAYRIG_CLUSTER`` names, else the one the last ``rayrig cloud up`` here brought up."""
    name = os.environ.get("RAYRIG_CLUSTER", "").strip()
    if name:
        return name
    current = ec2_state_dir() / "current"
    if current.is_file():
        name = current.read_text(encoding="utf-8").strip()
        if name:
            return name
    raise CloudError(
        f"no EC2 cluster named: set RAYRIG_CLUSTER=NAME, or run 'rayrig cloud up SPEC' (which records {current})"
    )
