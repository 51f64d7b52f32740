"""A cluster's instances as pyinfra hosts (``inventories/ec2.py``), found by their tags."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from cloud.ec2 import efa, instance_types
from cloud.ec2.ami import gpus_of, instance_type_info, ssh_user_for_ami
from cloud.ec2.aws import (
    TAG_GROUP,
    TAG_ROLE,
    TAG_SSH_USER,
    Aws,
    CloudError,
    address,
    aws_step,
    connect,
    created_filters,
    instances_matching,
    tags_of,
)
from cloud.ec2.spec import ClusterSpec, load_spec
from cloud.ec2.state import (
    current_cluster,
    load_state,
    private_state_dir,
    split_recorded,
    state_path,
    stranger_line,
    write_private,
)

HostList = list[tuple[str, dict[str, Any]]]


def _spec_for_state(state: Mapping[str, Any]) -> ClusterSpec | None:
    path = state.get("spec")
    if path and Path(path).is_file():
        return load_spec(path)
    return None


def write_ssh_config(name: str, bastion: str, addresses: Iterable[str], key: str | None) -> Path:
    """An ssh_config that reaches ``addresses`` through ``bastion`` (ProxyJump); pyinfra and ssh -F read it."""
    user, _, hostport = bastion.rpartition("@")
    host, _, port = hostport.partition(":")
    lines = [f"# written by rayrig for cluster {name}; rewritten on every inventory load", f"Host {host}"]
    if user:
        lines.append(f"  User {user}")
    if port:
        lines.append(f"  Port {port}")
    if key:
        lines.append(f"  IdentityFile {key}")
    lines += [f"Host {' '.join(addresses)}", f"  ProxyJump {bastion}", ""]
    return write_private(private_state_dir() / f"{name}.ssh_config", "\n".join(lines))


def cluster_hosts(name: str | None = None, region: str | None = None) -> tuple[HostList, HostList]:
    """The pyinfra hosts ``(heads, workers)`` of a cluster, found by its tags.

    The cluster is ``name``, else ``RAYRIG_CLUSTER``, else the state directory's
    current cluster; the region is ``region``, else ``RAYRIG_REGION``, else the
    one recorded by ``up``, else boto3's. Each host's data: ``ssh_user`` (from
    the AMI's family), ``ssh_key`` (the spec's private key), ``ray_role``,
    ``ray_num_gpus`` (from the instance type), ``ray_node_ip`` (the private
    address), ``ssh_config_file`` (ProxyJump through the bastion, if any), and
    the spec's ``host_data``; ``ray_efa`` on instances launched with EFA
    interfaces (``cloud.ec2.efa``), unless the spec's host data says otherwise.
    Without the spec file, the data comes from the state, which keeps no
    secrets: a cluster whose spec had some needs its spec.
    """
    name = name or current_cluster()
    state = load_state(name)
    spec = _spec_for_state(state)
    if spec is not None and spec.name != name:
        spec = None
    region = region or os.environ.get("RAYRIG_REGION") or state.get("region") or (spec.region if spec else None)
    aws = connect(region)
    running = [*created_filters(name), {"Name": "instance-state-name", "Values": ["running"]}]
    with aws_step(f"listing the instances of cluster {name}", aws.region):
        instances, strangers = split_recorded(state, aws.region, instances_matching(aws, running))
    for stranger in strangers:
        print(f"inventories/ec2.py: {stranger_line(name, stranger)}", file=sys.stderr)
    if not instances:
        raise CloudError(f"cluster {name} has no running instances in {aws.region} ('rayrig cloud ls' lists clusters)")

    unknown_types = {i["InstanceType"] for i in instances if instance_types.gpu_count(i["InstanceType"]) is None}
    type_info = instance_type_info(aws, unknown_types) if unknown_types else {}
    users = _ssh_users(aws, instances, spec.ami.ssh_user if spec else None)

    public, bastion, bastion_key, key, shared, per_group, admins, anywhere = _recorded(name, state, spec)

    def order(i: Mapping[str, Any]) -> tuple[str, str]:
        return (tags_of(i).get(TAG_GROUP, ""), i.get("PrivateIpAddress", ""))

    hosts: dict[str, HostList] = {"head": [], "worker": []}
    addresses = []
    for instance in sorted(instances, key=order):
        tags = tags_of(instance)
        role = tags.get(TAG_ROLE, "worker")
        gpus = gpus_of(instance["InstanceType"], type_info.get(instance["InstanceType"]))
        data: dict[str, Any] = {
            # The cluster's own token, and SSH for the spec's admins only (the security group agrees).
            "ray_cluster_name": name,
            "firewall_admin_cidrs": admins,
            "firewall_allow_ssh_from_anywhere": anywhere,
            **_efa_data(instance),  # the spec's host data may turn it off
            **shared,
            **per_group.get(tags.get(TAG_GROUP, ""), {}),
            "ray_role": role,
            "ray_num_gpus": gpus if gpus is not None else "auto",
            "ray_node_ip": instance.get("PrivateIpAddress"),
            "ssh_user": users[instance["InstanceId"]],
        }
        if key:
            data["ssh_key"] = str(key)
        host = address(instance, public and not bastion)
        addresses.append(host)
        hosts.setdefault(role, []).append((host, data))
    if bastion:
        config = write_ssh_config(name, bastion, addresses, str(bastion_key) if bastion_key else None)
        for _host, data in hosts["head"] + hosts["worker"]:
            data["ssh_config_file"] = str(config)
    if len(hosts["head"]) != 1:
        raise CloudError(
            f"cluster {name} has {len(hosts['head'])} running head instances in {aws.region}, expected 1 "
            f"(tag {TAG_ROLE}=head)"
        )
    return hosts["head"], hosts["worker"]


class _Recorded(NamedTuple):
    """What the spec (else the state ``up`` recorded) says of how hosts are reached and what data they get."""

    public_ips: bool
    bastion: str | None
    bastion_key: Any
    ssh_key: Any
    host_data: dict[str, Any]
    group_host_data: dict[str, dict[str, Any]]
    admin_cidrs: list[str]
    allow_ssh_from_anywhere: bool


def _recorded(name: str, state: Mapping[str, Any], spec: Any) -> _Recorded:
    if spec is not None:
        return _Recorded(
            spec.network.public_ips,
            spec.network.bastion,
            spec.network.bastion_ssh_key,
            spec.ssh_private_key,
            spec.host_data,
            {g.name: g.host_data for g in spec.groups},
            list(spec.admin_cidrs),
            spec.allow_ssh_from_anywhere,
        )
    if state.get("secret_keys"):
        raise CloudError(
            f"cluster {name}: the spec {state.get('spec') or '?'} recorded in {state_path(name)} is gone, and "
            f"the state keeps no secrets ({', '.join(state['secret_keys'])} are only in the spec): "
            f"put the spec back there"
        )
    return _Recorded(
        state.get("public_ips", True),
        state.get("bastion"),
        state.get("bastion_ssh_key"),
        state.get("ssh_private_key"),
        state.get("host_data", {}),
        state.get("group_host_data", {}),
        state.get("admin_cidrs", []),
        state.get("allow_ssh_from_anywhere", False),
    )


def _efa_data(instance: Mapping[str, Any]) -> dict[str, Any]:
    """``ray_efa`` (and ``ray_efa_device_rdma`` where the type's EFA does RDMA reads) for an instance
    launched with EFA interfaces (tag ``rayrig:efa``); nothing for the others."""
    if tags_of(instance).get(efa.TAG_EFA, "0") in ("", "0"):
        return {}
    return {"ray_efa": True, "ray_efa_device_rdma": efa.device_rdma(instance["InstanceType"])}


def _ssh_users(aws: Aws, instances: list[dict[str, Any]], override: str | None) -> dict[str, str]:
    """The SSH user of each instance: the spec's, else the up-time tag, else from its AMI's family."""
    users: dict[str, str] = {}
    unknown: dict[str, list[str]] = {}
    for instance in instances:
        user = override or tags_of(instance).get(TAG_SSH_USER)
        if user:
            users[instance["InstanceId"]] = user
        else:
            unknown.setdefault(instance["ImageId"], []).append(instance["InstanceId"])
    if unknown:
        with aws_step("reading the instances' AMIs", aws.region):
            amis = {i["ImageId"]: i for i in aws.ec2.describe_images(ImageIds=sorted(unknown))["Images"]}
        for ami_id, ids in unknown.items():
            user = ssh_user_for_ami(amis.get(ami_id, {}))
            if not user:
                raise CloudError(f"cannot tell the SSH user of AMI {ami_id}; set ami.ssh_user in the spec")
            users.update(dict.fromkeys(ids, user))
    return users
