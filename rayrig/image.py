"""Build, and push, the image every Ray node runs (``images/ray/Dockerfile``).

The image is a base image (PyTorch + CUDA for GPU clusters, plain Debian for
the CPU lab) with ``ray[default,train]`` pinned in a venv at ``/opt/ray``.
Air-gapped builds install from a *wheelhouse*: a folder of wheels made with
``pip download`` on a machine that can reach a package index, copied into the
build context and installed with ``--no-index``.

    rayrig image wheelhouse .rayrig/wheelhouse-2.60.0
    rayrig image build --base debian:bookworm --wheelhouse .rayrig/wheelhouse-2.60.0 \\
        --tag registry.lab:5000/rayrig/ray:2.60.0 --push

Builds are skipped when an image with the same tag was built from the same
inputs (the Dockerfile folder, the base image, the build args and the
wheelhouse's file list): the image carries their hash as the label
``rayrig.inputs``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from deploy.paths import repo_root

Progress = Callable[[str], None]

DEFAULT_RAY_VERSION = "2.60.0"
#: Torch for images whose base has none (the CPU lab). With pip's find-links
#: pointing at a CPU wheel this resolves to ``torch==2.13.0+cpu``.
DEFAULT_TORCH_REQUIREMENT = "torch==2.13.0"
#: Base of the GPU image: pick a tag whose CUDA your hosts' driver supports.
DEFAULT_GPU_BASE = "pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime"
#: The Python the wheelhouse targets by default: Debian 12's python3 (3.11, glibc 2.36).
DEFAULT_PYTHON_VERSION = "3.11"
DEFAULT_GLIBC = (2, 36)
INPUTS_LABEL = "rayrig.inputs"
WHEELHOUSE_MARKER = ".rayrig-wheelhouse.json"


def dockerfile_dir() -> Path:
    """Return the folder holding the Ray image's Dockerfile and its scripts."""
    return repo_root() / "images" / "ray"


# --------------------------------------------------------------------------
# Running commands with compact progress


class CommandError(RuntimeError):
    """A command failed; the message ends with the last lines it printed."""


def stream_command(
    cmd: Sequence[str],
    progress: Progress,
    prefix: str,
    *,
    every_s: float = 5.0,
    heartbeat_s: float = 30.0,
    always: Callable[[str], bool] | None = None,
    stdin_writer: Callable[[io.BufferedWriter], None] | None = None,
) -> list[str]:
    """Run ``cmd``, showing its output compactly, and return all its output lines.

    Lines for which ``always(line)`` is true are shown; other lines are shown at
    most once every ``every_s`` seconds (with a count of the lines skipped), so
    a user sees the command moving without a flood; after ``heartbeat_s``
    seconds without output a "still working" line is shown. ``stdin_writer``, when
    given, is called in a thread with the process's stdin (e.g. to stream a
    build context). Raises :class:`CommandError` with the last lines of output
    when the command fails.
    """
    proc = subprocess.Popen(
        list(cmd),
        stdin=subprocess.PIPE if stdin_writer else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    writer_error: list[BaseException] = []
    writer = None
    if stdin_writer is not None:
        assert proc.stdin is not None

        def _write() -> None:
            try:
                stdin_writer(proc.stdin)  # type: ignore[arg-type]
            except BaseException as exc:  # noqa: BLE001 - reported after the command ends
                writer_error.append(exc)
            finally:
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # type: ignore[union-attr]

        writer = threading.Thread(target=_write, daemon=True)
        writer.start()

    lines: list[str] = []
    tail: collections.deque[str] = collections.deque(maxlen=40)
    last_shown = float("-inf")  # the first line is always shown
    last_line = time.monotonic()
    skipped = 0
    done = threading.Event()

    def _heartbeat() -> None:
        # Long silent steps (pip installing, a layer being pushed) still show life.
        last_beat = 0.0
        while not done.wait(min(heartbeat_s, 5.0)):
            now = time.monotonic()
            quiet = now - last_line
            if quiet >= heartbeat_s and now - last_beat >= heartbeat_s:
                progress(f"{prefix}... still working ({quiet:.0f}s since the last output)")
                last_beat = now

    beat = threading.Thread(target=_heartbeat, daemon=True)
    beat.start()
    assert proc.stdout is not None
    try:
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            if not line.strip():
                continue
            lines.append(line)
            tail.append(line)
            now = last_line = time.monotonic()
            if (always is not None and always(line)) or now - last_shown >= every_s:
                more = f" (+{skipped} lines)" if skipped else ""
                progress(f"{prefix}{line[:160]}{more}")
                last_shown = now
                skipped = 0
            else:
                skipped += 1
        rc = proc.wait()
    finally:
        done.set()
    if writer is not None:
        writer.join()
    if rc != 0 or writer_error:
        why = f"exit status {rc}" if rc else f"stdin writer failed: {writer_error[0]!r}"
        raise CommandError(f"command failed ({why}): {' '.join(cmd)}\n  last output:\n    " + "\n    ".join(tail))
    return lines


# --------------------------------------------------------------------------
# Wheelhouse


def manylinux_platforms(glibc: tuple[int, int] = DEFAULT_GLIBC, arch: str = "x86_64") -> list[str]:
    """Return the wheel platform tags a glibc ``glibc`` Linux on ``arch`` can install.

    pip 23 does not expand ``--platform manylinux_2_36_x86_64`` to the older
    manylinux tags, so ``pip download`` is given each of them explicitly.

    >>> manylinux_platforms((2, 28))[:2]
    ['manylinux_2_28_x86_64', 'manylinux_2_27_x86_64']
    """
    major, minor = glibc
    if major != 2 or minor < 5:
        raise ValueError(f"unsupported glibc {major}.{minor}: expected 2.5 or newer")
    tags = [f"manylinux_2_{m}_{arch}" for m in range(minor, 4, -1)]
    tags += [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    return tags


def wheelhouse_requirements(
    ray_version: str = DEFAULT_RAY_VERSION,
    extra_requirements: Iterable[str] = (),
    torch_requirement: str | None = DEFAULT_TORCH_REQUIREMENT,
) -> list[str]:
    """Return the requirements a wheelhouse for ``ray_version`` holds."""
    reqs = [f"ray[default,train]=={ray_version}"]
    if torch_requirement:
        reqs.append(torch_requirement)
    reqs.extend(extra_requirements)
    return reqs


def pip_download_command(
    dest: Path,
    requirements: Sequence[str],
    python_version: str = DEFAULT_PYTHON_VERSION,
    glibc: tuple[int, int] = DEFAULT_GLIBC,
) -> list[str]:
    """Return the ``pip download`` command that fills ``dest`` with wheels for the image's Python."""
    abi = "cp" + python_version.replace(".", "")
    cmd = [
        sys.executable, "-m", "pip", "download",
        "--disable-pip-version-check", "--progress-bar", "off",
        "--only-binary=:all:",
        "--implementation", "cp", "--python-version", python_version, "--abi", abi,
    ]  # fmt: skip
    for platform in manylinux_platforms(glibc):
        cmd += ["--platform", platform]
    cmd += ["--dest", str(dest), *requirements]
    return cmd


def read_wheelhouse_marker(dest: Path) -> dict | None:
    """Return the marker a completed :func:`build_wheelhouse` left in ``dest``, or None."""
    try:
        return json.loads((Path(dest) / WHEELHOUSE_MARKER).read_text())
    except (OSError, ValueError):
        return None


def build_wheelhouse(
    dest: Path | str,
    ray_version: str = DEFAULT_RAY_VERSION,
    extra_requirements: Iterable[str] = (),
    progress: Progress = print,
    *,
    torch_requirement: str | None = DEFAULT_TORCH_REQUIREMENT,
    python_version: str = DEFAULT_PYTHON_VERSION,
) -> Path:
    """Ensure ``dest`` holds wheels for Ray ``ray_version`` (+ torch, + extras) for the image's Python.

    Runs ``pip download`` on this machine (which can reach the package index)
    for CPython ``python_version`` on manylinux x86_64, binary wheels only. A
    completed wheelhouse records its requirements in ``.rayrig-wheelhouse.json``;
    a second call with the same requirements returns at once.
    """
    dest = Path(dest)
    reqs = wheelhouse_requirements(ray_version, extra_requirements, torch_requirement)
    wanted = {"requirements": reqs, "python_version": python_version}
    marker = read_wheelhouse_marker(dest)
    if marker and {k: marker.get(k) for k in wanted} == wanted:
        progress(f"wheelhouse {dest}: up to date ({len(list(dest.glob('*.whl')))} wheels)")
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    (dest / WHEELHOUSE_MARKER).unlink(missing_ok=True)
    progress(f"wheelhouse {dest}: pip download {' '.join(reqs)} (python {python_version})")
    stream_command(
        pip_download_command(dest, reqs, python_version),
        progress,
        "  [pip] ",
        every_s=3.0,
        always=lambda line: line.startswith(("Saved", "Successfully", "ERROR")),
    )
    wheels = sorted(p.name for p in dest.glob("*.whl"))
    cuda = [w for w in wheels if w.startswith(("nvidia_", "triton-"))]
    if cuda:
        progress(f"wheelhouse {dest}: warning: CUDA wheels present ({', '.join(cuda[:3])}, ...)")
    (dest / WHEELHOUSE_MARKER).write_text(json.dumps({**wanted, "wheels": wheels}, indent=1) + "\n")
    size = sum((dest / w).stat().st_size for w in wheels)
    progress(f"wheelhouse {dest}: {len(wheels)} wheels, {size / 1e9:.2f} GB")
    return dest


# --------------------------------------------------------------------------
# Building and pushing


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


def _context_files(folder: Path) -> dict[str, bytes]:
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
    return line.startswith(("Step ", "Successfully", "rayrig:")) or "error" in line.lower()


def docker_build(
    tag: str,
    files: dict[str, bytes],
    progress: Progress = print,
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
    ray_version: str = DEFAULT_RAY_VERSION,
    wheelhouse: Path | str | None = None,
    progress: Progress = print,
    *,
    torch_requirement: str = DEFAULT_TORCH_REQUIREMENT,
    extra_requirements: Sequence[str] = (),
    labels: dict[str, str] | None = None,
    force: bool = False,
) -> str:
    """Build the Ray image ``tag`` from ``base_image`` with ``images/ray/Dockerfile``; return its ID.

    With ``wheelhouse`` the Python packages are installed offline from it (see
    :func:`build_wheelhouse`); without, from the package index. Torch
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
        _context_files(dockerfile_dir()),
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


def push_image(tag: str, progress: Progress = print) -> None:
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


# --------------------------------------------------------------------------
# CLI


def _cmd_build(args: argparse.Namespace) -> int:
    build_image(
        args.tag or f"rayrig/ray:{args.ray_version}",
        base_image=args.base,
        ray_version=args.ray_version,
        wheelhouse=args.wheelhouse,
        force=args.force,
    )
    if args.push:
        push_image(args.tag or f"rayrig/ray:{args.ray_version}")
    return 0


def _cmd_wheelhouse(args: argparse.Namespace) -> int:
    build_wheelhouse(
        args.dir,
        ray_version=args.ray_version,
        extra_requirements=args.extra,
        python_version=args.python_version,
        torch_requirement=args.torch or None,
    )
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig image build`` and ``rayrig image wheelhouse`` to the CLI.

    Each leaf parser sets ``func``: a callable taking the parsed arguments and
    returning an exit status.
    """
    image = subparsers.add_parser("image", help="build and push the Ray node image")
    sub = image.add_subparsers(dest="image_command", required=True, metavar="COMMAND")

    build = sub.add_parser("build", help="build the Ray image (docker build)")
    build.add_argument("--base", default=DEFAULT_GPU_BASE, help="base image (default: %(default)s)")
    build.add_argument("--ray-version", default=DEFAULT_RAY_VERSION, help="default: %(default)s")
    build.add_argument("--tag", help="image tag (default: rayrig/ray:RAY_VERSION)")
    build.add_argument("--wheelhouse", type=Path, help="install offline from this wheelhouse (rayrig image wheelhouse)")
    build.add_argument("--push", action="store_true", help="push the image after building it")
    build.add_argument("--force", action="store_true", help="build even if the inputs did not change")
    build.set_defaults(func=_cmd_build)

    wheels = sub.add_parser("wheelhouse", help="download the image's wheels for an offline build")
    wheels.add_argument("dir", type=Path, help="folder to fill with wheels")
    wheels.add_argument("--ray-version", default=DEFAULT_RAY_VERSION, help="default: %(default)s")
    wheels.add_argument(
        "--torch", default=DEFAULT_TORCH_REQUIREMENT,
        help="torch requirement, empty for none (default: %(default)s)",
    )  # fmt: skip
    wheels.add_argument("--extra", action="append", default=[], metavar="REQ", help="another requirement (repeatable)")
    wheels.add_argument(
        "--python-version", default=DEFAULT_PYTHON_VERSION, help="the image's Python (default: %(default)s)"
    )
    wheels.set_defaults(func=_cmd_wheelhouse)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m rayrig.image ...`` (the same commands as ``rayrig image ...``)."""
    parser = argparse.ArgumentParser(prog="python -m rayrig.image")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["image", *(argv if argv is not None else sys.argv[1:])])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
