"""Prometheus and Grafana on the monitoring host (``monitoring_host``, the head by default): two
containers supervised by systemd units, listening on 127.0.0.1, their files rendered by
:mod:`deploy.monitoring.config`; reloaded or restarted only when what they read changed.

Restarts, reloads, images and removal: docs/design/monitoring-server.md.
"""

from __future__ import annotations

import hashlib
import shlex
from io import StringIO
from typing import Any

from pyinfra import host, inventory
from pyinfra.api import FactBase, deploy
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from deploy.contract.settings import (
    host_data,
    host_settings,
    merge,
    node_address,
    present_hosts,
    resolve_monitoring_host,
)
from deploy.firewall.guard import FIREWALL_UNIT
from deploy.host import image_mirror
from deploy.host.ray_image import fetch_commands
from deploy.monitoring import config as mc
from deploy.monitoring import ray_sd
from deploy.run.facts import ContainerState, DockerImageId, FileText, NvidiaDevices, fact
from deploy.run.templating import put_template, resource
from deploy.run.units import daemon_reload

PROMETHEUS = "rayrig-prometheus"
GRAFANA = "rayrig-grafana"
UNIT_TEMPLATE = resource(__package__, "rayrig-monitoring.service.j2")
HASH_LABEL = "rayrig.config-hash"


class PathOwner(FactBase):
    """A path's owner as ``"uid:gid"``, or None when it does not exist."""

    def command(self, path: str) -> str:
        return f"stat -c %u:%g {shlex.quote(path)} 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        return output[0].strip() if output and output[0].strip() else None


class ConfigReadAt(FactBase):
    """When a container last read its configuration, and when its files were last written (epoch
    seconds, None when unknown): Prometheus's last successful reload (its own metric, on
    ``127.0.0.1:port``), else the container's start; the newest file's modification time."""

    @staticmethod
    def default() -> dict[str, float | None]:
        return {"read": None, "written": None}

    def command(self, container: str, paths: tuple[str, ...], port: int | None = None) -> str:
        quoted = " ".join(shlex.quote(p) for p in paths)
        metric = "prometheus_config_last_reload_success_timestamp_seconds"
        reloaded = (
            f"echo READ=$(curl -fsS --max-time 5 http://127.0.0.1:{int(port)}/metrics 2>/dev/null "
            f"| sed -n 's/^{metric} //p'); "
            if port
            else ""
        )
        return (
            reloaded + f"s=$(docker container inspect --format '{{{{.State.StartedAt}}}}' {shlex.quote(container)} "
            '2>/dev/null) && echo STARTED=$(date -d "$s" +%s); '
            f"echo WRITTEN=$(stat -c %Y {quoted} 2>/dev/null | sort -n | tail -1); true"
        )

    def process(self, output: list[str]) -> dict[str, float | None]:
        values: dict[str, float | None] = {"READ": None, "STARTED": None, "WRITTEN": None}
        for line in output:
            key, _sep, value = line.partition("=")
            if key in values:
                try:
                    values[key] = float(value.strip())
                except ValueError:
                    values[key] = None
        return {"read": values["READ"] or values["STARTED"], "written": values["WRITTEN"]}


def _hosts_view() -> list[tuple[str, str, str]]:
    return [(h.name, node_address(h), merge(host_data(h))["ray_role"]) for h in present_hosts(inventory)]


def monitoring_host_name() -> str | None:
    """The inventory name of the host that runs Prometheus and Grafana (None: monitoring is off)."""
    hosts = list(present_hosts(inventory))
    if not hosts:
        return None
    first = host_settings(hosts[0])  # monitoring_enabled and monitoring_host are the same on every host
    if not first["monitoring_enabled"]:
        return None
    return resolve_monitoring_host(first["monitoring_host"], _hosts_view())


def runs_monitoring(current_host: Any) -> bool:
    """Whether ``current_host`` runs Prometheus (and Grafana)."""
    return monitoring_host_name() == current_host.name


def head_runs_monitoring(current_host: Any) -> bool:
    """Whether ``current_host`` is the head and the monitoring host: its ray-node gets the monitoring
    environment (:func:`deploy.monitoring.config.ray_head_env`)."""
    return host_settings(current_host)["ray_role"] == "head" and runs_monitoring(current_host)


def is_gpu_host(h: Any, listed: set[str]) -> bool:
    """Whether ``h`` runs a GPU exporter: NVIDIA GPUs on its PCI bus and ``monitoring_gpu_exporter``
    not "none". A host left out of this run (``--limit``) keeps what the current ``gpu.json`` says
    (``listed``), since its devices cannot be read."""
    if host_settings(h)["monitoring_gpu_exporter"] == "none":
        return False
    if not h.connected:
        return h.name in listed
    return fact(h, NvidiaDevices).get("pci_count", 0) > 0


def members() -> list[mc.Member]:
    """Every present inventory host as the monitoring host's Prometheus sees it."""
    listed = mc.gpu_hosts_listed(fact(host, FileText, f"{mc.TARGETS_DIR}/gpu.json"))
    return [
        mc.Member(
            name=h.name,
            address=node_address(h),
            head=host_settings(h)["ray_role"] == "head",
            gpu=is_gpu_host(h, listed),
        )
        for h in present_hosts(inventory)
    ]


def mount(src: str, dst: str | None = None, readonly: bool = False) -> str:
    """``docker run``'s bind mount of ``src`` at ``dst`` (the same path by default)."""
    return f"--mount=type=bind,src={src},dst={dst or src}" + (",readonly" if readonly else "")


def run_words(
    container: str, image: str, uid: int, mounts: list[str], env: dict[str, str], args: list[str]
) -> list[str]:
    """The container's ``docker run`` command line, with the label that hashes it.

    >>> run_words("c", "img:1", 65534, [], {}, ["--x"])[5:]
    ['--network=host', '--pull=never', '--user=65534:65534', 'img:1', '--x']
    """
    words = ["docker", "run", "--rm", f"--name={container}", "--network=host", "--pull=never"]
    words += [f"--user={uid}:{uid}", *mounts, *(f"--env={k}={v}" for k, v in sorted(env.items()))]
    words += [image, *args]
    digest = hashlib.sha256("\0".join(words).encode()).hexdigest()[:16]
    return words[:4] + [f"--label={HASH_LABEL}={digest}"] + words[4:]


def run_hash(words: list[str]) -> str:
    """The hash label a container started from ``words`` carries."""
    return next(w.split("=", 2)[2] for w in words if w.startswith(f"--label={HASH_LABEL}="))


def systemd_line(words: list[str]) -> str:
    """``words`` as one systemd ``ExecStart=`` command line (systemd reads ``%`` and ``$`` itself)."""
    return shlex.join(words).replace("%", "%%").replace("$", "$$")


def prometheus_words(settings: dict[str, Any], ray_file: bool) -> list[str]:
    """Prometheus's ``docker run`` line; ``ray_file``: the folder of the copy of Ray's service-discovery
    file is mounted, read-only (on the head: :mod:`deploy.monitoring.ray_sd`); never Ray's own folder."""
    mounts = [mount(mc.CONFIG_DIR, readonly=True), mount(mc.PROMETHEUS_DATA)]
    if ray_file:
        mounts.append(mount(mc.RAY_SD_DIR, readonly=True))
    image = image_mirror.local_name(settings["monitoring_prometheus_image"])
    return run_words(PROMETHEUS, image, mc.PROMETHEUS_UID, mounts, {}, mc.prometheus_args(settings))


def grafana_words(settings: dict[str, Any], ray_dashboards: bool) -> list[str]:
    """Grafana's ``docker run`` line; ``ray_dashboards``: Ray's dashboards folder is mounted (on the head)."""
    mounts = [mount(mc.GRAFANA_DIR, readonly=True), mount(mc.GRAFANA_DATA)]
    if ray_dashboards:
        mounts.append(mount(mc.ray_dashboards_dir(settings), readonly=True))
    image = image_mirror.local_name(settings["monitoring_grafana_image"])
    return run_words(GRAFANA, image, mc.GRAFANA_UID, mounts, mc.grafana_env(settings), [])


def unit_values(container: str, what: str, words: list[str], firewall_unit: str | None = None) -> dict[str, Any]:
    """The template values of a container's unit (``rayrig-monitoring.service.j2``); ``firewall_unit``:
    rayrig's firewall's, with ``firewall_enabled``."""
    return {
        "container": container,
        "description": what,
        "exec_start": systemd_line(words),
        "firewall_unit": firewall_unit,
    }


def _image(what: str, image: str, with_auth: bool) -> None:
    if fact(host, DockerImageId, image_mirror.local_name(image)) is None:
        server.shell(name=f"Get {what}'s image {image}", commands=fetch_commands(image, with_auth))


def _data_folder(path: str, uid: int) -> None:
    files.directory(name=f"Create {path}", path=path, mode="700")
    if fact(host, PathOwner, path) != f"{uid}:{uid}":
        chown = f"chown -R {int(uid)}:{int(uid)} {shlex.quote(path)}"
        server.shell(name=f"Make {path} the container's (uid {uid})", commands=[chown])


def _service(container: str, what: str, words: list[str]) -> tuple[bool, dict[str, Any] | None]:
    """The container's unit written, loaded, enabled and running; restarted when the running
    container is not the unit's. Returns (restarted, the container as found)."""
    unit = put_template(
        f"Install the {container} systemd unit",
        UNIT_TEMPLATE,
        f"/etc/systemd/system/{container}.service",
        **unit_values(container, what, words, FIREWALL_UNIT if host_settings(host)["firewall_enabled"] else None),
    )
    daemon_reload(f"Reload systemd units for {container}", [unit], [f"{container}.service"])
    found = fact(host, ContainerState, container)
    stale = bool(found) and found["labels"].get(HASH_LABEL) != run_hash(words)
    systemd.service(
        name=f"Keep the {container} service enabled and running",
        service=f"{container}.service",
        running=True,
        enabled=True,
        restarted=stale,
    )
    return stale, found


def _put(path: str, text: str, what: str) -> Any:
    return files.put(name=f"Write {what}", src=StringIO(text), dest=path, mode="644")


def _prometheus(settings: dict[str, Any], on_head: bool) -> None:
    for folder in (mc.CONFIG_DIR, mc.TARGETS_DIR):
        files.directory(name=f"Create {folder}", path=folder, mode="755")
    view = members()
    config = _put(mc.PROMETHEUS_YML, mc.prometheus_yml(view, settings, ray_file=on_head, self_host=host.name),
                  "Prometheus's configuration")  # fmt: skip
    rules = _put(mc.RULES_YML, mc.rules_yml(settings["health_gate"]), "Prometheus's alert rules")
    for path, text in mc.target_files(view, settings).items():
        _put(path, text, f"Prometheus's targets ({path.rsplit('/', 1)[1]})")
    _data_folder(mc.PROMETHEUS_DATA, mc.PROMETHEUS_UID)
    if on_head:
        ray_sd.ensure(settings)
    else:
        ray_sd.remove(fact(host, Leftovers, ray_sd.PATHS, (), ()))
    _image("Prometheus", settings["monitoring_prometheus_image"], bool(settings["docker_registry_auth"]))
    stale, found = _service(PROMETHEUS, "Prometheus", prometheus_words(settings, on_head))
    if stale or not found or not found["running"]:
        return  # the container starts with the files as they are now
    files_read = (mc.PROMETHEUS_YML, mc.RULES_YML)
    times = fact(host, ConfigReadAt, PROMETHEUS, files_read, settings["monitoring_prometheus_port"])
    unread = times["read"] is not None and times["written"] is not None and times["written"] > times["read"]
    server.shell(
        name="Reload Prometheus's configuration (SIGHUP)",
        commands=[f"docker kill --signal=HUP {PROMETHEUS}"],
        **({} if unread else {"_if": any_changed(config, rules)}),
    )


def _grafana(settings: dict[str, Any], on_head: bool) -> None:
    for folder in (mc.GRAFANA_DIR, f"{mc.GRAFANA_PROVISIONING}/datasources", f"{mc.GRAFANA_PROVISIONING}/dashboards",
                   mc.GRAFANA_DASHBOARDS):  # fmt: skip
        files.directory(name=f"Create {folder}", path=folder, mode="755")
    texts = mc.grafana_files(settings, ray_dashboards=on_head)
    source = _put(mc.GRAFANA_DATASOURCE, texts[mc.GRAFANA_DATASOURCE], "Grafana's data source")
    providers = _put(mc.GRAFANA_PROVIDERS, texts[mc.GRAFANA_PROVIDERS], "Grafana's dashboard providers")
    _put(mc.GPU_DASHBOARD, texts[mc.GPU_DASHBOARD], "rayrig's GPU dashboard")
    _data_folder(mc.GRAFANA_DATA, mc.GRAFANA_UID)
    _image("Grafana", settings["monitoring_grafana_image"], bool(settings["docker_registry_auth"]))
    stale, found = _service(GRAFANA, "Grafana", grafana_words(settings, on_head))
    if stale or not found or not found["running"]:
        return
    provisioning = (mc.GRAFANA_DATASOURCE, mc.GRAFANA_PROVIDERS)
    times = fact(host, ConfigReadAt, GRAFANA, provisioning)
    unread = times["read"] is not None and times["written"] is not None and times["written"] > times["read"]
    systemd.service(
        name="Restart Grafana for its provisioning",
        service=f"{GRAFANA}.service",
        restarted=True,
        **({} if unread else {"_if": any_changed(source, providers)}),
    )


class Leftovers(FactBase):
    """What of this step is on a host: which of ``paths`` exist, which ``containers`` and ``images``
    Docker has (one command, so that a host without any of it costs one round trip)."""

    @staticmethod
    def default() -> set[tuple[str, str]]:
        return set()

    def command(self, paths: tuple[str, ...], containers: tuple[str, ...], images: tuple[str, ...]) -> str:
        words = " ".join(shlex.quote(p) for p in paths)
        names = " ".join(shlex.quote(c) for c in containers)
        refs = " ".join(shlex.quote(i) for i in images)
        return (
            f'for p in {words}; do [ -e "$p" ] && echo "PATH $p"; done; '
            "command -v docker >/dev/null 2>&1 || exit 0; "
            f'for c in {names}; do docker container inspect "$c" >/dev/null 2>&1 && echo "CONTAINER $c"; done; '
            f'for i in {refs}; do docker image inspect "$i" >/dev/null 2>&1 && echo "IMAGE $i"; done; true'
        )

    def process(self, output: list[str]) -> set[tuple[str, str]]:
        return {tuple(line.split(" ", 1)) for line in output if " " in line}  # type: ignore[misc]


def _unit_path(container: str) -> str:
    return f"/etc/systemd/system/{container}.service"


def _remove(
    settings: dict[str, Any], containers: list[str], folders: list[str], also: tuple[str, ...] = ()
) -> set[tuple[str, str]]:
    """Remove ``containers`` (their units, containers and images) and ``folders``, where they are. Returns
    what the one ``Leftovers`` fact found, ``also`` asked for besides (paths another remover takes away)."""
    images = {
        PROMETHEUS: image_mirror.local_name(settings["monitoring_prometheus_image"]),
        GRAFANA: image_mirror.local_name(settings["monitoring_grafana_image"]),
    }
    paths = (*map(_unit_path, containers), *folders, *also)
    found = fact(host, Leftovers, paths, tuple(containers), tuple(images[c] for c in containers))
    for container in containers:
        if ("PATH", _unit_path(container)) in found:
            systemd.service(
                name=f"Stop and disable the {container} service",
                service=f"{container}.service",
                running=False,
                enabled=False,
            )
            unit = files.file(name=f"Remove the {container} systemd unit", path=_unit_path(container), present=False)
            systemd.daemon_reload(name=f"Reload systemd units without {container}", _if=unit.did_change)
        if ("CONTAINER", container) in found:
            server.shell(name=f"Remove the {container} container", commands=[f"docker rm --force {container}"])
        if ("IMAGE", images[container]) in found:
            server.shell(
                name=f"Remove the image {images[container]}", commands=[f"docker rmi {shlex.quote(images[container])}"]
            )
    for folder in folders:
        if ("PATH", folder) in found:
            files.directory(name=f"Remove {folder}", path=folder, present=False)
    return found


def _grafana_folders(settings: dict[str, Any]) -> list[str]:
    """Grafana's folders on the monitoring host; on the head, the folder of Ray's dashboards too."""
    folders = [mc.GRAFANA_DIR, mc.GRAFANA_DATA]
    if settings["ray_role"] == "head":
        folders.append(mc.ray_dashboards_dir(settings))
    return folders


@deploy("Monitoring server")
def monitoring_server() -> None:
    """On the monitoring host, Prometheus (and Grafana) configured from the inventory and running;
    on every other host, and everywhere with ``monitoring_enabled = False``, none of it."""
    settings = host_settings(host)
    if not runs_monitoring(host):
        folders = [mc.CONFIG_DIR, mc.PROMETHEUS_DATA, *_grafana_folders(settings)]
        ray_sd.remove(_remove(settings, [GRAFANA, PROMETHEUS], folders, also=ray_sd.PATHS))
        return
    on_head = settings["ray_role"] == "head"
    _prometheus(settings, on_head)
    if settings["monitoring_grafana"]:
        _grafana(settings, on_head)
    else:
        _remove(settings, [GRAFANA], _grafana_folders(settings))
