"""What a host looks like to the monitoring server step of the deploy, for the plan tests' fake hosts.

``facts(converged, data, options)`` returns the files, directories and other fact answers a host
has: nothing of Prometheus's or Grafana's when fresh; when converged, on the monitoring host,
everything ``deploy.monitoring.server`` puts there (the files rendered by the pure functions of
``deploy.monitoring.config`` from the cluster's members), the images, the units enabled and
running, and containers whose hash label is their unit's; on every other host, nothing.
``fakehosts.cluster`` sets the options from the cluster:

- ``serves``: this host is the monitoring host (default: not);
- ``name``: this host's inventory name; ``members``: every present host as
  ``deploy.monitoring.config.Member`` (whom Prometheus scrapes);
- ``leftovers``: this step's paths, containers and images on a host that should have none
  (``("PATH", path)``, ``("CONTAINER", name)``, ``("IMAGE", ref)``), as a monitoring host that
  moved or a deploy with ``monitoring_enabled = False`` finds them;
- ``prometheus_label``: the hash label the running Prometheus container carries (default: its unit's);
- ``config_unread``: Prometheus's configuration was written after its last reload (a run that died
  before the SIGHUP).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deploy.contract import settings
from deploy.firewall.guard import FIREWALL_UNIT
from deploy.host.image_mirror import local_name
from deploy.monitoring import config as mc
from deploy.monitoring import ray_sd
from deploy.monitoring import server as ms
from deploy.run.facts import DockerImageId, FileText
from deploy.run.templating import render
from tests.plan.fakes.fakestep import FakeState, container_state_key, fact_key, need_reload, systemd_unit

IMAGE_ID = "sha256:" + "cd" * 32
GPU_TARGETS = f"{mc.TARGETS_DIR}/gpu.json"

#: The matchers of the facts this module answers, checked against their commands.
LEFTOVERS = fact_key(ms.Leftovers, 'echo "PATH $p"', ("/etc/x",), ("x",), ("x",))
GPU_TARGETS_TEXT = fact_key(FileText, f"if [ -f {GPU_TARGETS} ]", GPU_TARGETS)


def config_read_at(container: str) -> str:
    """The matcher of ``ConfigReadAt`` for ``container`` (its files do not change the command's start)."""
    return fact_key(ms.ConfigReadAt, f"--format '{{{{.State.StartedAt}}}}' {container}", container, ("/etc/x",))


def serves_grafana(s: Mapping[str, Any]) -> bool:
    return bool(s["monitoring_enabled"] and s["monitoring_grafana"])


def expected_files(s: Mapping[str, Any], name: str, members: list[mc.Member]) -> dict[str, tuple[str, int]]:
    """path -> (content, mode) of what the step writes on the monitoring host with settings ``s``."""
    on_head = s["ray_role"] == "head"
    files = {
        mc.PROMETHEUS_YML: mc.prometheus_yml(members, s, ray_file=on_head, self_host=name),
        mc.RULES_YML: mc.rules_yml(),
        **mc.target_files(members, s),
        f"/etc/systemd/system/{ms.PROMETHEUS}.service": ms_unit(ms.PROMETHEUS, "Prometheus", prometheus(s), s),
    }
    if s["monitoring_grafana"]:
        files |= mc.grafana_files(s, ray_dashboards=on_head)
        files[f"/etc/systemd/system/{ms.GRAFANA}.service"] = ms_unit(ms.GRAFANA, "Grafana", grafana(s), s)
    found = {path: (text, 644) for path, text in files.items()}
    if on_head:  # the copier of Ray's service-discovery file
        found[ray_sd.UNIT_PATH] = (render(ray_sd.UNIT_TEMPLATE, **ray_sd.unit_values(dict(s))), 644)
        found[ray_sd.SCRIPT] = (Path(ray_sd.SCRIPT_SOURCE).read_text(), 755)
    return found


def prometheus(s: Mapping[str, Any]) -> list[str]:
    return ms.prometheus_words(dict(s), s["ray_role"] == "head")


def grafana(s: Mapping[str, Any]) -> list[str]:
    return ms.grafana_words(dict(s), s["ray_role"] == "head")


def ms_unit(container: str, what: str, words: list[str], s: Mapping[str, Any]) -> str:
    firewall_unit = FIREWALL_UNIT if s["firewall_enabled"] else None
    return render(ms.UNIT_TEMPLATE, **ms.unit_values(container, what, words, firewall_unit))


def expected_dirs(s: Mapping[str, Any]) -> dict[str, int]:
    dirs = {mc.CONFIG_DIR: 755, mc.TARGETS_DIR: 755, mc.PROMETHEUS_DATA: 700}
    if s["ray_role"] == "head":  # the copier's folder, and its script's
        dirs |= {mc.RAY_SD_DIR: 755, ray_sd.SCRIPT.rsplit("/", 1)[0]: 755}
    if s["monitoring_grafana"]:
        dirs |= {mc.GRAFANA_DIR: 755, f"{mc.GRAFANA_PROVISIONING}/datasources": 755,
                 f"{mc.GRAFANA_PROVISIONING}/dashboards": 755, mc.GRAFANA_DASHBOARDS: 755,
                 mc.GRAFANA_DATA: 700}  # fmt: skip
    return dirs


def _container(name: str, image: str, label: str) -> str:
    return json.dumps(
        {
            "Id": "f00d" * 16,
            "Image": IMAGE_ID,
            "Name": f"/{name}",
            "State": {"Status": "running", "Running": True, "Restarting": False},
            "Config": {"Image": image, "Labels": {ms.HASH_LABEL: label}},
        }
    )


def facts(converged: bool, data: Mapping[str, Any], options: Mapping[str, Any]) -> FakeState:
    """The monitoring server step's view of one host."""
    s = settings.merge(data)
    state = FakeState()
    serves = bool(options.get("serves")) and converged
    # Leftovers: one command; on a host that should have none, what ``leftovers`` says is there.
    state.responses[LEFTOVERS] = [" ".join(item) for item in options.get("leftovers", ())]
    containers = {ms.PROMETHEUS: (local_name(s["monitoring_prometheus_image"]), prometheus(s))}
    if s["monitoring_grafana"]:
        containers[ms.GRAFANA] = (local_name(s["monitoring_grafana_image"]), grafana(s))
    # ConfigReadAt: when each container last read its files, and when they were written.
    state.responses[config_read_at(ms.GRAFANA)] = ["STARTED=1733004000", "WRITTEN=1733000000"] if serves else []
    unread = bool(options.get("config_unread"))
    state.responses[config_read_at(ms.PROMETHEUS)] = (
        ["READ=1733004000", "STARTED=1733000500", f"WRITTEN={1733009000 if unread else 1733000000}"] if serves else []
    )
    leftovers = set(options.get("leftovers", ()))
    for name in (ms.PROMETHEUS, ms.GRAFANA):
        runs = (serves and name in containers) or ("CONTAINER", name) in leftovers
        if name in containers:
            image, words = containers[name]
            label = options.get("prometheus_label", ms.run_hash(words)) if name == ms.PROMETHEUS else ms.run_hash(words)
            key = container_state_key(name)
            state.responses[key] = [_container(name, image, label)] if serves else []
        state.responses.update(
            systemd_unit(f"{name}.service", "running" if runs else "dead", "enabled" if runs else "")
        )
    copier = (serves and s["ray_role"] == "head") or ("PATH", ray_sd.UNIT_PATH) in leftovers
    state.responses.update(systemd_unit(ray_sd.UNIT, "running" if copier else "dead", "enabled" if copier else ""))
    state.responses.update(need_reload(ray_sd.UNIT, False))
    for path, uid in ((mc.PROMETHEUS_DATA, mc.PROMETHEUS_UID), (mc.GRAFANA_DATA, mc.GRAFANA_UID)):
        state.responses[fact_key(ms.PathOwner, f"stat -c %u:%g {path}", path)] = [f"{uid}:{uid}"] if serves else []
    for kind, path in leftovers:  # what pyinfra's own File and Directory facts see of them
        if kind == "PATH" and path.endswith((".service", ".sh")):
            state.files[path] = ("[Unit]\n", 644)
        elif kind == "PATH":
            state.dirs[path] = 755
    if not serves:
        state.responses[GPU_TARGETS_TEXT] = ["ABSENT"]
        return state
    members = list(options.get("members", ()))
    state.files.update(expected_files(s, options.get("name", ""), members))
    state.dirs.update(expected_dirs(s))
    gpu = state.files[GPU_TARGETS][0]
    state.responses[GPU_TARGETS_TEXT] = ["EXISTS", *gpu.splitlines()]
    for image in (local_name(s["monitoring_prometheus_image"]), local_name(s["monitoring_grafana_image"])):
        key = fact_key(DockerImageId, f"docker image inspect --format '{{{{.Id}}}}' {image}", image)
        state.responses[key] = [IMAGE_ID]
    return state
