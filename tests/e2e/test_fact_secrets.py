"""What rayrig's facts read from real Docker, and what they leave out: pyinfra prints a fact's output with
``-vvv``, so a fact that read a container's whole ``docker container inspect`` would print its
environment (``ray_env_secret``'s values). It needs Docker but not the lab."""

from __future__ import annotations

import io
import subprocess
import tarfile

import pytest

from deploy.run.facts import ContainerState

pytestmark = [pytest.mark.e2e, pytest.mark.no_lab]

IMAGE = "rayrig-e2e/empty:1"
CONTAINER = "rayrig-e2e-fact-secrets"
SECRET = "fact-Secret-do-not-print"


def docker(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], input=stdin, capture_output=True, check=True)


@pytest.fixture
def container():
    """A created (never started) container of an empty image, a secret in its environment."""
    empty = io.BytesIO()
    tarfile.open(fileobj=empty, mode="w").close()
    docker("image", "import", "-", IMAGE, stdin=empty.getvalue())
    subprocess.run(["docker", "rm", "--force", CONTAINER], capture_output=True, check=False)
    docker("container", "create", "--name", CONTAINER, "--env", f"RAY_SECRET={SECRET}", "--label",
           "rayrig.inputs=abc", IMAGE, "/none")  # fmt: skip
    try:
        yield CONTAINER
    finally:
        subprocess.run(["docker", "rm", "--force", CONTAINER], capture_output=True, check=False)
        subprocess.run(["docker", "image", "rm", "--force", IMAGE], capture_output=True, check=False)


def test_the_container_state_fact_reads_its_fields_and_not_the_containers_environment(container):
    fact = ContainerState()
    output = subprocess.run(["sh", "-c", fact.command(container)], capture_output=True, text=True, check=True).stdout
    assert SECRET not in output and "RAY_SECRET" not in output  # what pyinfra -vvv would print
    state = fact.process(output.splitlines())
    inspect = docker("container", "inspect", container).stdout.decode()
    assert SECRET in inspect  # the secret is there to be read: the fact chose not to
    assert state["running"] is False and state["restarting"] is False
    assert state["image"] == IMAGE and state["image_id"].startswith("sha256:") and len(state["id"]) == 64
    assert state["labels"] == {"rayrig.inputs": "abc"}
    missing = subprocess.run(["sh", "-c", fact.command("rayrig-e2e-no-such")], capture_output=True, text=True)
    assert fact.process(missing.stdout.splitlines()) is None
