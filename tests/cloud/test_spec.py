"""Cluster specs: the example is valid, defaults apply, and every bad spec is refused
with an error naming the file, the key and what is expected, before any AWS call."""

from __future__ import annotations

import copy
import datetime as dt
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cloud.ec2.spec import SpecError, load_spec, parse_ttl
from tests.cloud.conftest import assert_refused_before_any_aws_call, base_spec, run_cli, to_toml

pytestmark = pytest.mark.cloud

ROOT = Path(__file__).resolve().parents[2]


def test_example_spec_is_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: tuple[Path, Path]) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(keys[0], home / ".ssh" / "id_ed25519.pub")
    shutil.copy(keys[1], home / ".ssh" / "id_ed25519")
    monkeypatch.setenv("HOME", str(home))

    spec = load_spec(ROOT / "examples" / "sprint42.toml")

    assert (spec.name, spec.region, spec.owner) == ("sprint42", "us-east-1", "aiko@example.com")
    assert spec.ttl == dt.timedelta(days=7)
    assert spec.admin_cidrs == ("198.51.100.0/24",)
    assert spec.ssh_private_key == home / ".ssh" / "id_ed25519"
    assert spec.ami.ssm_parameter and spec.ami.ssm_parameter.startswith("/aws/service/deeplearning/")
    assert [(g.name, g.role, g.instance_type, g.count) for g in spec.groups] == [
        ("head", "head", "m5.2xlarge", 1),
        ("gpu", "worker", "g5.12xlarge", 2),
    ]
    assert spec.workers[0].host_data == {"ray_resources": {"a10g": 4}}
    assert spec.placement_group and spec.network.public_ips and not spec.network.existing


def test_defaults(write_spec: Callable[..., Path], keys: tuple[Path, Path]) -> None:
    data = base_spec(keys[0])
    for key in ("placement_group", "host_data"):
        del data[key]
    data["head"] = {"instance_type": "m5.xlarge"}
    data["workers"] = [{"name": "gpu", "instance_type": "g5.xlarge", "count": 1}]
    spec = load_spec(write_spec(data))

    assert spec.head.market == "on-demand" and spec.head.root_volume_gb == 100
    assert spec.workers[0].market == "on-demand"
    assert spec.placement_group is True and spec.allow_ssh_from_anywhere is False
    assert spec.network.vpc_cidr == "10.42.0.0/16" and spec.network.internet_egress
    assert spec.ssh_private_key == keys[1]  # the public key's path without .pub
    assert spec.host_data == {}


def test_ttl_parsing() -> None:
    assert parse_ttl("12h") == dt.timedelta(hours=12)
    assert parse_ttl("1d12h30m") == dt.timedelta(days=1, hours=12, minutes=30)
    with pytest.raises(ValueError, match="forever"):
        parse_ttl("forever")


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation that sets (or with value ... deletes) a dotted key; list indexes are numbers."""

    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        key: Any = int(last) if last.isdigit() else last
        if value is ...:
            del node[key]
        else:
            node[key] = value

    return mutate


def _private_key_as_public(data: dict[str, Any]) -> None:
    data["ssh_public_key"] = data["ssh_public_key"].removesuffix(".pub")


def _ecdsa_key(data: dict[str, Any]) -> None:
    path = Path(data["ssh_public_key"]).with_name("id_ecdsa.pub")
    path.write_text("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY= me@host\n")
    data["ssh_public_key"] = str(path)


def _duplicate_worker(data: dict[str, Any]) -> None:
    data["workers"].append(copy.deepcopy(data["workers"][0]))


#: (id, mutation of a valid spec, fragments the error must contain: the key and what is expected)
BAD_SPECS: list[tuple[str, Callable[[dict[str, Any]], None], list[str]]] = [
    ("missing-name", _set("name", ...), ["name: missing", "expected a cluster name"]),
    ("bad-name", _set("name", "Sprint 42"), ["name = 'Sprint 42'", "expected a cluster name"]),
    ("bad-region", _set("region", "us-east"), ["region = 'us-east'", 'such as "us-east-1"']),
    ("ttl-words", _set("ttl", "forever"), ["ttl = 'forever'", 'a duration such as "12h"']),
    ("ttl-too-long", _set("ttl", "45d"), ["ttl = '45d'", "at most 30d"]),
    ("ttl-zero", _set("ttl", "0h"), ["ttl = '0h'", "above 0"]),
    ("cidr-invalid", _set("admin_cidrs", ["10.0.0.0/33"]), ["admin_cidrs[0] = '10.0.0.0/33'", "a CIDR such as"]),
    ("cidr-host-bits", _set("admin_cidrs", ["198.51.100.7/24"]), ["admin_cidrs[0]", "did you mean '198.51.100.0/24'"]),
    ("cidr-anywhere", _set("admin_cidrs", ["0.0.0.0/0"]), ["admin_cidrs[0] = '0.0.0.0/0'", "allow_ssh_from_anywhere"]),
    ("cidr-anywhere-v6", _set("admin_cidrs", ["::/0"]), ["admin_cidrs[0] = '::/0'", "allow_ssh_from_anywhere"]),
    ("cidrs-empty", _set("admin_cidrs", []), ["admin_cidrs = []", "a non-empty list"]),
    (
        "key-missing",
        _set("ssh_public_key", "/nonexistent/id.pub"),
        ["ssh_public_key", "/nonexistent/id.pub is missing"],
    ),
    ("key-is-private", _private_key_as_public, ["ssh_public_key", "holds a private key"]),
    ("key-ecdsa", _ecdsa_key, ["ssh_public_key", "ssh-ed25519 or ssh-rsa"]),
    ("ami-both", _set("ami.id", "ami-0123456789abcdef0"), ["ami = ", "exactly one of ami.id or ami.ssm_parameter"]),
    ("ami-neither", _set("ami", {}), ["ami = {}", "exactly one of ami.id or ami.ssm_parameter"]),
    ("ami-id-malformed", _set("ami", {"id": "ami-xyz"}), ["ami.id = 'ami-xyz'", "an AMI id such as"]),
    ("head-missing", _set("head", ...), ["head: missing", "instance_type"]),
    ("head-count", _set("head.count", 2), ["head.count = 2", "expected 1 (a cluster has exactly one head)"]),
    ("typo-key", _set("head.instnace_type", "m5.xlarge"), ["head.instnace_type: unknown key", "'instance_type'"]),
    (
        "instance-type",
        _set("workers.0.instance_type", "g5 large"),
        ["workers[0].instance_type = 'g5 large'", "g5.12xlarge"],
    ),
    ("count-zero", _set("workers.0.count", 0), ["workers[0].count = 0", "an integer from 1 to 64"]),
    ("count-string", _set("workers.0.count", "2"), ["workers[0].count = '2'", "an integer from 1 to 64"]),
    ("market", _set("workers.0.market", "preemptible"), ["workers[0].market = 'preemptible'", '"on-demand" or "spot"']),
    ("volume-small", _set("head.root_volume_gb", 4), ["head.root_volume_gb = 4", "from 8 to 16384"]),
    ("worker-dup", _duplicate_worker, ["workers[1].name = 'gpu'", "a name used by no other group"]),
    (
        "subnet-no-vpc",
        _set("network", {"subnet_id": "subnet-0123456789abcdef0"}),
        ["network.vpc_id: missing", "both network.vpc_id and network.subnet_id"],
    ),
    (
        "subnet-outside",
        _set("network", {"subnet_cidr": "10.99.0.0/24"}),
        ["network.subnet_cidr = '10.99.0.0/24'", "inside vpc_cidr 10.42.0.0/16"],
    ),
    (
        "zone-region",
        _set("network", {"availability_zone": "eu-west-1a"}),
        ["network.availability_zone = 'eu-west-1a'", "region us-east-1"],
    ),
    ("private-unreachable", _set("network", {"public_ips": False}), ["network.public_ips = false", "network.bastion"]),
    (
        "reserved-host-data",
        _set("host_data.ray_role", "head"),
        ["host_data.ray_role = 'head'", "inventories/ec2.py sets ray_role itself"],
    ),
    ("host-data-typo", _set("host_data.ray_imag", "x"), ["host_data.ray_imag", "did you mean 'ray_image'"]),
    (
        "host-data-value",
        _set("workers.0.host_data", {"ray_resources": {"a10g": -1}}),
        ["workers[0].host_data.ray_resources", "a whole number of at least 0"],
    ),
    (
        "cidrs-halves",
        _set("admin_cidrs", ["0.0.0.0/1", "128.0.0.0/1"]),
        ["admin_cidrs[0] = '0.0.0.0/1'", "admin_cidrs[1] = '128.0.0.0/1'", "allow_ssh_from_anywhere"],
    ),
    ("cidr-v6-half", _set("admin_cidrs", ["::/1"]), ["admin_cidrs[0] = '::/1'", "allow_ssh_from_anywhere"]),
    ("cidr-wide", _set("admin_cidrs", ["10.0.0.0/7"]), ["admin_cidrs[0] = '10.0.0.0/7'", "at most /8 wide"]),
    ("cidr-wide-v6", _set("admin_cidrs", ["2000::/3"]), ["admin_cidrs[0] = '2000::/3'", "at most /16 wide"]),
    ("ttl-overflow", _set("ttl", "99999999999999999999d"), ["ttl = '99999999999999999999d'", "at most 30d"]),
    ("ttl-newline", _set("ttl", "7d\n"), ["ttl = '7d\\n'", 'a duration such as "12h"']),
    ("name-newline", _set("name", "sprint42\n"), ["name = 'sprint42\\n'", "expected a cluster name"]),
    ("count-float", _set("workers.0.count", 2.0), ["workers[0].count = 2.0", "an integer from 1 to 64"]),
    (
        "key-unknown-user",
        _set("ssh_public_key", "~nosuchuser-rayrig/x.pub"),
        ["ssh_public_key = '~nosuchuser-rayrig/x.pub'", "an existing user's"],
    ),
    (
        "private-key-unknown-user",
        _set("ssh_private_key", "~nosuchuser-rayrig/x"),
        ["ssh_private_key = '~nosuchuser-rayrig/x'", "an existing user's"],
    ),
    (
        "bastion-key-unknown-user",
        _set("network", {"bastion": "me@bastion.example.com", "bastion_ssh_key": "~nosuchuser-rayrig/k"}),
        ["network.bastion_ssh_key = '~nosuchuser-rayrig/k'", "an existing user's"],
    ),
    (
        "bastion-newline",
        _set("network", {"bastion": "bastion.example.com\n"}),
        ["network.bastion = ", "a bastion host for ProxyJump"],
    ),
    (
        "host-data-ray-auth-env",
        _set("host_data.ray_env", {"RAY_AUTH_TOKEN": "abc"}),
        ["host_data.ray_env['RAY_AUTH_TOKEN']", "set ray_auth instead"],
    ),
    (
        "host-data-hostile-ip",
        _set("workers.0.host_data", {"ray_node_ip": "10.0.0.1%x/1);touch /tmp/P;(true"}),
        ["workers[0].host_data.ray_node_ip", "inventories/ec2.py sets ray_node_ip itself"],
    ),
    (
        "host-data-hostile-nfs-server",
        _set("host_data.storage_nfs_mounts", [{"server": "x;touch /tmp/P", "export": "/srv", "path": "/mnt/s"}]),
        ["host_data.storage_nfs_mounts[0]['server'] = 'x;touch /tmp/P'", 'a list of {"server": ...'],
    ),
    (
        "host-data-extra-port-on-ray",
        _set("host_data.firewall_extra_tcp_ports", [6379]),
        ["host_data.firewall_extra_tcp_ports[0] = 6379", "would open Ray to the world"],
    ),
    (
        "host-data-fractional-cpus",
        _set("workers.0.host_data", {"ray_num_cpus": 1.5}),
        ["workers[0].host_data.ray_num_cpus = 1.5", "a non-negative integer"],
    ),
    (
        "host-data-exports-without-server",
        _set("host_data.storage_nfs_exports", [{"path": "/srv/shared"}]),
        ["host_data.storage_nfs_exports", "unless storage_nfs_server names the host"],
    ),
]


def test_at_least_twelve_bad_specs() -> None:
    assert len(BAD_SPECS) >= 12


@pytest.mark.parametrize(("mutate", "fragments"), [(m, f) for _, m, f in BAD_SPECS], ids=[i for i, _, _ in BAD_SPECS])
def test_bad_spec_is_refused_before_any_aws_call(
    mutate: Callable[[dict[str, Any]], None],
    fragments: list[str],
    keys: tuple[Path, Path],
    write_spec: Callable[..., Path],
    no_aws: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = base_spec(keys[0])
    mutate(data)
    assert_refused_before_any_aws_call(write_spec(data), fragments, capsys)
    assert no_aws == []


def test_unreadable_specs_are_refused(tmp_path: Path, no_aws: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.toml"
    assert run_cli("cloud", "up", str(missing)) == 2
    assert f"{missing}: no such file" in capsys.readouterr().err

    broken = tmp_path / "broken.toml"
    broken.write_text('name = "sprint42"\nregion = \n')
    assert run_cli("cloud", "up", str(broken)) == 2
    err = capsys.readouterr().err
    assert f"{broken}: not valid TOML" in err and "line 2" in err
    assert no_aws == []


def test_every_problem_is_reported_at_once(keys: tuple[Path, Path], write_spec: Callable[..., Path]) -> None:
    data = base_spec(keys[0], name="X", ttl="forever")
    data["workers"][0]["count"] = 0
    with pytest.raises(SpecError) as caught:
        load_spec(write_spec(data))
    assert len(caught.value.problems) == 3


def test_ssh_from_anywhere_needs_the_explicit_flag(keys: tuple[Path, Path], write_spec: Callable[..., Path]) -> None:
    spec = load_spec(write_spec(base_spec(keys[0], admin_cidrs=["0.0.0.0/0"], allow_ssh_from_anywhere=True)))
    assert spec.admin_cidrs == ("0.0.0.0/0",) and spec.allow_ssh_from_anywhere


def test_toml_writer_round_trips(keys: tuple[Path, Path]) -> None:
    import tomllib

    data = base_spec(keys[0])
    assert tomllib.loads(to_toml(data)) == data


@pytest.mark.parametrize(
    "key, value",
    [
        ("ssh_password", "hunter2-secret"),
        ("ssh_key", "/home/me/.ssh/hunter2-secret"),
    ],
)
def test_reserved_secret_keys_are_not_printed_back(
    key: str, value: str, keys: tuple[Path, Path], write_spec: Callable[..., Path]
) -> None:
    data = base_spec(keys[0])
    data["host_data"][key] = value
    with pytest.raises(SpecError) as caught:
        load_spec(write_spec(data))
    message = str(caught.value)
    assert f"host_data.{key} = " in message and "inventories/ec2.py sets" in message
    if key == "ssh_password":
        assert "hunter2" not in message and "'***'" in message


def test_secret_values_in_host_data_are_not_printed_back(
    keys: tuple[Path, Path], write_spec: Callable[..., Path]
) -> None:
    data = base_spec(keys[0])
    data["host_data"]["storage_s3_credentials"] = {"access_key_id": "AKIAEXAMPLE", "secret_access_key": ""}
    data["host_data"]["docker_registry_auth"] = {"registry": "r.example", "username": "me", "password": 7}
    with pytest.raises(SpecError) as caught:
        load_spec(write_spec(data))
    message = str(caught.value)
    assert "host_data.storage_s3_credentials" in message and "host_data.docker_registry_auth" in message
    assert "AKIAEXAMPLE" not in message and "7}" not in message


def test_a_slash_eight_admin_network_is_fine(keys: tuple[Path, Path], write_spec: Callable[..., Path]) -> None:
    spec = load_spec(write_spec(base_spec(keys[0], admin_cidrs=["10.0.0.0/8", "2001:db8::/32"])))
    assert spec.admin_cidrs == ("10.0.0.0/8", "2001:db8::/32")


def test_wide_admin_networks_pass_with_the_explicit_flag(
    keys: tuple[Path, Path], write_spec: Callable[..., Path]
) -> None:
    data = base_spec(keys[0], admin_cidrs=["0.0.0.0/1", "128.0.0.0/1"], allow_ssh_from_anywhere=True)
    assert load_spec(write_spec(data)).admin_cidrs == ("0.0.0.0/1", "128.0.0.0/1")
