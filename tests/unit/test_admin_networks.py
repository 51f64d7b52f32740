"""Admin networks wider than /8 (IPv6: /16) count as "anywhere", in an inventory as in an EC2 spec."""

from __future__ import annotations

import pytest
from pyinfra.api import Inventory

from deploy.contract.schema import InventoryError, check_inventory, validate_cluster
from tests.unit.test_schema import head, worker

#: What the EC2 spec says of such a network (tests/cloud/test_spec.py), with the inventory's flag.
EXPECTED = (
    "your office's or VPN's CIDR (at most /{width} wide): SSH from the whole internet, or from a large part "
    "of it, needs firewall_allow_ssh_from_anywhere = True"
)


@pytest.mark.parametrize(
    "cidrs,refused",
    [
        (["0.0.0.0/1", "128.0.0.0/1"], [(0, "0.0.0.0/1", 8), (1, "128.0.0.0/1", 8)]),
        (["::/1"], [(0, "::/1", 16)]),
        (["198.51.100.0/24", "10.0.0.0/7"], [(1, "10.0.0.0/7", 8)]),
        (["0.0.0.0/0", "::/0"], [(0, "0.0.0.0/0", 8), (1, "::/0", 16)]),
        (["2001:db8::/15"], [(0, "2001:db8::/15", 16)]),
    ],
    ids=["two-halves", "v6-half", "a-slash-7", "anywhere", "v6-slash-15"],
)
def test_an_admin_network_wider_than_the_guard_is_refused_naming_host_key_and_value(cidrs, refused):
    problems = validate_cluster([head(), worker(1, firewall_admin_cidrs=cidrs)])
    assert [str(p) for p in problems] == [
        f"host worker-1: firewall_admin_cidrs[{i}] = {value!r}: expected {EXPECTED.format(width=width)}"
        for i, value, width in refused
    ]


def test_the_refusal_stops_the_deploy_before_any_operation():
    inventory = Inventory(([("@fake/head", {"ray_role": "head", "firewall_admin_cidrs": ["::/1"]})], {}))
    with pytest.raises(InventoryError) as error:
        check_inventory(inventory)
    message = str(error.value)
    assert "host @fake/head: firewall_admin_cidrs[0] = '::/1': expected your office's or VPN's CIDR" in message
    assert message.endswith("Nothing was changed on any host.")


@pytest.mark.parametrize(
    "cidrs", [["10.0.0.0/8", "2001:db8::/16"], ["198.51.100.7"], ["203.0.113.0/24", "2001:db8::/48"], []]
)
def test_admin_networks_up_to_the_guard_pass(cidrs):
    assert validate_cluster([head(firewall_admin_cidrs=cidrs), worker(1)]) == []


def test_a_wide_admin_network_passes_with_the_explicit_flag():
    wide = {"firewall_admin_cidrs": ["0.0.0.0/1", "128.0.0.0/1", "::/1"], "firewall_allow_ssh_from_anywhere": True}
    assert validate_cluster([head(**wide), worker(1, **wide)]) == []
