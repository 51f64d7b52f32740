"""Grow and shrink a running cluster on the lab.

A fourth host joins with a plain deploy, and the three running nodes keep their containers; a
deploy limited to a fifth, new host stops before any change and names the hosts to include;
the fourth host marked ``ray_state = "absent"`` is drained and stripped, and the others drop
it. The lab and the cluster end as they began: three hosts, deployed from inventories/lab.py.
"""

from __future__ import annotations

import pytest

from cloud import lab as local
from cloud import ssh as remote
from deploy.ray import auth
from tests.e2e.labkit import LAB, LAB_INVENTORY, Lab, changed_operations, cluster_state, deploy, inventory_variant

pytestmark = pytest.mark.e2e
NO_CHECKS = ("--data", "checks_enabled=False")


def ray_node_containers(lab: Lab, h: dict) -> str:
    """The names of the host's ray-node containers ("" when there is none, or no Docker yet)."""
    command = "command -v docker >/dev/null || exit 0; sudo docker ps -a --filter name=ray-node --format '{{.Names}}'"
    return lab.sh(h, command).strip()


def present(lab: Lab, h: dict, test: str) -> bool:
    """Whether the shell ``test`` holds on the host (its exit status, not an assertion)."""
    status, _output = remote.run(lab.target(h), f"{test} >/dev/null 2>&1", timeout=60)
    return status == 0


def members_v4(lab: Lab, h: dict) -> str:
    return lab.sh(h, "sudo nft list set inet rayrig members_v4")


def test_grow_by_one_then_a_limited_run_on_a_new_host_stops_then_shrink(lab, baseline, tmp_path):
    done = False
    try:
        before = {h["address"]: lab.container_id(h) for h in lab.hosts}

        # Grow: a fourth host, and a plain deploy.
        grown = Lab(local.up(hosts=4, name=LAB))
        fourth = grown.hosts[3]
        result = deploy(LAB_INVENTORY, *NO_CHECKS)
        assert result.returncode == 0, "the deploy that adds a fourth host failed"
        state = cluster_state(lab, expect=4)
        assert sorted(n["ip"] for n in state["nodes"]) == sorted(h["address"] for h in grown.hosts), state
        after = {h["address"]: lab.container_id(h) for h in lab.hosts}
        assert after == before, "a running node was replaced when a host joined"
        for h in lab.hosts:
            assert fourth["address"] in members_v4(lab, h), f"{h['address']}'s member set lacks the new host"

        # A fifth host, and a deploy limited to it: it stops before any change.
        fifth = Lab(local.up(hosts=5, name=LAB)).hosts[4]
        limited = deploy(LAB_INVENTORY, "--limit", fifth["address"])
        output = limited.stdout + limited.stderr
        assert limited.returncode != 0, "a deploy limited to a new host went on"
        assert f"{fifth['address']} is new to the cluster" in output, output[-3000:]
        for h in grown.hosts:
            assert f"--limit {h['address']}" in output, f"the error does not name {h['address']}: {output[-3000:]}"
        assert ray_node_containers(grown, fifth) == "", "the limited run started something on the new host"
        assert {h["address"]: lab.container_id(h) for h in lab.hosts} == before

        # Shrink: the fifth host leaves the lab (it never joined), the fourth is marked absent.
        local.up(hosts=4, name=LAB)
        absent = inventory_variant(tmp_path / "absent.py", {"ray_state": "absent"}, only=fourth["address"])
        result = deploy(absent, *NO_CHECKS)
        assert result.returncode == 0, "the deploy that removes the fourth host failed"
        state = cluster_state(lab, expect=3)
        assert sorted(n["ip"] for n in state["nodes"]) == sorted(h["address"] for h in lab.hosts), state
        assert ray_node_containers(grown, fourth) == "", "the absent host still has a ray-node container"
        assert not present(grown, fourth, "sudo nft list table inet rayrig"), "the absent host keeps rayrig's table"
        assert not present(grown, fourth, f"sudo test -e {auth.NODE_TOKEN_PATH}"), "the absent host keeps the token"
        for h in lab.hosts:
            assert fourth["address"] not in members_v4(lab, h), f"{h['address']} still admits the absent host"
        assert {h["address"]: lab.container_id(h) for h in lab.hosts} == before

        # Still marked absent, a re-run changes nothing on any host.
        rerun = deploy(absent, *NO_CHECKS)
        assert rerun.returncode == 0, "a re-run with the host still marked absent failed"
        changes = changed_operations(rerun.stdout + rerun.stderr)
        assert all(n == 0 for n in changes.values()), changes
        done = True
    finally:
        local.up(hosts=3, name=LAB)
        if not done:  # put the three hosts' member sets back as inventories/lab.py has them
            deploy(LAB_INVENTORY, *NO_CHECKS)
