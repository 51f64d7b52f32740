"""Base: a fresh host made ready for the rest of the deploy.

Ensures cloud-init has finished its first boot, package-manager locks are
waited for rather than failed on, and the base packages (ca-certificates,
curl, gnupg and ``base_extra_packages``) are installed, on apt and dnf hosts.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.rpm import RpmPackages
from pyinfra.operations import apt, dnf, files, server

from deploy.contract.settings import host_settings
from deploy.host import repo_keys
from deploy.host.platform import Platform, detect
from deploy.run.facts import CloudInitRunning, HostInfo, fact
from deploy.run.memo import run_memo
from deploy.run.templating import put_template

APT_LOCK_CONF = "/etc/apt/apt.conf.d/90rayrig-lock-timeout"


def platform() -> Platform:
    """The current host's Platform (read once per host)."""
    return detect(fact(host, HostInfo), host.name)


def _planned() -> set[str]:
    """The packages an earlier step of this run already installs on the current host."""
    return run_memo(host.state, "packages").setdefault(host.name, set())


def missing_packages(names: list[str] | tuple[str, ...]) -> list[str]:
    """The packages among ``names`` that the current host lacks (and no earlier step of this run installs)."""
    installed = fact(host, DebPackages if platform().family == "apt" else RpmPackages) or {}
    planned = _planned()
    return [name for name in names if name not in installed and name not in planned]


def install_packages(names: list[str] | tuple[str, ...], name: str) -> None:
    """Install ``names`` with the host's package manager, only those missing.

    The package index is refreshed only when something is to be installed, so
    that a re-run on a ready host plans nothing.
    """
    missing = missing_packages(names)
    if not missing:
        return
    _planned().update(missing)
    if platform().family == "apt":
        apt.packages(name=name, packages=missing, update=True, no_recommends=True)
    else:
        dnf.packages(name=name, packages=missing)


class RepositoryKeyError(PyinfraError):
    """A repository's signing key would come over plain HTTP."""


def require_https_key(setting: str, key_url: str, host_name: str) -> None:
    """Stop unless a repository's signing key comes over https: the key is what every package of the
    repository is checked against, so whoever could replace it could replace them all.

    >>> require_https_key("docker_repo_url", "https://download.docker.com/linux/ubuntu/gpg", "gpu-01")
    """
    if not key_url.startswith("https://"):
        raise RepositoryKeyError(
            f"host {host_name}: {setting}: the repository's signing key would be fetched from {key_url!r} over "
            "plain HTTP, where anyone on the path can replace it; expected an https:// URL"
        )


def signed_apt_repository(
    what: str, key_url: str, keyring: str, list_path: str, line: str, *, setting: str, key: str
) -> None:
    """An apt repository signed by its own key: the key in ``keyring``, ``line`` in ``list_path``.

    ``what`` names it in the operations, e.g. "Docker's" or "the CUDA"; ``setting`` is the data
    key its URL comes from; ``key`` names its fingerprints in :data:`deploy.host.repo_keys.PINNED`.
    The key must come over https (:func:`require_https_key`) and carry a pinned fingerprint
    (:func:`deploy.host.repo_keys.ensure_key`), checked before anything is written.
    """
    require_https_key(setting, key_url, host.name)
    repo_keys.ensure_key(what, key_url, keyring, key)
    files.put(name=f"Add {what} apt repository", src=StringIO(line), dest=list_path, mode="644")


def dnf_repository(what: str, path: str, template: str, *, setting: str, key_url: str, key: str, **values: Any) -> None:
    """A dnf repository file at ``path`` from ``template`` filled with ``values`` and ``gpgkey``: the local
    copy of its key (``key_url``, from the data key ``setting``, https only), fetched and checked against
    the fingerprints pinned as ``key`` and imported into rpm's database before the file is written, so
    that dnf never fetches a key itself."""
    require_https_key(setting, key_url, host.name)
    local = repo_keys.rpm_key_path(key)
    repo_keys.ensure_key(what, key_url, local, key, rpm_import=True)
    put_template(f"Add {what} dnf repository", template, path, gpgkey=f"file://{local}", **values)


def will_install(names: list[str] | tuple[str, ...]) -> None:
    """Note that a step installs ``names`` in this run by its own command (not :func:`install_packages`),
    so that later steps do not install them again."""
    _planned().update(names)


@deploy("Base")
def base(ahead: list[str] | tuple[str, ...] = ()) -> None:
    """``ahead``: packages later steps need from the distribution's own repositories (Docker's engine,
    nftables), installed here in the same transaction as the base packages: one package index
    refresh and one unpacking for all, where each step on its own would pay for both again."""
    settings = host_settings(host)
    timeout = settings["base_wait_timeout_s"]
    plat = platform()

    if fact(host, CloudInitRunning):
        server.shell(
            name="Wait for cloud-init to finish",
            commands=[f"timeout {int(timeout)} cloud-init status --wait >/dev/null || true"],
        )

    if plat.family == "apt":
        files.put(
            name="Make apt wait for the package lock",
            src=StringIO(f'DPkg::Lock::Timeout "{int(timeout)}";\n'),
            dest=APT_LOCK_CONF,
            mode="644",
        )

    wanted = [*plat.base_packages, *settings["base_extra_packages"]]
    also = [name for name in dict.fromkeys(ahead) if name not in wanted and missing_packages([name])]
    install_packages(
        wanted + also, "Install base packages" + (f" and the later steps' ({', '.join(also)})" if also else "")
    )
