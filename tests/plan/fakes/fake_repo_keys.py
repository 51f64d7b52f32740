"""Package repositories' signing keys on a fake host: the key files rayrig writes, and what
``deploy.host.repo_keys.KeyFingerprints`` reads of them.

A converged host holds each key it needs with its pinned fingerprint (``answers``); a test that
wants another key in place (one replaced on the host) answers with ``key_answer(path, [fpr])``.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from deploy.host.repo_keys import PINNED, KeyFingerprints, rpm_key_path
from tests.plan.fakes.fakestep import fact_key

#: The text of a key file on a fake host (what is in it is read through ``KeyFingerprints`` alone).
FAKE_KEY = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n"
#: Every key file rayrig writes, and the key it holds (a name in ``PINNED``).
KEY_FILES = {
    "/etc/apt/keyrings/docker.asc": "docker-deb",
    "/etc/apt/keyrings/nvidia-container-toolkit-keyring.asc": "nvidia-container-toolkit",
    "/etc/apt/keyrings/cuda-archive-keyring.asc": "cuda-deb",
    **{rpm_key_path(name): name for name in PINNED},
}


def key_matcher(path: str) -> str:
    """The ``fake_responses`` key of ``KeyFingerprints`` read for ``path``."""
    return fact_key(KeyFingerprints, f"--show-keys {path}", path)


def key_answer(path: str, fingerprints: Iterable[str]) -> dict[str, list[str]]:
    """``KeyFingerprints``' answer for a key file at ``path`` whose primary keys carry ``fingerprints``
    (gpg's ``--with-colons`` records, a subkey after each)."""
    lines = ["PRESENT"]
    for fingerprint in fingerprints:
        lines += [f"pub:-:4096:1:{fingerprint[-16:]}:1487788800:::-:::scESC::::::23::0:",
                  f"fpr:::::::::{fingerprint}:",
                  "uid:-::::1487788800::0000::Fake <fake@example.invalid>::::::::::0:",
                  "sub:-:4096:1:0000000000000000:1487788800::::::s::::::23:",
                  "fpr:::::::::0000000000000000000000000000000000000000:"]  # fmt: skip
    return {key_matcher(path): lines}


def answers(files: Mapping[str, object]) -> dict[str, list[str]]:
    """``KeyFingerprints``' answers for the key files among ``files``: each with its pinned fingerprint."""
    found: dict[str, list[str]] = {}
    for path in files:
        if path in KEY_FILES:
            found.update(key_answer(path, PINNED[KEY_FILES[path]]))
    return found


@dataclass(frozen=True)
class KeyFetch:
    """What one planned ``fetch-key.sh`` run does: fetch ``url``, check it against ``fingerprints``,
    write it to ``dest`` (and ``rpm --import`` it when ``rpm_import``)."""

    url: str
    dest: str
    rpm_import: bool
    fingerprints: tuple[str, ...]


def key_fetch(commands: list[str]) -> KeyFetch:
    """The one ``fetch-key.sh`` run among an operation's ``commands`` (``bash -c SCRIPT fetch-key HOST URL
    DEST IMPORT FINGERPRINT...``): every value is a positional argument, none is in the script."""
    (command,) = commands
    words = shlex.split(command)
    assert words[:2] == ["bash", "-c"] and words[3] == "fetch-key", command
    _host, url, dest, rpm_import, *fingerprints = words[4:]
    assert url not in words[2] and dest not in words[2]
    return KeyFetch(url, dest, rpm_import == "rpm", tuple(fingerprints))
