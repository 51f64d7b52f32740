"""``inventories/ec2.py`` loaded by pyinfra itself: one head, the workers, and their data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paramiko
import pytest

from cloud import ec2
from cloud.ec2.ami import ssh_user_for_ami
from cloud.ec2.aws import tags_of
from cloud.ec2.spec import load_spec
from cloud.ec2.state import forget_state
from deploy.contract.schema import validate_cluster
from tests.cloud.conftest import UBUNTU_AMI, base_spec, raw_client, run_cli

pytestmark = pytest.mark.cloud

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = str(ROOT / "inventories" / "ec2.py")


def pyinfra_inventory(*env: str) -> subprocess.CompletedProcess[str]:
    """``pyinfra inventories/ec2.py debug-inventory --json``, run as a user runs it (from the repo root).

    The real pyinfra CLI loads the real inventory file (with group_data), in its own
    gevent-patched process, and reaches moto through RAYRIG_AWS_ENDPOINT_URL.
    """
    pyinfra = Path(sys.executable).with_name("pyinfra")
    return subprocess.run(
        [str(pyinfra), "inventories/ec2.py", "debug-inventory", "--json"],
        cwd=ROOT,
        env={**os.environ, **dict(e.split("=", 1) for e in env)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def load_inventory(*env: str) -> list[dict[str, Any]]:
    """The hosts pyinfra builds from inventories/ec2.py: [{name, groups, data}]."""
    result = pyinfra_inventory(*env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def up(path: Path, probe: Any) -> ec2.UpResult:
    return ec2.up(load_spec(path), assume_yes=True, ssh_probe=probe, say=print)


def test_inventory_yields_one_head_and_the_workers(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, aws: str
) -> None:
    result = up(write_spec(), no_ssh)
    by_id = {i["InstanceId"]: i for i in result.instances}
    role_of = {i["PrivateIpAddress"]: tags_of(i)["rayrig:role"] for i in by_id.values()}

    hosts = load_inventory()

    heads = [h for h in hosts if "heads" in h["groups"]]
    workers = [h for h in hosts if "workers" in h["groups"]]
    assert len(heads) == 1 and len(workers) == 2 and len(hosts) == 3
    assert {h["name"] for h in hosts} == {i["PublicIpAddress"] for i in result.instances}
    head = heads[0]["data"]
    assert head["ray_role"] == "head" and role_of[head["ray_node_ip"]] == "head"
    assert head["ray_num_gpus"] == 0  # m5.2xlarge
    assert head["ssh_user"] == "ec2-user"  # Amazon Linux 2023
    assert head["ssh_key"] == str(keys[1])
    assert head["ray_image"] == "registry.example.com/ray:2.60.0-gpu"  # the spec's host_data
    assert head["ray_version"] == "2.60.0"  # group_data/all.py still applies
    assert head["ray_resources"] == {}  # the default: the worker group's resources stay on the workers
    assert head["ray_cluster_name"] == load_spec(write_spec()).name  # a token of the cluster's own
    assert head["firewall_admin_cidrs"] == list(load_spec(write_spec()).admin_cidrs)
    for worker in (w["data"] for w in workers):
        assert worker["ray_role"] == "worker" and role_of[worker["ray_node_ip"]] == "worker"
        assert worker["ray_num_gpus"] == 4  # g5.12xlarge
        assert worker["ray_resources"] == {"a10g": 4}  # the worker group's host_data
        assert worker["ray_node_ip"].startswith("10.42.")
    # The deploy's own validation accepts the hosts as they come.
    assert validate_cluster((h["name"], h["data"], h["data"]["ray_node_ip"]) for h in hosts) == []


def test_inventory_follows_rayrig_cluster_and_the_ami_family(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    up(write_spec(), no_ssh)
    other = base_spec(keys[0], name="other", ami={"id": UBUNTU_AMI}, workers=[])
    other["head"] = {"instance_type": "p5e.48xlarge"}  # not in rayrig's price table: GPUs asked from EC2
    up(write_spec(other), no_ssh)
    assert (ROOT / "inventories" / "ec2.py").is_file()

    sprint = ec2.cluster_hosts()  # the current cluster: the last one brought up, "other"
    assert [data["ray_role"] for _, data in sprint[0] + sprint[1]] == ["head"]
    monkeypatch.setenv("RAYRIG_CLUSTER", "sprint42")
    heads, workers = ec2.cluster_hosts()
    assert (len(heads), len(workers)) == (1, 2)

    monkeypatch.setenv("RAYRIG_CLUSTER", "other")
    ((_, head),), workers = ec2.cluster_hosts()
    assert workers == []
    assert head["ssh_user"] == "ubuntu" and head["ray_num_gpus"] == 8 and head["ray_role"] == "head"


def test_ssh_user_comes_from_the_ami_when_the_tag_is_missing(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, aws: str
) -> None:
    result = up(write_spec(base_spec(keys[0], ami={"id": UBUNTU_AMI})), no_ssh)
    raw_client("ec2", aws).delete_tags(
        Resources=[i["InstanceId"] for i in result.instances], Tags=[{"Key": "rayrig:ssh-user"}]
    )
    forget_state("sprint42")  # no spec to read either: only the instances and their AMI tell
    heads, workers = ec2.cluster_hosts("sprint42", "us-east-1")
    assert {data["ssh_user"] for _, data in heads + workers} == {"ubuntu"}


def test_an_instance_tagged_into_the_cluster_by_hand_is_no_member_and_down_leaves_it(
    write_spec: Callable[..., Path], no_ssh: Any, aws: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tags alone make no member: whoever may tag instances could otherwise add one (and be handed the
    token) or get theirs terminated. The inventory, a second ``up`` and ``down`` name it and leave it."""
    result = up(write_spec(), no_ssh)
    client = raw_client("ec2", aws)
    worker = next(i for i in result.instances if tags_of(i)["rayrig:role"] == "worker")
    stranger = client.run_instances(
        ImageId=worker["ImageId"], InstanceType="m5.large", MinCount=1, MaxCount=1, SubnetId=worker["SubnetId"],
        TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": k, "Value": v} for k, v in tags_of(worker).items()  # every tag a member of the cluster has
        ]}],
    )["Instances"][0]["InstanceId"]  # fmt: skip
    said = f"instance {stranger} carries the tags of cluster sprint42, but "
    capsys.readouterr()

    loaded = pyinfra_inventory()
    assert loaded.returncode == 0, loaded.stderr
    hosts = json.loads(loaded.stdout)
    assert len(hosts) == 3 and {h["name"] for h in hosts} == {i["PublicIpAddress"] for i in result.instances}
    assert said in loaded.stderr and "not a member, left alone" in loaded.stderr

    again = up(write_spec(), no_ssh)  # a second up neither adopts it nor records it
    assert stranger not in {i["InstanceId"] for i in again.instances}
    assert said in capsys.readouterr().out

    assert run_cli("cloud", "down", "sprint42", "--yes") == 1  # something still carries the cluster's tag
    out = capsys.readouterr().out
    assert said in out and f"instance {stranger} (running)" in out and "Still tagged rayrig:cluster=sprint42" in out
    states = {
        i["InstanceId"]: i["State"]["Name"]
        for r in client.describe_instances()["Reservations"] for i in r["Instances"]
    }  # fmt: skip
    assert states[stranger] == "running"
    assert {states[i["InstanceId"]] for i in result.instances} == {"terminated"}


@pytest.mark.parametrize(
    ("name", "user"),
    [
        ("Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) 20250101", "ubuntu"),
        ("Deep Learning Base OSS Nvidia Driver GPU AMI (Amazon Linux 2023) 20250101", "ec2-user"),
        ("al2023-ami-2023.6.20250107.0-kernel-6.1-x86_64", "ec2-user"),
        ("debian-12-amd64-20240717-1811", "admin"),
        ("Rocky-9-EC2-Base-9.4-20240523.0.x86_64", "rocky"),
        ("RHEL-9.4.0_HVM-20240605-x86_64-82-Hourly2-GP3", "ec2-user"),
        ("my-own-image", None),
    ],
)
def test_ssh_user_by_ami_family(name: str, user: str | None) -> None:
    assert ssh_user_for_ami({"Name": name}) == user


def test_private_addresses_through_a_bastion(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, aws: str, tmp_path: Path
) -> None:
    data = base_spec(keys[0])
    data["network"] = {"public_ips": False, "bastion": "ec2-user@bastion.example.com:2222"}
    data["network"]["bastion_ssh_key"] = str(keys[1])
    result = up(write_spec(data), no_ssh)
    assert no_ssh.probed == []  # the hosts are not reachable from here, only through the bastion
    private = {i["PrivateIpAddress"] for i in result.instances}
    assert not any(i.get("PublicIpAddress") for i in result.instances)

    heads, workers = ec2.cluster_hosts()

    assert {name for name, _ in heads + workers} == private
    configs = {data["ssh_config_file"] for _, data in heads + workers}
    assert len(configs) == 1
    config = paramiko.SSHConfig.from_path(configs.pop())
    for address in private:
        assert config.lookup(address)["proxyjump"] == "ec2-user@bastion.example.com:2222"
    bastion = config.lookup("bastion.example.com")
    assert (bastion["user"], bastion["port"], bastion["identityfile"]) == ("ec2-user", "2222", [str(keys[1])])


def test_no_cluster_is_a_clear_error(aws: str) -> None:
    result = pyinfra_inventory()
    assert result.returncode != 0
    assert "inventories/ec2.py: no EC2 cluster named: set RAYRIG_CLUSTER=NAME" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_cluster_without_instances_is_a_clear_error(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYRIG_CLUSTER", "nothing-here")
    with pytest.raises(ec2.CloudError, match="cluster nothing-here has no running instances in us-east-1"):
        ec2.cluster_hosts()


def test_wide_admin_networks_the_spec_allows_reach_the_deploy_allowed(
    write_spec: Callable[..., Path], keys: tuple[Path, Path], no_ssh: Any, aws: str
) -> None:
    """The deploy refuses admin networks wider than /8 unless the inventory allows them, as the spec does."""
    path = write_spec(base_spec(keys[0], admin_cidrs=["0.0.0.0/1", "128.0.0.0/1"], allow_ssh_from_anywhere=True))
    up(path, no_ssh)
    for source in ("spec", "state"):  # the state alone, once the spec is gone
        if source == "state":
            path.unlink()
        heads, workers = ec2.cluster_hosts()
        hosts = [(name, data, data["ray_node_ip"]) for name, data in heads + workers]
        assert all(data["firewall_allow_ssh_from_anywhere"] is True for _, data, _ in hosts), source
        assert validate_cluster(hosts) == [], source
