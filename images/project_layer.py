"""A project's own image layer: its requirements on top of the Ray image (``images/project/``).

Images build in three steps, each its own set of layers:

    base image (debian:bookworm, pytorch/pytorch:...)      --base
      -> Ray image   rayrig/ray:RAY_VERSION                images/ray/, --ray-tag
        -> project   registry.example/myproject:1          images/project/, --requirements, --tag

    rayrig image build --requirements requirements.txt --tag registry.example/myproject:1 --push

The project image is a second Dockerfile ``FROM`` the Ray image rather than
more steps in the Ray image's Dockerfile: the Ray image keeps its own tag and
its own input hash (:func:`images.build.docker_build`), so a change to the
project's requirements finds it up to date and builds only the project's
layer on top, and several projects share one Ray image. (Steps appended to the
Ray image's Dockerfile would be kept by Docker's layer cache too, but only while
that cache lives: ``docker builder prune`` or a CI runner without it rebuild
Ray; a tagged image with its inputs hash does not.) There is still one tag
to push and to deploy (``ray_image``): the project's, which holds the Ray
image's layers; a registry or a host that has them already transfers only
the project's layer.

Every package the Ray image holds is a pip constraint at its installed version,
so a requirement that would change Ray, torch or one of their dependencies
fails the build with pip's message instead of replacing it (a package the Ray
layer must hold in another version belongs in the Ray layer: ``--extra``).

Offline: ``rayrig image wheelhouse DIR --requirements FILE`` downloads the
project's wheels into ``DIR/project/`` with the Ray wheelhouse's versions as
constraints, leaving out the wheels ``DIR`` has already; the Ray image's build
sees only ``DIR``'s own wheels, so the project's never invalidate it. A wheel
left out that way is one the Ray image installed, or whose package its base
image has (a pytorch base's own torch).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

from images import RAY_VERSION, context_dir
from images.build import DEFAULT_GPU_BASE, build_image, context_files, docker_build
from images.stream import Progress, silent, stream_command
from images.wheelhouse import DEFAULT_PYTHON_VERSION, DEFAULT_TORCH_REQUIREMENT, pip_download_command

#: The project's wheels, inside a Ray wheelhouse folder.
PROJECT_WHEELHOUSE = "project"
PROJECT_MARKER = ".rayrig-project-wheelhouse.json"
#: Requirement lines that name another file or a local folder, which the image build cannot see.
_OUTSIDE_FILE = re.compile(
    r"^(?:-r|--requirement|-c|--constraint|-e|--editable)(?:[\s=]|$)|^(?:\.{1,2}/|/|file:)", re.IGNORECASE
)


def read_requirements(path: Path | str) -> bytes:
    """Return the content of the requirements file ``path``, checked for what an image build can install.

    Raises :class:`FileNotFoundError` when it does not exist and :class:`ValueError`
    when it lists nothing or a line refers to another file or a local folder
    (``-r``, ``-c``, ``-e``, ``./pkg``): the build context holds this one file only.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"requirements file {path} is a folder: name the file ({path / 'requirements.txt'}?)")
    if not path.is_file():
        raise FileNotFoundError(f"requirements file {path} does not exist")
    data = path.read_bytes()
    listed = 0
    for number, raw in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if _OUTSIDE_FILE.match(line):
            raise ValueError(
                f"{path} line {number}: {line!r} refers to another file or a local folder, which the "
                "image build cannot see: list the requirements themselves in this file"
            )
        listed += not line.startswith("-")
    if not listed:
        raise ValueError(f"requirements file {path} lists no requirement")
    return data


def project_context(requirements: bytes) -> dict[str, bytes]:
    """Return the project image's build context: ``images/project/`` plus ``requirements.txt``."""
    return {**context_files(context_dir("project")), "requirements.txt": requirements}


def requirements_digest(requirements: bytes) -> str:
    """Return the short hash a project wheelhouse records of the requirements it was made for."""
    return hashlib.sha256(requirements).hexdigest()[:20]


def wheel_pins(wheelhouse: Path) -> list[str]:
    """Return ``name==version`` for every wheel in ``wheelhouse`` (from the wheels' file names).

    ``ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl`` gives ``ray==2.60.0``.
    """
    return sorted({"==".join(p.name.split("-")[:2]) for p in wheelhouse.glob("*.whl")})


def _project_wheels(wheelhouse: Path, requirements: bytes) -> Path:
    """Return ``wheelhouse/project`` after checking it was made for these requirements."""
    folder = wheelhouse / PROJECT_WHEELHOUSE
    fix = f"run `rayrig image wheelhouse {wheelhouse} --requirements FILE`"
    try:
        marker = json.loads((folder / PROJECT_MARKER).read_text())
    except (OSError, ValueError):
        missing = f"wheelhouse {wheelhouse} has no wheels for the project's requirements: {fix}"
        raise FileNotFoundError(missing) from None
    if marker.get("requirements") != requirements_digest(requirements):
        raise ValueError(f"the project's wheels in {folder} were downloaded for other requirements: {fix}")
    return folder


def build_project_wheelhouse(
    wheelhouse: Path | str,
    requirements: Path | str,
    progress: Progress = silent,
    *,
    python_version: str = DEFAULT_PYTHON_VERSION,
) -> Path:
    """Ensure ``wheelhouse/project`` holds the wheels of the requirements file ``requirements``.

    ``wheelhouse`` must hold the Ray image's wheels already
    (:func:`images.wheelhouse.build_wheelhouse`): their versions are the
    download's constraints, and wheels it has are not downloaded twice. Returns
    the project folder; a second call for the same requirements returns at once.
    """
    wheelhouse = Path(wheelhouse)
    data = read_requirements(requirements)
    pins = wheel_pins(wheelhouse) if wheelhouse.is_dir() else []
    if not pins:
        raise FileNotFoundError(f"wheelhouse {wheelhouse} holds no wheels: make the Ray image's wheelhouse first")
    dest = wheelhouse / PROJECT_WHEELHOUSE
    wanted = {"requirements": requirements_digest(data), "python_version": python_version, "pins": pins}
    try:
        marker = json.loads((dest / PROJECT_MARKER).read_text())
    except (OSError, ValueError):
        marker = {}
    if {k: marker.get(k) for k in wanted} == wanted:
        progress(f"wheelhouse {dest}: up to date ({len(list(dest.glob('*.whl')))} wheels)")
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    (dest / PROJECT_MARKER).unlink(missing_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    constraints = dest / "ray-wheelhouse-constraints.txt"
    constraints.write_text("".join(f"{pin}\n" for pin in pins))
    progress(f"wheelhouse {dest}: pip download -r {requirements}, the Ray wheelhouse's {len(pins)} versions kept")
    stream_command(
        pip_download_command(dest, ["-r", str(requirements), "-c", str(constraints)], python_version),
        progress,
        "  [pip] ",
        every_s=3.0,
        always=lambda line: line.startswith(("Saved", "Successfully", "ERROR")),
    )
    for wheel in dest.glob("*.whl"):
        if (wheelhouse / wheel.name).is_file():
            wheel.unlink()  # the Ray wheelhouse has it, and the Ray image installed it
    wheels = sorted(p.name for p in dest.glob("*.whl"))
    (dest / PROJECT_MARKER).write_text(json.dumps({**wanted, "wheels": wheels}, indent=1) + "\n")
    progress(f"wheelhouse {dest}: {len(wheels)} wheels of the project's own")
    return dest


def build_project_image(
    tag: str,
    requirements: Path | str,
    ray_image: str,
    wheelhouse: Path | str | None = None,
    progress: Progress = silent,
    *,
    labels: dict[str, str] | None = None,
    force: bool = False,
) -> str:
    """Build ``tag``: the Ray image ``ray_image`` plus the requirements file ``requirements``; return its ID.

    With ``wheelhouse`` (a Ray wheelhouse with the project's wheels in its
    ``project/`` folder) the install is offline. Skipped when ``tag`` was built
    from the same inputs: the requirements' content, ``images/project/``, the Ray
    image's ID and the project's wheel names (unless ``force``).
    """
    data = read_requirements(requirements)
    folder = _project_wheels(Path(wheelhouse), data) if wheelhouse is not None else None
    wheels = sorted(folder.glob("*.whl")) if folder is not None else []
    source = f"offline from {folder} ({len(wheels)} wheels)" if folder is not None else "from the package index"
    progress(f"image {tag}: {ray_image} + {requirements}, python packages {source}")
    return docker_build(
        tag,
        project_context(data),
        progress,
        build_args={"RAY_IMAGE": ray_image, "OFFLINE": "1" if folder is not None else "0"},
        labels={"rayrig.ray_image": ray_image, **(labels or {})},
        wheels=wheels,
        base_image=ray_image,
        force=force,
    )


def build_with_requirements(
    tag: str,
    requirements: Path | str,
    ray_tag: str,
    base_image: str = DEFAULT_GPU_BASE,
    ray_version: str = RAY_VERSION,
    wheelhouse: Path | str | None = None,
    progress: Progress = silent,
    *,
    torch_requirement: str = DEFAULT_TORCH_REQUIREMENT,
    extra_requirements: Sequence[str] = (),
    force: bool = False,
) -> str:
    """Build the Ray image ``ray_tag`` (or find it up to date), then the project image ``tag`` on it.

    Every input is checked before anything is built: the requirements file, and
    with ``wheelhouse`` its project wheels. Returns the project image's ID.
    """
    if tag == ray_tag:
        raise ValueError(f"the project image needs a tag of its own: {tag} is the Ray image's (--ray-tag)")
    data = read_requirements(requirements)
    if wheelhouse is not None and Path(wheelhouse).is_dir():
        _project_wheels(Path(wheelhouse), data)
    build_image(
        ray_tag,
        base_image=base_image,
        ray_version=ray_version,
        wheelhouse=wheelhouse,
        progress=progress,
        torch_requirement=torch_requirement,
        extra_requirements=extra_requirements,
        force=force,
    )
    return build_project_image(tag, requirements, ray_tag, wheelhouse, progress, force=force)
