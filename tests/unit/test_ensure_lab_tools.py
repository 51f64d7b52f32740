"""``scripts/ensure-lab-tools.sh``: what a fresh machine gets installed (or is told to install) by make.

Each case runs the script's dry run with a PATH that holds only the programs the case says are
there (stubs), for root or for another user, and reads what it would do.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from deploy.contract.paths import repo_root

SCRIPT = repo_root() / "scripts" / "ensure-lab-tools.sh"
BASH = shutil.which("bash") or "/bin/bash"
EVERYTHING = (
    "docker", "dockerd", "ssh", "ssh-keygen", "debootstrap", "nft", "s3fs", "promtool", "prometheus", "make", "apt-get"
)  # fmt: skip


def machine(tmp_path: Path, programs: tuple[str, ...], venv: bool = True, daemon: bool = False) -> Path:
    """A folder of stub programs: those named, and python3 whose venv works or not.

    A ``docker`` stub is a client alone: ``docker info`` fails, as it does where no daemon answers,
    unless ``daemon`` says one does.
    """
    folder = tmp_path / "bin"
    folder.mkdir()
    for program in programs:
        (folder / program).write_text("#!/bin/sh\nexit 0\n")
        (folder / program).chmod(0o755)
    if "docker" in programs and not daemon:
        (folder / "docker").write_text('#!/bin/sh\n[ "$1" = info ] && exit 1\nexit 0\n')
    (folder / "python3").write_text(f"#!/bin/sh\nexit {0 if venv else 1}\n")
    (folder / "python3").chmod(0o755)
    return folder


def dry_run(folder: Path, uid: int, *purposes: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BASH, str(SCRIPT), "--dry-run", *purposes],
        env={"PATH": str(folder), "RAYRIG_TOOLS_UID": str(uid)},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_scripts_parse():
    for script in ("ensure-lab-tools.sh", "ensure-docker.sh"):
        assert subprocess.run([BASH, "-n", str(repo_root() / "scripts" / script)]).returncode == 0


def test_root_on_a_fresh_debian_gets_everything_installed_with_apt_in_one_go(tmp_path):
    result = dry_run(machine(tmp_path, ("apt-get",), venv=False), 0, "venv", "test")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "would run: apt-get update && apt-get install -y python3-venv docker.io openssh-client debootstrap make "
        "nftables s3fs prometheus"
    )


def test_the_demo_needs_the_lab_programs_only(tmp_path):
    result = dry_run(machine(tmp_path, ("apt-get", "ssh", "ssh-keygen")), 0, "lab")
    assert result.returncode == 0
    assert result.stdout.splitlines()[-1] == "would run: apt-get update && apt-get install -y docker.io debootstrap"


def test_a_machine_that_has_everything_gets_nothing_and_hears_nothing(tmp_path):
    result = dry_run(machine(tmp_path, EVERYTHING), 0, "venv", "lab", "test")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_a_user_who_is_not_root_is_told_the_exact_command_and_make_stops(tmp_path):
    result = dry_run(machine(tmp_path, ("apt-get", "make"), venv=False), 1000, "venv", "test")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "rayrig needs programs this machine lacks (for venv test): python3's venv, a Docker engine (dockerd), "
        "docker, ssh, ssh-keygen",
        "  install them:  sudo apt-get install -y python3-venv docker.io openssh-client",
        "  then run make again",
    ]  # debootstrap, nft, s3fs and prometheus are asked of root only


def test_without_apt_the_programs_are_named(tmp_path):
    result = dry_run(machine(tmp_path, ("ssh", "ssh-keygen", "debootstrap")), 0, "lab")
    assert result.returncode == 1
    assert "lacks (for lab): a Docker engine (dockerd), docker" in result.stderr
    assert "with your system's packages (on Debian or Ubuntu: docker.io)" in result.stderr


def test_a_docker_client_alone_is_no_engine_and_gets_docker_io(tmp_path):
    """Machines that ship a Docker client and no engine (no dockerd, no socket) are the usual case."""
    everything_but_the_engine = tuple(p for p in EVERYTHING if p != "dockerd")
    result = dry_run(machine(tmp_path, everything_but_the_engine), 0, "venv", "test")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "would run: apt-get update && apt-get install -y docker.io"


def test_a_user_with_a_docker_client_alone_is_told_to_install_the_engine(tmp_path):
    result = dry_run(machine(tmp_path, ("apt-get", "make", "docker", "ssh", "ssh-keygen")), 1000, "lab")
    assert result.returncode == 1
    assert result.stderr.splitlines()[:2] == [
        "rayrig needs programs this machine lacks (for lab): a Docker engine (dockerd)",
        "  install them:  sudo apt-get install -y docker.io",
    ]


def test_an_engine_that_answers_without_dockerd_on_path_is_enough(tmp_path):
    """A daemon that answers (a remote DOCKER_HOST, a rootless engine started elsewhere) is an engine."""
    programs = tuple(p for p in EVERYTHING if p != "dockerd")
    result = dry_run(machine(tmp_path, programs, daemon=True), 0, "venv", "lab", "test")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_a_purpose_it_does_not_know_is_a_usage_error(tmp_path):
    assert dry_run(machine(tmp_path, EVERYTHING), 0, "everything").returncode == 2


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("target", ["demo", "test"])
def test_make_installs_the_programs_before_it_uses_them(target, tmp_path):
    planned = subprocess.run(
        ["make", "-n", "-C", str(repo_root()), target, f"VENV={tmp_path / 'venv'}"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.splitlines()
    index = {line: i for i, line in reversed(list(enumerate(planned)))}
    venv = next(i for i, line in enumerate(planned) if line.startswith("python3 -m venv"))
    # every program, python3's venv included, asked for in one go (one message, one apt-get), first
    tools = "scripts/ensure-lab-tools.sh venv test" if target == "test" else "scripts/ensure-lab-tools.sh venv lab"
    first = next(line for line in planned if line.startswith("scripts/"))
    assert first == tools and index[tools] < venv < index["scripts/ensure-docker.sh"]


def test_ci_installs_nothing_that_make_would_not():
    ci = (repo_root() / ".ci" / "run").read_text()
    commands = [line for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert not re.search(r"apt-get|apt |dpkg|pip install", ci)
    assert commands[-3:] == ["scripts/ensure-lab-tools.sh venv test", "make lint", "make test"]
