"""``rayrig dashboard``: the tunnel it opens, from an inventory's head."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cloud.ec2 import inventory as ec2_inventory
from deploy.contract import settings
from deploy.contract.paths import repo_root
from deploy.ray import auth
from rayrig import dashboard
from rayrig.cli import main
from rayrig.inventory import OperateError, inventory_of

HEAD = {"name": "10.0.0.1", "data": {"ray_role": "head", "ssh_user": "root", "ssh_key": "/keys/id", "ssh_port": 2222}}
WORKER = {"name": "10.0.0.2", "data": {"ray_role": "worker"}}


def plan_of(hosts: list[dict]) -> dashboard.TunnelPlan:
    return dashboard.tunnel_plan(inventory_of("inventories/test.py", hosts))


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path))
    return tmp_path


def test_the_tunnel_goes_to_the_heads_loopback_dashboard_with_the_inventorys_ssh_settings():
    plan = plan_of([WORKER, HEAD])
    assert dashboard.ssh_command(plan, 18265) == [
        "ssh", "-v", "-N", "-o", "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=30",
        "-L", "127.0.0.1:18265:127.0.0.1:8265",
        "-L", "127.0.0.1:9090:127.0.0.1:9090", "-L", "127.0.0.1:3000:127.0.0.1:3000",  # Prometheus, Grafana
        "-i", "/keys/id", "-o", "IdentitiesOnly=yes",
        "-o", "StrictHostKeyChecking=accept-new", "-p", "2222", "-l", "root", "--", "10.0.0.1",
    ]  # fmt: skip
    assert plan.destination == "root@10.0.0.1"


def test_a_dashboard_bound_to_one_address_is_reached_there_and_its_port_comes_from_ray_ports():
    ports = {**settings.defaults()["ray_ports"], "dashboard": 9265}
    data = {**HEAD["data"], "ssh_hostname": "192.0.2.10", "ray_dashboard_host": "192.0.2.10", "ray_ports": ports}
    head = {"name": "gpu-head", "data": data}
    plan = plan_of([head])
    assert "127.0.0.1:9265:192.0.2.10:9265" in dashboard.ssh_command(plan, 9265)
    assert dashboard.ssh_command(plan, 9265)[-3:] == ["root", "--", "192.0.2.10"]


def test_the_banner_names_the_token_file_and_never_the_token(state):
    path = auth.ensure_token(settings.merge({}))
    plan = plan_of([HEAD, WORKER])
    text = dashboard.banner(plan, 8265)
    assert 'Dashboard of cluster "cluster": http://127.0.0.1:8265' in text
    assert str(path) in text
    assert auth.read_token(path) not in text
    no_auth = {**HEAD["data"], "ray_auth": "none", "ray_auth_allow_none": True}
    assert "token" not in dashboard.banner(plan_of([{**HEAD, "data": no_auth}]), 1)


@pytest.mark.parametrize("hosts", [[WORKER], [HEAD, {**HEAD, "name": "10.0.0.3"}]])
def test_an_inventory_without_exactly_one_head_is_an_error(hosts):
    with pytest.raises(OperateError, match="exactly one"):
        plan_of(hosts)


def test_a_missing_inventory_is_a_usage_error(capsys):  # exit 2, like rayrig deploy and check
    assert main(["dashboard", "no/such/inventory.py"]) == 2
    assert "no/such/inventory.py: no such inventory file" in capsys.readouterr().err


def test_an_inventory_that_yields_no_host_is_a_usage_error(tmp_path, capsys):
    empty = tmp_path / "empty.py"
    empty.write_text("heads = []\n")
    assert main(["dashboard", str(empty)]) == 2
    assert f"{empty}: the inventory yields no host" in capsys.readouterr().err


def test_print_command_loads_the_inventory_through_pyinfra(capsys):
    assert main(["dashboard", "tests/plan/fake_inventory.py", "--print-command", "--local-port", "18000"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.endswith(
        "-L 127.0.0.1:18000:127.0.0.1:8265 -L 127.0.0.1:9090:127.0.0.1:9090 "
        "-L 127.0.0.1:3000:127.0.0.1:3000 -o StrictHostKeyChecking=accept-new -- @fake/head"
    )


# --- How ssh reaches the head: pyinfra's ssh_* data, a bastion through ssh_config_file -----------------


def resolved(options: list[str]) -> dict[str, str]:
    """What OpenSSH itself makes of ``ssh OPTIONS`` (``ssh -G``: the configuration, no connection)."""
    result = subprocess.run(["ssh", "-G", *options], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    seen: dict[str, str] = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition(" ")
        seen[key] = f"{seen[key]} {value}" if key in seen and key == "identityfile" else value
    return seen


@pytest.fixture
def keys(tmp_path):
    for name in ("head_key", "bastion_key", "known hosts"):
        (tmp_path / name).write_text("")
    return tmp_path


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's ssh")
def test_a_head_behind_a_bastion_is_reached_through_the_ssh_config_file_that_cloud_up_writes(keys, monkeypatch):
    monkeypatch.setattr(ec2_inventory, "private_state_dir", lambda: keys)
    config = ec2_inventory.write_ssh_config("sprint", "ec2-user@bastion.example.com:2022", ["10.0.1.5"],
                                            str(keys / "bastion_key"))  # fmt: skip
    data = {"ray_role": "head", "ssh_user": "ubuntu", "ssh_key": str(keys / "head_key"), "ssh_config_file": str(config)}
    options = dashboard.ssh_options("10.0.1.5", data)
    assert options[-2:] == ["--", "10.0.1.5"] and options[options.index("-F") + 1] == str(config)
    seen = resolved(options)
    assert seen["proxyjump"] == "ec2-user@bastion.example.com:2022"
    assert (seen["user"], seen["hostname"], seen["port"]) == ("ubuntu", "10.0.1.5", "22")
    assert str(keys / "head_key") in seen["identityfile"]
    bastion = resolved(["-F", str(config), "bastion.example.com"])  # the hop: ssh passes -F on to it
    assert (bastion["user"], bastion["port"]) == ("ec2-user", "2022")
    assert bastion["identityfile"] == str(keys / "bastion_key")


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's ssh")
def test_the_port_user_key_known_hosts_and_host_key_policy_reach_ssh_as_pyinfra_uses_them(keys):
    data = {
        "ssh_hostname": "head.lab.example", "ssh_user": "rayrig", "ssh_port": 2222, "ssh_key": str(keys / "head_key"),
        "ssh_known_hosts_file": str(keys / "known hosts"), "ssh_strict_host_key_checking": "yes",
        "ssh_allow_agent": False, "ssh_look_for_keys": False,
    }  # fmt: skip
    seen = resolved(dashboard.ssh_options("gpu-head", data))
    assert (seen["hostname"], seen["user"], seen["port"]) == ("head.lab.example", "rayrig", "2222")
    assert seen["identityfile"].split()[0] == str(keys / "head_key")
    assert seen["userknownhostsfile"] == str(keys / "known hosts")
    assert seen["stricthostkeychecking"] == "true"  # ssh -G prints "yes" as true
    assert (seen["identitiesonly"], seen["identityagent"]) == ("yes", "none")
    off = resolved(dashboard.ssh_options("gpu-head", {"ssh_strict_host_key_checking": "off"}))
    assert off["stricthostkeychecking"] == "accept-new"  # host keys are always checked: a changed one is refused
    default = resolved(dashboard.ssh_options("gpu-head", {}))
    assert default["stricthostkeychecking"] == "accept-new"  # pyinfra's default, not OpenSSH's "ask"


def test_relative_files_in_the_inventory_are_the_repository_roots_as_for_a_deploy():
    options = dashboard.ssh_options("h", {"ssh_key": "keys/id", "ssh_config_file": "~/cfg"})
    assert options[options.index("-i") + 1] == str(repo_root() / "keys/id")
    assert options[options.index("-F") + 1] == str(Path("~/cfg").expanduser())


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"ssh_port": "22; rm"}, "host gpu-head: ssh_port = '22; rm': expected a port number 1-65535"),
        ({"ssh_port": 70000}, "ssh_port = 70000: expected a port number"),
        ({"ssh_user": "-oProxyCommand=x y"}, "ssh_user = '-oProxyCommand=x y': expected a user name"),
        ({"ssh_strict_host_key_checking": "maybe"}, "ssh_strict_host_key_checking = 'maybe': expected one of yes"),
        ({"ssh_known_hosts_file": 'a"b'}, "ssh_known_hosts_file = 'a\"b': expected the path of a file"),
        ({"ssh_hostname": "a b"}, "ssh_hostname = 'a b': expected a host name or address"),
    ],
)
def test_ssh_settings_ssh_cannot_take_are_errors_naming_host_key_and_value(data, words):
    with pytest.raises(OperateError, match=re.escape(words)):
        dashboard.ssh_options("gpu-head", data)


def test_a_host_name_that_looks_like_an_option_stays_the_destination():
    assert dashboard.ssh_options("-oProxyCommand=touch", {})[-2:] == ["--", "-oProxyCommand=touch"]


# --- What the user reads: the export lines; ssh's failure -------------------------------------------------------


def test_the_banner_ends_with_the_export_lines_a_local_ray_client_needs(state):
    path = auth.ensure_token(settings.merge({}))
    plan = plan_of([HEAD])
    lines = dashboard.banner(plan, 18265).splitlines()
    assert lines[-3:] == [
        "export RAY_ADDRESS=http://127.0.0.1:18265",
        "export RAY_AUTH_MODE=token",
        f"export RAY_AUTH_TOKEN_PATH={path}",
    ]
    assert Path(lines[-1].split("=", 1)[1]).is_absolute()
    none = plan_of([{**HEAD, "data": {**HEAD["data"], "ray_auth": "none", "ray_auth_allow_none": True}}])
    assert dashboard.export_lines(none, 1) == ["export RAY_ADDRESS=http://127.0.0.1:1"]


def test_a_token_path_with_spaces_is_quoted_in_its_export_line(state):
    odd = state / "my tokens" / "t"
    plan = plan_of([{**HEAD, "data": {**HEAD["data"], "ray_auth_token_file": str(odd)}}])
    assert dashboard.export_lines(plan, 1)[-1] == f"export RAY_AUTH_TOKEN_PATH='{odd}'"


FAILING_SSH = """#!/bin/sh
echo "ssh: connect to host 10.9.9.9 port 22: Connection refused" >&2
exit 255
"""


def test_ssh_that_fails_ends_the_command_with_1_and_ssh_s_words(tmp_path, monkeypatch, capsys):
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "ssh"
    fake.write_text(FAILING_SSH)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    inventory = tmp_path / "inventory.py"
    inventory.write_text('heads = [("10.9.9.9", {"ray_role": "head", "ssh_user": "ubuntu"})]\n')
    assert main(["dashboard", str(inventory), "--local-port", str(dashboard.free_port())]) == 1
    err = capsys.readouterr().err
    assert (
        "rayrig dashboard: cannot open the tunnel to the dashboard: ssh to ubuntu@10.9.9.9 exited with status 255: "
        in err
    )
    assert "Connection refused" in err
    assert "Traceback" not in err


def test_the_banner_says_when_this_machine_has_no_copy_of_the_token_yet(state):
    plan = plan_of([HEAD])
    assert "which this machine has no copy of yet" in dashboard.banner(plan, 8265)
    auth.ensure_token(settings.merge({}))
    assert "which this machine has no copy of yet" not in dashboard.banner(plan, 8265)


# --- Prometheus and Grafana of the monitoring host ---------------------------------------------------------------


def with_data(host: dict, **data: object) -> dict:
    return {**host, "data": {**host["data"], **data}}


def test_prometheus_and_grafana_on_the_head_go_through_the_same_ssh_and_the_banner_names_them():
    plan = plan_of([with_data(HEAD, monitoring_prometheus_port=9091, monitoring_grafana_port=3001), WORKER])
    command = dashboard.ssh_command(plan, 8265)
    assert command.count("-L") == 3 and command[0] == "ssh"  # one ssh process
    assert command[command.index("-L", 8) : command.index("-L", 8) + 4] == [
        "-L", "127.0.0.1:9091:127.0.0.1:9091", "-L", "127.0.0.1:3001:127.0.0.1:3001"]  # fmt: skip
    lines = dashboard.banner(plan, 8265).splitlines()
    assert lines[0] == 'Dashboard of cluster "cluster": http://127.0.0.1:8265'
    assert "Prometheus: http://127.0.0.1:9091" in lines and "Grafana: http://127.0.0.1:3001" in lines
    tunnel = "The tunnel runs over SSH to root@10.0.0.1 until Ctrl-C."
    assert lines.index("Grafana: http://127.0.0.1:3001") < lines.index(tunnel)


def test_without_grafana_only_prometheus_is_forwarded_and_without_monitoring_neither():
    plan = plan_of([with_data(HEAD, monitoring_grafana=False)])
    assert [f.name for f in plan.forwards] == ["Prometheus"]
    assert "Grafana" not in dashboard.banner(plan, 8265) and "127.0.0.1:3000:" not in " ".join(
        dashboard.ssh_command(plan, 8265))  # fmt: skip
    off = plan_of([with_data(HEAD, monitoring_enabled=False)])
    assert off.forwards == () and dashboard.ssh_command(off, 8265).count("-L") == 1
    assert "Prometheus" not in dashboard.banner(off, 8265)


def test_local_ports_of_their_own_for_prometheus_and_grafana(capsys):
    argv = ["dashboard", "tests/plan/fake_inventory.py", "--print-command", "--local-prometheus-port", "19090",
            "--local-grafana-port", "13000"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "-L 127.0.0.1:19090:127.0.0.1:9090 -L 127.0.0.1:13000:127.0.0.1:3000 " in printed


def test_a_local_prometheus_port_in_use_is_an_error_naming_the_option_before_ssh_starts():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        plan = dashboard.tunnel_plan(inventory_of("inventories/test.py", [HEAD]), {"Prometheus": port})
        with pytest.raises(dashboard.DashboardError) as error:
            dashboard.open_tunnel(plan, dashboard.free_port())
    assert str(error.value) == (
        f"127.0.0.1:{port} (Prometheus) is already in use here: choose another with --local-prometheus-port"
    )


def test_prometheus_on_another_host_is_not_forwarded_through_the_head_and_the_banner_says_how():
    monitor = {"name": "10.0.0.9", "data": {"ray_role": "worker", "ssh_user": "ops", "ssh_port": 2200}}
    plan = plan_of([with_data(HEAD, monitoring_host="10.0.0.9"), with_data(monitor, monitoring_host="10.0.0.9")])
    assert plan.forwards == () and dashboard.ssh_command(plan, 8265).count("-L") == 1
    text = dashboard.banner(plan, 8265)
    assert "Prometheus and Grafana run on another host; forward them with: ssh -N " in text
    assert ("-L 127.0.0.1:9090:127.0.0.1:9090 -L 127.0.0.1:3000:127.0.0.1:3000 -o StrictHostKeyChecking=accept-new "
            "-p 2200 -l ops -- 10.0.0.9") in text  # fmt: skip


def test_a_monitoring_host_that_is_not_in_the_inventory_is_an_error_naming_it():
    with pytest.raises(OperateError, match="monitoring_host = 'gone': expected the name or address of a present host"):
        plan_of([with_data(HEAD, monitoring_host="gone")])


def test_the_tunnel_of_rayrig_submit_is_the_dashboards_alone():
    plan = dashboard.tunnel_plan(inventory_of("inventories/test.py", [HEAD]), monitoring=False)
    assert plan.forwards == () and plan.elsewhere == ()
    assert dashboard.ssh_command(plan, 8265).count("-L") == 1


#: An ssh that does what ``ssh -v -N -L`` does here: it listens on every forward's local port, says so as
#: OpenSSH does, notes its pid, and runs until it is stopped.
LISTENING_SSH = """#!/usr/bin/env python3
import os, socket, sys, time
args = sys.argv[1:]
sockets = []
for i, arg in enumerate(args):
    if arg == "-L":
        host, port = args[i + 1].split(":")[:2]
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, int(port)))
        s.listen()
        sockets.append(s)
        print(f"debug1: Local forwarding listening on {host} port {port}.", file=sys.stderr, flush=True)
with open(os.environ["FAKE_SSH_PID"], "w") as f:
    f.write(str(os.getpid()))
while True:
    time.sleep(1)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_killed_dashboard_stops_its_ssh_and_frees_the_ports(signum, tmp_path):
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "ssh"
    fake.write_text(LISTENING_SSH)
    fake.chmod(0o755)
    inventory = tmp_path / "inventory.py"
    inventory.write_text('heads = [("10.9.9.9", {"ray_role": "head", "ssh_user": "ubuntu"})]\n')
    ports = [dashboard.free_port() for _ in range(3)]
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "FAKE_SSH_PID": str(tmp_path / "pid"),
           "RAYRIG_STATE_DIR": str(tmp_path)}  # fmt: skip
    command = ["dashboard", str(inventory), "--local-port", str(ports[0]),
               "--local-prometheus-port", str(ports[1]), "--local-grafana-port", str(ports[2])]  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "rayrig", *command], cwd=repo_root(), env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout.readline().startswith('Dashboard of cluster "cluster": http://127.0.0.1:')
        ssh = int((tmp_path / "pid").read_text())
        assert _alive(ssh) and all(dashboard._listening(port) for port in ports)
        process.send_signal(signum)
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        process.wait()
    deadline = time.monotonic() + 10
    while _alive(ssh) and time.monotonic() < deadline:
        time.sleep(0.1)
    outlived = _alive(ssh)
    if outlived:
        os.kill(ssh, signal.SIGKILL)  # not left behind by a failing test either
    assert not outlived, "the tunnel's ssh outlived rayrig dashboard"
    assert not any(dashboard._listening(port) for port in ports)
