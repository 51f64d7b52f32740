"""The image layers base -> Ray -> project with real Docker: a change to the project's requirements
rebuilds the project's layer only, and no requirement can replace the Ray image's Ray.

The Ray image is built the way the lab builds its own (the lab's rootfs, its wheelhouse, offline), so
Docker's cache usually answers every step of it; the project's wheels come from the package index
(``rayrig image wheelhouse --requirements``). It needs Docker but not the lab.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from cloud.lab.build import ensure_rootfs
from cloud.lab.engine import image_lock
from deploy.contract.paths import state_dir
from images import RAY_VERSION
from images.build import build_image, docker_image_inspect
from images.project_layer import PROJECT_MARKER, build_project_wheelhouse, build_with_requirements, requirements_digest
from images.stream import CommandError
from images.wheelhouse import build_wheelhouse

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.no_lab]

RAY_TAG = f"rayrig-e2e/ray:{RAY_VERSION}"
PROJECT_TAG = "rayrig-e2e/project:1"
CONFLICT_TAG = "rayrig-e2e/project:conflict"


def remove_images(*tags: str) -> None:
    subprocess.run(["docker", "image", "rm", "--force", *tags], capture_output=True, check=False)


def layers(tag: str) -> list[str]:
    info = docker_image_inspect(tag)
    assert info, f"{tag} is not there"
    return info["RootFS"]["Layers"]


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """A copy of the lab's Ray wheelhouse (hard links where they can be), so project/ stays the test's."""
    with image_lock():  # the lab's builds, which may be running beside this module, share this wheelhouse
        ray_wheels = build_wheelhouse(state_dir() / f"wheelhouse-{RAY_VERSION}", RAY_VERSION, progress=print)
    folder = tmp_path_factory.mktemp("wheelhouse")
    for wheel in ray_wheels.glob("*.whl"):
        try:
            os.link(wheel, folder / wheel.name)
        except OSError:
            shutil.copy2(wheel, folder / wheel.name)
    return folder


def opt_ray_layers(tag: str) -> list[tuple[str, int]]:
    """The Ray image's layers that hold /opt/ray, bottom up: each COPY from the builder stage, as where it
    copies to and its bytes."""
    history = subprocess.run(
        ["docker", "history", "--no-trunc", "--human=false", "--format", "{{.CreatedBy}}\t{{.Size}}", tag],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.splitlines()  # fmt: skip
    rows = [line.rsplit("\t", 1) for line in reversed(history)]
    copies = [(re.search(r"COPY dir:\w+ in (/(?:opt/ray)?) *$", made), size) for made, size in rows]
    return [(copy[1], int(size)) for copy, size in copies if copy]


@pytest.fixture(scope="module")
def images_built_here():
    remove_images(RAY_TAG, PROJECT_TAG, CONFLICT_TAG)
    yield
    remove_images(PROJECT_TAG, CONFLICT_TAG, RAY_TAG)


def build(requirements: Path, wheelhouse: Path, tag: str = PROJECT_TAG) -> tuple[list[str], float]:
    shown: list[str] = []
    started = time.monotonic()
    with image_lock():  # after the lab's own Ray image build, if one runs now: Docker's cache then answers
        build_with_requirements(
            tag, requirements, RAY_TAG, base_image=ensure_rootfs(print), wheelhouse=wheelhouse, progress=shown.append
        )
    print("\n".join(shown))
    return shown, time.monotonic() - started


def test_a_requirements_change_rebuilds_the_project_layer_only(tmp_path, wheelhouse, images_built_here):
    requirements = tmp_path / "requirements.txt"
    run_id = f"# run {time.time_ns()}\n"  # content no earlier run had: Docker's cache cannot answer the install
    requirements.write_text(f"{run_id}tabulate\n")
    build_project_wheelhouse(wheelhouse, requirements, print)
    _, first_s = build(requirements, wheelhouse)
    ray_id, ray_layers = docker_image_inspect(RAY_TAG)["Id"], layers(RAY_TAG)
    # /opt/ray as four layers: the rest of the venv, then its three largest packages (CPU torch, Ray
    # and pyarrow here, each over 100 MB) on their own, so that push and pull move them side by side
    opt_ray = opt_ray_layers(RAY_TAG)
    assert [target for target, _ in opt_ray] == ["/opt/ray", "/", "/", "/"], opt_ray
    assert all(size >= 100e6 for _, size in opt_ray), opt_ray
    first_layers = layers(PROJECT_TAG)
    assert first_layers[: len(ray_layers)] == ray_layers and len(first_layers) == len(ray_layers) + 1

    requirements.write_text(f"{run_id}tabulate\ntermcolor\n")
    build_project_wheelhouse(wheelhouse, requirements, print)
    shown, second_s = build(requirements, wheelhouse)
    assert any("project layer:" in line for line in shown)  # the install ran: not an answer from the cache
    print(f"first build {first_s:.1f} s (Ray image and project), requirements changed: {second_s:.1f} s")
    assert f"image {RAY_TAG}: up to date" in shown
    assert docker_image_inspect(RAY_TAG)["Id"] == ray_id
    second_layers = layers(PROJECT_TAG)
    assert second_layers[: len(ray_layers)] == ray_layers  # the base and Ray layers, byte for byte
    assert len(second_layers) == len(ray_layers) + 1 and second_layers[-1] != first_layers[-1]

    run = subprocess.run(
        ["docker", "run", "--rm", PROJECT_TAG, "python", "-c",
         "import ray, torch, pyarrow, tabulate, termcolor; print('ray', ray.__version__)"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0 and run.stdout.strip() == f"ray {RAY_VERSION}", run.stdout + run.stderr

    # Even a forced build of the Ray image is Docker's cache answering its install step.
    forced: list[str] = []
    with image_lock():
        build_image(RAY_TAG, base_image=ensure_rootfs(print), wheelhouse=wheelhouse, progress=forced.append, force=True)
    print("\n".join(forced))
    step = next(i for i, line in enumerate(forced) if "install-ray.sh" in line and "RUN" in line)
    assert "Using cache" in forced[step + 1] or forced[step + 1].endswith(" CACHED"), forced[step : step + 3]
    assert layers(RAY_TAG) == ray_layers


def pips_words(failed: pytest.ExceptionInfo[CommandError]) -> str:
    """What the failed command printed last (not its command line, which names the constraints file)."""
    return str(failed.value).split("last output:", 1)[1]


def test_a_requirement_that_would_replace_ray_fails_with_pips_message(tmp_path, wheelhouse, images_built_here):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("ray<2.60\n")
    conflict = f"The user requested (constraint) ray=={RAY_VERSION}"
    with pytest.raises(CommandError) as failed:
        build_project_wheelhouse(wheelhouse, requirements, print)
    assert conflict in pips_words(failed), pips_words(failed)

    # The image build holds the same line: a project wheelhouse that lets the requirement through
    # still meets the Ray image's own packages as constraints.
    project = wheelhouse / "project"
    project.mkdir(exist_ok=True)
    for old in project.glob("*.whl"):
        old.unlink()
    (project / PROJECT_MARKER).write_text(f'{{"requirements": "{requirements_digest(requirements.read_bytes())}"}}')
    with pytest.raises(CommandError) as failed:
        build(requirements, wheelhouse, CONFLICT_TAG)
    for container in re.findall(r"Running in ([0-9a-f]{12})", str(failed.value)):
        subprocess.run(["docker", "rm", container], capture_output=True, check=False)  # the classic builder keeps it
    print(pips_words(failed))
    assert "The user requested ray<2.60" in pips_words(failed) and conflict in pips_words(failed)
    assert docker_image_inspect(CONFLICT_TAG) is None
