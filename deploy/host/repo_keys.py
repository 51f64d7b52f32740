"""Package repositories' signing keys, checked against fingerprints pinned here before they are written.

A repository's key is what apt and dnf check every package of it against, so it is fetched the way
a package would be if it had no signature: into a private temporary folder, its fingerprints read
(``gpg --show-keys --with-colons``, which imports nothing), compared with :data:`PINNED`, and only
then moved into place (``fetch-key.sh``); on dnf hosts it is also imported into rpm's database
(``rpm --import``) and the repository's ``gpgkey`` names the local file, so that dnf never fetches
a key itself. A key whose fingerprints differ fails the host, naming the URL, the expected and the
found fingerprints, and nothing is written. A key already in place with a pinned fingerprint (fact
``KeyFingerprints``) plans nothing. Example::

    ensure_key("Docker's", "https://download.docker.com/linux/ubuntu/gpg", "/etc/apt/keyrings/docker.asc",
               "docker-deb")
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path

from pyinfra import host
from pyinfra.api import FactBase
from pyinfra.operations import server

from deploy.run.facts import fact
from deploy.run.templating import resource

#: The fingerprints each repository's key may carry (every primary key in the file must be one of them).
PINNED: dict[str, tuple[str, ...]] = {
    # Docker's apt repositories (download.docker.com/linux/{ubuntu,debian}/gpg), "Docker Release (CE deb)":
    # Docker's install guides for Debian and Ubuntu (docker/docs, engine/install/debian.md, ubuntu.md).
    "docker-deb": ("9DC858229FC7DD38854AE2D88D81803C0EBFCD88",),
    # Docker's rpm repositories (download.docker.com/linux/{centos,rhel}/gpg), "Docker Release (CE rpm)":
    # Docker's install guides for CentOS, RHEL and Fedora ("verify that the fingerprint matches 060A 61C5 ...").
    "docker-rpm": ("060A61C51B558A7F742B77AAC52FEB6B621E9F35",),
    # The NVIDIA Container Toolkit (nvidia.github.io/libnvidia-container/gpgkey), "NVIDIA CORPORATION (Open
    # Source Projects) <cudatools@nvidia.com>": gpg's listing of that file in NVIDIA/nvidia-container-toolkit#1460.
    "nvidia-container-toolkit": ("C95B321B61E88C1809C4F759DDCAE044F796ECB0",),
    # The CUDA repositories' keys, "cudatools <cudatools@nvidia.com>": 3bf863cc.pub (deb) and D42D0685.pub
    # (rpm), as NVIDIA's NVIDIA/cuda-repo-management SIGNATURES.md verifies them ("Primary key fingerprint").
    "cuda-deb": ("EB693B3035CD5710E231E123A4B469963BF863CC",),
    "cuda-rpm": ("610C7B14E068A878070DA4E99CD0A493D42D0685",),
    # EPEL's keys (dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-{9,8}), "Fedora (epel9)" and "Fedora EPEL
    # (8)" <epel@fedoraproject.org>: as dnf shows them when it imports them (0x3228467C, 0x2F86D6A1), the
    # fingerprints Fedora lists on fedoraproject.org/security.
    "epel-9": ("FF8AD1344597106ECE813B918A3872BF3228467C",),
    "epel-8": ("94E279EB8D8F25B21810ADF121EA45AB2F86D6A1",),
}

#: Where dnf hosts keep the keys rayrig checked (the repository files' ``gpgkey=file://...``).
RPM_KEY_DIR = "/etc/pki/rpm-gpg"
FETCH_SCRIPT = resource(__package__, "fetch-key.sh")


def rpm_key_path(key: str) -> str:
    """Where a dnf host keeps the checked key ``key`` (a name in :data:`PINNED`).

    >>> rpm_key_path("docker-rpm")
    '/etc/pki/rpm-gpg/RPM-GPG-KEY-rayrig-docker-rpm'
    """
    return f"{RPM_KEY_DIR}/RPM-GPG-KEY-rayrig-{key}"


def primary_fingerprints(lines: Iterable[str]) -> list[str]:
    """The fingerprints of the primary keys in ``gpg --with-colons`` output (``--show-keys``), in order:
    each is the ``fpr`` record right after a ``pub`` record (those after ``sub`` are subkeys')."""
    found, kind = [], ""
    for line in lines:
        fields = line.strip().split(":")
        if fields[0] in ("pub", "sub", "sec", "ssb"):
            kind = fields[0]
        elif fields[0] == "fpr" and kind == "pub" and len(fields) > 9:
            found.append(fields[9].upper())
            kind = ""
    return found


def matches(found: Iterable[str], key: str) -> bool:
    """Whether a key file's primary fingerprints ``found`` are all pinned for ``key`` (and there is one)."""
    found = list(found)
    return bool(found) and all(f.upper() in PINNED[key] for f in found)


class KeyFingerprints(FactBase):
    """The primary-key fingerprints of a key file on the host (``["9DC8...CD88"]``), None when there is no
    such file. gpg reads it with a throwaway home folder, importing nothing."""

    def command(self, path: str) -> str:
        quoted = shlex.quote(path)
        return (
            f"[ -f {quoted} ] || exit 0; echo PRESENT; h=$(mktemp -d) && "
            f'gpg --homedir "$h" --batch --no-tty --with-colons --show-keys {quoted} 2>/dev/null; '
            'rm -rf "$h"; true'
        )

    def process(self, output: list[str]) -> list[str] | None:
        if not any(line.strip() == "PRESENT" for line in output):
            return None
        return primary_fingerprints(output)


def fetch_command(key_url: str, dest: str, key: str, host_name: str, rpm_import: bool = False) -> str:
    """The shell command that fetches ``key_url``, checks it against ``PINNED[key]`` and writes it to ``dest``
    (``fetch-key.sh``, every value a positional argument)."""
    lines = Path(FETCH_SCRIPT).read_text().splitlines()
    script = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    args = [host_name, key_url, dest, "rpm" if rpm_import else "none", *PINNED[key]]
    return shlex.join(["bash", "-c", script, "fetch-key", *args])


def ensure_key(what: str, key_url: str, dest: str, key: str, *, rpm_import: bool = False) -> None:
    """``dest`` holds the key at ``key_url`` and its fingerprints are ``PINNED[key]``'s: fetched and checked
    when the file is missing or carries another key, nothing otherwise. ``what`` names the repository in
    the operation ("Docker's", "the CUDA")."""
    if matches(fact(host, KeyFingerprints, dest) or [], key):
        return
    server.shell(
        name=f"Download {what} repository key and check its fingerprint",
        commands=[fetch_command(key_url, dest, key, host.name, rpm_import)],
    )
