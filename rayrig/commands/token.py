"""``rayrig token rotate INVENTORY``: give a running cluster a new Ray token, on purpose.

    rayrig token rotate inventories/prod.py [more pyinfra arguments]

The new token takes the place of the local copy, the previous one is kept 0600 beside it
(``ray_auth_token.previous``) until every node runs the new one, and the deploy runs with
``RAYRIG_TOKEN_ROTATION=1``: every node gets the new token and its ray-node container is
replaced like for any other change (the head first; a node that does not rejoin gets its
previous container back and the deploy fails). No token is ever printed.
Exit codes: 0 rotated, 1 the deploy failed (the message says where the cluster stands), 2 bad usage.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from deploy.ray import auth
from deploy.ray.cluster_token import ROTATION_ENV
from rayrig.errors import UsageError
from rayrig.inventory import OperateError, load_inventory
from rayrig.run import deploy_rotation

#: pyinfra arguments that would leave some hosts on the previous token.
PARTIAL_RUN = ("--limit", "--exclude")


class RotationUsageError(Exception):
    """The rotation cannot start; nothing was changed."""


def cluster_settings(inventory: str, pyinfra_args: list[str]) -> dict[str, Any]:
    """The head's settings of ``inventory``, once it is known that a rotation can start there."""
    partial = [arg for arg in pyinfra_args if arg.split("=", 1)[0] in PARTIAL_RUN]
    if partial:
        raise RotationUsageError(
            f"{partial[0].split('=', 1)[0]}: a rotation must reach every host of the inventory "
            "(a node left on the previous token could not rejoin the cluster)"
        )
    try:
        settings = dict(load_inventory(inventory).head.settings)  # checked as a deploy checks it
    except OperateError as error:
        raise RotationUsageError(str(error)) from None
    if settings["ray_auth"] != "token":
        raise RotationUsageError(
            f"{inventory}: ray_auth = {settings['ray_auth']!r}: the cluster has no token to rotate"
        )
    return settings


def _cmd_rotate(args: argparse.Namespace) -> int:
    try:
        settings = cluster_settings(args.inventory, args.pyinfra_args)
    except RotationUsageError as error:
        message, *details = str(error).splitlines()
        raise UsageError(message, "nothing was changed", [line.strip() for line in details]) from None
    rotation = auth.begin_rotation(settings)
    cluster = settings["ray_cluster_name"]
    print(start_message(cluster, rotation), flush=True)
    return deploy_rotation(
        args.inventory,
        args.pyinfra_args,
        ROTATION_ENV,
        kept="token",
        undo=lambda: auth.undo_rotation(rotation),
        end=lambda: auth.end_rotation(rotation),
        failure=lambda status: failure_message(args.inventory, rotation, status),
        done=f"==> Every node of cluster {cluster!r} runs the new token ({rotation.token}); the previous one is "
        "deleted, and Ray refuses it. Give the new file to every client that needs the cluster.",
    )


def start_message(cluster: str, rotation: auth.Rotation) -> str:
    """What the rotation is about to deploy, and where the previous token is kept."""
    if rotation.resumed:
        return (
            f"==> A rotation of cluster {cluster!r} was cut short: finishing it with the token it made "
            f"({rotation.token}); the previous one is still in {rotation.backup}"
        )
    kept = f"; the previous one is kept in {rotation.backup} until every node runs the new one"
    return f"==> New Ray token for cluster {cluster!r} in {rotation.token}{kept if rotation.backup else ''}"


def failure_message(inventory: str, rotation: auth.Rotation, status: int) -> str:
    """Where the cluster stands after a rotation's deploy failed, and how to finish it."""
    previous = f", kept in {rotation.backup}" if rotation.backup else ""
    return (
        f"rayrig token rotate: the deploy failed (pyinfra exit status {status}); the rotation is not finished.\n"
        f"  The nodes whose ray-node was replaced before the failure (the head first) run the new token, "
        f"in {rotation.token}.\n"
        f"  The others (every node, if the deploy stopped before any change) still run the previous "
        f"one{previous}.\n"
        f"  Fix the cause above, then run `rayrig token rotate {shlex.quote(inventory)}` again: it finishes "
        "with the same new token, so the nodes already on it are not restarted."
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig token rotate``."""
    token = subparsers.add_parser("token", help="the cluster's Ray token")
    sub = token.add_subparsers(dest="token_command", required=True, metavar="COMMAND")
    rotate = sub.add_parser(
        "rotate", help="give the cluster a new Ray token: every node gets it and its ray-node is replaced"
    )
    rotate.add_argument("inventory", help="pyinfra inventory file, e.g. inventories/prod.py")
    rotate.add_argument("pyinfra_args", nargs=argparse.REMAINDER, help="more pyinfra arguments (-v, --dry ...)")
    rotate.set_defaults(func=_cmd_rotate)
