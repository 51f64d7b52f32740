"""The firewall's pure parts: the rendered nftables ruleset (golden files, each one
accepted by ``nft -c -f``), its helpers, the unit, and the facts' parsers.

Regenerate the golden files after an intended change with

    RAYRIG_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_firewall.py

and review the diff.
"""

from __future__ import annotations

import difflib
import os
import random
import shutil
import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from deploy.contract import settings
from deploy.contract.ports import member_ports, port_ranges
from deploy.firewall import nftables
from deploy.firewall.members import InvalidMemberCidr, member_cidrs
from deploy.firewall.nftables import (
    DeploySource,
    OtherFirewalls,
    RayrigTable,
    UnresolvableNode,
    collapse_networks,
    conflict_message,
    drop_in_text,
    is_loopback,
    member_addresses,
    needs_load,
    parse_address,
    ports_match,
    render_ruleset,
    resolve_address,
    ruleset_digest,
    ssh_ports,
    unit_text,
)

GOLDEN = Path(__file__).resolve().parent / "golden" / "firewall"
UPDATE = os.environ.get("RAYRIG_UPDATE_GOLDEN") == "1"
PORTS = settings.defaults()["ray_ports"]
#: What the deploy opens to the members by default: Ray's ports and the exporters' (monitoring_ports).
MEMBER_PORTS = member_ports(settings.defaults())
SOURCE = "198.51.100.7"

#: Custom ports, all away from the defaults, for the one-node cluster.
CUSTOM_PORTS = {
    "gcs": 7379, "client_server": 11001, "dashboard": 9265, "dashboard_agent_grpc": 9266,
    "dashboard_agent_http": 53365, "node_manager": 7380, "object_manager": 7381, "runtime_env_agent": 7382,
    "metrics_export": 7383, "worker_min": 20000, "worker_max": 20999,
}  # fmt: skip

SCENARIOS = {
    # The default data on a head and two workers, deployed over SSH from SOURCE.
    "default-3-node": {
        "ray_ports": MEMBER_PORTS,
        "members": ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        "deploy_source": SOURCE,
    },
    # Admins given (one of them already holds the deploy's address), more ports open,
    # the dashboard on every interface, sshd on two ports.
    "admins-extra-dashboard": {
        "ray_ports": PORTS,
        "members": ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        "admin_cidrs": ["203.0.113.0/24", "192.0.2.15", "2001:db8:1::/48"],
        "extra_tcp_ports": [8888, "9000-9100", 8000],
        "ssh_ports": [22, 2222],
        "dashboard_host": "0.0.0.0",
        "deploy_source": "203.0.113.40",
    },
    # A worker reached over IPv6, deployed from an IPv6 address.
    "ipv6-member": {
        "ray_ports": PORTS,
        "members": ["10.0.0.1", "fd00:10::2", "10.0.0.3"],
        "deploy_source": "2001:db8::7",
    },
    # The head serves NFS to the cluster (storage_nfs_server): TCP 2049 joins the members' ports.
    "nfs-server": {
        "ray_ports": PORTS,
        "members": ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        "deploy_source": SOURCE,
        "nfs_server": True,
    },
    # Members reach Ray's ports and the exporters' and nothing else (firewall_members_all_ports = False).
    "ray-ports-only": {
        "ray_ports": MEMBER_PORTS,
        "members": ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        "deploy_source": SOURCE,
        "members_all_ports": False,
    },
    # Every node has a second NIC (InfiniBand, RoCE) on 192.168.100.0/24, one of them also on an
    # IPv6 fabric: their addresses are members too (firewall_member_cidrs).
    "member-cidrs": {
        "ray_ports": PORTS,
        "members": ["10.0.0.1", "10.0.0.2", "10.0.0.3"],
        "deploy_source": SOURCE,
        "member_cidrs": ["192.168.100.0/24", "192.168.100.7", "fd00:1b::/64"],
    },
    # One node, deployed locally (no SSH source), with its own ports.
    "one-node": {"ray_ports": CUSTOM_PORTS, "members": ["10.0.0.1"], "dashboard_host": "localhost"},
}


def rendered(name: str) -> str:
    return render_ruleset(**SCENARIOS[name])


# --- Golden files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_ruleset_matches_its_golden_file(name):
    path = GOLDEN / f"{name}.nft"
    text = rendered(name)
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with RAYRIG_UPDATE_GOLDEN=1 to create it"
    expected = path.read_text()
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True), text.splitlines(keepends=True), str(path), "rendered"
            )
        )
        pytest.fail(f"the rendered ruleset differs from {path} (RAYRIG_UPDATE_GOLDEN=1 rewrites it):\n{diff}")


def nft(*args: str, netns: bool = False) -> subprocess.CompletedProcess:
    """Run nft (in a network namespace of its own with ``netns``), or skip when it cannot run here."""
    if not shutil.which("nft"):
        pytest.skip("nft is not installed (apt-get install nftables)")
    command = ["nft", *args]
    if netns:
        if not shutil.which("unshare"):
            pytest.skip("unshare is not installed")
        command = ["unshare", "--net", "sh", "-c", " && ".join(" ".join(c) for c in args)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if "Operation not permitted" in proc.stderr or "unshare failed" in proc.stderr:
        pytest.skip(f"nft needs CAP_NET_ADMIN here: {proc.stderr.strip()}")
    return proc


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_golden_ruleset_is_accepted_by_nft(name):
    path = GOLDEN / f"{name}.nft"
    proc = nft("-c", "-f", str(path))
    assert proc.returncode == 0, f"nft -c -f {path}:\n{proc.stderr}"


def test_loading_replaces_rayrig_table_only_and_twice_is_the_same(tmp_path):
    """In a network namespace of its own: another table survives, and a second load
    (a re-run, the unit at boot) is one more atomic replacement, not an error."""
    path = GOLDEN / "admins-extra-dashboard.nft"
    proc = nft(
        ("nft", "add", "table", "ip", "filter"),
        ("nft", "add", "chain", "ip", "filter", "DOCKER"),
        ("nft", "-f", str(path)),
        ("nft", "-f", str(path)),
        ("nft", "list", "ruleset"),
        netns=True,
    )
    assert proc.returncode == 0, proc.stderr
    listing = proc.stdout
    assert "table ip filter" in listing and "chain DOCKER" in listing
    assert listing.count("table inet rayrig") == 1
    assert "policy drop;" in listing
    assert "ip saddr @members_v4 tcp dport @ray_ports accept" in listing
    assert "203.0.113.0/24" in listing


# --- What the ruleset opens, to whom ------------------------------------------------------------------


def rules(text: str) -> list[str]:
    """The rules of the input chain."""
    chain = text.split("chain input {", 1)[1]
    return [line.strip() for line in chain.splitlines() if line.strip() and not line.strip().startswith(("type", "}"))]


def set_elements(text: str, name: str) -> list[str]:
    body = text.split(f"set {name} {{", 1)[1].split("\n\t}", 1)[0]
    if "elements = {" not in body:
        return []
    inner = body.split("elements = {", 1)[1].split("}", 1)[0]
    return [line.split("#")[0].strip().rstrip(",") for line in inner.splitlines() if line.split("#")[0].strip()]


def test_default_ruleset_drops_by_default_and_keeps_ssh_and_replies():
    text = rendered("default-3-node")
    assert text.startswith("#!/usr/sbin/nft -f\n# Managed by rayrig")
    assert "\ntable inet rayrig {}\ndelete table inet rayrig\n\ntable inet rayrig {\n" in text
    assert "type filter hook input priority filter; policy drop;" in text
    chain = rules(text)
    assert chain[0].startswith('iif "lo" accept')
    assert chain[1].startswith("ct state invalid drop")
    assert chain[2].startswith("ct state established,related accept")
    assert any(r.startswith("meta l4proto ipv6-icmp accept") for r in chain)
    assert any(r.startswith("meta l4proto icmp accept") for r in chain)
    # No admin CIDRs: SSH from anywhere.
    assert any(r.startswith("tcp dport 22 accept") for r in chain)
    assert set_elements(text, "members_v4") == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert set_elements(text, "members_v6") == []
    assert set_elements(text, "admins_v4") == [SOURCE]


def test_every_ray_port_is_open_to_the_members_only():
    """Ray's ports, its metrics ports and the exporters' (they answer anyone who asks) are in the
    members' set, and no rule opens any of them to anyone else."""
    text = rendered("default-3-node")
    elements = set_elements(text, "ray_ports")
    singles = {str(p) for name, p in MEMBER_PORTS.items() if name not in ("worker_min", "worker_max", "dashboard")}
    assert {"6383", "44217", "44227", "9100", "9400"} <= singles
    assert set(elements) == singles | {f"{PORTS['worker_min']}-{PORTS['worker_max']}"}
    ray_rules = [r for r in rules(text) if "@ray_ports" in r]
    assert ray_rules == [
        'ip saddr @members_v4 tcp dport @ray_ports accept comment "Ray from the members"',
        'ip6 saddr @members_v6 tcp dport @ray_ports accept comment "Ray from the members"',
    ]
    for port in singles:
        assert not any(f"dport {port}" in r for r in rules(text))


def test_an_nfs_server_admits_nfs_from_the_members_only():
    text = rendered("nfs-server")
    assert "2049" in set_elements(text, "ray_ports")
    assert "2049" not in set_elements(rendered("default-3-node"), "ray_ports")
    assert not any("dport 2049" in r for r in rules(text))


def test_members_reach_every_port_unless_the_data_says_ray_ports_only():
    everything = [
        r
        for r in rules(rendered("default-3-node"))
        if r.startswith(("ip saddr @members_v4 accept", "ip6 saddr @members_v6 accept"))
    ]
    assert len(everything) == 2
    narrow = rules(rendered("ray-ports-only"))
    assert not [r for r in narrow if "@members" in r and "dport" not in r]
    assert [r for r in narrow if "@members_v4 tcp dport @ray_ports" in r]


def test_ports_come_from_ray_ports_only():
    text = rendered("one-node")
    for name, port in PORTS.items():
        assert str(port) not in text, name
    assert "7379,  # gcs" in text
    assert "20000-20999,  # worker_min-worker_max" in text or "20000-20999  # worker_min-worker_max" in text


def test_the_module_hard_codes_no_ray_port():
    source = Path(nftables.__file__).read_text()
    for name, port in PORTS.items():
        assert str(port) not in source, f"ray_ports[{name!r}] = {port} is written in deploy/nftables.py"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.1.1"])
def test_loopback_dashboard_is_not_opened(host):
    text = render_ruleset(ray_ports=PORTS, members=["10.0.0.1"], admin_cidrs=["203.0.113.0/24"], dashboard_host=host)
    assert str(PORTS["dashboard"]) not in set_elements(text, "ray_ports")
    assert not any(str(PORTS["dashboard"]) in r for r in rules(text))
    assert f"The dashboard (TCP {PORTS['dashboard']}) is not open" in text


def test_non_local_dashboard_is_open_to_admins_and_members():
    text = rendered("admins-extra-dashboard")
    dashboard = str(PORTS["dashboard"])
    assert dashboard in set_elements(text, "ray_ports")  # the members
    assert f'ip saddr @admins_v4 tcp dport {dashboard} accept comment "Ray dashboard from the admins"' in rules(text)
    assert f'ip6 saddr @admins_v6 tcp dport {dashboard} accept comment "Ray dashboard from the admins"' in rules(text)
    assert not any(r.startswith(f"tcp dport {dashboard}") for r in rules(text))  # not from anywhere


def test_admin_cidrs_restrict_ssh_and_keep_the_deploy_address():
    text = render_ruleset(ray_ports=PORTS, members=["10.0.0.1"], admin_cidrs=["203.0.113.0/24"], deploy_source=SOURCE)
    chain = rules(text)
    assert 'ip saddr @admins_v4 tcp dport 22 accept comment "SSH from the admins"' in chain
    assert 'ip6 saddr @admins_v6 tcp dport 22 accept comment "SSH from the admins"' in chain
    assert not any(r.startswith("tcp dport 22") for r in chain)
    # The deploy's own address stays admitted: it never locks itself out.
    assert set_elements(text, "admins_v4") == ["198.51.100.7", "203.0.113.0/24"]


def test_admin_networks_are_normalised_and_merged():
    text = rendered("admins-extra-dashboard")
    # 203.0.113.40 (the deploy) lies in 203.0.113.0/24: one element, no conflicting intervals.
    assert set_elements(text, "admins_v4") == ["192.0.2.15", "203.0.113.0/24"]
    assert set_elements(text, "admins_v6") == ["2001:db8:1::/48"]
    assert [str(n) for n in collapse_networks(["10.1.2.3/16", "10.1.0.0/17", "10.1.128.0/17"])] == ["10.1.0.0/16"]


def test_extra_ports_are_open_to_anyone():
    chain = rules(rendered("admins-extra-dashboard"))
    assert 'tcp dport { 8000, 8888, 9000-9100 } accept comment "firewall_extra_tcp_ports, from anywhere"' in chain
    assert not any("firewall_extra_tcp_ports" in r for r in rules(rendered("default-3-node")))


def test_ssh_on_two_ports():
    chain = rules(rendered("admins-extra-dashboard"))
    assert any(r.startswith("ip saddr @admins_v4 tcp dport { 22, 2222 } accept") for r in chain)


def test_ipv4_and_ipv6_members_are_kept_apart():
    text = rendered("ipv6-member")
    assert set_elements(text, "members_v4") == ["10.0.0.1", "10.0.0.3"]
    assert set_elements(text, "members_v6") == ["fd00:10::2"]
    assert set_elements(text, "admins_v6") == ["2001:db8::7"]
    assert set_elements(text, "admins_v4") == []


def test_without_a_deploy_address_the_admins_are_the_cidrs_only():
    text = rendered("one-node")
    assert set_elements(text, "admins_v4") == [] and set_elements(text, "admins_v6") == []
    assert "and no deploy address" in text


def test_output_does_not_depend_on_the_order_of_the_data():
    scenario = SCENARIOS["admins-extra-dashboard"]
    shuffled = dict(scenario)
    rng = random.Random(7)
    for key in ("members", "admin_cidrs", "extra_tcp_ports", "ssh_ports"):
        values = list(scenario[key])
        rng.shuffle(values)
        shuffled[key] = values
    shuffled["ray_ports"] = dict(reversed(list(PORTS.items())))
    shuffled["members"] = [*shuffled["members"], "10.0.0.2"]  # a duplicate (a host listed twice)
    assert render_ruleset(**shuffled) == render_ruleset(**scenario)


# --- Helpers --------------------------------------------------------------------------------------


def test_port_ranges_merge_overlaps_and_keep_neighbours():
    assert port_ranges([9000, "8000-8010", 8005, "9001-9001"]) == [(8000, 8010), (9000, 9000), (9001, 9001)]
    assert port_ranges(["100-200", "150-300"]) == [(100, 300)]
    assert ports_match([22]) == "22"
    assert ports_match(["5000-5000"]) == "5000"
    assert ports_match([2222, 22]) == "{ 22, 2222 }"


def test_is_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("LOCALHOST")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1") and not is_loopback("::")


def test_parse_address():
    assert str(parse_address("::ffff:192.0.2.7")) == "192.0.2.7"
    assert str(parse_address("fe80::1%eth0")) == "fe80::1"
    assert parse_address("head.lab") is None


def test_ssh_ports_add_the_connected_port():
    assert ssh_ports({}, None) == [22]
    assert ssh_ports({"ssh_port": 2222}, {"address": SOURCE, "port": 22}) == [22, 2222]
    assert ssh_ports({"ssh_port": 22}, {"address": SOURCE, "port": 22}) == [22]


def test_unit_loads_the_file_at_boot_and_removes_only_rayrig_table():
    text = unit_text()
    assert "Type=oneshot\n" in text and "RemainAfterExit=yes\n" in text
    assert "ExecStart=/usr/sbin/nft -f /etc/rayrig/firewall.nft\n" in text
    assert "ExecStop=-/usr/sbin/nft delete table inet rayrig\n" in text
    assert "Before=network-pre.target" in text and "Wants=network-pre.target\n" in text
    assert "WantedBy=multi-user.target\n" in text
    assert "flush ruleset" not in text and "/etc/nftables.conf" not in text


def test_check_command_removes_a_refused_file():
    assert (
        nftables.check_command() == "nft -c -f /etc/rayrig/firewall.nft || { rm -f /etc/rayrig/firewall.nft; exit 1; }"
    )


def test_conflict_message_names_host_firewall_and_the_way_out():
    message = conflict_message("gpu-7", {"ufw": "active"}, PORTS)
    assert message.startswith("host gpu-7: ufw is active")
    assert "sudo ufw disable" in message
    assert "firewall_enabled = False" in message
    assert f"{PORTS['gcs']}" in message and f"{PORTS['worker_min']}-{PORTS['worker_max']}" in message
    assert "Nothing was changed on any host." in message
    both = conflict_message("gpu-7", {"firewalld": "enabled", "ufw": "active"}, PORTS)
    assert "firewalld is enabled and ufw is active" in both
    assert "sudo systemctl disable --now firewalld" in both


# --- Members --------------------------------------------------------------------------------------


def fake_host(name: str, **data):
    return SimpleNamespace(name=name, data=SimpleNamespace(dict=lambda: data))


def test_member_addresses_resolve_names_here(monkeypatch):
    answers = {
        "head.lab": [(socket.AF_INET, 0, 0, "", ("10.0.0.1", 0))],
        "gpu.lab": [(socket.AF_INET, 0, 0, "", ("10.0.0.2", 0)), (socket.AF_INET6, 0, 0, "", ("fd00::2", 0, 0, 0))],
    }
    monkeypatch.setattr(socket, "getaddrinfo", lambda name, *a, **k: answers[name])
    hosts = [
        fake_host("head", ssh_hostname="head.lab"),
        fake_host("gpu", ray_node_ip="gpu.lab"),
        fake_host("cpu", ray_node_ip="10.0.0.3", ssh_hostname="cpu.lab"),  # ray_node_ip first: no lookup
        fake_host("10.0.0.1"),  # the same head twice
    ]
    assert member_addresses(hosts) == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::2"]


def test_unresolvable_member_is_a_clear_error(monkeypatch):
    def fail(name, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    with pytest.raises(UnresolvableNode) as error:
        resolve_address("gpu-9.lab", "gpu-9")
    message = str(error.value)
    assert message.startswith("host gpu-9: its node address 'gpu-9.lab'")
    assert "Name or service not known" in message
    assert "ray_node_ip" in message


# --- Facts ----------------------------------------------------------------------------------------


def test_deploy_source_fact():
    process = DeploySource().process
    assert process(["RAYRIG_SSH_CONNECTION=198.51.100.7 52814 10.0.0.1 22", "RAYRIG_SSH_CLIENT="]) == {
        "address": SOURCE,
        "port": 22,
    }
    assert process(["RAYRIG_SSH_CONNECTION=", "RAYRIG_SSH_CLIENT=2001:db8::7 40000 2222"]) == {
        "address": "2001:db8::7",
        "port": 2222,
    }
    assert process(["RAYRIG_SSH_CONNECTION=::ffff:192.0.2.1 1 ::ffff:10.0.0.1 22"])["address"] == "192.0.2.1"
    assert process(["RAYRIG_SSH_CONNECTION=", "RAYRIG_SSH_CLIENT="]) is None  # @local
    assert DeploySource.default() is None
    assert "SSH_CONNECTION" in DeploySource().command()


def test_rayrig_table_fact_reads_the_digest_the_loaded_table_carries():
    listing = ["table inet rayrig {", '\tcomment "rayrig ruleset 3f2a9c0d5e6b7a81"', "\tset members_v4 {", "\t}", "}"]
    assert RayrigTable().process(listing) == {"digest": "3f2a9c0d5e6b7a81"}
    assert RayrigTable().process(["table inet rayrig {", "}"]) == {"digest": None}  # loaded, no digest
    assert RayrigTable().process([]) is None  # not loaded, or no nft
    assert "nft list table inet rayrig" in RayrigTable().command()


def test_loaded_table_reads_back_the_digest_of_the_file_it_came_from(tmp_path):
    """In a network namespace of its own: what nft lists is what the fact parses."""
    path = GOLDEN / "member-cidrs.nft"
    proc = nft(("nft", "-f", str(path)), ("nft", "list", "table", "inet", "rayrig"), netns=True)
    assert proc.returncode == 0, proc.stderr
    loaded = RayrigTable().process(proc.stdout.splitlines())
    assert loaded == {"digest": ruleset_digest(path.read_text())}
    assert not needs_load(loaded, path.read_text())


def test_the_ruleset_is_loaded_unless_the_table_came_from_it():
    text = rendered("default-3-node")
    assert needs_load(None, text)  # not loaded
    assert needs_load({"digest": None}, text)  # loaded before tables carried a digest
    assert needs_load({"digest": ruleset_digest(rendered("nfs-server"))}, text)  # another ruleset
    assert not needs_load({"digest": ruleset_digest(text)}, text)


def test_digest_is_carried_in_the_table_and_covers_every_line():
    text = rendered("default-3-node")
    digest = ruleset_digest(text)
    assert f'table inet rayrig {{\n\tcomment "rayrig ruleset {digest}"\n' in text
    assert len(digest) == 16
    assert ruleset_digest(text.replace("10.0.0.3", "10.0.0.4")) != digest
    assert ruleset_digest(text.replace("policy drop", "policy accept")) != digest


def test_other_firewalls_fact():
    process = OtherFirewalls().process
    assert process([]) == {}
    assert process(["RAYRIG_FIREWALL=ufw active"]) == {"ufw": "active"}
    assert process(["RAYRIG_FIREWALL=ufw enabled", "RAYRIG_FIREWALL=firewalld active"]) == {
        "ufw": "enabled",
        "firewalld": "active",
    }


def test_member_cidrs_join_the_members_without_overlaps():
    text = rendered("member-cidrs")
    # 192.168.100.7 lies in 192.168.100.0/24: an interval set refuses overlapping elements.
    assert set_elements(text, "members_v4") == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "192.168.100.0/24"]
    assert set_elements(text, "members_v6") == ["fd00:1b::/64"]
    assert "firewall_member_cidrs" in text
    # They reach what the members reach: Ray's ports, and every port by default.
    assert "ip saddr @members_v4 tcp dport @ray_ports accept" in text
    assert "ip saddr @members_v4 accept" in text
    # A node address covered by a member network is listed once, as the network.
    covered = render_ruleset(ray_ports=PORTS, members=["10.0.0.1", "192.168.100.9"], member_cidrs=["192.168.100.0/24"])
    assert set_elements(covered, "members_v4") == ["10.0.0.1", "192.168.100.0/24"]


def test_member_cidrs_of_every_host_are_checked_and_joined():
    hosts = [
        fake_host("head", firewall_member_cidrs=["192.168.100.1"]),
        fake_host("gpu-1", firewall_member_cidrs=["192.168.100.2", "192.168.100.1"]),
        fake_host("cpu-1"),
    ]
    assert member_cidrs(hosts) == ["192.168.100.1", "192.168.100.2"]


@pytest.mark.parametrize(
    "value,expected",
    [
        ("192.168.1.300", 'expected an IP address or network such as "192.168.100.0/24"'),
        ("10.0.0.0/33", "expected an IP address or network"),
        ("0.0.0.0/0", "expected a network of the cluster's own NICs, /8 or narrower (IPv4)"),
        ("10.0.0.0/7", "/8 or narrower (IPv4)"),
        ("::/1", "/32 or narrower (IPv6)"),
    ],
)
def test_bad_member_cidrs_stop_the_deploy_naming_host_key_and_value(value, expected):
    hosts = [fake_host("head"), fake_host("gpu-1", firewall_member_cidrs=["192.168.100.2", value])]
    with pytest.raises(InvalidMemberCidr) as error:
        member_cidrs(hosts)
    message = str(error.value)
    assert message.startswith(f"host gpu-1: firewall_member_cidrs[1] = {value!r}: ")
    assert expected in message
    assert message.endswith("Nothing was changed on any host.")


def test_drop_in_loads_rayrig_table_again_after_nftables_service():
    text = drop_in_text()
    assert "[Service]\n" in text
    assert "ExecStartPost=-/usr/sbin/nft -f /etc/rayrig/firewall.nft\n" in text
    assert "ExecReload=-/usr/sbin/nft -f /etc/rayrig/firewall.nft\n" in text
    assert "ExecStop" not in text and "flush" not in text.split("[Service]")[1]


def test_members_must_be_addresses():
    with pytest.raises(ValueError, match="resolve names first"):
        render_ruleset(ray_ports=PORTS, members=["10.0.0.1", "gpu-1.lab"])


def test_the_image_mirror_port_is_open_to_the_members_only():
    text = nftables.render_ruleset(
        ray_ports=settings.defaults()["ray_ports"], members=["10.0.0.1", "10.0.0.2"], members_all_ports=False,
        mirror_port=5000,
    )  # fmt: skip
    assert "5000" in text.split("set ray_ports")[1].split("}")[0]
    assert "the image mirror (TCP 5000) from the cluster's members" in text
    without = nftables.render_ruleset(
        ray_ports=settings.defaults()["ray_ports"], members=["10.0.0.1"], members_all_ports=False
    )
    assert "5000" not in without.split("set ray_ports")[1].split("}")[0]
