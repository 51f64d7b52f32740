"""Re-runs after a run that died half-way: a file written, its follow-up not done.

Each follow-up (load the firewall, restart Docker, re-export NFS, reload systemd)
is planned from what is live on the host, not from whether the file changed in
this run: the file is already right, so only the follow-up is planned.
"""

from __future__ import annotations

import pytest

from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, NVIDIA_DAEMON_JSON, reference_cluster
from tests.plan.harness import run_deploy

RULESET = "/etc/rayrig/firewall.nft"
NFS = {
    "storage_nfs_server": HEAD,
    "storage_nfs_exports": [{"path": "/srv/shared"}],
    "storage_nfs_mounts": [{"server": "10.0.0.1", "export": "/srv/shared", "path": "/mnt/shared"}],
}


@pytest.mark.parametrize("digest", ["0123456789abcdef", None], ids=["older-ruleset", "no-digest"])
def test_table_loaded_from_another_ruleset_is_loaded_again(digest):
    """The file was written, the run died before `nft -f`: the table is the old one."""
    options = {CPU_WORKER: {"firewall": {"table_digest": digest}}}
    run = run_deploy(reference_cluster("debian12", "converged", options=options))
    assert run.changed_hosts == {
        CPU_WORKER: ["Firewall | Check rayrig's nftables ruleset", "Firewall | Load rayrig's nftables ruleset"]
    }
    assert run[CPU_WORKER].op("Load rayrig's nftables ruleset").commands == [f"nft -f {RULESET}"]
    assert RULESET not in run[CPU_WORKER].uploads  # the file is already right


@pytest.mark.parametrize("os_name", ["ubuntu22", "rocky9"])
def test_daemon_json_newer_than_the_running_docker_restarts_docker_only(os_name):
    """daemon.json was merged, the run died before Docker's restart."""
    run = run_deploy(reference_cluster(os_name, "converged", options={HEAD: {"daemon_json_unread": True}}))
    assert run.changed_hosts == {HEAD: ["Docker | Restart Docker for its new configuration"]}
    assert run[HEAD].commands == ["systemctl restart docker.service"]


def test_nvidia_runtime_registered_by_a_run_that_died_restarts_docker_once():
    """`nvidia-ctk runtime configure` wrote daemon.json, the run died before its restart:
    daemon.json has the runtime (nothing to register) and the Docker step restarts Docker."""
    options = {GPU_WORKER: {"daemon_json": NVIDIA_DAEMON_JSON, "daemon_json_unread": True}}
    run = run_deploy(reference_cluster("ubuntu22", "converged", options=options))
    assert run.changed_hosts == {GPU_WORKER: ["Docker | Restart Docker for its new configuration"]}
    assert run[GPU_WORKER].commands == ["systemctl restart docker.service"]
    assert not run[GPU_WORKER].has_op("Register the NVIDIA runtime")


def test_exports_newer_than_the_live_export_table_are_exported_again():
    """rayrig's exports file was written, the run died before `exportfs -ra`."""
    options = {HEAD: {"storage": {"exports_unread": True}}}
    run = run_deploy(reference_cluster("ubuntu22", "converged", data=NFS, options=options))
    assert run.changed_hosts == {HEAD: ["Shared storage | Re-export the NFS exports"]}
    assert run[HEAD].commands == ["exportfs -ra"]


def test_converged_nfs_server_does_not_export_again():
    run = run_deploy(reference_cluster("rocky9", "converged", data=NFS))
    assert run.changed_hosts == {}
    assert run[HEAD].has_op("Re-export the NFS exports")  # it did look


def test_ray_node_unit_newer_than_systemd_is_reloaded_only():
    """The ray-node unit was rewritten, the run died before `systemctl daemon-reload`."""
    run = run_deploy(reference_cluster("ubuntu24", "converged", options={GPU_WORKER: {"unit_need_reload": True}}))
    assert run.changed_hosts == {GPU_WORKER: ["Ray node | Reload systemd units"]}
    assert run[GPU_WORKER].commands == ["systemctl daemon-reload"]


@pytest.mark.parametrize("unit", ["rayrig-firewall.service", "nftables.service"])
def test_firewall_unit_or_drop_in_newer_than_systemd_is_reloaded_only(unit):
    options = {HEAD: {"firewall": {"need_reload": [unit]}}}
    run = run_deploy(reference_cluster("al2023", "converged", options=options))
    assert run.changed_hosts == {HEAD: ["Firewall | Reload systemd units for rayrig's firewall"]}
    assert run[HEAD].commands == ["systemctl daemon-reload"]


def test_firewall_removed_by_a_run_that_died_before_the_reload_is_reloaded():
    """firewall_enabled = False: the files are gone already, systemd still runs them."""
    options = {
        name: {"firewall": {"installed": False, "table_loaded": False, "need_reload": ["nftables.service"]}}
        for name in (HEAD, GPU_WORKER, CPU_WORKER)
    }
    hosts = reference_cluster("debian12", "converged", data={"firewall_enabled": False}, options=options)
    run = run_deploy(hosts)
    for name in (HEAD, GPU_WORKER, CPU_WORKER):
        assert run.changed_hosts[name] == ["Firewall | Reload systemd units without rayrig's firewall"]
        assert run[name].commands == ["systemctl daemon-reload"]


def test_fresh_host_restarts_docker_after_writing_daemon_json():
    """Debian's and Ubuntu's engine packages start Docker when installed, before daemon.json is
    written: a start would leave the new daemon.json unread, so Docker is restarted after it."""
    run = run_deploy(reference_cluster("ubuntu22", "fresh"))
    for host in run.hosts.values():
        names = [op.name for op in host.ops]
        assert host.op("Restart Docker for its new configuration").commands == ["systemctl restart docker.service"]
        assert (
            names.index("Base | Install base packages and the later steps' (docker.io, nftables)")
            < names.index("Docker | Merge rayrig's keys into daemon.json")
            < names.index("Docker | Restart Docker for its new configuration")
        )


def test_nfs_mount_unit_newer_than_systemd_is_mounted_again():
    """The mount unit was rewritten (new options), the run died before the remount."""
    options = {CPU_WORKER: {"storage": {"need_reload": ["mnt-shared.mount"]}}}
    run = run_deploy(reference_cluster("debian12", "converged", data=NFS, options=options))
    assert run.changed_hosts == {CPU_WORKER: ["Shared storage | Mount 10.0.0.1:/srv/shared at /mnt/shared"]}
    assert "systemctl daemon-reload" in run[CPU_WORKER].commands
    assert "timeout 120 systemctl restart mnt-shared.mount || {" in " ".join(run[CPU_WORKER].commands)
