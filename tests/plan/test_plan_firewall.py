"""The firewall step's plans: nftables installed, the ruleset checked before it is
loaded, the unit enabled; nothing on a converged host; a clear stop beside ufw or
firewalld; and everything taken away when the firewall is switched off."""

from __future__ import annotations

import re
import shlex
import socket

import pytest

from deploy.firewall.members import InvalidMemberCidr
from deploy.firewall.nftables import FirewallConflict, UnresolvableNode
from tests.plan.fakes.fake_firewall import DEPLOY_SOURCE, expected_ruleset
from tests.plan.fakes.fakehosts import CPU_WORKER, FAMILY, GPU_WORKER, HEAD, OSES, cluster, reference_cluster, with_data
from tests.plan.harness import HostRun, run_deploy
from tests.plan.test_cli_fake import command_lines, operation_output, run_pyinfra

RULESET = "/etc/rayrig/firewall.nft"
UNIT = "/etc/systemd/system/rayrig-firewall.service"
DROP_IN = "/etc/systemd/system/nftables.service.d/rayrig.conf"
MEMBERS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
ALL = (HEAD, GPU_WORKER, CPU_WORKER)


def firewall_ops(host: HostRun) -> list[str]:
    return [op.name for op in host.ops if op.name.startswith("Firewall |")]


def firewall_changes(host: HostRun) -> list[str]:
    return [op.name for op in host.changes if op.name.startswith("Firewall |")]


def elements(ruleset: str, set_name: str) -> list[str]:
    body = ruleset.split(f"set {set_name} {{", 1)[1].split("\n\t}", 1)[0]
    inner = body.split("elements = {", 1)[1].split("}", 1)[0] if "elements = {" in body else ""
    return [line.split("#")[0].strip().rstrip(",") for line in inner.splitlines() if line.split("#")[0].strip()]


@pytest.fixture(scope="module", params=OSES)
def fresh(request):
    return request.param, run_deploy(reference_cluster(request.param))


def test_fresh_host_installs_nftables(fresh):
    os_name, run = fresh
    for name in ALL:
        commands = run[name].op("Base . Install base packages").commands  # in the base packages' transaction
        install = [shlex.split(c) for c in commands if " install " in f" {c} "]
        assert len(install) == 1, commands
        assert install[0][-1] == "nftables"
        assert ("apt-get" in install[0]) == (FAMILY[os_name] == "apt")
        assert ("dnf" in install[0]) == (FAMILY[os_name] == "dnf")


def test_fresh_host_gets_the_ruleset_checked_before_it_is_loaded(fresh):
    _os, run = fresh
    for name in ALL:
        host = run[name]
        put = host.op("Install rayrig's nftables ruleset")
        assert put.uploads == {RULESET: expected_ruleset({}, MEMBERS)}
        assert f"chmod 644 {RULESET}" in put.commands
        check = host.op("Check rayrig's nftables ruleset")
        load = host.op("Load rayrig's nftables ruleset")
        assert check.commands == [f"nft -c -f {RULESET} || {{ rm -f {RULESET}; exit 1; }}"]
        assert load.commands == [f"nft -f {RULESET}"]
        assert put.step < check.step < load.step


def test_fresh_host_enables_the_unit_that_loads_it_at_boot(fresh):
    _os, run = fresh
    for name in ALL:
        host = run[name]
        unit = host.op("Install the rayrig-firewall.service unit").uploads[UNIT]
        assert "ExecStart=/usr/sbin/nft -f /etc/rayrig/firewall.nft\n" in unit
        assert "ExecStop=-/usr/sbin/nft delete table inet rayrig\n" in unit
        assert "Before=network-pre.target" in unit and "WantedBy=multi-user.target" in unit
        assert host.op("Reload systemd units for rayrig's firewall").commands == ["systemctl daemon-reload"]
        assert host.op("Enable rayrig-firewall.service").commands == [
            "systemctl start rayrig-firewall.service",
            "systemctl enable rayrig-firewall.service",
        ]
        names = [op.name for op in host.ops]
        assert names.index("Firewall | Reload systemd units for rayrig's firewall") < names.index(
            "Firewall | Enable rayrig-firewall.service (loads the ruleset at boot)"
        )
        # The distribution's own nftables setup is left alone: only a drop-in of rayrig's is added.
        drop_in = host.op("Install the drop-in that loads rayrig's table after nftables.service").uploads[DROP_IN]
        assert f"ExecStartPost=-/usr/sbin/nft -f {RULESET}\n" in drop_in
        assert f"ExecReload=-/usr/sbin/nft -f {RULESET}\n" in drop_in
        assert not any("/etc/nftables.conf" in c or "systemctl" in c and "nftables" in c for c in host.commands)
        assert not any("flush ruleset" in c for c in host.commands)


def test_fresh_host_runs_the_guard_and_every_listening_service_wants_the_firewall(fresh):
    """Fail closed: the guard stops what wants rayrig-firewall.service while the table is gone, so each
    of rayrig's services that answers the network says it wants it."""
    _os, run = fresh
    for name in ALL:
        host = run[name]
        unit = host.op("Install the rayrig-firewall-guard.service unit").uploads[
            "/etc/systemd/system/rayrig-firewall-guard.service"
        ]
        assert (
            'ExecStart=/usr/local/lib/rayrig/firewall-guard.sh "inet rayrig" /etc/rayrig/firewall.nft '
            "rayrig-firewall.service 1 60\n" in unit
        )
        assert "Restart=always" in unit and "After=rayrig-firewall.service" in unit
        assert host.op("Install rayrig's firewall guard").uploads["/usr/local/lib/rayrig/firewall-guard.sh"]
        names = [op.name for op in host.ops]
        assert names.index("Firewall | Enable rayrig-firewall.service (loads the ruleset at boot)") < names.index(
            "Firewall | Keep rayrig's firewall guard running (rayrig's services stop while the table is not loaded)"
        )
        units = {path: text for path, text in host.uploads.items() if path.startswith("/etc/systemd/system/")}
        listening = [
            p
            for p in units
            if re.search(
                r"/(ray-node|rayrig-(node|gpu)-exporter|rayrig-prometheus|rayrig-grafana)\.service$|prometheus-node-exporter.*rayrig|node_exporter.*rayrig",
                p,
            )
        ]
        # the head: Ray, the node exporter (the package's, through rayrig's drop-in), Prometheus, Grafana
        assert len(listening) == {HEAD: 4, GPU_WORKER: 3, CPU_WORKER: 2}[name], sorted(units)
        for path in listening:
            assert "Wants=rayrig-firewall.service" in str(units[path]), path
    mirror = run_deploy(reference_cluster("ubuntu22", "fresh", data={"image_mirror": "head"}))
    drop_in = mirror[HEAD].uploads["/etc/systemd/system/docker-registry.service.d/rayrig.conf"]
    assert "Wants=rayrig-firewall.service" in drop_in and "ExecStartPre=+/bin/sh -c" in drop_in


def test_firewall_comes_after_storage_and_before_ray(fresh):
    _os, run = fresh
    host = run[HEAD]
    names = [op.name for op in host.ops]
    last_firewall = max(i for i, n in enumerate(names) if n.startswith("Firewall |"))
    first_firewall = min(i for i, n in enumerate(names) if n.startswith("Firewall |"))
    assert first_firewall > max(i for i, n in enumerate(names) if n.startswith(("Docker |", "Base |")))
    assert last_firewall < min(i for i, n in enumerate(names) if n.startswith("Ray node |"))


def test_ruleset_admits_the_members_and_the_deploy_address(fresh):
    _os, run = fresh
    ruleset = run[CPU_WORKER].uploads[RULESET]
    assert elements(ruleset, "members_v4") == MEMBERS
    assert elements(ruleset, "admins_v4") == [DEPLOY_SOURCE]
    assert f"the address this deploy connects from ({DEPLOY_SOURCE})" in ruleset
    assert "type filter hook input priority filter; policy drop;" in ruleset


@pytest.mark.parametrize("os_name", OSES)
def test_converged_host_plans_no_firewall_change(os_name):
    run = run_deploy(reference_cluster(os_name, "converged"))
    for name in ALL:
        assert firewall_ops(run[name]), "the step did look"
        assert firewall_changes(run[name]) == []
        assert not any("nft" in c for c in run[name].commands)


def test_deploy_address_is_admitted_to_ssh_with_admin_cidrs():
    data = {"firewall_admin_cidrs": ["203.0.113.0/24"]}
    run = run_deploy(reference_cluster("ubuntu24", data=data))
    ruleset = run[HEAD].uploads[RULESET]
    assert elements(ruleset, "admins_v4") == [DEPLOY_SOURCE, "203.0.113.0/24"]
    assert '\t\tip saddr @admins_v4 tcp dport 22 accept comment "SSH from the admins"\n' in ruleset
    assert "\t\ttcp dport 22 accept" not in ruleset  # not from anywhere


def test_ssh_port_from_data_and_from_the_connection_are_both_open():
    """sshd on 2222 (ssh_port); the head is reached through a NAT that maps 2222 to its port 22."""
    run = run_deploy(
        reference_cluster(
            "debian12",
            host_data={HEAD: {"ssh_port": 2222}, CPU_WORKER: {"ssh_port": 2222}},
            options={HEAD: {"firewall": {"ssh_server_port": 22}}, CPU_WORKER: {"firewall": {"ssh_server_port": 2222}}},
        )
    )
    assert "\t\ttcp dport { 22, 2222 } accept" in run[HEAD].uploads[RULESET]
    assert "\t\ttcp dport 2222 accept" in run[CPU_WORKER].uploads[RULESET]
    assert "\t\ttcp dport 22 accept" in run[GPU_WORKER].uploads[RULESET]


def test_ipv6_deploy_address_goes_to_the_ipv6_admins():
    run = run_deploy(reference_cluster("rocky9", options={HEAD: {"firewall": {"deploy_source": "2001:db8::7"}}}))
    ruleset = run[HEAD].uploads[RULESET]
    assert elements(ruleset, "admins_v6") == ["2001:db8::7"]
    assert elements(ruleset, "admins_v4") == []


def test_without_ssh_no_deploy_address_is_added():
    run = run_deploy(reference_cluster("ubuntu22", firewall={"deploy_source": None}))
    ruleset = run[HEAD].uploads[RULESET]
    assert elements(ruleset, "admins_v4") == [] and elements(ruleset, "admins_v6") == []


def test_member_names_are_resolved_on_the_operator_machine(monkeypatch):
    real = socket.getaddrinfo
    answers = {"gpu-1.lab": [(socket.AF_INET6, 0, 0, "", ("fd00::2", 0, 0, 0))]}
    monkeypatch.setattr(
        socket, "getaddrinfo", lambda name, *a, **k: answers[name] if name in answers else real(name, *a, **k)
    )
    hosts = with_data(reference_cluster("ubuntu22"), GPU_WORKER, ray_node_ip=None, ssh_hostname="gpu-1.lab")
    run = run_deploy(hosts)
    ruleset = run[HEAD].uploads[RULESET]
    assert elements(ruleset, "members_v4") == ["10.0.0.1", "10.0.0.3"]
    assert elements(ruleset, "members_v6") == ["fd00::2"]


def test_unresolvable_member_stops_the_deploy(monkeypatch):
    def fail(name, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    hosts = with_data(reference_cluster("ubuntu22"), GPU_WORKER, ray_node_ip=None, ssh_hostname="gpu-1.lab")
    with pytest.raises(UnresolvableNode, match=f"host {GPU_WORKER}: its node address 'gpu-1.lab'"):
        run_deploy(hosts)


@pytest.mark.parametrize(
    "other,state,advice",
    [
        ("ufw", "active", "sudo ufw disable"),
        ("ufw", "enabled", "sudo ufw disable"),
        ("firewalld", "active", "sudo systemctl disable --now firewalld"),
    ],
)
def test_another_firewall_stops_the_deploy_before_any_change(other, state, advice):
    hosts = reference_cluster(
        "ubuntu22" if other == "ufw" else "rocky9", options={CPU_WORKER: {"firewall": {other: state}}}
    )
    with pytest.raises(FirewallConflict) as error:
        run_deploy(hosts)
    message = str(error.value)
    assert message.startswith(f"host {CPU_WORKER}: {other} is {state}")
    assert advice in message
    assert "set firewall_enabled = False for this host and open Ray's ports (ray_ports: TCP 6379, " in message
    assert "6379" in message and "10002-10999" in message
    assert "Nothing was changed on any host." in message


def test_another_firewall_is_left_alone_when_rayrig_firewall_is_off():
    hosts = reference_cluster(
        "ubuntu22", data={"firewall_enabled": False}, options={CPU_WORKER: {"firewall": {"ufw": "active"}}}
    )
    run = run_deploy(hosts)
    assert firewall_ops(run[CPU_WORKER]) == []


@pytest.mark.parametrize("state", ["fresh", "converged"])
def test_firewall_off_plans_nothing_where_it_never_was(state):
    run = run_deploy(reference_cluster("al2023", state, data={"firewall_enabled": False}))
    for name in ALL:
        host = run[name]
        assert firewall_ops(host) == []
        assert not any("nft" in c or "rayrig-firewall" in c for c in host.commands)
        assert RULESET not in host.uploads
    if state == "converged":
        assert run.changed_hosts == {}


@pytest.mark.parametrize("os_name", ["ubuntu22", "rocky9"])
def test_turning_the_firewall_off_removes_it(os_name):
    hosts = [(n, {**d, "firewall_enabled": False}) for n, d in reference_cluster(os_name, "converged")]
    run = run_deploy(hosts)
    for name in ALL:
        host = run[name]
        assert firewall_changes(host) == [
            # the guard first: it would stop rayrig's services on finding no table
            "Firewall | Stop and disable rayrig-firewall-guard.service",
            "Firewall | Remove the rayrig-firewall-guard.service unit",
            "Firewall | Remove rayrig's firewall guard",
            "Firewall | Reload systemd units without the firewall guard",
            "Firewall | Delete rayrig's nftables table",
            "Firewall | Stop and disable rayrig-firewall.service",
            "Firewall | Remove the rayrig-firewall.service unit",
            "Firewall | Remove rayrig's drop-in for nftables.service",
            "Firewall | Reload systemd units without rayrig's firewall",
            "Firewall | Remove rayrig's nftables ruleset",
        ]
        assert host.op("Delete rayrig's nftables table").commands == ["nft delete table inet rayrig"]
        assert host.op("Stop and disable rayrig-firewall.service").commands == [
            "systemctl stop rayrig-firewall.service",
            "systemctl disable rayrig-firewall.service",
        ]
        assert host.op("Remove the rayrig-firewall.service unit").commands == [f"rm -f {UNIT}"]
        assert host.op("Remove rayrig's drop-in for nftables.service").commands == [f"rm -f {DROP_IN}"]
        assert host.op("Remove rayrig's nftables ruleset").commands == [f"rm -f {RULESET}"]
        assert not any("apt-get" in c or "dnf" in c for c in host.commands)  # nftables itself stays
    assert set(run.changed_hosts) == set(ALL)
    # Beside the firewall, only the units move: they no longer want rayrig's firewall. The exporters,
    # whose flags stay, are not restarted.
    others = {n for names in run.changed_hosts.values() for n in names if not n.startswith("Firewall |")}
    exporters = {n for n in others if n.startswith("Monitoring exporters |")}
    assert others - exporters == {
        "Ray node | Install the ray-node systemd unit",
        "Ray node | Reload systemd units",
        *(f"Monitoring server | {what} rayrig-{c}{unit}" for c in ("prometheus", "grafana")
          for what, unit in (("Install the", " systemd unit"), ("Reload systemd units for", ""))),
    }  # fmt: skip
    assert exporters and all(
        re.search(r"\| (Install the .* unit|Make .* listen|Reload systemd units)", n) for n in exporters
    )
    for name in ALL:
        unit = run[name].uploads["/etc/systemd/system/ray-node.service"]
        assert "rayrig-firewall.service" not in unit and "nft list table" not in unit
        assert not run[name].commands_matching("^docker (create|rm)")


def test_turned_off_firewall_with_its_table_already_gone_removes_the_rest():
    options = {HEAD: {"firewall": {"table_loaded": False}}}
    hosts = [
        (n, {**d, "firewall_enabled": False}) for n, d in reference_cluster("debian12", "converged", options=options)
    ]
    run = run_deploy(hosts)
    assert not run[HEAD].has_op("Delete rayrig's nftables table")
    assert run[HEAD].has_op("Stop and disable rayrig-firewall.service")
    assert run[HEAD].op("Remove rayrig's nftables ruleset").commands == [f"rm -f {RULESET}"]


def test_changed_admin_cidrs_rewrite_and_reload_the_ruleset_only():
    hosts = reference_cluster("ubuntu24", "converged")
    changed = [(n, {**d, "firewall_admin_cidrs": ["203.0.113.0/24"]}) for n, d in hosts]
    run = run_deploy(changed)
    for name in ALL:
        assert run.changed_hosts[name] == [
            "Firewall | Install rayrig's nftables ruleset",
            "Firewall | Check rayrig's nftables ruleset",
            "Firewall | Load rayrig's nftables ruleset",
        ]
        assert "203.0.113.0/24" in run[name].uploads[RULESET]
        assert not any(c.startswith("systemctl") for c in run[name].commands)  # no restart: nft -f replaced it


def test_table_missing_on_a_converged_host_is_loaded_again():
    """Someone flushed the ruleset: the file is as it should be, but the table is not loaded."""
    run = run_deploy(
        reference_cluster("debian12", "converged", options={GPU_WORKER: {"firewall": {"table_loaded": False}}})
    )
    assert run.changed_hosts == {
        GPU_WORKER: ["Firewall | Check rayrig's nftables ruleset", "Firewall | Load rayrig's nftables ruleset"]
    }


def test_one_node_cluster_admits_itself():
    hosts = cluster("ubuntu22", hosts=[(HEAD, {"ray_role": "head", "ray_node_ip": "10.0.0.1"})])
    ruleset = run_deploy(hosts)[HEAD].uploads[RULESET]
    assert elements(ruleset, "members_v4") == ["10.0.0.1"]


def test_pyinfra_prints_the_conflict_and_exits_non_zero_before_any_operation(tmp_path):
    inventory = tmp_path / "ufw_inventory.py"
    inventory.write_text(
        "from tests.plan.fakes.fakehosts import cluster\n"
        "hosts = cluster('ubuntu22', 'fresh', options={'@fake/worker-2': {'firewall': {'ufw': 'active'}}})\n"
    )
    code, output = run_pyinfra(inventory=str(inventory))
    assert code != 0
    assert "host @fake/worker-2: ufw is active" in output, output[-3000:]
    assert "sudo ufw disable" in output
    assert not operation_output(output)
    commands = [cmd for _host, cmd in command_lines(output)]
    assert not any(cmd.startswith(("apt-get", "nft ", "systemctl ", "docker ")) for cmd in commands)


def test_member_cidrs_of_one_host_are_members_on_every_host():
    """A GPU worker's InfiniBand address: NCCL from it reaches every node."""
    hosts = with_data(reference_cluster("ubuntu22"), GPU_WORKER, firewall_member_cidrs=["192.168.100.2"])
    run = run_deploy(hosts)
    for name in ALL:
        assert elements(run[name].uploads[RULESET], "members_v4") == [*MEMBERS, "192.168.100.2"]


def test_a_bad_member_cidr_stops_the_deploy_before_any_change():
    hosts = with_data(reference_cluster("ubuntu22"), CPU_WORKER, firewall_member_cidrs=["0.0.0.0/0"])
    with pytest.raises(InvalidMemberCidr) as error:
        run_deploy(hosts)
    assert str(error.value).startswith(f"host {CPU_WORKER}: firewall_member_cidrs[0] = '0.0.0.0/0': expected")
    assert str(error.value).endswith("Nothing was changed on any host.")
