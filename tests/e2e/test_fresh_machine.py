"""The two commands' first step on a truly fresh machine: Debian 12 with python3, make and a Docker client, no engine.

A container of the lab's bare Debian 12 rootfs (debootstrap's minbase, or debian:bookworm where a
registry serves it) with ``python3`` and ``make`` installed and a Docker *client* binary at
``/usr/local/bin/docker`` (this machine's own), no ``dockerd`` and no socket: the machine this
project's users and CI start from. The repository's make and scripts files are there read-only.

- As a user who is not root, ``make demo`` and ``make test`` stop at once naming the exact
  ``sudo apt-get install`` line (the engine among what is missing), exit 2, and change nothing.
- As root, ``scripts/ensure-lab-tools.sh --dry-run venv test`` names ``docker.io``; run for real it
  installs it (and the rest), ``scripts/ensure-docker.sh`` then starts an engine that answers
  ``docker info``, and a second dry run has nothing left to install.

It needs Docker but not the lab.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from cloud.lab.build import ensure_rootfs
from cloud.lab.engine import cgroup_version, image_lock, privileged_works
from cloud.lab.hosts import host_run_flags
from deploy.contract.paths import repo_root
from images import context_dir
from images.build import docker_build

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.no_lab]

IMAGE = "rayrig-e2e/fresh-debian:12"
USER = "newcomer"
#: What a fresh clone's first make step reads: the Makefile and the files its rules name.
CHECKOUT = ("Makefile", "pyproject.toml", "requirements.lock", "scripts/ensure-lab-tools.sh",
            "scripts/ensure-docker.sh")  # fmt: skip
DOCKERFILE = f"""\
ARG ROOTFS
FROM ${{ROOTFS}}
COPY sources.list /etc/apt/sources.list
COPY docker /usr/local/bin/docker
RUN chmod 0755 /usr/local/bin/docker \\
 && rm -f /etc/apt/sources.list.d/debian.sources \\
 && apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 make \\
 && apt-get clean && rm -rf /var/lib/apt/lists/* \\
 && useradd --create-home {USER}
"""


def fresh_image() -> str:
    """The fresh machine's image (built once per machine, from the lab's rootfs and this machine's client)."""
    client = shutil.which("docker")
    assert client, "the tests need a Docker client"
    files = {
        "Dockerfile": DOCKERFILE.encode(),
        "sources.list": (context_dir("lab-base") / "sources.list").read_bytes(),
        "docker": Path(client).resolve().read_bytes(),
    }
    with image_lock():  # the lab's builds may be making the rootfs right now
        rootfs = ensure_rootfs(print)
        docker_build(IMAGE, files, print, build_args={"ROOTFS": rootfs}, base_image=rootfs)
    return IMAGE


class Machine:
    """A running container of the fresh image; ``run`` is a shell command in it, as root or the user."""

    def __init__(self, name: str):
        self.name = name

    def run(self, command: str, user: str = "root", timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["docker", "exec", "--user", user, "--workdir", "/src", self.name, "bash", "-c", command],
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    checkout = tmp_path_factory.mktemp("checkout")
    checkout.chmod(0o755)  # pytest makes its folders 0700: the user in the machine reads the checkout too
    for path in CHECKOUT:
        (checkout / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo_root() / path, checkout / path)
    image = fresh_image()
    name = f"rayrig-e2e-fresh-{uuid.uuid4().hex[:8]}"
    flags = host_run_flags(privileged_works(image), cgroup_version())
    subprocess.run(
        ["docker", "run", "--detach", "--name", name, *flags, "--mount", "type=volume,dst=/var/lib/docker",
         "--volume", f"{checkout}:/src:ro", image, "sleep", "infinity"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    try:
        yield Machine(name)
    finally:
        subprocess.run(["docker", "rm", "--force", "--volumes", name], capture_output=True, timeout=120)


def test_the_machine_has_a_docker_client_and_no_engine(machine):
    seen = machine.run(
        "docker --version; command -v dockerd || echo no-dockerd; docker info >/dev/null 2>&1 || echo no"
    )
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.startswith("Docker version ") and seen.stdout.splitlines()[1:] == ["no-dockerd", "no"], seen


@pytest.mark.parametrize("target", ["demo", "test"])
def test_a_user_who_is_not_root_is_told_the_exact_command_and_nothing_changes(machine, target):
    result = machine.run(f"make {target}", user=USER)
    assert result.returncode == 2, result.stdout + result.stderr
    told = "  install them:  sudo apt-get install -y python3-venv docker.io openssh-client"
    assert told in result.stderr.splitlines(), result.stderr
    assert "a Docker engine (dockerd)" in result.stderr
    assert "python3 -m venv" not in result.stdout  # it stopped before making anything


def test_root_gets_docker_io_installed_and_an_engine_that_answers(machine):
    planned = machine.run("scripts/ensure-lab-tools.sh --dry-run venv test")
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.splitlines()[-1] == (
        "would run: apt-get update && apt-get install -y python3-venv docker.io openssh-client debootstrap "
        "nftables s3fs prometheus"
    )
    installed = machine.run("scripts/ensure-lab-tools.sh venv test", timeout=900)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    assert machine.run("dpkg-query -W -f '${Status}' docker.io").stdout == "install ok installed"

    started = machine.run("scripts/ensure-docker.sh", timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    answer = machine.run("docker info --format '{{.ServerVersion}}'")
    assert answer.returncode == 0 and answer.stdout.strip(), answer.stdout + answer.stderr

    again = machine.run("scripts/ensure-lab-tools.sh --dry-run venv test")
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")  # nothing left to install
