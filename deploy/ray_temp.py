"""Ray's temp folder: ``/tmp/ray`` in the ray-node container, a folder of the host's.

Ray keeps its sessions there: every process's log, the sockets, and the objects it
spills when the object store is full. Left in the container's writable layer they
would grow unseen, survive in a layer nobody cleans, and a crash loop could fill the
disk. The container bind-mounts ``ray_temp_dir`` (``/var/lib/rayrig/ray``) at
``/tmp/ray`` instead, and what it keeps is bounded:

* Ray rotates its logs: ``RAY_ROTATION_MAX_BYTES`` per file and
  ``RAY_ROTATION_BACKUP_COUNT`` old files (:data:`ROTATION_ENV`, unless ``ray_env`` or
  ``ray_env_secret`` sets them);
* every start of the ray-node unit (a crash loop's too) keeps the newest
  :data:`SESSIONS_KEPT` session folders and removes the older ones before Ray starts
  its new session (``templates/ray-node.service.j2``);
* the folder is 0700, owned by the user the container runs as (root in rayrig's image,
  ``ray`` in Ray's), set by each replacement (:func:`own_command`).

Example::

    docker_args += [mount_arg(settings)]
    env = {**rotation_env(settings), **settings["ray_env"]}
"""

from __future__ import annotations

import shlex
from typing import Any

#: Where Ray keeps its sessions inside the container (``ray start``'s default --temp-dir).
CONTAINER_PATH = "/tmp/ray"
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


def mount_arg(settings: dict[str, Any]) -> str:
    """``docker create``'s bind mount of ``ray_temp_dir`` at ``/tmp/ray``.

    >>> mount_arg({"ray_temp_dir": "/var/lib/rayrig/ray"})
    '--mount=type=bind,src=/var/lib/rayrig/ray,dst=/tmp/ray'
    """
    return f"--mount=type=bind,src={settings['ray_temp_dir']},dst={CONTAINER_PATH}"


def own_command(settings: dict[str, Any]) -> str:
    """A shell command that makes ``ray_temp_dir`` the container user's, 0700 (the user is the
    image's: root in rayrig's image, ``ray`` in Ray's); symbolic links inside are not followed.

    >>> print(own_command({"ray_temp_dir": "/var/lib/rayrig/ray", "ray_image": "rayproject/ray:2.60.0"}))
    mkdir -p /var/lib/rayrig/ray && chown -R "$(docker run --rm --network=none --entrypoint id rayproject/ray:2.60.0 -u)" /var/lib/rayrig/ray && chmod 700 /var/lib/rayrig/ray
    """  # noqa: E501 - a doctest's output is one line
    folder = shlex.quote(settings["ray_temp_dir"])
    uid = f"docker run --rm --network=none --entrypoint id {shlex.quote(settings['ray_image'])} -u"
    return f'mkdir -p {folder} && chown -R "$({uid})" {folder} && chmod 700 {folder}'

