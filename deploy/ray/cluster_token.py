"""One Ray token for the cluster's life: the operator's copy is the one the cluster runs.

Decided once per run, when the deploy file runs for its first host, before any
operation on any host (:func:`settle_token_once`):

- No local copy, and the head has the token (``auth.NODE_TOKEN_PATH``): the deploy
  reads it over its own SSH connection to the head and stores it, 0600 in a 0700
  folder. The nodes already have it: nothing changes on any of them. A second
  laptop or a fresh clone joins the cluster this way.
- No local copy and no token on the head: the first deploy; a new token is generated.
- A local copy that differs from the one the cluster runs (the head's token file,
  or the ``rayrig.auth-token-digest`` label of the head's ray-node container) stops
  the deploy: deploying it would restart every node and lock out every client that
  holds the cluster's token. Only ``rayrig token rotate`` changes the token of a
  running cluster: it runs the deploy with ``RAYRIG_TOKEN_ROTATION=1``.

The head's token is read with ``sudo cat`` through the connector itself, not as a
pyinfra fact (pyinfra prints a fact's output with ``-vvv``) nor with ``get_file``
(through sudo that copies the file to a temporary file on the host, made readable
for the download): the token exists on the host only in its own file, and in this
process only in memory until it is stored. The command (which holds no secret) is
shown with ``-vv``, as pyinfra shows a fact's; its output never is.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from pyinfra import logger
from pyinfra.api.exceptions import PyinfraError

from deploy.contract.settings import host_data, host_settings, merge
from deploy.ray import auth
from deploy.run.facts import ContainerState, fact, read_unprinted_file, unprinted_file_command
from deploy.run.memo import run_lock, run_memo

#: Set to 1 by ``rayrig token rotate``: the local token is the cluster's next one.
ROTATION_ENV = "RAYRIG_TOKEN_ROTATION"
TOKEN_LABEL = auth.TOKEN_LABEL

#: The first line the read command prints: the token follows, or there is none.
TOKEN_FOLLOWS, NO_TOKEN = "RAYRIG-TOKEN-FOLLOWS", "RAYRIG-NO-TOKEN"
#: Reads the head's token file: a marker line, then the token. A folder it may not look into (no sudo)
#: is an error, not "no token". Its output is never printed.
READ_COMMAND = unprinted_file_command(auth.NODE_TOKEN_DIR, auth.NODE_TOKEN_PATH, TOKEN_FOLLOWS, NO_TOKEN)


#: Said once on every deploy of a cluster without token authentication (``ray_auth_allow_none`` consented).
NO_AUTH_WARNING = (
    'ray_auth = "none" (ray_auth_allow_none = True): Ray asks no client for a token; whoever reaches a Ray port '
    "runs code on every node, so the firewall and the network are all that keep them out"
)


class ClusterTokenError(PyinfraError):
    """The cluster's token cannot be read from the head, or the local one is not the cluster's."""


def settle_token_once(state: Any, inventory: Any) -> Path | None:
    """The local copy of the cluster's token, fetched, generated or checked the first time a deploy file
    runs in ``state``; None without token authentication (``ray_auth = "none"``).

        settle_token_once(host.state, inventory)  # after validation, before any operation
    """
    memo = run_memo(state, "cluster_token")
    if "path" not in memo:
        with run_lock(state, "cluster_token"):  # one read of the head's token, not one per host
            if "path" not in memo:
                memo["path"] = _settle(inventory)
    return memo["path"]


def rotating() -> bool:
    """Whether this run deploys a new token on purpose (``rayrig token rotate``)."""
    return os.environ.get(ROTATION_ENV) == "1"


def _settle(inventory: Any) -> Path | None:
    head = next(h for h in inventory if merge(host_data(h))["ray_role"] == "head")
    settings = host_settings(head)
    if settings["ray_auth"] != "token":
        logger.warning(NO_AUTH_WARNING)
        return None
    path = auth.token_path(settings)
    on_head = read_head_token(head)
    container = fact(head, ContainerState, settings["ray_container_name"])
    label = (container or {}).get("labels", {}).get(TOKEN_LABEL)
    if not path.exists():
        if on_head is None:
            if label and not rotating():
                raise ClusterTokenError(missing_file_message(head.name, path))
            return auth.ensure_token(settings)  # the first deploy
        auth.store_token(path, on_head)
        logger.info(f"{head.print_prefix}Fetched the cluster's Ray token from the head into {path}")
    path = auth.ensure_token(settings)  # 0600, not empty
    if not rotating():
        local = auth.token_digest(path)
        cluster = {
            f"the head's token file {auth.NODE_TOKEN_PATH}": auth.digest(on_head) if on_head is not None else None,
            f"the head's {settings['ray_container_name']} container (label {TOKEN_LABEL})": label,
        }
        differs = {where: value for where, value in cluster.items() if value and value != local}
        if differs:
            split = None not in cluster.values() and len(set(cluster.values())) > 1
            raise ClusterTokenError(mismatch_message(head.name, path, local, differs, split))
    return path


def read_head_token(head: Any) -> str | None:
    """The token in the head's ``auth.NODE_TOKEN_PATH`` (None when there is none), read through sudo
    as the deploy's operations are, its output kept from pyinfra's printing and logs."""
    markers = (TOKEN_FOLLOWS, NO_TOKEN)
    what = "the cluster's Ray token"
    token = read_unprinted_file(head, READ_COMMAND, markers, what, auth.NODE_TOKEN_PATH, ClusterTokenError)
    if token is None:
        return None
    if not token:
        raise ClusterTokenError(
            f"host {head.name}: the cluster's Ray token file {auth.NODE_TOKEN_PATH} is empty. "
            "Run `rayrig token rotate INVENTORY` to give the cluster a new token. Nothing was changed on any host."
        )
    return token


def mismatch_message(head: str, path: Path, local: str, differs: dict[str, str], split: bool = False) -> str:
    """The error of a local token that is not the one the cluster runs (digests only, never a token).

    ``split``: the head's token file and its container disagree with each other, as a
    rotation cut short leaves them.
    """
    where = "; ".join(f"{place} has digest {value}" for place, value in differs.items())
    text = (
        f"host {head}: the local Ray token {path} (digest {local}) differs from the cluster's: {where}. "
        "Deploying it would restart every node and lock out every client that holds the cluster's token, "
        "so nothing was changed on any host. Either delete "
        f"{shlex.quote(str(path))} to have the deploy fetch the cluster's token from the head, or run "
        "`rayrig token rotate INVENTORY` to give the cluster a new token on purpose."
    )
    if split:
        text += (
            " The head's token file and its container disagree, as a rotation cut short leaves them: "
            "`rayrig token rotate INVENTORY` finishes it."
        )
    return text


def missing_file_message(head: str, path: Path) -> str:
    """The error of a head whose ray-node runs with a token the head no longer has a file of."""
    return (
        f"host {head}: there is no local Ray token ({path}) and the head's ray-node container runs with a "
        f"token (label {TOKEN_LABEL}) whose file {auth.NODE_TOKEN_PATH} is gone, so it cannot be fetched. "
        f"Put the cluster's token back in {path}, or run `rayrig token rotate INVENTORY` to give the cluster "
        "a new token. Nothing was changed on any host."
    )
