"""Files that hold secrets (registry logins, the Ray token, S3 keys), written without showing them."""

from __future__ import annotations

from io import StringIO

from pyinfra import state
from pyinfra.api import operation
from pyinfra.operations import files


@operation()
def put_secret_file(src: StringIO, dest: str, mode: str = "600"):
    """``files.put`` of a file holding a secret: never shown by ``pyinfra --diff``.

    ``files.put`` prints the old and new content of a file when the diff is on;
    for a credentials file that would print the credentials. (``src`` is a
    StringIO, which pyinfra names by its hash wherever it lists arguments.)

        put_secret_file(name="Store the login", src=StringIO(text), dest="/etc/app/auth.json")
    """
    diff, state.config.DIFF = state.config.DIFF, False
    try:
        yield from files.put._inner(src=src, dest=dest, mode=mode)
    finally:
        state.config.DIFF = diff
