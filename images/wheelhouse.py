"""Wheelhouses: the Ray image's Python packages, downloaded here, for builds without a package index.

A wheelhouse is a folder of wheels made with ``pip download`` on a machine that
can reach a package index; the image build copies it into its context and
installs with ``--no-index``.

    rayrig image wheelhouse .rayrig/wheelhouse-RAY_VERSION
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from images import RAY_VERSION
from images.stream import Progress, silent, stream_command

#: Torch for images whose base has none (the CPU lab). With pip's find-links
#: pointing at a CPU wheel this resolves to ``torch==2.13.0+cpu``.
DEFAULT_TORCH_REQUIREMENT = "torch==2.13.0"
#: The Python the wheelhouse targets by default: Debian 12's python3 (3.11, glibc 2.36).
DEFAULT_PYTHON_VERSION = "3.11"
DEFAULT_GLIBC = (2, 36)
WHEELHOUSE_MARKER = ".rayrig-wheelhouse.json"


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
    ray_version: str = RAY_VERSION,
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
    ray_version: str = RAY_VERSION,
    extra_requirements: Iterable[str] = (),
    progress: Progress = silent,
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
