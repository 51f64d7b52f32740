"""Growing and shrinking a deployed cluster: who changes what, and runs limited to some hosts.

A host joins: the members only update their firewall member sets (and the NFS exports) in
place, their ray-node containers keep running. A host marked ``ray_state = "absent"`` is
drained and stripped of what rayrig put there, and the others drop it. A run limited to some
hosts that would change the membership stops before any change, naming the hosts to add.
"""

from __future__ import annotations

import logging
import re

import pytest

from deploy.contract.schema import InventoryError
from deploy.host.secret_files import DIGEST_KEY_DIR
from deploy.ray import auth, membership
from deploy.ray.membership import MembershipChange
from deploy.storage import nfs
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, reference_cluster, reference_hosts, with_data
from tests.plan.harness import run_deploy
from tests.plan.test_plan_storage import ALL  # the shared storage of the storage plan tests

NEW = "@fake/worker-3"
NEW_HOST = (NEW, {"ray_role": "worker", "ray_node_ip": "10.0.0.4", "ray_num_cpus": 32})
RULESET = "/etc/rayrig/firewall.nft"
MEMBERS = ("Ray node", "Firewall", "Cluster membership")


def grown() -> list[tuple[str, dict]]:
    """The converged reference cluster, and a fresh fourth host added to its inventory."""
    return reference_cluster("ubuntu22", "converged") + reference_cluster("ubuntu22", "fresh", hosts=[NEW_HOST])


def members_of(ruleset: str) -> set[str]:
    """The elements of a ruleset's ``members_v4`` set."""
    lines = [line.strip() for line in ruleset.splitlines()]
    start = lines.index("set members_v4 {")
    end = lines.index("}", start)
    return {line.rstrip(",") for line in lines[start:end] if line[:1].isdigit()}


def test_a_new_host_joins_and_the_members_only_update_their_member_sets():
    run = run_deploy(grown())
    assert run[NEW].has_op("Start the Ray worker container")
    for name in (HEAD, GPU_WORKER, CPU_WORKER):
        changes = [op.name for op in run[name].changes]
        # the running node stays: nothing in its configuration depends on the other members
        assert not any("Start the Ray" in change or "Wait for the Ray" in change for change in changes), changes
        assert not run[name].commands_matching("replace-ray-node")
        # and on the head, Prometheus's targets and configuration name the new host (a reload, no restart)
        monitoring = ("Monitoring server",) if name == HEAD else ()
        assert [c for c in changes if not c.startswith(MEMBERS + monitoring)] == []
        kept = [op for op in run[name].ops if "Keep the rayrig-prometheus service" in op.name]
        assert not any(op.changed for op in kept)
        assert run[name].has_op("Load rayrig's nftables ruleset")
        assert "10.0.0.4" in members_of(run[name].uploads[RULESET])
        record = run[name].uploads[membership.MEMBERS_PATH]
        assert membership.parse_record(record.splitlines()) == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]


def test_a_limited_run_on_a_new_host_stops_and_names_the_hosts_to_include():
    with pytest.raises(MembershipChange) as caught:
        run_deploy(grown(), limit=[NEW])
    message = str(caught.value)
    assert f"{NEW} (10.0.0.4) is new to the cluster" in message
    assert f"member sets or NFS exports of {HEAD}, {GPU_WORKER}, {CPU_WORKER} do not follow" in message
    assert f"--limit {NEW} --limit {HEAD} --limit {GPU_WORKER} --limit {CPU_WORKER}" in message
    assert message.endswith("Nothing was changed on any host.")


def test_a_limited_run_of_a_member_and_a_new_host_names_the_members_left_out():
    with pytest.raises(MembershipChange) as caught:
        run_deploy(grown(), limit=[CPU_WORKER, NEW])
    message = str(caught.value)
    assert f"{NEW} (10.0.0.4) is new to the cluster" in message
    assert f"the members recorded on {CPU_WORKER} differ from this inventory's (joining: 10.0.0.4)" in message
    assert f"member sets or NFS exports of {HEAD}, {GPU_WORKER} do not follow" in message


def test_a_limited_run_that_keeps_the_members_goes_on():
    hosts = with_data(reference_cluster("ubuntu22", "converged"), CPU_WORKER, ray_num_cpus=4)
    run = run_deploy(hosts, limit=[CPU_WORKER])
    assert "--num-cpus=4" in run[CPU_WORKER].docker_create()
    assert set(run.changed_hosts) == {CPU_WORKER}


def test_a_limited_run_is_not_stopped_when_the_hosts_it_leaves_out_depend_on_no_member():
    data = {"firewall_enabled": False}
    hosts = reference_cluster("ubuntu22", "converged", data=data) + reference_cluster(
        "ubuntu22", "fresh", hosts=[NEW_HOST], data=data
    )
    run = run_deploy(hosts, limit=[NEW])
    assert run[NEW].has_op("Start the Ray worker container")


def test_an_absent_host_is_drained_and_removed_and_the_others_drop_it():
    hosts = with_data(reference_cluster("ubuntu22", "converged"), CPU_WORKER, ray_state="absent")
    run = run_deploy(hosts)
    gone = run[CPU_WORKER]
    assert gone.op("Drain the Ray node").commands == [
        c for c in gone.commands if " drain-ray-node ray-node @fake/worker-2 120" in c
    ]
    assert gone.commands_matching(r"^docker rm --force ray-node$")
    assert gone.commands_matching(r"^systemctl disable --now ray-node\.service")
    assert gone.has_op("Remove the ray-node systemd unit")
    assert gone.commands_matching(r"^nft delete table inet rayrig$")
    assert gone.has_op(f"Remove the Ray token \\({auth.NODE_TOKEN_DIR}\\)")
    assert gone.op("Remove the cluster's key of secret files' digests").commands == [f"rm -rf {DIGEST_KEY_DIR}"]
    assert gone.has_op("Remove the record of the cluster's members")
    # nothing of a member's deploy: no node started, no package, no ruleset written
    assert not gone.has_op("Start the Ray") and not gone.has_op("Install rayrig's nftables ruleset")
    assert not gone.commands_matching(r"^(apt-get|dnf|docker pull)")
    # it is drained before the others stop admitting it
    drain = gone.op("Drain the Ray node").step
    for name in (HEAD, GPU_WORKER):
        assert not run[name].commands_matching("replace-ray-node")
        monitoring = ("Monitoring server",) if name == HEAD else ()  # its targets drop the host (a reload)
        assert [c for c in (op.name for op in run[name].changes) if not c.startswith(MEMBERS + monitoring)] == []
        assert members_of(run[name].uploads[RULESET]) == {"10.0.0.1", "10.0.0.2"}
        assert run[name].op("Load rayrig's nftables ruleset").step > drain


@pytest.mark.parametrize("tls", ["off", "on"])
def test_removing_a_host_says_which_secrets_it_held_and_how_to_rotate_them(tls, caplog):
    hosts = with_data(reference_cluster("ubuntu22", "converged"), CPU_WORKER, ray_state="absent")
    with caplog.at_level(logging.WARNING, logger="pyinfra"):
        run_deploy([(name, {**data, "ray_tls": tls}) for name, data in hosts])
    said = [r.getMessage() for r in caplog.records if "leaves the cluster" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f'{CPU_WORKER} leaves the cluster (ray_state = "absent")')
    assert "`rayrig token rotate INVENTORY`" in said[0]
    assert ("`rayrig tls rotate INVENTORY`" in said[0]) == (tls == "on")


def test_a_host_still_marked_absent_changes_nothing_once_removed():
    present = reference_cluster("ubuntu22", "converged", hosts=reference_hosts()[:2])
    removed = reference_cluster("ubuntu22", "fresh", hosts=[reference_hosts()[2]], data={"ray_state": "absent"})
    run = run_deploy(present + removed)
    assert run.changed_hosts == {}


def test_a_limited_run_on_an_absent_host_stops_while_the_others_hold_it():
    hosts = with_data(reference_cluster("ubuntu22", "converged"), CPU_WORKER, ray_state="absent")
    leaves = rf'{CPU_WORKER} \(10.0.0.3\) leaves the cluster \(ray_state = "absent"\)'
    with pytest.raises(MembershipChange, match=leaves):
        run_deploy(hosts, limit=[CPU_WORKER])


def test_the_head_cannot_be_absent():
    hosts = with_data(reference_cluster("ubuntu22", "converged"), HEAD, ray_state="absent")
    with pytest.raises(InventoryError, match=rf"host {HEAD}: ray_state = 'absent': expected \"present\" on the head"):
        run_deploy(hosts)


def test_an_absent_host_loses_its_mounts_and_s3_credentials_and_the_nfs_server_stops_exporting_to_it():
    hosts = with_data(reference_cluster("ubuntu22", "converged", data=ALL), CPU_WORKER, ray_state="absent")
    run = run_deploy(hosts)
    gone = run[CPU_WORKER]
    for unit in ("mnt-shared.mount", "mnt-ml\\x2ddata.mount", "mnt-datasets.mount", "mnt-checkpoints.mount"):
        assert gone.has_op(f"Remove the storage unit {re.escape(unit)}"), unit
    assert gone.op("Remove S3 credentials").commands == [
        "rm -f /etc/rayrig/s3/passwd-checkpoints /etc/rayrig/s3/passwd-datasets"
    ]
    # the container that bind-mounts them is gone first
    assert gone.op("Stop and remove the ray-node container").step < gone.op("Remove the storage unit mnt-shared").step
    exports = run[HEAD].op("Write the NFS exports").uploads[nfs.EXPORTS_FILE]
    assert "10.0.0.3" not in exports and "10.0.0.2(" in exports
    assert run[HEAD].has_op("Re-export the NFS exports")
