"""A fake host's Docker, for the plan tests' fake hosts: its daemon.json (``FileText``), the
docker.service unit (pyinfra's systemd facts) and when the daemon started (``DockerDaemon``),
and the engine's packages and repository files.

``HostDocker()`` on a fresh host: no daemon.json, Docker not running and not enabled. On a
converged host: daemon.json holds rayrig's keys merged in (``merge_daemon_config`` of the data),
Docker is enabled and running, and the daemon started after daemon.json was last written.
Each field changes one aspect (None: as the state says):

- ``daemon_json``: what another tool wrote to daemon.json (as is when fresh, rayrig's keys
  merged in when converged);
- ``daemon_json_merged``: whether rayrig's keys are merged in;
- ``running``: whether docker.service runs;
- ``daemon_json_unread``: daemon.json was written after the running daemon started (a run
  died before Docker's restart).

The NVIDIA runtime, when ``HostGPUs`` says daemon.json registers it, is added by ``daemon_text``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deploy.host.docker import DAEMON_JSON, PINNED_PACKAGES, DockerDaemon, merge_daemon_config
from deploy.host.repo_keys import rpm_key_path
from deploy.run.facts import FileText
from tests.plan.fakes.fake_nvidia import NVIDIA_RUNTIME
from tests.plan.fakes.fake_os import CODENAME, FAMILY
from tests.plan.fakes.fake_repo_keys import FAKE_KEY
from tests.plan.fakes.fakestep import fact_key, systemd_unit

DOCKER_CE = ("docker-ce", "docker-ce-cli", "containerd.io", "docker-buildx-plugin")
#: The engine a converged host runs, per OS and docker_source.
ENGINE_PACKAGES = {
    ("ubuntu22", "distro"): ("docker.io",),
    ("ubuntu24", "distro"): ("docker.io",),
    ("debian12", "distro"): ("docker.io",),
    ("ubuntu22", "docker"): DOCKER_CE,
    ("ubuntu24", "docker"): DOCKER_CE,
    ("debian12", "docker"): DOCKER_CE,
    ("rocky9", "distro"): DOCKER_CE,  # RHEL 9 ships no Docker
    ("rocky9", "docker"): DOCKER_CE,
    ("al2023", "distro"): ("docker",),  # no Docker CE repository for Amazon Linux
    ("al2023", "docker"): ("docker",),
}
DOCKER_REPO_PATH = {"ubuntu22": "ubuntu", "ubuntu24": "ubuntu", "debian12": "debian", "rocky9": "centos"}
APT_KEYRING = "/etc/apt/keyrings/docker.asc"
APT_DOCKER_LIST = "/etc/apt/sources.list.d/docker.list"
DNF_DOCKER_REPO = "/etc/yum.repos.d/docker-ce.repo"

#: The matchers of the facts this module answers. The DockerDaemon one must come before pyinfra's
#: uptime matcher (``fake_os.UPTIME``), which its command contains too.
DAEMON_STATE = fact_key(DockerDaemon, "--property ExecMainStartTimestampMonotonic docker.service")
DAEMON_JSON_TEXT = fact_key(FileText, f"if [ -f {DAEMON_JSON} ]", DAEMON_JSON)

BOOT = 1_733_000_000.0  # the host's clock at boot


@dataclass
class HostDocker:
    """A host's Docker daemon and its configuration (see the module's docstring)."""

    daemon_json: Mapping[str, Any] | None = None
    daemon_json_merged: bool | None = None
    running: bool | None = None
    daemon_json_unread: bool = False

    def daemon_text(self, converged: bool, s: Mapping[str, Any], nvidia_runtime: bool) -> str | None:
        """daemon.json's text on the host (merged settings ``s``), or None when there is none."""
        current = dict(self.daemon_json or {})
        if nvidia_runtime and "nvidia" not in (current.get("runtimes") or {}):
            current["runtimes"] = {**(current.get("runtimes") or {}), **NVIDIA_RUNTIME}
        if converged if self.daemon_json_merged is None else self.daemon_json_merged:
            current = merge_daemon_config(current, dict(s))
        return json.dumps(current, indent=2, sort_keys=True) + "\n" if current else None

    def daemon_state(self, converged: bool, has_config: bool) -> dict[str, list[str]]:
        """``DockerDaemon``'s answer: a daemon that started 1000 s after boot; daemon.json (if
        ``has_config``) written 10 s before that, or 10 s after when ``daemon_json_unread``."""
        running = self.is_running(converged)
        written = BOOT + 1000 + (10 if self.daemon_json_unread else -10)
        return {
            DAEMON_STATE: [
                f"MainPID={4242 if running else 0}",
                f"ExecMainStartTimestampMonotonic={1_000_000_000 if running else 0}",
                "RAYRIG_UPTIME=5000.00",
                f"RAYRIG_NOW={BOOT + 5000:.9f}",
                *([f"RAYRIG_CONFIG_WRITTEN={written:.9f}"] if has_config else []),
            ]
        }

    def config(self, text: str | None) -> dict[str, list[str]]:
        """``FileText(DAEMON_JSON)``'s answer for daemon.json's ``text`` (None: absent)."""
        return {DAEMON_JSON_TEXT: ["EXISTS", *text.splitlines()] if text is not None else ["ABSENT"]}

    def service(self, converged: bool) -> dict[str, list[str]]:
        """What systemd says of docker.service: enabled when converged, running as ``running`` says."""
        sub_state = "running" if self.is_running(converged) else "dead"
        return systemd_unit("docker.service", sub_state, "enabled" if converged else "")

    def is_running(self, converged: bool) -> bool:
        return converged if self.running is None else self.running


def uses_docker_repo(os_name: str, source: str) -> bool:
    """Whether rayrig installs Docker CE from Docker's repository on ``os_name`` (``docker_source``)."""
    return os_name in DOCKER_REPO_PATH and ENGINE_PACKAGES[(os_name, source)] == DOCKER_CE


def repo_files(os_name: str, s: Mapping[str, Any]) -> dict[str, tuple[str, int]]:
    """path -> (content, mode) of Docker's repository files on a converged host (merged settings ``s``)."""
    if not uses_docker_repo(os_name, s["docker_source"]):
        return {}
    base = f"{s['docker_repo_url'].rstrip('/')}/{DOCKER_REPO_PATH[os_name]}"
    if FAMILY[os_name] == "apt":
        return {
            APT_KEYRING: (FAKE_KEY, 644),
            APT_DOCKER_LIST: (f"deb [arch=amd64 signed-by={APT_KEYRING}] {base} {CODENAME[os_name]} stable\n", 644),
        }
    repo = (
        "[docker-ce-stable]\n"
        "name=Docker CE Stable\n"
        f"baseurl={base}/$releasever/$basearch/stable\n"
        "enabled=1\n"
        "gpgcheck=1\n"
        f"gpgkey=file://{rpm_key_path('docker-rpm')}\n"
    )
    return {DNF_DOCKER_REPO: (repo, 644), rpm_key_path("docker-rpm"): (FAKE_KEY, 644)}


def engine_versions(os_name: str, s: Mapping[str, Any]) -> dict[str, str]:
    """The versions of the pinned Docker CE packages on a converged host (merged settings ``s``), as the
    package fact lists them: ``docker_ce_version``, with apt's epoch and build."""
    if not uses_docker_repo(os_name, s["docker_source"]):
        return {}
    version = s["docker_ce_version"]
    found = f"5:{version}-1~{os_name}~{CODENAME[os_name]}" if FAMILY[os_name] == "apt" else f"{version}-1.el9"
    return {name: found for name in PINNED_PACKAGES}
