"""Files that hold secrets (registry logins, the Ray token, S3 keys), written without showing them.

Through ``sudo`` (or doas, dzdo), pyinfra uploads a file in two steps: SFTP as the
SSH user to ``<temp dir>/pyinfra-<sha1 of the destination>``, then a copy as root.
The temp dir defaults to the host's ``/tmp``, so the file would sit there, readable
by every local user (the SSH user's umask, usually 0644) and at a name anyone can
predict and claim first. :func:`private_uploads` points every upload of the host at
a 0700 directory of the SSH user's own instead (pyinfra's ``_temp_dir``).
"""

from __future__ import annotations

from io import StringIO
from typing import Any

from pyinfra import host, state
from pyinfra.api import operation
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.server import Home
from pyinfra.operations import files

#: The private upload directory, in the SSH user's home.
UPLOAD_DIR_NAME = ".rayrig-upload"
#: The global arguments that make pyinfra upload through a temp file (and run as another user).
ESCALATION = ("_sudo", "_doas", "_dzdo")
#: The same arguments turned off: what runs as the SSH user itself.
AS_SSH_USER: dict[str, Any] = {key: False for key in ESCALATION}


class UploadDirError(PyinfraError):
    """The SSH user's private upload directory cannot be placed."""


def upload_dir(home: str | None, host_name: str) -> str:
    """The private upload directory under the SSH user's ``home`` (what ``echo ~`` printed).

    >>> upload_dir("/home/ubuntu", "gpu-01")
    '/home/ubuntu/.rayrig-upload'
    """
    if not home or not home.startswith("/") or any(c.isspace() for c in home):
        raise UploadDirError(
            f"host {host_name}: the SSH user's home directory is {home!r}; expected an absolute path "
            f"(uploads go through {UPLOAD_DIR_NAME} there, never through /tmp)"
        )
    return f"{home.rstrip('/')}/{UPLOAD_DIR_NAME}"


def private_uploads() -> None:
    """Ensure the current host's uploads and downloads pass only through a 0700 directory of the SSH user's.

    Creates ``~/.rayrig-upload`` as the SSH user, mode 0700, and makes it the temp
    directory (``_temp_dir``) of every later operation on that host: the registry
    login, the Ray token and the S3 keys uploaded through sudo never touch
    ``/tmp``, nor do the repository keys that ``files.download`` fetches into a temp
    file before moving them in place (also as root, on a host reached as root). A
    re-run plans nothing.

        private_uploads()  # first, before any operation uploads or downloads a file
    """
    path = upload_dir(host.get_fact(Home, **AS_SSH_USER), host.name)
    # Every operation's default from here on (pyinfra's host data override). Set first: an operation
    # called with another default fails pyinfra's argument check when its facts are read.
    host.data._temp_dir = path
    files.directory(name="Create the private upload directory", path=path, mode="700", **AS_SSH_USER)


@operation()
def put_secret_file(src: StringIO, dest: str, mode: str = "600"):
    """``files.put`` of a file holding a secret: never shown by ``pyinfra --diff``.

    ``files.put`` prints the old and new content of a file when the diff is on;
    for a credentials file that would print the credentials. (``src`` is a
    StringIO, which pyinfra names by its hash wherever it lists arguments.) The
    upload's temp file is in the private directory of :func:`private_uploads`.

        put_secret_file(name="Store the login", src=StringIO(text), dest="/etc/app/auth.json")
    """
    diff, state.config.DIFF = state.config.DIFF, False
    try:
        yield from files.put._inner(src=src, dest=dest, mode=mode)
    finally:
        state.config.DIFF = diff
