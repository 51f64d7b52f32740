"""Hostile strings in every string key of an EC2 cluster spec, and in its host data.

Each is refused with a problem naming the spec's key (and nothing is created), or accepted
only where the spec means free text that never reaches a shell (the owner, an AWS tag).
Host data in a spec gets exactly the deploy's verdict: the same value is refused in both.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from cloud.ec2 import spec_schema
from cloud.ec2.spec import RESERVED_HOST_DATA, SpecError, parse_spec
from deploy.contract import schema
from deploy.contract.schema import validate_host
from tests.cloud.conftest import base_spec
from tests.hostile_corpus import BASE, HOSTILE, KEY, VALUE, put, string_slots

pytestmark = pytest.mark.cloud

#: Spec keys of free text: the owner becomes an AWS tag (rayrig:owner), never a shell word.
FREE_TEXT = {("owner",)}


def spec_label(slot: tuple[Any, ...]) -> str:
    label = ""
    for step in slot:
        if step in (VALUE, KEY):
            continue
        label += f"[{step}]" if isinstance(step, int) else (f".{step}" if label else str(step))
    return label


def spec_with(public_key: Path, slot: tuple[Any, ...], value: str) -> dict[str, Any]:
    data = base_spec(public_key)
    data["network"] = {
        "bastion": "ec2-user@bastion.example.com",
        "bastion_ssh_key": str(public_key),
        "availability_zones": ["us-east-1a", "us-east-1b"],
    }
    data["ami"]["ssh_user"] = "ubuntu"
    data["head"]["host_data"] = {}
    for group in (data["head"], *data["workers"]):  # the list form, so that a hostile entry has a list to go in
        group["instance_types"] = [group.pop("instance_type")]
    data["ssh_private_key"] = str(public_key.with_suffix(""))
    put(data, slot, value)
    return data


#: The spec's own string keys, and hostile names as host data keys (host data values: below).
SPEC_SLOTS = sorted((s for s in string_slots(spec_schema.SCHEMA) if s[-2:] != ("host_data", VALUE)), key=repr)


def test_the_spec_corpus_reaches_every_string_key():
    labels = {spec_label(slot) for slot in SPEC_SLOTS}
    for key in ("name", "owner", "ttl", "admin_cidrs[0]", "ami.ssm_parameter", "network.bastion", "workers[0].name"):
        assert key in labels, key
    for key in ("network.availability_zones[0]", "head.instance_types[0]", "workers[0].spot_fallback"):
        assert key in labels, key
    assert ("host_data", KEY) in SPEC_SLOTS and ("workers", 0, "host_data", KEY) in SPEC_SLOTS


@pytest.mark.parametrize("value", HOSTILE, ids=[repr(v) for v in HOSTILE])
def test_a_hostile_string_in_a_spec_key_is_refused(value: str, keys: tuple[Path, Path], tmp_path: Path) -> None:
    for slot in SPEC_SLOTS:
        data = spec_with(keys[0], slot, value)
        try:
            parse_spec(data, tmp_path / "spec.toml")
        except SpecError as error:
            label = spec_label(slot)
            assert any(label in problem for problem in error.problems), f"{label}: {error.problems}"
            assert all(": expected" in p or ": key " in p or "unknown key" in p for p in error.problems)
        else:
            assert slot in FREE_TEXT, f"{spec_label(slot)} = {value!r} was accepted"


#: Keys a spec's host data cannot hold: inventories/ec2.py sets them, or they name inventory hosts.
NOT_IN_A_SPEC = (*RESERVED_HOST_DATA, "storage_nfs_server", "storage_nfs_exports")


def host_data_slots() -> list[tuple[Any, ...]]:
    return sorted((s for s in string_slots(schema.SCHEMA) if s[0] not in NOT_IN_A_SPEC), key=repr)


@pytest.mark.parametrize("value", HOSTILE, ids=[repr(v) for v in HOSTILE])
def test_host_data_in_a_spec_gets_the_deploy_s_verdict(value: str, keys: tuple[Path, Path], tmp_path: Path) -> None:
    for slot in host_data_slots():
        host_data = copy.deepcopy(BASE)
        del host_data["storage_nfs_server"], host_data["storage_nfs_exports"]  # a spec cannot name a host
        host_data["ray_auth_token_file"] = str(tmp_path / "token")
        put(host_data, slot, value)
        data = base_spec(keys[0])
        data["workers"][0]["host_data"] = host_data
        deploy_verdict = validate_host("worker", host_data)
        try:
            parse_spec(data, tmp_path / "spec.toml")
        except SpecError as error:
            assert deploy_verdict, f"{slot}: the spec refused what the deploy takes: {error.problems}"
            assert any(f"workers[0].host_data.{slot[0]}" in p for p in error.problems), error.problems
            if slot[-1] in ("password", "access_key_id", "secret_access_key"):
                assert all(repr(value) not in p for p in error.problems), error.problems  # secrets are masked
        else:
            assert not deploy_verdict, f"{slot} = {value!r}: the spec took what the deploy refuses"
