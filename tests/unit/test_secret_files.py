"""Why secrets need a private upload directory: pyinfra's own behaviour through sudo, and the
directory rayrig uses instead; the keyed digest that decides whether a secret file is written."""

from __future__ import annotations

import hashlib
import secrets
import stat
import subprocess
from io import BytesIO
from pathlib import Path

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.connectors.ssh import SSHConnector

from deploy.host.secret_files import (
    DigestKeyError,
    UploadDirError,
    keyed_digest,
    read_digest_key,
    store_digest_key,
    upload_dir,
)
from deploy.ray import env_secret
from deploy.run.facts import SecretFileDigest


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


# --- The keyed digest of a secret file ------------------------------------------------------------


def secret_file_digest(path: Path, key_path: Path) -> dict:
    """What ``SecretFileDigest`` finds, its command run for real by sh, and what it printed."""
    command = SecretFileDigest().command(str(path), str(key_path))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout
    return {"fact": SecretFileDigest().process(out.splitlines()), "printed": out}


def test_the_host_prints_the_keyed_digest_the_deploy_computes_and_nothing_of_the_secret(tmp_path):
    key, secret = secrets.token_hex(32) + "\n", "AKIAEXAMPLE:hunter2\n"
    (tmp_path / "key").write_text(key)
    (tmp_path / "passwd").write_text(secret)
    (tmp_path / "passwd").chmod(0o600)
    found = secret_file_digest(tmp_path / "passwd", tmp_path / "key")
    assert found["fact"] == {"folder": True, "mode": 600, "digest": keyed_digest(key, secret)}
    checksums = [hashlib.new(algorithm, secret.encode()).hexdigest() for algorithm in ("sha1", "sha256", "md5")]
    for revealing in (secret.strip(), key.strip(), *checksums):
        assert revealing not in found["printed"]
    another_key = secrets.token_hex(32) + "\n"
    assert keyed_digest(another_key, secret) != keyed_digest(key, secret)


def test_a_missing_file_key_or_folder_is_no_digest(tmp_path):
    (tmp_path / "key").write_text("k" * 64 + "\n")
    (tmp_path / "passwd").write_text("s")
    absent = {"folder": True, "mode": None, "digest": None}
    assert secret_file_digest(tmp_path / "absent", tmp_path / "key")["fact"] == absent
    assert secret_file_digest(tmp_path / "no" / "passwd", tmp_path / "key")["fact"] == {**absent, "folder": False}
    no_key = secret_file_digest(tmp_path / "passwd", tmp_path / "no-key")["fact"]
    assert no_key["digest"] is None and no_key["mode"] is not None


def test_the_local_digest_key_is_0600_kept_once_and_a_broken_one_names_its_file(tmp_path):
    path = tmp_path / "cluster" / "secret_digest_key"
    first, second = secrets.token_hex(32), secrets.token_hex(32)
    store_digest_key(path, first)
    store_digest_key(path, second)  # another deploy's, meanwhile: the first one stays
    assert read_digest_key(path) == first + "\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["secret_digest_key"]
    path.write_text("not a key\n")
    with pytest.raises(DigestKeyError, match=rf"{path}: expected the cluster's digest key, 64 hex digits"):
        read_digest_key(path)


def test_the_secret_environment_label_is_keyed():
    values = {"DB_PASSWORD": "hunter2"}
    key = secrets.token_hex(32) + "\n"
    assert env_secret.env_digest(values, key) == env_secret.env_digest(dict(values), key)  # stable: no replacement
    assert env_secret.env_digest(values, key) != env_secret.env_digest({"DB_PASSWORD": "hunter3"}, key)
    assert env_secret.env_digest(values, key) != env_secret.env_digest(values, secrets.token_hex(32) + "\n")
