"""Ray's temp folder: ``/tmp/ray`` in the ray-node container, a folder of the host's.

Ray keeps its sessions there: every process's log, the sockets, and the objects it
spills when the object store is full. Left in the container's writable layer they
would grow unseen, survive in a layer nobody cleans, and a crash loop could fill the
disk. The container bind-mounts a folder of the host's at ``/tmp/ray`` instead:
``tmp`` inside ``ray_temp_dir`` (``/var/lib/rayrig/ray/tmp``). Ray makes the folder it is
given and its sessions world-writable (0777, so that several users of one machine can
share them); ``ray_temp_dir`` itself is 0700 and root's, so no other user of the host
reaches them, and a re-run finds it as it left it. What the folder keeps is bounded:

* Ray rotates its logs: ``RAY_ROTATION_MAX_BYTES`` per file and
  ``RAY_ROTATION_BACKUP_COUNT`` old files (:data:`ROTATION_ENV`, unless ``ray_env`` or
  ``ray_env_secret`` sets them);
* every start of the ray-node unit (a crash loop's too) keeps the newest
  :data:`SESSIONS_KEPT` session folders and removes the older ones before Ray starts
  its new session (``ray-node.service.j2``);
* the mounted folder is owned by the user the container runs as (root in rayrig's image,
  ``ray`` in Ray's), set by each replacement (:func:`own_command`).

Example::

    docker_args += [mount_arg(settings)]
    env = {**rotation_env(settings), **settings["ray_env"]}
"""

from __future__ import annotations

import shlex
from typing import Any

from deploy.host import image_mirror
from deploy.host.ray_image import user_command

#: Where Ray keeps its sessions inside the container (``ray start``'s default --temp-dir).
CONTAINER_PATH = "/tmp/ray"
#: The folder inside ``ray_temp_dir`` that the container sees as /tmp/ray.
HOST_SUBFOLDER = "tmp"
#: Session folders each start of the unit keeps, the newest, besides the one Ray then starts.
SESSIONS_KEPT = 3
#: Ray's log rotation unless the data sets it: 100 MiB per file and 3 old ones, as Docker's own logs.
ROTATION_ENV = {"RAY_ROTATION_MAX_BYTES": str(100 * 2**20), "RAY_ROTATION_BACKUP_COUNT": "3"}


def rotation_env(settings: dict[str, Any]) -> dict[str, str]:
    """The log-rotation variables the container gets: :data:`ROTATION_ENV`, less those that
    ``ray_env`` or ``ray_env_secret`` set (theirs win).

    >>> rotation_env({"ray_env": {"RAY_ROTATION_BACKUP_COUNT": "9"}, "ray_env_secret": {}})
    {'RAY_ROTATION_MAX_BYTES': '104857600'}
    """
    own = {**settings["ray_env"], **settings["ray_env_secret"]}
    return {name: value for name, value in ROTATION_ENV.items() if name not in own}


def host_path(settings: dict[str, Any]) -> str:
    """The host folder the container sees as /tmp/ray.

    >>> host_path({"ray_temp_dir": "/var/lib/rayrig/ray"})
    '/var/lib/rayrig/ray/tmp'
    """
    return f"{settings['ray_temp_dir']}/{HOST_SUBFOLDER}"


def mount_arg(settings: dict[str, Any]) -> str:
    """``docker create``'s bind mount of :func:`host_path` at ``/tmp/ray``.

    >>> mount_arg({"ray_temp_dir": "/var/lib/rayrig/ray"})
    '--mount=type=bind,src=/var/lib/rayrig/ray/tmp,dst=/tmp/ray'
    """
    return f"--mount=type=bind,src={host_path(settings)},dst={CONTAINER_PATH}"


def own_command(settings: dict[str, Any]) -> str:
    """A shell command that makes the mounted folder the container user's (the image's: root in
    rayrig's image, ``ray`` in Ray's), symbolic links inside not followed, and keeps
    ``ray_temp_dir`` around it 0700.

    >>> print(own_command({"ray_temp_dir": "/var/lib/rayrig/ray", "ray_image": "rayproject/ray:2.60.0"}))
    mkdir -p /var/lib/rayrig/ray/tmp && chown -R "$(docker run --rm --network=none --entrypoint id rayproject/ray:2.60.0 -u)" /var/lib/rayrig/ray/tmp && chmod 700 /var/lib/rayrig/ray
    """  # noqa: E501 - a doctest's output is one line
    folder = shlex.quote(settings["ray_temp_dir"])
    mounted = shlex.quote(host_path(settings))
    uid = user_command(image_mirror.local_name(settings["ray_image"]))
    return f'mkdir -p {mounted} && chown -R "$({uid})" {mounted} && chmod 700 {folder}'
