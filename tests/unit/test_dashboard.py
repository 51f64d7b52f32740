"""``rayrig dashboard``: the tunnel it opens, from an inventory's head."""

from __future__ import annotations

import pytest

from deploy import auth, settings
from rayrig import dashboard
from rayrig.cli import main

HEAD = {"name": "10.0.0.1", "data": {"ray_role": "head", "ssh_user": "root", "ssh_key": "/keys/id", "ssh_port": 2222}}
WORKER = {"name": "10.0.0.2", "data": {"ray_role": "worker"}}


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path))
    return tmp_path


def test_the_tunnel_goes_to_the_heads_loopback_dashboard_with_the_inventorys_ssh_settings():
    plan = dashboard.tunnel_plan([WORKER, HEAD])
    assert dashboard.ssh_command(plan, 18265) == [
        "ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=30",
        "-L", "127.0.0.1:18265:127.0.0.1:8265", "-i", "/keys/id", "-p", "2222", "root@10.0.0.1",
    ]  # fmt: skip


def test_a_dashboard_bound_to_one_address_is_reached_there_and_its_port_comes_from_ray_ports():
    ports = {**settings.defaults()["ray_ports"], "dashboard": 9265}
    data = {**HEAD["data"], "ssh_hostname": "192.0.2.10", "ray_dashboard_host": "192.0.2.10", "ray_ports": ports}
    head = {"name": "gpu-head", "data": data}
    plan = dashboard.tunnel_plan([head])
    assert "127.0.0.1:9265:192.0.2.10:9265" in dashboard.ssh_command(plan, 9265)
    assert dashboard.ssh_command(plan, 9265)[-1] == "root@192.0.2.10"


def test_the_banner_names_the_token_file_and_never_the_token(state):
    path = auth.ensure_token(settings.merge({}))
    plan = dashboard.tunnel_plan([HEAD, WORKER])
    text = dashboard.banner(plan, 8265)
    assert 'Dashboard of cluster "cluster": http://127.0.0.1:8265' in text
    assert str(path) in text
    assert auth.read_token(path) not in text
    assert "token" not in dashboard.banner(
        dashboard.tunnel_plan([{**HEAD, "data": {**HEAD["data"], "ray_auth": "none"}}]), 1
    )


@pytest.mark.parametrize("hosts", [[WORKER], [HEAD, {**HEAD, "name": "10.0.0.3"}]])
def test_an_inventory_without_exactly_one_head_is_an_error(hosts):
    with pytest.raises(dashboard.DashboardError, match="expected exactly one"):
        dashboard.tunnel_plan(hosts)


def test_a_missing_inventory_is_a_usage_error(capsys):
    assert main(["dashboard", "no/such/inventory.py"]) == 2
    assert "no/such/inventory.py: no such inventory file" in capsys.readouterr().err


def test_an_inventory_that_yields_no_host_is_a_usage_error(tmp_path, capsys):
    empty = tmp_path / "empty.py"
    empty.write_text("heads = []\n")
    assert main(["dashboard", str(empty)]) == 2
    assert f"{empty}: the inventory yields no host" in capsys.readouterr().err


def test_print_command_loads_the_inventory_through_pyinfra(capsys):
    assert main(["dashboard", "tests/plan/fake_inventory.py", "--print-command", "--local-port", "18000"]) == 0
    assert capsys.readouterr().out.strip().endswith("-L 127.0.0.1:18000:127.0.0.1:8265 @fake/head")
