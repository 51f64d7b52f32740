"""``rayrig image build|wheelhouse``: building the Ray node image (:mod:`images`) from the command line.

    rayrig image wheelhouse .rayrig/wheelhouse-RAY_VERSION
    rayrig image build --base debian:bookworm --wheelhouse .rayrig/wheelhouse-RAY_VERSION \\
        --tag registry.lab:5000/rayrig/ray:RAY_VERSION --push

With ``--requirements FILE`` the build adds the project's own layer on the Ray
image (:mod:`images.project_layer`): ``--tag`` then names the project image (the
one to push and deploy) and ``--ray-tag`` the Ray image under it.

    rayrig image build --requirements requirements.txt --tag registry.example/myproject:1 --push

RAY_VERSION defaults to ``ray_version`` in ``inventories/group_data/all.py``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from images import RAY_VERSION
from images.build import DEFAULT_GPU_BASE, build_image, push_image
from images.project_layer import build_project_wheelhouse, build_with_requirements, read_requirements
from images.wheelhouse import DEFAULT_PYTHON_VERSION, DEFAULT_TORCH_REQUIREMENT, build_wheelhouse
from rayrig.errors import UsageError


def wheelhouse_dir(text: str) -> Path:
    """``--wheelhouse``: a folder that exists (argparse's usage error otherwise, before Docker is asked)."""
    folder = Path(text).expanduser()
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "no such folder"
        raise argparse.ArgumentTypeError(f"{text}: {what}; make one with `rayrig image wheelhouse {text}`")
    return folder


def requirements_file(text: str) -> Path:
    """``--requirements``: a requirements file the build can use (argparse's usage error otherwise,
    naming the file or its line, before Docker or pip is asked)."""
    try:
        read_requirements(Path(text).expanduser())
    except (OSError, ValueError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return Path(text).expanduser()


def _cmd_build(args: argparse.Namespace) -> int:
    ray_tag = args.ray_tag or f"rayrig/ray:{args.ray_version}"
    common = {"base_image": args.base, "ray_version": args.ray_version, "wheelhouse": args.wheelhouse,
              "progress": print, "extra_requirements": args.extra, "force": args.force}  # fmt: skip
    if args.requirements is None:
        tag = args.tag or ray_tag
        build_image(tag, **common)
    else:
        tag = args.tag or f"rayrig/project:{args.ray_version}"
        try:
            build_with_requirements(tag, args.requirements, ray_tag, **common)
        except ValueError as error:  # a tag or a project wheelhouse that does not fit: nothing was built
            raise UsageError(str(error)) from None
    if args.push:
        push_image(tag, progress=print)
    return 0


def _cmd_wheelhouse(args: argparse.Namespace) -> int:
    build_wheelhouse(
        args.dir,
        ray_version=args.ray_version,
        extra_requirements=args.extra,
        progress=print,
        python_version=args.python_version,
        torch_requirement=args.torch or None,
    )
    if args.requirements is not None:
        try:
            build_project_wheelhouse(args.dir, args.requirements, print, python_version=args.python_version)
        except ValueError as error:  # the folder's project wheels were made for other requirements
            raise UsageError(str(error)) from None
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
    build.add_argument("--ray-version", default=RAY_VERSION, help="Ray version to install (default: %(default)s)")
    build.add_argument(
        "--tag",
        help="image tag (default: rayrig/ray:RAY_VERSION; with --requirements the project image's, "
        "default rayrig/project:RAY_VERSION)",
    )
    build.add_argument(
        "--requirements", type=requirements_file, metavar="FILE",
        help="the project's requirements, installed as a layer of their own on the Ray image",
    )  # fmt: skip
    build.add_argument("--ray-tag", help="with --requirements: the Ray image's tag (default: rayrig/ray:RAY_VERSION)")
    build.add_argument(
        "--extra", action="append", default=[], metavar="REQ",
        help="another requirement of the Ray layer itself (repeatable)",
    )  # fmt: skip
    build.add_argument(
        "--wheelhouse", type=wheelhouse_dir, help="install offline from this wheelhouse (rayrig image wheelhouse)"
    )
    build.add_argument("--push", action="store_true", help="push the image after building it")
    build.add_argument("--force", action="store_true", help="build even if the inputs did not change")
    build.set_defaults(func=_cmd_build)

    wheels = sub.add_parser("wheelhouse", help="download the image's wheels for an offline build")
    wheels.add_argument("dir", type=Path, help="folder to fill with wheels")
    wheels.add_argument("--ray-version", default=RAY_VERSION, help="Ray version to download (default: %(default)s)")
    wheels.add_argument(
        "--torch", default=DEFAULT_TORCH_REQUIREMENT,
        help="torch requirement, empty for none (default: %(default)s)",
    )  # fmt: skip
    wheels.add_argument("--extra", action="append", default=[], metavar="REQ", help="another requirement (repeatable)")
    wheels.add_argument(
        "--requirements", type=requirements_file, metavar="FILE", help="also the project's wheels, into DIR/project/"
    )
    wheels.add_argument(
        "--python-version", default=DEFAULT_PYTHON_VERSION, help="the image's Python (default: %(default)s)"
    )
    wheels.set_defaults(func=_cmd_wheelhouse)
