"""Repository signing keys (deploy/host/repo_keys.py, fetch-key.sh): the fingerprint parser on real
``gpg --show-keys --with-colons`` output, and the script that fetches a key, checks it and only then
writes it, run for real with gpg and a stand-in curl."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from deploy.host import repo_keys

FIXTURES = Path(__file__).parent / "fixtures" / "gpg"
GPG = shutil.which("gpg")
needs_gpg = pytest.mark.skipif(GPG is None, reason="gpg is not installed")


def test_primary_fingerprints_of_a_real_keyring_skip_subkeys_and_revokers():
    # Debian's archive keyring as gpg --show-keys --with-colons lists it: 9 primary keys, some with
    # designated revokers (rvk records between pub and fpr) and signing subkeys (sub, then fpr).
    lines = (FIXTURES / "debian-archive-keyring.colons").read_text().splitlines()
    found = repo_keys.primary_fingerprints(lines)
    assert len(found) == 9
    assert found[0] == "1F89983E0081FDE018F3CC9673A4F27B8DD47936"  # Debian 11 automatic signing key
    assert "4D64FEC119C2029067D6E791F8D2585B8783D481" in found  # Debian 12 stable release key
    assert "A7236886F3CCCAAD148A27F80E98404D386FA1D9" not in found  # the first key's signing subkey
    assert "80E976F14A508A48E9CA3FE9BC372252CA1CF964" not in found  # a designated revoker


def test_matches_needs_every_primary_key_pinned_and_one_at_least():
    docker = repo_keys.PINNED["docker-deb"][0]
    assert repo_keys.matches([docker], "docker-deb")
    assert repo_keys.matches([docker.lower()], "docker-deb")
    assert not repo_keys.matches([], "docker-deb")
    assert not repo_keys.matches([docker, "0" * 40], "docker-deb")  # a key slipped in beside Docker's
    assert not repo_keys.matches([docker], "docker-rpm")


def test_every_pinned_fingerprint_is_a_full_v4_fingerprint():
    for name, fingerprints in repo_keys.PINNED.items():
        assert fingerprints, name
        for fingerprint in fingerprints:
            assert re.fullmatch(r"[0-9A-F]{40}", fingerprint), (name, fingerprint)


def test_the_fact_reads_none_for_a_missing_file_and_the_primary_fingerprints_otherwise():
    fact = repo_keys.KeyFingerprints()
    assert fact.process([]) is None
    lines = ["PRESENT", *(FIXTURES / "debian-archive-keyring.colons").read_text().splitlines()]
    assert fact.process(lines)[0] == "1F89983E0081FDE018F3CC9673A4F27B8DD47936"
    assert fact.process(["PRESENT"]) == []  # a file gpg reads no key from: replaced by the deploy
    assert "'/etc/apt/keyrings/a b.asc'" in fact.command("/etc/apt/keyrings/a b.asc")


# --- fetch-key.sh, for real --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def throwaway_key(tmp_path_factory) -> tuple[Path, str]:
    """An armored public key made for the test (a primary key and an encryption subkey), and its
    primary fingerprint as gpg lists it."""
    home = tmp_path_factory.mktemp("gnupg")
    os.chmod(home, 0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    quiet = {"env": env, "check": True, "capture_output": True}
    user = "Throwaway <t@example.invalid>"
    subprocess.run([GPG, "--batch", "--passphrase", "", "--quick-gen-key", user, "ed25519", "sign", "never"], **quiet)
    primary = subprocess.run([GPG, "--batch", "--with-colons", "--list-keys", user], text=True, **quiet).stdout
    made = repo_keys.primary_fingerprints(primary.splitlines())[0]
    subprocess.run([GPG, "--batch", "--passphrase", "", "--quick-add-key", made, "cv25519", "encr", "never"], **quiet)
    armored = subprocess.run(
        [GPG, "--batch", "--armor", "--export", "t@example.invalid"], env=env, check=True, capture_output=True
    ).stdout
    path = home / "key.asc"
    path.write_bytes(armored)
    listed = subprocess.run(
        [GPG, "--batch", "--with-colons", "--show-keys", str(path)], env=env, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert sum(line.startswith("sub:") for line in listed) == 1  # the subkey is there, and left out:
    (fingerprint,) = repo_keys.primary_fingerprints(listed)
    return path, fingerprint


def _run_fetch(tmp_path: Path, served: Path, dest: Path, fingerprints: list[str]) -> subprocess.CompletedProcess:
    """fetch-key.sh as the deploy runs it (``fetch_command``), with a curl that serves ``served``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    curl = bin_dir / "curl"
    curl.write_text(f'#!/bin/sh\nwhile [ "$1" != -o ]; do shift; done\ncp {served} "$2"\n')
    curl.chmod(0o755)
    repo_keys.PINNED["test-key"] = tuple(fingerprints)
    try:
        command = repo_keys.fetch_command("https://repo.example/gpg", str(dest), "test-key", "gpu-01")
    finally:
        del repo_keys.PINNED["test-key"]
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=60)


@needs_gpg
def test_a_key_with_the_pinned_fingerprint_is_written_world_readable(tmp_path, throwaway_key):
    served, fingerprint = throwaway_key
    dest = tmp_path / "keyrings" / "repo.asc"
    result = _run_fetch(tmp_path, served, dest, ["0" * 40, fingerprint])
    assert result.returncode == 0, result.stderr
    assert dest.read_bytes() == served.read_bytes()
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644
    assert sorted(p.name for p in dest.parent.iterdir()) == ["repo.asc"]  # no temporary file left beside it


@needs_gpg
def test_another_key_fails_naming_url_expected_and_found_and_writes_nothing(tmp_path, throwaway_key):
    served, fingerprint = throwaway_key
    dest = tmp_path / "keyrings" / "repo.asc"
    dest.parent.mkdir()
    dest.write_text("the key that was there\n")
    pinned = "9DC858229FC7DD38854AE2D88D81803C0EBFCD88"
    result = _run_fetch(tmp_path, served, dest, [pinned])
    assert result.returncode == 1
    assert "host gpu-01: the signing key at https://repo.example/gpg is not the one pinned" in result.stderr
    assert f"expected {pinned}, found {fingerprint}" in result.stderr
    assert f"nothing was written to {dest}" in result.stderr
    assert dest.read_text() == "the key that was there\n"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["repo.asc"]


@needs_gpg
def test_a_file_that_holds_no_key_is_refused(tmp_path):
    served = tmp_path / "page.html"
    served.write_text("<html>a captive portal</html>\n")
    dest = tmp_path / "repo.asc"
    result = _run_fetch(tmp_path, served, dest, ["9DC858229FC7DD38854AE2D88D81803C0EBFCD88"])
    assert result.returncode == 1
    assert "found no OpenPGP key" in result.stderr
    assert not dest.exists()
