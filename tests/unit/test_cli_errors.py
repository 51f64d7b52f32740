"""What a user reads when a ``rayrig`` command fails: one line, the documented exit status, no traceback."""

from __future__ import annotations

import importlib.metadata
import os
import stat
import subprocess

import paramiko
import pytest
from botocore.exceptions import ClientError, NoCredentialsError
from botocore.parsers import ResponseParserError

from cloud import lab
from cloud.ec2 import CloudError, SpecError
from cloud.lab import build as lab_build
from cloud.lab import engine
from images import RAY_VERSION
from images.stream import CommandError
from rayrig import dashboard, errors
from rayrig.cli import main
from rayrig.commands import dashboard as dashboard_commands
from rayrig.commands import deploy as deploy_commands
from rayrig.commands import image as image_commands
from rayrig.commands import lab as lab_commands
from rayrig.inventory import inventory_of

HEAD = {"name": "10.0.0.1", "data": {"ray_role": "head", "ssh_user": "root", "ssh_port": 2222}}


def failing(exc: BaseException):
    def command(args):
        raise exc

    return command


def run(exc: BaseException, capsys) -> tuple[int, str]:
    status = errors.run_command(failing(exc), None, "rayrig thing")
    captured = capsys.readouterr()
    assert captured.out == ""
    return status, captured.err


def one_line(err: str) -> str:
    """The error's line: exactly one line that is not an indented detail, and no traceback."""
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if not line.startswith("  ")]
    assert len(lines) == 1, err
    return lines[0]


# --------------------------------------------------------------------------- the handler


def test_an_expected_failure_is_one_line_with_what_to_do(capsys):
    status, err = run(errors.RayrigError("cannot open the tunnel: ssh exited 255", "check ssh"), capsys)
    assert status == 1
    assert one_line(err) == "rayrig thing: cannot open the tunnel: ssh exited 255; check ssh"


def test_a_usage_error_exits_2(capsys):
    status, err = run(errors.UsageError("inv.py: no such inventory file"), capsys)
    assert status == 2 and one_line(err) == "rayrig thing: inv.py: no such inventory file"


def test_an_unexpected_exception_is_one_line_that_says_it_is_a_bug(capsys, monkeypatch):
    monkeypatch.delenv(errors.DEBUG_ENV, raising=False)
    status, err = run(KeyError("ray_role"), capsys)
    assert status == 1
    assert one_line(err) == (
        "rayrig thing: unexpected KeyError: 'ray_role'; run with RAYRIG_DEBUG=1 for the traceback; "
        "this is a bug: report it"
    )


def test_rayrig_debug_prints_the_traceback_above_the_line(capsys, monkeypatch):
    monkeypatch.setenv(errors.DEBUG_ENV, "1")
    status, err = run(errors.RayrigError("it broke"), capsys)
    assert status == 1
    assert err.startswith("Traceback (most recent call last):")
    assert err.rstrip().endswith("rayrig thing: it broke")


def test_ctrl_c_exits_130_with_one_line(capsys):
    status, err = run(KeyboardInterrupt(), capsys)
    assert status == 130 and one_line(err) == "rayrig thing: interrupted"


@pytest.mark.parametrize(
    ("exc", "status", "words"),
    [
        (CloudError("listing clusters: cannot reach http://x; check the network"), 1, "listing clusters: cannot"),
        (lab.LabError("`docker network ls` failed (1): boom"), 1, "`docker network ls` failed (1): boom"),
        (dashboard.DashboardError("inv.py: the inventory yields no host"), 1, "inv.py: the inventory yields no"),
        (CommandError("command failed (exit 1): docker build .\n  last output:\n    E: no space"), 1,
         "command failed (exit 1): docker build .; see the output above"),
        (FileNotFoundError(2, "No such file or directory", "docker"), 1,
         "docker: command not found; install and start Docker: `make docker`"),
        (PermissionError(13, "Permission denied", "/etc/rayrig/token"), 1,
         "/etc/rayrig/token: Permission denied; check the path"),
        (FileNotFoundError("wheelhouse /w holds no wheels: run `rayrig image wheelhouse`"), 1,
         "wheelhouse /w holds no wheels"),
        (subprocess.CalledProcessError(3, ["ssh-keygen", "-q"], stderr="ssh-keygen: bad key\n"), 1,
         "`ssh-keygen -q` exited with status 3: ssh-keygen: bad key; see its output above"),
        (subprocess.TimeoutExpired("pyinfra debug-inventory", 120), 1, "did not finish within 120 s"),
        (NoCredentialsError(), 1, "AWS: no AWS credentials found"),
        (ClientError({"Error": {"Code": "InvalidAction", "Message": "nope"}}, "DescribePlacementGroups"), 1,
         "does not implement DescribePlacementGroups (InvalidAction: nope)"),
        (ResponseParserError("Unable to parse response, invalid XML received:\nb'<html>'"), 1,
         "is not an AWS response (Unable to parse response, invalid XML received:)"),
        (paramiko.AuthenticationException("Authentication failed."), 1,
         "SSH: the host refused the login (Authentication failed.); check ssh_user and ssh_key"),
        (paramiko.SSHException("Error reading SSH protocol banner"), 1, "SSH: Error reading SSH protocol banner"),
    ],
)  # fmt: skip
def test_each_expected_library_failure_is_one_line(exc, status, words, capsys):
    got, err = run(exc, capsys)
    assert got == status
    line = one_line(err)
    assert line.startswith("rayrig thing: ") and words in line, line
    assert errors.BUG_HINT not in line


def test_a_spec_with_one_problem_is_one_line_naming_the_file_and_key(capsys):
    status, err = run(SpecError("s.toml", ['s.toml: ttl = 5: expected a duration such as "12h"']), capsys)
    assert status == 2
    assert one_line(err) == (
        'rayrig thing: invalid cluster spec: s.toml: ttl = 5: expected a duration such as "12h"; '
        "fix it; nothing was created and AWS was not contacted"
    )


def test_a_spec_with_several_problems_lists_each_below_its_line(capsys):
    status, err = run(SpecError("s.toml", ["s.toml: ttl = 5: expected a duration", "s.toml: name: missing"]), capsys)
    assert status == 2
    assert one_line(err).startswith("rayrig thing: invalid cluster spec s.toml (2 problems, below); fix them")
    assert err.splitlines()[1:] == ["  - s.toml: ttl = 5: expected a duration", "  - s.toml: name: missing"]


# --------------------------------------------------------------------------- --version


def test_version_names_the_package_and_the_pinned_ray(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == (
        f"rayrig {importlib.metadata.version('rayrig')} (Ray {RAY_VERSION} in the node image)"
    )


# --------------------------------------------------------------------------- the lab


@pytest.fixture
def no_lab(monkeypatch):
    """The lab's work and Docker fail the test if they are reached."""
    monkeypatch.setattr(lab, "up", lambda *a, **k: pytest.fail("the lab must not start"))
    monkeypatch.setattr(engine.subprocess, "run", lambda *a, **k: pytest.fail("Docker must not be asked"))


@pytest.mark.parametrize("hosts", ["0", "-1", str(lab.MAX_HOSTS + 1), "three"])
@pytest.mark.parametrize("command", [["lab", "up"], ["demo"]])
def test_a_host_count_the_lab_cannot_hold_is_a_usage_error_before_anything_starts(hosts, command, no_lab, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*command, "--hosts", hosts])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --hosts: {hosts!r} is not a number of hosts from 1 to {lab.MAX_HOSTS}" in err
    assert "Traceback" not in err


def test_the_lab_library_refuses_a_bad_host_count_before_building_anything(monkeypatch):
    monkeypatch.setattr(lab, "ensure_images", lambda *a: pytest.fail("nothing may be built"))
    for hosts in (0, -1, lab.MAX_HOSTS + 1):
        with pytest.raises(ValueError, match=f"a lab has 1 to {lab.MAX_HOSTS} hosts"):
            lab.up(hosts=hosts)
    assert lab_commands.host_count(str(lab.MAX_HOSTS)) == lab.MAX_HOSTS  # the largest that fits is taken


@pytest.mark.parametrize("name", ["../x", "", "my lab", "-lab", "x" * 41])
def test_a_lab_name_docker_would_refuse_is_a_usage_error(name, no_lab, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["lab", "up", f"--name={name}"])
    assert exited.value.code == 2
    assert f"invalid lab name {name!r}" in capsys.readouterr().err


def test_a_docker_daemon_that_does_not_answer_says_how_to_start_it(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path))
    said = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n"
    monkeypatch.setattr(
        engine.subprocess, "run", lambda cmd, **k: subprocess.CompletedProcess(cmd, 1, stdout="", stderr=said)
    )
    assert main(["lab", "status"]) == 1
    line = one_line(capsys.readouterr().err)
    assert line.startswith("rayrig lab status: Docker does not answer (`docker container ls`: Cannot connect")
    assert "start it with `make docker`" in line


def test_no_debian_image_and_no_debootstrap_is_one_line_that_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setattr(lab_build, "inspect", lambda kind, ref: None)
    monkeypatch.setattr(lab_build, "docker", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "denied"))
    monkeypatch.setattr(lab_build.shutil, "which", lambda name: None)
    with pytest.raises(lab.LabError) as caught:
        lab_build.ensure_rootfs(print)
    status, err = run(caught.value, capsys)
    assert status == 1
    line = one_line(err)
    assert "cannot pull debian:bookworm" in line and "debootstrap" in line
    assert "`make docker` as root" in line and "sudo apt-get install debootstrap" in line


def test_an_unreadable_lab_state_is_one_line_that_says_how_to_start_over(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path))
    lab.lab_dir("lab-x").mkdir(parents=True)
    lab.state_path("lab-x").write_text("{not json")
    monkeypatch.setattr(engine.subprocess, "run", lambda *a, **k: pytest.fail("Docker must not be asked"))
    assert main(["lab", "status", "--name", "lab-x"]) == 1
    line = one_line(capsys.readouterr().err)
    assert f"{lab.state_path('lab-x')}: cannot read the lab's state" in line
    assert "`rayrig lab down --name lab-x` removes the lab" in line


# --------------------------------------------------------------------------- image build


def test_a_missing_wheelhouse_is_a_usage_error_before_docker_is_asked(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(image_commands, "build_image", lambda *a, **k: pytest.fail("nothing may be built"))
    missing = tmp_path / "missing"
    with pytest.raises(SystemExit) as exited:
        main(["image", "build", "--wheelhouse", str(missing)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --wheelhouse: {missing}: no such folder; make one with `rayrig image wheelhouse {missing}`" in err
    assert "Traceback" not in err


def test_an_empty_wheelhouse_is_one_line_before_docker_is_asked(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("images.build.docker_build", lambda *a, **k: pytest.fail("Docker must not be asked"))
    assert main(["image", "build", "--wheelhouse", str(tmp_path)]) == 1
    line = one_line(capsys.readouterr().err)
    assert line == f"rayrig image build: wheelhouse {tmp_path} holds no wheels: run `rayrig image wheelhouse`"


# --------------------------------------------------------------------------- dashboard


@pytest.fixture
def failing_ssh(tmp_path, monkeypatch):
    """An ``ssh`` on PATH that fails like OpenSSH does when the host does not answer."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text(
        "#!/bin/sh\necho 'Warning: Permanently added the host key' >&2\n"
        "echo 'ssh: connect to host 10.0.0.1 port 2222: Connection refused' >&2\nexit 255\n"
    )
    ssh.chmod(ssh.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(dashboard_commands, "load_inventory", lambda path: inventory_of(path, [HEAD]))
    return ssh


def test_a_dashboard_whose_ssh_fails_exits_1_naming_what_failed(failing_ssh, capsys):
    assert main(["dashboard", "inventories/lab.py", "--local-port", "18265"]) == 1
    line = one_line(capsys.readouterr().err)
    assert line == (
        "rayrig dashboard: cannot open the tunnel to the dashboard: ssh to root@10.0.0.1 exited with status 255: "
        "ssh: connect to host 10.0.0.1 port 2222: Connection refused. Check that this works from here: "
        "ssh -o StrictHostKeyChecking=accept-new -p 2222 -l root -- 10.0.0.1 true"
    )


def test_a_dashboard_inventory_without_a_head_stays_a_usage_error(monkeypatch, capsys):
    worker = [{"name": "w", "data": {"ray_role": "worker"}}]
    monkeypatch.setattr(dashboard_commands, "load_inventory", lambda path: inventory_of(path, worker))
    assert main(["dashboard", "inventories/lab.py"]) == 2
    err = capsys.readouterr().err
    assert one_line(err) == "rayrig dashboard: inventories/lab.py: invalid inventory data:"
    assert 'expected exactly one host with ray_role = "head"' in err


def test_a_demo_whose_deploy_fails_is_one_line_that_says_the_lab_stays(monkeypatch, capsys):
    monkeypatch.setattr(deploy_commands.lab, "up", lambda hosts, name: {"name": name})
    monkeypatch.setattr(deploy_commands, "run_pyinfra", lambda *a, **k: 1)
    assert main(["demo", "--name", "lab-x"]) == 1
    assert one_line(capsys.readouterr().err) == (
        "rayrig demo: the deploy to lab lab-x failed (pyinfra exit status 1); see pyinfra's output above; "
        "the lab stays up, and `make demo` again deploys to it"
    )
