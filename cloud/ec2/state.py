"""What this machine remembers about the EC2 clusters it brought up: ``<state>/ec2``.

One ``NAME.json`` per cluster (spec path, region, keys, host data without its
secrets, each instance's type, zone and market, every other resource rayrig
created for it by ID or name, and its expiry), ``current`` naming the last cluster brought up, ``NAME.ssh_config``
when the hosts are reached through a bastion, and ``NAME.lock``, which one
``rayrig cloud up`` or ``down`` of the cluster holds at a time.

The folder is 0700 and every file in it 0600, written whole (a temporary file
in the same folder, private before it holds anything, renamed over the old
one). The state keeps no secret: a ``host_data`` key whose name, or the name
of anything inside it, looks secret (password, secret, token, credential,
auth, key) stays in the spec only, and the state lists its name under
``secret_keys``; the inventory reads such keys from the spec again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from cloud.ec2.aws import TAG_GROUP, TAG_ROLE, TAG_SLOT, CloudError, Progress, iso, parse_time, tags_of
from cloud.ec2.spec import ClusterSpec
from deploy.contract.paths import state_dir

#: Names under which a value is kept out of the state file (broader than the deploy's redaction, on purpose).
SECRET_NAME = re.compile(r"pa?s+w|pwd|secret|token|credential|auth|key", re.IGNORECASE)


def ec2_state_dir() -> Path:
    """``<state>/ec2``: one ``NAME.json`` per cluster brought up here, and ``current``."""
    return state_dir() / "ec2"


def private_state_dir() -> Path:
    """``ec2_state_dir()``, created if needed, readable by its owner only (0700)."""
    folder = ec2_state_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)  # an older rayrig made it 0755
    return folder


def write_private(path: Path, text: str) -> Path:
    """Replace ``path`` with ``text``, readable by its owner only (0600), at once: never half written."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def holds_secret(name: str, value: Any) -> bool:
    """Whether ``name`` or any name inside ``value`` (mappings, lists of them) looks secret."""
    if SECRET_NAME.search(name):
        return True
    if isinstance(value, Mapping):
        return any(holds_secret(str(k), v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(holds_secret("", v) for v in value)
    return False


def without_secrets(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``data`` without its secret-looking keys (see ``holds_secret``), and the names of those keys."""
    kept = {k: v for k, v in data.items() if not holds_secret(k, v)}
    return kept, sorted(k for k in data if k not in kept)


#: The kinds of resource the record lists besides the instances (``teardown.Resources``' fields): what
#: ``down`` and ``reap`` may delete, by ID (by name for key pairs, placement groups and IAM).
RECORDED_KINDS = (
    "placement_groups",
    "security_groups",
    "key_pairs",
    "route_tables",
    "subnets",
    "internet_gateways",
    "vpcs",
    "instance_profiles",
    "iam_roles",
)


def save_state(
    spec: ClusterSpec,
    ssh_user: str,
    instances: Iterable[Mapping[str, Any]] = (),
    resources: Mapping[str, Iterable[str]] | None = None,
    expires_at: dt.datetime | None = None,
) -> Path:
    """Record the cluster (spec path, region, keys, host data without secrets, where each of its described
    ``instances`` runs: type, zone, market; the other ``resources`` rayrig created for it, by kind of
    ``RECORDED_KINDS``, added to those recorded before; its expiry) and make it the current cluster."""
    folder = private_state_dir()
    before = load_state(spec.name)
    kept = before.get("resources", {}) if before.get("region") == spec.region else {}
    merged = {kind: sorted({*kept.get(kind, []), *(resources or {}).get(kind, [])}) for kind in RECORDED_KINDS}
    host_data, secret_keys = without_secrets(spec.host_data)
    group_host_data: dict[str, dict[str, Any]] = {}
    for group in spec.groups:
        group_host_data[group.name], omitted = without_secrets(group.host_data)
        secret_keys += [f"{group.name}.{k}" for k in omitted]
    record = {
        "name": spec.name,
        "region": spec.region,
        "spec": str(spec.path),
        "ssh_user": ssh_user,
        "ssh_private_key": str(spec.ssh_private_key) if spec.ssh_private_key else None,
        "public_ips": spec.network.public_ips,
        "bastion": spec.network.bastion,
        "bastion_ssh_key": str(spec.network.bastion_ssh_key) if spec.network.bastion_ssh_key else None,
        "host_data": host_data,
        "group_host_data": group_host_data,
        "secret_keys": secret_keys,
        "admin_cidrs": list(spec.admin_cidrs),
        "allow_ssh_from_anywhere": spec.allow_ssh_from_anywhere,
        "instances": [_placement(i) for i in instances],
        "resources": merged,
        "expires_at": iso(expires_at) if expires_at else before.get("expires_at"),
    }
    path = write_private(folder / f"{spec.name}.json", json.dumps(record, indent=2, sort_keys=True) + "\n")
    write_private(folder / "current", spec.name + "\n")
    return path


def _placement(instance: Mapping[str, Any]) -> dict[str, Any]:
    """Where a described instance runs, as the state records it (capacity failover may have chosen any option)."""
    tags = tags_of(instance)
    return {
        "id": instance["InstanceId"],
        "group": tags.get(TAG_GROUP),
        "role": tags.get(TAG_ROLE),
        "slot": tags.get(TAG_SLOT),
        "instance_type": instance["InstanceType"],
        "zone": instance.get("Placement", {}).get("AvailabilityZone"),
        "market": "spot" if instance.get("InstanceLifecycle") == "spot" else "on-demand",
    }


def recorded_instances(state: Mapping[str, Any], region: str) -> set[str] | None:
    """The IDs of the instances ``rayrig cloud up`` launched for the cluster in ``region`` and recorded in
    ``state``; None when this machine has no record of the cluster there."""
    if "instances" not in state or state.get("region", region) != region:
        return None
    return {i["id"] for i in state["instances"] if i.get("id")}


def split_recorded(
    state: Mapping[str, Any], region: str, instances: Iterable[Mapping[str, Any]]
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """``(members, strangers)``: the described ``instances`` (found by the cluster's tags) that ``state``
    records, and those it does not. Tags alone make no member: whoever may tag instances in the account
    could otherwise add one to the cluster (and hand it the token) or get theirs terminated by ``down``.
    Without a record of the cluster in ``region`` here, every tagged instance is a member (another machine
    brought the cluster up)."""
    recorded = recorded_instances(state, region)
    if recorded is None:
        return list(instances), []
    members = [i for i in instances if i["InstanceId"] in recorded]
    return members, [i for i in instances if i["InstanceId"] not in recorded]


def stranger_line(name: str, instance: Mapping[str, Any]) -> str:
    """What rayrig says of an instance that carries cluster ``name``'s tags without being recorded."""
    return (
        f"instance {instance['InstanceId']} carries the tags of cluster {name}, but {state_path(name)} does not "
        f"record it (rayrig cloud up records every instance it launches): not a member, left alone"
    )


def recorded_resources(state: Mapping[str, Any], region: str) -> dict[str, set[str]] | None:
    """The resources besides the instances that ``state`` records for the cluster in ``region``, by kind of
    ``RECORDED_KINDS``; None when this machine has no such record there (none of the cluster, or one an
    older rayrig wrote, which listed the instances only)."""
    if "resources" not in state or state.get("region", region) != region:
        return None
    return {kind: set(state["resources"].get(kind, [])) for kind in RECORDED_KINDS}


def foreign_line(name: str, what: str) -> str:
    """What rayrig says of a resource (``what``: "security group sg-0abc") that carries cluster ``name``'s tags
    without being recorded: rayrig neither uses nor deletes it."""
    return (
        f"{what} carries the tags of cluster {name}, but {state_path(name)} does not record it "
        f"(rayrig cloud up records everything it creates): not the cluster's, left alone"
    )


def recorded_expiry(state: Mapping[str, Any], region: str) -> dt.datetime | None:
    """The expiry ``state`` records for the cluster in ``region`` (what ``reap`` goes by), or None."""
    if state.get("region", region) != region:
        return None
    return parse_time(state.get("expires_at"))


def record_expiry(name: str, expires_at: dt.datetime) -> None:
    """Write ``expires_at`` into the record of cluster ``name`` (``extend``); nothing when there is none."""
    state = load_state(name)
    if state:
        state["expires_at"] = iso(expires_at)
        write_private(state_path(name), json.dumps(state, indent=2, sort_keys=True) + "\n")


def recorded_clusters(region: str) -> list[str]:
    """The clusters this machine brought up in ``region`` and has a record of, sorted."""
    folder = ec2_state_dir()
    names = [path.stem for path in folder.glob("*.json")] if folder.is_dir() else []
    return sorted(name for name in names if load_state(name).get("region") == region)


def state_path(name: str) -> Path:
    """Where the state of cluster ``name`` is kept."""
    return ec2_state_dir() / f"{name}.json"


def load_state(name: str) -> dict[str, Any]:
    """The recorded state of cluster ``name``, or {} when this machine has none."""
    path = state_path(name)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CloudError(f"cannot read {path}: {exc}") from None


def recorded_regions() -> list[str]:
    """The regions of the clusters this machine brought up and has not taken down, sorted."""
    folder = ec2_state_dir()
    names = [path.stem for path in folder.glob("*.json")] if folder.is_dir() else []
    return sorted({region for name in names if (region := load_state(name).get("region"))})


def forget_state(name: str) -> None:
    """Remove the record of cluster ``name`` (and ``current`` if it names it)."""
    folder = ec2_state_dir()
    state_path(name).unlink(missing_ok=True)
    (folder / f"{name}.ssh_config").unlink(missing_ok=True)
    current = folder / "current"
    if current.is_file() and current.read_text(encoding="utf-8").strip() == name:
        current.unlink()


@contextlib.contextmanager
def cluster_lock(name: str, say: Progress) -> Iterator[Path]:
    """Hold ``<state>/ec2/NAME.lock`` for the block: one ``up`` or ``down`` of a cluster at a time here.

    A second run waits for the first (and says so), then sees what the first made.
    """
    path = private_state_dir() / f"{name}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    with os.fdopen(fd, "r+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another 'rayrig cloud up' or 'down' of cluster {name} (lock {path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield path
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
