"""Files that hold secrets (registry logins, the Ray token, S3 keys, TLS keys, workload secrets),
written without showing them: neither their content nor a checksum anyone could test a guess against.

``files.put`` shows a file's old and new content with ``--diff``, and decides whether to upload by
the destination's sha1 (pyinfra's ``Sha1File``), which ``pyinfra -vvv`` prints: for a weak password,
enough to test guesses offline. :func:`put_secret_file` compares a keyed digest instead
(:class:`deploy.run.facts.SecretFileDigest`): the sha256 of the cluster's digest key followed by
the file. The key is random, kept beside the cluster's Ray token on the operator's machine (fetched
from the head by a machine without it, as the token is) and root-only on each host (:func:`digest_key`).

Through ``sudo`` (or doas, dzdo), pyinfra uploads a file in two steps: SFTP as the
SSH user to ``<temp dir>/pyinfra-<sha1 of the destination>``, then a copy as root.
The temp dir defaults to the host's ``/tmp``, so the file would sit there, readable
by every local user (the SSH user's umask, usually 0644) and at a name anyone can
predict and claim first. :func:`private_uploads` points every upload of the host at
a 0700 directory of the SSH user's own instead (pyinfra's ``_temp_dir``).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from io import StringIO
from pathlib import Path
from shlex import quote
from typing import Any

from pyinfra import host
from pyinfra.api import FileUploadCommand, operation
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.server import Home
from pyinfra.operations import files

from deploy.contract.settings import host_data, host_settings, merge
from deploy.ray import auth
from deploy.run.facts import SecretFileDigest, read_unprinted_file, unprinted_file_command
from deploy.run.memo import run_lock, run_memo

#: The private upload directory, in the SSH user's home.
UPLOAD_DIR_NAME = ".rayrig-upload"
#: Where each host keeps the cluster's digest key (root-only, in a 0700 folder): :class:`SecretFileDigest` reads it.
DIGEST_KEY_DIR = "/etc/rayrig/secret-digest"
DIGEST_KEY_PATH = f"{DIGEST_KEY_DIR}/key"
#: The digest key's file on the operator's machine, beside the cluster's Ray token.
DIGEST_KEY_NAME = "secret_digest_key"
#: The first line :data:`READ_KEY_COMMAND` prints: the key follows, or there is none.
KEY_FOLLOWS, NO_KEY = "RAYRIG-DIGEST-KEY-FOLLOWS", "RAYRIG-NO-DIGEST-KEY"
#: Reads the head's digest key (when the operator's machine has none); its output is never printed. A
#: folder it may not look into (no sudo) is an error, not "no key" (a new key would rewrite every secret file).
READ_KEY_COMMAND = unprinted_file_command(DIGEST_KEY_DIR, DIGEST_KEY_PATH, KEY_FOLLOWS, NO_KEY)
#: The global arguments that make pyinfra upload through a temp file (and run as another user).
ESCALATION = ("_sudo", "_doas", "_dzdo")
#: The same arguments turned off: what runs as the SSH user itself.
AS_SSH_USER: dict[str, Any] = {key: False for key in ESCALATION}


class UploadDirError(PyinfraError):
    """The SSH user's private upload directory cannot be placed."""


class DigestKeyError(PyinfraError):
    """The cluster's digest key on the operator's machine is unusable."""


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


def digest_key_path(settings: dict[str, Any]) -> Path:
    """The cluster's digest key on the operator's machine: beside its Ray token (and TLS CA)."""
    return auth.token_path(settings).parent / DIGEST_KEY_NAME


def store_digest_key(path: Path, key: str) -> None:
    """Write ``key`` to ``path``, 0600 in a 0700 folder, unless the file exists (another deploy's wins).

    The file appears whole or not at all, written the way the Ray token is (``auth.store_token``).
    """
    auth.store_token(path, key)


def read_digest_key(path: Path) -> str:
    """The digest key in ``path`` as the hosts hold it (one line), kept 0600; an unusable one is an error."""
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    key = path.read_text()
    if not re.fullmatch(r"[0-9a-f]{64}\n", key):
        raise DigestKeyError(
            f"{path}: expected the cluster's digest key, 64 hex digits on one line; "
            "delete the file to have the deploy fetch the cluster's from the head"
        )
    return key


def cluster_digest_key(current: Any) -> str:
    """The cluster's digest key, settled the first time a deploy of ``current``'s run asks for it.

    The local copy (:func:`digest_key_path`) when there is one. Without one (a fresh clone, another
    machine), the head's :data:`DIGEST_KEY_PATH`, read with its output unprinted and stored 0600, so
    that nothing changes on any host; when the head has none either, a new random key.
    """
    settings = host_settings(current)
    path = digest_key_path(settings)
    memo = run_memo(current.state, "digest_key")
    if path not in memo:
        with run_lock(current.state, ("digest_key", path)):  # one read of the head's key
            if path not in memo:
                if not path.exists():
                    store_digest_key(path, _head_key(current.inventory) or secrets.token_hex(32))
                memo[path] = read_digest_key(path)
    return memo[path]


def _head_key(inventory: Any) -> str | None:
    head = next(h for h in inventory if merge(host_data(h))["ray_role"] == "head")
    what = "the cluster's digest key"
    key = read_unprinted_file(head, READ_KEY_COMMAND, (KEY_FOLLOWS, NO_KEY), what, DIGEST_KEY_PATH, DigestKeyError)
    return key if key and re.fullmatch(r"[0-9a-f]{64}", key) else None  # none, or unusable: a new one replaces it


def keyed_digest(key: str, content: str) -> str:
    """What :class:`SecretFileDigest` prints of a file with ``content`` on a host that holds ``key``.

    >>> keyed_digest("k\\n", "s") == hashlib.sha256(b"k\\ns").hexdigest()
    True
    """
    return hashlib.sha256(key.encode() + content.encode()).hexdigest()


def digest_key() -> None:
    """Ensure the current host holds the cluster's digest key (:func:`cluster_digest_key`) in
    :data:`DIGEST_KEY_PATH`, root's, 0600 in a 0700 folder, written as the secrets are: the digest
    ``-vvv`` shows of it is keyed by the key itself, a random one, and says nothing. A re-run plans
    nothing.

        digest_key()  # once per host, before any put_secret_file
    """
    key = StringIO(cluster_digest_key(host))
    files.directory(name="Create the folder of the cluster's digest key", path=DIGEST_KEY_DIR, mode="700")
    put_secret_file(name="Store the cluster's key of secret files' digests", src=key, dest=DIGEST_KEY_PATH)


@operation()
def put_secret_file(src: StringIO, dest: str, mode: str = "600"):
    """Ensure ``dest`` holds ``src`` with ``mode``, uploaded through :func:`private_uploads`' folder
    and never shown: neither the content (``pyinfra --diff``) nor a plain checksum (``-vvv``).

    Whether to upload is decided by :class:`SecretFileDigest`, a digest keyed by the cluster's
    key (:func:`digest_key`, before); ``src`` is a StringIO, which pyinfra names by its hash
    wherever it lists arguments. The file's folder is made when absent. A re-run plans nothing.

        put_secret_file(name="Store the login", src=StringIO(text), dest="/etc/app/auth.json")
    """
    found = host.get_fact(SecretFileDigest, dest, DIGEST_KEY_PATH)
    wanted = keyed_digest(cluster_digest_key(host), src.getvalue())
    if found["digest"] != wanted:
        if not found["folder"]:
            yield f"mkdir -p {quote(os.path.dirname(dest))}"
        temp_dir = (host.current_op_global_arguments or {}).get("_temp_dir")
        yield FileUploadCommand(src, dest, remote_temp_filename=host.get_temp_filename(dest, temp_directory=temp_dir))
        yield f"chmod {mode} {quote(dest)}"
    elif found["mode"] != int(mode):
        yield f"chmod {mode} {quote(dest)}"
    else:
        host.noop(f"secret file {dest} is up to date")
