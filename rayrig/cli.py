"""The ``rayrig`` command: the local lab, images, EC2 clusters, deploys and checks, the cluster's token.

Each command area (``rayrig/commands/``) registers its own subcommands; this module only wires them up.
Exit codes: 0 success, 1 failure, 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rayrig.commands import cloud, dashboard, deploy, image, lab, submit, token

#: Command modules whose ``register(subparsers)`` adds one area each, in ``rayrig --help``'s order:
#: ``rayrig lab ...``, ``rayrig image ...``, ``rayrig cloud ...``, deploy/check/demo, ``rayrig token ...``, dashboard,
#: submit.
AREAS = (lab, image, cloud, deploy, token, dashboard, submit)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rayrig", description="GPU Ray clusters with pyinfra.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for area in AREAS:
        area.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
