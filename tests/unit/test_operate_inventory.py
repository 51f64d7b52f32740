"""The day-to-day commands' view of an inventory: its hosts as pyinfra loads them, and the ssh
command line each host's SSH settings make (checked with ``ssh -G``, which resolves a command
line into the configuration ssh would use, without connecting)."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from deploy.contract.paths import repo_root
from rayrig.cli import main
from rayrig.inventory import OperateError, SshSettings, inventory_of, load_inventory, ssh_argv

needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="the OpenSSH client is not installed")


def resolved(argv: list[str]) -> dict[str, list[str]]:
    """What ssh makes of a command line: ``ssh -G`` prints every option it resolved."""
    assert argv[0] == "ssh"
    result = subprocess.run(["ssh", "-G", *argv[1:]], capture_output=True, text=True, timeout=30, check=True)
    found: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition(" ")
        found.setdefault(key, []).append(value)
    return found


def settings(**data) -> SshSettings:
    return SshSettings.from_data("gpu-01", data)


# --- ssh command lines -------------------------------------------------------------------------


@needs_ssh
def test_the_key_port_user_and_known_hosts_of_the_data_reach_ssh(tmp_path):
    key = tmp_path / "id_ed25519"
    key.write_text("")
    known = tmp_path / "with space" / "known_hosts"
    ssh = settings(ssh_user="ubuntu", ssh_key=str(key), ssh_port=2222, ssh_known_hosts_file=str(known))
    config = resolved(ssh_argv(ssh, "uptime"))
    assert config["user"] == ["ubuntu"]
    assert config["port"] == ["2222"]
    assert config["hostname"] == ["gpu-01"]
    assert config["identityfile"] == [str(key)]  # only the inventory's key
    assert config["identitiesonly"] == ["yes"]
    assert config["userknownhostsfile"] == [str(known)]


@needs_ssh
def test_ssh_hostname_is_where_ssh_connects_and_a_relative_key_is_the_repositorys(tmp_path):
    ssh = settings(ssh_hostname="192.0.2.11", ssh_key="keys/lab")
    assert ssh.key == str(repo_root() / "keys" / "lab")
    assert resolved(ssh_argv(ssh))["hostname"] == ["192.0.2.11"]


@needs_ssh
def test_a_bastion_in_ssh_config_file_is_the_jump_and_the_file_replaces_the_users_config(tmp_path):
    config_file = tmp_path / "sprint42.ssh_config"
    config_file.write_text(
        textwrap.dedent("""\
        Host bastion.example.com
          User ec2-user
        Host 10.0.1.5 10.0.1.6
          ProxyJump ec2-user@bastion.example.com
        """)
    )
    argv = ssh_argv(SshSettings.from_data("10.0.1.5", {"ssh_user": "ubuntu", "ssh_config_file": str(config_file)}))
    assert argv[argv.index("-F") + 1] == str(config_file)
    config = resolved(argv)
    assert config["proxyjump"] == ["ec2-user@bastion.example.com"]
    assert config["user"] == ["ubuntu"]  # the host's own ssh_user, not the bastion's


@needs_ssh
@pytest.mark.parametrize(
    ("value", "expected"), [("yes", "true"), ("accept-new", "accept-new"), ("no", "accept-new"), ("off", "accept-new")]
)
def test_host_keys_are_always_checked(value, expected):
    config = resolved(ssh_argv(settings(ssh_strict_host_key_checking=value), "true", batch=True))
    assert config["stricthostkeychecking"] == [expected]
    assert config["batchmode"] == ["yes"]


def test_unset_settings_are_left_to_the_users_ssh_configuration_but_pyinfras_host_key_default():
    assert ssh_argv(settings()) == ["ssh", "-o", "StrictHostKeyChecking=accept-new", "--", "gpu-01"]
    assert ssh_argv(settings(), "uptime", batch=True, stdin=False) == [
        "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-n", "-o", "StrictHostKeyChecking=accept-new",
        "--", "gpu-01", "uptime",
    ]  # fmt: skip


def test_agent_forwarding_and_a_terminal_when_asked():
    argv = ssh_argv(settings(ssh_forward_agent=True), "top", tty=True)
    assert "-A" in argv and "-t" in argv and argv[-1] == "top"


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"ssh_port": "ssh"}, "host gpu-01: ssh_port = 'ssh': expected a port number 1-65535"),
        ({"ssh_port": 70000}, "host gpu-01: ssh_port = 70000"),
        ({"ssh_strict_host_key_checking": "maybe"}, "ssh_strict_host_key_checking = 'maybe': expected one of yes"),
        ({"ssh_key": "a\nb"}, "host gpu-01: ssh_key = 'a\\nb': expected the path of a file on this machine"),
    ],
)
def test_settings_ssh_cannot_take_are_usage_errors_naming_host_key_and_value(data, words):
    with pytest.raises(OperateError) as error:
        settings(**data)
    assert words in str(error.value)
    assert error.value.status == 2


# --- the loader --------------------------------------------------------------------------------


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_a_lab_like_inventory_loads_with_its_roles_addresses_ssh_settings_and_defaults(tmp_path):
    known = tmp_path / "known_hosts"
    inventory = write(
        tmp_path,
        "lab.py",
        f"""\
        _ssh = {{"ssh_user": "rayrig", "ssh_key": "{tmp_path}/id", "ssh_known_hosts_file": "{known}",
                 "ssh_strict_host_key_checking": "yes", "_sudo": True}}
        heads = [("10.213.0.10", {{**_ssh, "ray_role": "head", "ray_num_cpus": 2, "ray_resources": {{"lab-1": 1}}}})]
        workers = [("10.213.0.11", {{**_ssh, "ray_num_cpus": 2}}), ("10.213.0.12", {{**_ssh, "ray_num_cpus": 2}})]
        """,
    )
    loaded = load_inventory(str(inventory))
    assert [(h.name, h.role, h.address, h.node_ip) for h in loaded.hosts] == [
        ("10.213.0.10", "head", "10.213.0.10", "10.213.0.10"),
        ("10.213.0.11", "worker", "10.213.0.11", "10.213.0.11"),
        ("10.213.0.12", "worker", "10.213.0.12", "10.213.0.12"),
    ]
    assert loaded.head.name == "10.213.0.10"
    head = loaded.head
    assert head.ssh == SshSettings("10.213.0.10", "rayrig", None, f"{tmp_path}/id", str(known), "yes")
    assert head.settings["ray_resources"] == {"lab-1": 1}
    assert head.settings["ray_container_name"] == "ray-node"  # group_data/all.py's default, merged
    assert head.as_root == ["sudo", "-n"]


def test_an_ec2_like_inventory_keeps_its_group_data_and_its_bastion_config(tmp_path):
    config = write(tmp_path, "state/sprint42.ssh_config", "Host 10.0.1.5 10.0.1.6\n  ProxyJump ec2-user@bastion\n")
    write(tmp_path, "inv/group_data/all.py", 'ssh_key = "~/.ssh/sprint42"\nray_cluster_name = "sprint42"\n')
    write(tmp_path, "inv/group_data/workers.py", "ray_num_gpus = 8\n")
    inventory = write(
        tmp_path,
        "inv/ec2.py",
        f"""\
        _data = {{"ssh_user": "ubuntu", "ssh_config_file": "{config}"}}
        heads = [("10.0.1.5", {{**_data, "ray_role": "head", "ray_node_ip": "10.0.1.5", "ray_num_gpus": 0}})]
        workers = [("10.0.1.6", {{**_data, "ray_node_ip": "10.0.1.6"}})]
        """,
    )
    loaded = load_inventory(str(inventory))
    worker = loaded.pick("10.0.1.6")
    assert worker.role == "worker"
    assert worker.settings["ray_num_gpus"] == 8  # the inventory folder's group data, as pyinfra loads it
    assert worker.settings["ray_cluster_name"] == "sprint42"
    assert worker.ssh.key == str(Path("~/.ssh/sprint42").expanduser())
    assert worker.ssh.config_file == str(config)


def test_a_host_leaving_the_cluster_is_not_a_member_and_the_head_is_found_by_ray_role():
    loaded = inventory_of(
        "inv.py",
        [
            {"name": "w1", "data": {"ray_node_ip": "192.0.2.2", "ray_state": "absent"}},
            {"name": "h", "data": {"ray_role": "head", "ray_node_ip": "192.0.2.1", "ssh_user": "root"}},
        ],
    )
    assert loaded.head.name == "h" and loaded.head.as_root == []
    assert [h.name for h in loaded.members] == ["h"]
    assert loaded.pick("192.0.2.2").name == "w1"  # by its Ray address too


def test_an_unknown_host_is_a_usage_error_listing_the_inventorys_hosts():
    loaded = inventory_of("inv.py", [{"name": "h", "data": {"ray_role": "head", "ray_node_ip": "192.0.2.1"}},
                                     {"name": "w", "data": {"ray_node_ip": "192.0.2.2"}}])  # fmt: skip
    with pytest.raises(OperateError, match=r"inv.py: no host 'x'; its hosts are h \(head\), w \(worker\)") as error:
        loaded.pick("x")
    assert error.value.status == 2


def test_invalid_data_is_rejected_before_any_host_is_reached_naming_host_and_key():
    with pytest.raises(OperateError, match="host w: ray_role = 'boss'") as error:
        inventory_of(
            "inv.py", [{"name": "h", "data": {"ray_role": "head"}}, {"name": "w", "data": {"ray_role": "boss"}}]
        )
    assert error.value.status == 2


def test_an_inventory_that_does_not_load_says_why_in_pyinfras_words(tmp_path):
    broken = write(tmp_path, "broken.py", "raise RuntimeError(\"the local lab 'x' is not up\")\n")
    with pytest.raises(OperateError, match="the inventory does not load: .*the local lab 'x' is not up") as error:
        load_inventory(str(broken))
    assert error.value.status == 1


@pytest.mark.parametrize("command", [["status"], ["ssh"], ["exec", "--all", "--", "true"], ["logs"]])
def test_every_command_calls_a_missing_inventory_a_usage_error(command, capsys):
    assert main([command[0], "no/such/inventory.py", *command[1:]]) == 2
    err = capsys.readouterr().err
    assert f"rayrig {command[0]}: no/such/inventory.py: no such inventory file" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("printed", ["", "[{not json", "--> Loading inventory..."])
def test_an_inventory_listing_rayrig_cannot_read_is_a_one_line_error(tmp_path, monkeypatch, printed):
    inventory = write(tmp_path, "inv.py", 'heads = [("h", {"ray_role": "head"})]\n')
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, printed, ""))
    with pytest.raises(OperateError, match="pyinfra printed no inventory that rayrig can read") as error:
        load_inventory(str(inventory))
    assert error.value.status == 1


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["status"], "the following arguments are required: inventory"),
        (["status", "inv.py", "--timeout", "0"], "'0' is not a number of seconds above 0"),
        (["logs", "inv.py", "-n", "0"], "'0' is not a whole number of at least 1"),
        (["exec", "inv.py", "--host", "a", "--all", "--", "true"], "not allowed with argument"),
        (["ssh", "inv.py", "a", "b"], "unrecognized arguments: b"),
    ],
)
def test_bad_arguments_are_usage_errors_without_a_traceback(argv, words, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and words in err and "Traceback" not in err
