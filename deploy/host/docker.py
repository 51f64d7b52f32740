"""Docker: the container engine, configured and running.

Ensures the engine is installed from the distribution (``docker_source =
"distro"``) or from Docker's repository (``"docker"``, or on RHEL 9 and its
rebuilds, which ship none) at ``docker_ce_version``, its signing key checked
against the fingerprint pinned in :mod:`deploy.host.repo_keys`, that ``/etc/docker/daemon.json`` carries rayrig's
keys merged over whatever is there (keys other tools set, such as the NVIDIA
runtime, survive), and that the service is enabled and running. Docker is
restarted when daemon.json changed, or when the running daemon started before
daemon.json was last written (fact ``DockerDaemon``): a run that died between
writing the file and restarting Docker, or NVIDIA's runtime registered by a run
that died before its restart, is finished by the next run.
"""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase, deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.rpm import RpmPackages
from pyinfra.operations import apt, dnf, files, server, systemd

from deploy.contract.settings import host_settings
from deploy.host import image_mirror
from deploy.host.base import (
    dnf_repository,
    install_packages,
    missing_packages,
    platform,
    signed_apt_repository,
    will_install,
)
from deploy.host.platform import Platform
from deploy.run.facts import FileText, HostInfo, fact
from deploy.run.templating import resource

DAEMON_JSON = "/etc/docker/daemon.json"
REPO_PACKAGES = ("docker-ce", "docker-ce-cli", "containerd.io", "docker-buildx-plugin")
#: The packages ``docker_ce_version`` pins (Docker's install guide pins these two; containerd.io and
#: the buildx plugin come at the repository's version).
PINNED_PACKAGES = ("docker-ce", "docker-ce-cli")
APT_KEYRING = "/etc/apt/keyrings/docker.asc"
DNF_REPO = "/etc/yum.repos.d/docker-ce.repo"
DNF_REPO_TEMPLATE = resource(__package__, "docker-ce.repo.j2")
APT_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


class DockerDaemon(FactBase):
    """When the running Docker daemon started and when daemon.json was last written, in
    seconds since the epoch: ``{"started": 1733000000.25, "config_written": 1733000100.5}``
    (None: not running, no daemon.json).

    The start comes from systemd (``ExecMainStartTimestampMonotonic``, microseconds since
    boot) and the host's uptime and clock read together, to a few hundredths of a second.
    """

    @staticmethod
    def default() -> dict[str, float | None]:
        return {"started": None, "config_written": None}

    def command(self) -> str:
        return (
            "command -v systemctl >/dev/null 2>&1 && systemctl show --property MainPID "
            "--property ExecMainStartTimestampMonotonic docker.service 2>/dev/null; "
            'echo "RAYRIG_UPTIME=$(cut -d" " -f1 /proc/uptime)"; echo "RAYRIG_NOW=$(date +%s.%N)"; '
            f'[ -f {DAEMON_JSON} ] && echo "RAYRIG_CONFIG_WRITTEN=$(date -r {DAEMON_JSON} +%s.%N)"; true'
        )

    def process(self, output: list[str]) -> dict[str, float | None]:
        values = dict(line.strip().partition("=")[::2] for line in output if "=" in line)

        def number(key: str) -> float | None:
            try:
                return float(values.get(key, ""))
            except ValueError:
                return None

        pid, since_boot = number("MainPID"), number("ExecMainStartTimestampMonotonic")
        uptime, now = number("RAYRIG_UPTIME"), number("RAYRIG_NOW")
        started = None
        if pid and since_boot and uptime is not None and now is not None:
            started = now - (uptime - since_boot / 1e6)
        return {"started": started, "config_written": number("RAYRIG_CONFIG_WRITTEN")}


def runs_older_config(daemon: dict[str, float | None]) -> bool:
    """Whether the running daemon started before daemon.json was last written (``DockerDaemon``)."""
    started, written = daemon["started"], daemon["config_written"]
    return started is not None and written is not None and written > started


class DaemonConfigError(PyinfraError):
    """daemon.json on a host is not a JSON object, so it cannot be merged safely."""


def merge_daemon_config(current: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """daemon.json with rayrig's keys merged over ``current``.

    Lists rayrig manages (registry mirrors, insecure registries) keep entries
    others added; ``docker_daemon_options`` overrides last.

    >>> merge_daemon_config({"runtimes": {"nvidia": {}}}, {"docker_registry_mirrors": [],
    ...     "docker_insecure_registries": ["r:5000"], "docker_log_opts": {}, "docker_daemon_options": {}})
    {'runtimes': {'nvidia': {}}, 'insecure-registries': ['r:5000']}
    """
    merged = dict(current)
    for key, wanted in (
        ("registry-mirrors", settings["docker_registry_mirrors"]),
        ("insecure-registries", settings["docker_insecure_registries"]),
    ):
        existing = list(merged.get(key) or [])
        combined = existing + [item for item in wanted if item not in existing]
        if combined:
            merged[key] = combined
    if settings["docker_log_opts"]:
        merged["log-driver"] = "json-file"
        merged["log-opts"] = {**(merged.get("log-opts") or {}), **settings["docker_log_opts"]}
    merged.update(settings["docker_daemon_options"])
    return merged


def parse_daemon_config(text: str | None) -> dict[str, Any]:
    """The parsed daemon.json (empty when the file is absent or blank)."""
    if not text or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DaemonConfigError(f"{DAEMON_JSON} on {host.name} is not valid JSON ({exc}); fix or remove it") from None
    if not isinstance(value, dict):
        raise DaemonConfigError(f"{DAEMON_JSON} on {host.name} is not a JSON object; fix or remove it")
    return value


def engine_packages(plat: Platform, source: str) -> tuple[tuple[str, ...], bool]:
    """(packages, from Docker's repository?) for a platform and ``docker_source``."""
    if source == "distro" and plat.distro_docker:
        return plat.distro_docker, False
    if not plat.docker_repo_path:
        # Amazon Linux has no Docker CE repository; its own package is the supported engine.
        return plat.distro_docker, False
    return REPO_PACKAGES, True


def pinned_specs(family: str, version: str) -> list[str]:
    """``docker-ce`` and ``docker-ce-cli`` at ``version``, as apt (any epoch and build of it) or dnf takes them.

    >>> pinned_specs("apt", "28.5.2"), pinned_specs("dnf", "28.5.2")
    (['docker-ce=5:28.5.2-*', 'docker-ce-cli=5:28.5.2-*'], ['docker-ce-28.5.2', 'docker-ce-cli-28.5.2'])
    """
    if family == "apt":
        return [f"{name}=5:{version}-*" for name in PINNED_PACKAGES]
    return [f"{name}-{version}" for name in PINNED_PACKAGES]


def pinned_current(installed: dict[str, Any], version: str) -> bool:
    """Whether ``docker-ce`` and ``docker-ce-cli`` are installed at ``version`` (package fact: name -> versions,
    apt's "5:28.5.2-1~ubuntu.22.04~jammy", rpm's "28.5.2-1.el9")."""

    def at(found: Any) -> bool:
        return str(found).rpartition(":")[2].startswith(f"{version}-")

    return all(any(at(v) for v in installed.get(name) or ()) for name in PINNED_PACKAGES)


def _install_from_repo(plat: Platform, packages: tuple[str, ...], version: str) -> None:
    """Install ``packages`` from Docker's repository, ``docker-ce`` and its CLI at ``version`` (the others only
    when missing): also when they are there at another version."""
    installed = fact(host, DebPackages if plat.family == "apt" else RpmPackages) or {}
    others = missing_packages([name for name in packages if name not in PINNED_PACKAGES])
    if pinned_current(installed, version):
        install_packages(others, "Install the Docker engine")
        return
    will_install(packages)
    specs = [*pinned_specs(plat.family, version), *others]
    if plat.family == "apt":
        apt.packages(
            name="Install the Docker engine", packages=specs, update=True, no_recommends=True, allow_downgrades=True
        )
    else:
        dnf.packages(name="Install the Docker engine", packages=specs)


def _docker_repository(plat: Platform, repo_url: str) -> None:
    base = f"{repo_url.rstrip('/')}/{plat.docker_repo_path}"
    if plat.family == "apt":
        arch = APT_ARCH.get(fact(host, HostInfo)["arch"], "amd64")
        files.directory(name="Create the apt keyrings directory", path="/etc/apt/keyrings", mode="755")
        signed_apt_repository(
            "Docker's",
            key_url=f"{base}/gpg",
            keyring=APT_KEYRING,
            list_path="/etc/apt/sources.list.d/docker.list",
            line=f"deb [arch={arch} signed-by={APT_KEYRING}] {base} {plat.codename} stable\n",
            setting="docker_repo_url",
            key="docker-deb",
        )
    else:
        dnf_repository(
            "Docker's", DNF_REPO, DNF_REPO_TEMPLATE, setting="docker_repo_url", key_url=f"{base}/gpg", key="docker-rpm",
            base=base,
        )  # fmt: skip


def distro_packages() -> tuple[str, ...]:
    """The current host's engine packages (and the image mirror's, on its head) when they come from the
    distribution's own repositories: the base step installs them with its own (``deploy.host.base.base``)."""
    packages, from_repo = engine_packages(platform(), host_settings(host)["docker_source"])
    if image_mirror.runs_mirror(host) and platform().family == "apt":
        packages = (*packages, *image_mirror.PACKAGES)
    return () if from_repo else packages


@deploy("Docker")
def docker() -> None:
    settings = host_settings(host)
    plat = platform()

    packages, from_repo = engine_packages(plat, settings["docker_source"])
    if from_repo:
        _docker_repository(plat, settings["docker_repo_url"])
    mirror = image_mirror.mirror_host()
    if image_mirror.runs_mirror(host):
        image_mirror.check_mirror_host(plat.family)
        packages = (*packages, *image_mirror.PACKAGES)  # one package transaction for both
    if from_repo:
        _install_from_repo(plat, packages, settings["docker_ce_version"])
    else:
        install_packages(packages, "Install the Docker engine")

    current = parse_daemon_config(fact(host, FileText, DAEMON_JSON))
    if mirror is not None:  # the head's mirror answers plain HTTP on the cluster's network
        insecure = [*settings["docker_insecure_registries"], image_mirror.mirror_address(mirror)]
        settings = {**settings, "docker_insecure_registries": insecure}
    wanted = merge_daemon_config(current, settings)
    config = None
    if wanted != current:
        files.directory(name="Create /etc/docker", path="/etc/docker", mode="755")
        config = files.put(
            name="Merge rayrig's keys into daemon.json",
            src=StringIO(json.dumps(wanted, indent=2, sort_keys=True) + "\n"),
            dest=DAEMON_JSON,
            mode="644",
        )

    systemd.service(name="Enable and start Docker", service="docker", running=True, enabled=True)
    # Also when daemon.json is newer than the running daemon: a run that died before the restart.
    stale = runs_older_config(fact(host, DockerDaemon))
    if stale or config is not None:
        # An explicit restart: systemd.service(restarted=True) restarts only a service that was
        # running when the plan was made, and the engine's package may have started it since
        # (Debian's and Ubuntu's do), before daemon.json was written.
        server.shell(
            name="Restart Docker for its new configuration",
            commands=["systemctl restart docker.service"],
            **({} if stale or config is None else {"_if": config.did_change}),
        )
