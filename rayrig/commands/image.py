"""``rayrig image build|wheelhouse``: building the Ray node image (:mod:`images`) from the command line.

    rayrig image wheelhouse .rayrig/wheelhouse-RAY_VERSION
    rayrig image build --base debian:bookworm --wheelhouse .rayrig/wheelhouse-RAY_VERSION \\
        --tag registry.lab:5000/rayrig/ray:RAY_VERSION --push

RAY_VERSION defaults to ``ray_version`` in ``inventories/group_data/all.py``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from images import RAY_VERSION
from images.build import DEFAULT_GPU_BASE, build_image, push_image
from images.wheelhouse import DEFAULT_PYTHON_VERSION, DEFAULT_TORCH_REQUIREMENT, build_wheelhouse


def wheelhouse_dir(text: str) -> Path:
    """``--wheelhouse``: a folder that exists (argparse's usage error otherwise, before Docker is asked)."""
    folder = Path(text).expanduser()
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "no such folder"
        raise argparse.ArgumentTypeError(f"{text}: {what}; make one with `rayrig image wheelhouse {text}`")
    return folder


def _cmd_build(args: argparse.Namespace) -> int:
    tag = args.tag or f"rayrig/ray:{args.ray_version}"
    build_image(
        tag,
        base_image=args.base,
        ray_version=args.ray_version,
        wheelhouse=args.wheelhouse,
        progress=print,
        force=args.force,
    )
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
    build.add_argument("--ray-version", default=RAY_VERSION, help="default: %(default)s")
    build.add_argument("--tag", help="image tag (default: rayrig/ray:RAY_VERSION)")
    build.add_argument(
        "--wheelhouse", type=wheelhouse_dir, help="install offline from this wheelhouse (rayrig image wheelhouse)"
    )
    build.add_argument("--push", action="store_true", help="push the image after building it")
    build.add_argument("--force", action="store_true", help="build even if the inputs did not change")
    build.set_defaults(func=_cmd_build)

    wheels = sub.add_parser("wheelhouse", help="download the image's wheels for an offline build")
    wheels.add_argument("dir", type=Path, help="folder to fill with wheels")
    wheels.add_argument("--ray-version", default=RAY_VERSION, help="default: %(default)s")
    wheels.add_argument(
        "--torch", default=DEFAULT_TORCH_REQUIREMENT,
        help="torch requirement, empty for none (default: %(default)s)",
    )  # fmt: skip
    wheels.add_argument("--extra", action="append", default=[], metavar="REQ", help="another requirement (repeatable)")
    wheels.add_argument(
        "--python-version", default=DEFAULT_PYTHON_VERSION, help="the image's Python (default: %(default)s)"
    )
    wheels.set_defaults(func=_cmd_wheelhouse)
