"""Build, and push, Docker images; above all the image every Ray node runs (``images/ray/``).

The Ray image is a base image (PyTorch + CUDA for GPU clusters, plain Debian
for the CPU lab) with ``ray[default,train]`` pinned in a venv at ``/opt/ray``.
Air-gapped builds install from a wheelhouse (:mod:`images.wheelhouse`).

    rayrig image build --base debian:bookworm --wheelhouse .rayrig/wheelhouse-RAY_VERSION \\
        --tag registry.lab:5000/rayrig/ray:RAY_VERSION --push

Builds are skipped when an image with the same tag was built from the same
inputs (the build context, the base image, the build args and the
wheelhouse's file list): the image carries their hash as the label
``rayrig.inputs``.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from images import RAY_VERSION, context_dir
from images.stream import CommandError, Progress, silent, stream_command
from images.wheelhouse import DEFAULT_TORCH_REQUIREMENT

#: Base of the GPU image: pick a tag whose CUDA your hosts' driver supports.
DEFAULT_GPU_BASE = "pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime"
INPUTS_LABEL = "rayrig.inputs"


def docker_image_inspect(ref: str) -> dict | None:
    """Return ``docker image inspect`` of ``ref``, or None when the image is not here."""
    out = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return None
    data = json.loads(out.stdout)
    return data[0] if data else None


def image_label(ref: str, label: str) -> str | None:
    """Return the value of ``label`` on the local image ``ref`` (None if absent)."""
    info = docker_image_inspect(ref)
    if not info:
        return None
    return ((info.get("Config") or {}).get("Labels") or {}).get(label)


def image_inputs_hash(
    context_files: dict[str, bytes],
    build_args: dict[str, str],
    base_id: str,
    wheels: Iterable[str] = (),
) -> str:
    """Return a hash of everything a build depends on.

    ``context_files`` maps names in the Dockerfile folder to their content,
    ``base_id`` is the base image's ID (or its name when not pulled yet) and
    ``wheels`` the wheelhouse's file names (their names carry their versions).
    """
    h = hashlib.sha256()
    for name in sorted(context_files):
        h.update(f"file {name} {len(context_files[name])}\n".encode())
        h.update(context_files[name])
    for key in sorted(build_args):
        h.update(f"arg {key}={build_args[key]}\n".encode())
    h.update(f"base {base_id}\n".encode())
    for wheel in sorted(wheels):
        h.update(f"wheel {wheel}\n".encode())
    return h.hexdigest()[:20]


def context_files(folder: Path) -> dict[str, bytes]:
    """Return the files of a build context folder, by their path inside it."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _wheel_files(wheelhouse: Path | None) -> list[Path]:
    if wheelhouse is None:
        return []
    return sorted(p for p in wheelhouse.iterdir() if p.is_file() and p.suffix == ".whl")


def _write_context(stream: io.BufferedWriter, files: dict[str, bytes], wheels: Sequence[Path]) -> None:
    """Write the build context as a tar stream: the Dockerfile folder plus wheelhouse/."""
    with tarfile.open(fileobj=stream, mode="w|") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
        folder = tarfile.TarInfo("wheelhouse")
        folder.type = tarfile.DIRTYPE
        folder.mode = 0o755
        tar.addfile(folder)
        for wheel in wheels:
            tar.add(str(wheel), arcname=f"wheelhouse/{wheel.name}", recursive=False)


def _is_build_milestone(line: str) -> bool:
    # A step Docker's layer cache answered is shown too: it says which layers a build reused.
    return (
        line.startswith(("Step ", "Successfully", "rayrig:"))
        or "error" in line.lower()
        or "Using cache" in line  # the classic builder
        or line.endswith(" CACHED")  # BuildKit's plain progress: "#7 CACHED"
    )


def docker_build(
    tag: str,
    files: dict[str, bytes],
    progress: Progress = silent,
    *,
    build_args: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    wheels: Sequence[Path] = (),
    base_image: str | None = None,
    force: bool = False,
) -> str:
    """Build ``tag`` from an in-memory context and return the image ID; skip it when up to date.

    ``files`` is the build context (it must hold ``Dockerfile``); ``wheels``
    are added under ``wheelhouse/``. The context is streamed to ``docker
    build -`` as a tar, so nothing is copied on disk. The image is labelled
    with :func:`image_inputs_hash` of the context, the build args, the base
    image's ID and the wheel names; a build is skipped when ``tag`` already
    carries the same hash (unless ``force``).
    """
    build_args = dict(build_args or {})
    base_info = docker_image_inspect(base_image) if base_image else None
    base_id = base_info["Id"] if base_info else (base_image or "")
    inputs = image_inputs_hash(files, build_args, base_id, (w.name for w in wheels))
    existing = docker_image_inspect(tag)
    if not force and existing and image_label(tag, INPUTS_LABEL) == inputs:
        progress(f"image {tag}: up to date")
        return existing["Id"]

    cmd = ["docker", "build"]
    for key, value in build_args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    for key, value in {**(labels or {}), INPUTS_LABEL: inputs}.items():
        cmd += ["--label", f"{key}={value}"]
    cmd += ["--tag", tag, "-"]
    started = time.monotonic()
    stream_command(
        cmd,
        progress,
        "  [build] ",
        every_s=5.0,
        always=_is_build_milestone,
        stdin_writer=lambda stream: _write_context(stream, files, wheels),
    )
    info = docker_image_inspect(tag)
    if not info:
        raise CommandError(f"docker build reported success but {tag} is not there")
    progress(f"image {tag}: built in {time.monotonic() - started:.0f}s, {info.get('Size', 0) / 1e9:.2f} GB")
    return info["Id"]


def build_image(
    tag: str,
    base_image: str = DEFAULT_GPU_BASE,
    ray_version: str = RAY_VERSION,
    wheelhouse: Path | str | None = None,
    progress: Progress = silent,
    *,
    torch_requirement: str = DEFAULT_TORCH_REQUIREMENT,
    extra_requirements: Sequence[str] = (),
    labels: dict[str, str] | None = None,
    force: bool = False,
) -> str:
    """Build the Ray image ``tag`` from ``base_image`` with ``images/ray/Dockerfile``; return its ID.

    With ``wheelhouse`` the Python packages are installed offline from it (see
    :func:`images.wheelhouse.build_wheelhouse`); without, from the package index. Torch
    (``torch_requirement``) is installed only when the base image has none.
    The build is skipped when ``tag`` already exists and was built from the
    same inputs (unless ``force``).
    """
    wheel_dir = Path(wheelhouse) if wheelhouse is not None else None
    if wheel_dir is not None and not wheel_dir.is_dir():
        raise FileNotFoundError(f"wheelhouse {wheel_dir} does not exist: run `rayrig image wheelhouse`")
    wheels = _wheel_files(wheel_dir)
    if wheel_dir is not None and not wheels:
        raise FileNotFoundError(f"wheelhouse {wheel_dir} holds no wheels: run `rayrig image wheelhouse`")
    source = f"offline from {wheel_dir} ({len(wheels)} wheels)" if wheel_dir else "from the package index"
    progress(f"image {tag}: from {base_image}, ray {ray_version}, python packages {source}")
    return docker_build(
        tag,
        context_files(context_dir("ray")),
        progress,
        build_args={
            "BASE_IMAGE": base_image,
            "RAY_VERSION": ray_version,
            "TORCH_REQUIREMENT": torch_requirement,
            "EXTRA_REQUIREMENTS": " ".join(extra_requirements),
            "OFFLINE": "1" if wheel_dir is not None else "0",
        },
        labels={"rayrig.ray_version": ray_version, **(labels or {})},
        wheels=wheels,
        base_image=base_image,
        force=force,
    )


def push_image(tag: str, progress: Progress = silent) -> None:
    """Push ``tag`` to its registry (``docker push``), showing layer progress."""
    progress(f"image {tag}: pushing")
    started = time.monotonic()
    stream_command(
        ["docker", "push", tag],
        progress,
        "  [push] ",
        every_s=5.0,
        always=lambda line: line.endswith(("Pushed", "Layer already exists")) or "digest:" in line,
    )
    progress(f"image {tag}: pushed in {time.monotonic() - started:.0f}s")
