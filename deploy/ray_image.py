"""Ray image: the Ray image present on every host, pulled with rayrig's registry login.

Pulls ``ray_image`` when it is absent (``ray_image_pull = "missing"``) or on
every run (``"always"``). The ray-node container follows the image: one created
from another image than the one ``ray_image`` names now is replaced
(:func:`runs_other_image`, from facts, and :func:`same_image_command`, on the host
after a pull, since facts are read before the pull runs). Registry credentials (``docker_registry_auth``) go
into a Docker config file of rayrig's own, mode 0600, written like any other
file: the password is never part of a command line or of pyinfra's output.
"""

from __future__ import annotations

import base64
import json
import shlex
from io import StringIO
from typing import Any

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files, server

from deploy.facts import DockerImageId, fact
from deploy.secret_files import put_secret_file
from deploy.settings import host_settings

DOCKER_CONFIG_DIR = "/etc/rayrig/docker"


def registry_config(auth: dict[str, str]) -> str:
    """The Docker config.json text that logs in to ``auth["registry"]``."""
    token = base64.b64encode(f"{auth['username']}:{auth['password']}".encode()).decode()
    return json.dumps({"auths": {auth["registry"]: {"auth": token}}}, indent=2) + "\n"


def pull_command(image: str, with_auth: bool) -> str:
    """The shell command that pulls ``image`` (with rayrig's credentials when set)."""
    config = f" --config {DOCKER_CONFIG_DIR}" if with_auth else ""
    return f"docker{config} pull --quiet {shlex.quote(image)}"


def needs_pull(settings: dict[str, Any], image_id: str | None) -> bool:
    """Whether the deploy must pull the image."""
    return settings["ray_image_pull"] == "always" or image_id is None


def runs_other_image(container: dict[str, Any] | None, image_id: str | None) -> bool:
    """Whether ``container`` (``ContainerState``) was created from another image than ``image_id``,
    the one ``ray_image`` names on the host now. Unknown on either side: no.

    >>> runs_other_image({"image_id": "sha256:aa"}, "sha256:bb"), runs_other_image({"image_id": "sha256:aa"}, None)
    (True, False)
    """
    used = (container or {}).get("image_id")
    return bool(used and image_id and used != image_id)


#: Succeeds when container $2 was created from the image that $1 names now; values are arguments, never code.
SAME_IMAGE = (
    '[ "$(docker image inspect --format "{{.Id}}" "$1")" = "$(docker container inspect --format "{{.Image}}" "$2")" ]'
)


def same_image_command(image: str, container: str) -> str:
    """A shell command that succeeds when ``container`` runs the image ``image`` names now (after a pull).

    >>> print(same_image_command("rayproject/ray:2.60.0", "ray-node"))  # doctest: +ELLIPSIS
    bash -c '[ "$(docker image inspect ... "$2")" ]' _ rayproject/ray:2.60.0 ray-node
    """
    return shlex.join(["bash", "-c", SAME_IMAGE, "_", image, container])


@deploy("Ray image")
def ray_image() -> None:
    """Log in to the registry (when ``docker_registry_auth`` is set) and pull ``ray_image`` as needed."""
    settings = host_settings(host)
    auth = settings["docker_registry_auth"]
    if auth:
        files.directory(name="Create rayrig's Docker config directory", path=DOCKER_CONFIG_DIR, mode="700")
        put_secret_file(
            name=f"Store the login for {auth['registry']}",
            src=StringIO(registry_config(auth)),
            dest=f"{DOCKER_CONFIG_DIR}/config.json",
        )
    if needs_pull(settings, fact(host, DockerImageId, settings["ray_image"])):
        server.shell(name=f"Pull {settings['ray_image']}", commands=[pull_command(settings["ray_image"], bool(auth))])


def user_command(image: str) -> str:
    """A shell command that prints the uid ``image``'s containers run as (root in rayrig's image,
    ``ray`` in Ray's): files a ray-node container reads or writes are made that user's.

    >>> print(user_command("rayproject/ray:2.60.0"))
    docker run --rm --network=none --entrypoint id rayproject/ray:2.60.0 -u
    """
    return f"docker run --rm --network=none --entrypoint id {shlex.quote(image)} -u"
