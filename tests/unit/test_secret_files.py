"""Why secrets need a private upload directory: pyinfra's own behaviour through sudo, and the
directory rayrig uses instead."""

from __future__ import annotations

import hashlib
from io import BytesIO

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.connectors.ssh import SSHConnector

from deploy.host.secret_files import UploadDirError, upload_dir


def _ssh_connector() -> SSHConnector:
    inventory = Inventory((["gpu-01"], {}))
    state = State(inventory, Config())
    host = inventory.get_host("gpu-01")
    host.get_fact = lambda *_a, **_k: ""  # no TMPDIR on the host: pyinfra falls back to /tmp
    return SSHConnector(state, host)


def test_pyinfra_uploads_through_sudo_via_a_predictable_file_in_tmp():
    connector = _ssh_connector()
    written, ran = [], []
    connector._put_file = lambda _io, remote: written.append(remote)
    connector.run_shell_command = lambda command, **_k: (ran.append(str(command)), (True, None))[1]

    connector.put_file(BytesIO(b"the token"), "/etc/rayrig/ray/auth_token", _sudo=True)

    # SFTP (as the SSH user, with its umask: usually 0644) to /tmp/pyinfra-<sha1 of the destination>,
    # then a copy as root: the secret sits in /tmp, at a name anyone can claim first.
    temp = "/tmp/pyinfra-" + hashlib.sha1(b"/etc/rayrig/ray/auth_token").hexdigest()
    assert written == [temp]
    assert ran[0] == f"cp {temp} /etc/rayrig/ray/auth_token"


def test_a_temp_dir_moves_that_file():
    connector = _ssh_connector()
    temp = connector.host.get_temp_filename("/etc/rayrig/ray/auth_token", temp_directory="/home/u/.rayrig-upload")
    assert temp.startswith("/home/u/.rayrig-upload/pyinfra-")


def test_the_upload_directory_is_in_the_ssh_users_home():
    assert upload_dir("/home/ubuntu/", "gpu-01") == "/home/ubuntu/.rayrig-upload"
    for home in (None, "", "~", "relative/home", "/home/a b"):
        with pytest.raises(UploadDirError, match=r"host gpu-01: the SSH user's home directory is .*absolute path"):
            upload_dir(home, "gpu-01")
