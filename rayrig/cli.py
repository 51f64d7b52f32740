"""The ``rayrig`` command: the local lab, images, EC2 clusters, deploys and checks, the cluster's token and CA.

Each command area (``rayrig/commands/``) registers its own subcommands; this module only wires them up
and runs the chosen one through ``rayrig.errors``, which turns a failure into one line on stderr.
Exit codes: 0 success, 1 failure, 2 bad usage, 130 interrupted (see ``rayrig/errors.py``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Iterator, Sequence

from images import RAY_VERSION
from rayrig import __version__
from rayrig.commands import cloud, dashboard, deploy, health, image, lab, notebook, operate, submit, tls, token
from rayrig.errors import run_command

#: Command modules whose ``register(subparsers)`` adds one area each, in ``rayrig --help``'s order:
#: ``rayrig lab ...``, ``rayrig image ...``, ``rayrig cloud ...``, deploy/check/demo, ``rayrig token ...``,
#: ``rayrig tls ...``, dashboard, and the day-to-day commands on a running cluster (status, ssh, exec, logs,
#: ``rayrig health ...``, submit, notebook).
AREAS = (lab, image, cloud, deploy, token, tls, dashboard, operate, health, submit, notebook)


def version() -> str:
    """``rayrig --version``: the installed package's version and the Ray version its images pin."""
    try:
        installed = importlib.metadata.version("rayrig")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        installed = __version__
    return f"rayrig {installed} (Ray {RAY_VERSION} in the node image)"


def leaves(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser of ``parser``'s tree that runs a command (``rayrig cloud ls``, ``rayrig deploy`` ...)."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subparsers:
        yield parser
    for action in subparsers:
        for child in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
            yield from leaves(child)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rayrig", description="GPU Ray clusters with pyinfra.")
    parser.add_argument("--version", action="version", version=version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for area in AREAS:
        area.register(commands)
    for leaf in leaves(parser):
        leaf.set_defaults(command_path=leaf.prog)  # "rayrig cloud ls": what its error lines start with
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rayrig ARGV``; return the exit status (argparse exits 2 itself on bad usage)."""
    args = build_parser().parse_args(argv)
    return run_command(args.func, args, args.command_path)


if __name__ == "__main__":
    sys.exit(main())
