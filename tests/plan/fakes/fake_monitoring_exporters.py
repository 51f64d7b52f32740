"""What a host looks like to the monitoring exporters step, for the plan tests' fake hosts.

``facts(os_name, converged, data, gpus, options)`` returns the files, directories, packages
and other fact answers a host has: nothing of the exporters when fresh; when converged with
``monitoring_enabled``, everything the step puts there:

- Debian, Ubuntu, Rocky: the node exporter package (``prometheus-node-exporter``, EPEL's
  ``node-exporter``), rayrig's marker that it installed it, its unit's drop-in (rendered by
  the pure ``deploy.monitoring.exporters.drop_in_text``), the unit enabled and running with
  rayrig's flags;
- Amazon Linux 2023: the ``rayrig-node-exporter`` unit file, enabled and running;
- GPU hosts with ``monitoring_gpu_exporter = "dcgm"``: the ``rayrig-gpu-exporter`` unit;
- the record of the images rayrig pulled (the containers' images).

Options:

- ``installed``: whether the exporters are there (default: converged and monitoring_enabled);
  with monitoring off, ``installed=True`` is what an earlier deploy with it on left;
- ``own_package``: the host had the node exporter package before rayrig: no marker (default False);
- ``package_only``: the package is there (the host's own), nothing of rayrig's (default False);
- ``live_args``: unit -> the argv its main process runs with now (default: rayrig's own flags
  where the unit runs); None: it runs nothing;
- ``images_present``: whether the exporter images are in Docker (default: ``installed``);
- ``need_reload``: units whose files changed since systemd's last daemon-reload.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deploy.contract import settings
from deploy.host.image_mirror import local_name
from deploy.host.platform import detect
from deploy.monitoring import exporters as mon
from deploy.run.facts import DockerImageId, FileText
from tests.plan.fakes.fakestep import FakeState, fact_key, need_reload, systemd_unit

OS_IDS = {
    "ubuntu22": ("ubuntu", "22.04"),
    "ubuntu24": ("ubuntu", "24.04"),
    "debian12": ("debian", "12"),
    "rocky9": ("rocky", "9.4"),
    "al2023": ("amzn", "2023"),
}


def package_of(os_name: str) -> mon.NodeExporterPackage | None:
    """The node exporter package of a fake OS (None: Amazon Linux 2023, the container)."""
    if os_name not in OS_IDS:
        return None  # an OS rayrig refuses before this step
    os_id, version = OS_IDS[os_name]
    return mon.node_exporter_package(detect({"id": os_id, "version_id": version}))


def expected_units(os_name: str, data: Mapping[str, Any], gpus: int) -> dict[str, tuple[list[str], str]]:
    """unit -> (argv of its main process, its file's text or its drop-in's) of a converged host."""
    s = settings.merge(data)
    address = str(s["ray_node_ip"] or "10.0.0.99")
    node = mon.listen_address(address, s["monitoring_ports"]["node_exporter"])
    gpu = mon.listen_address(address, s["monitoring_ports"]["gpu_exporter"])
    firewall_unit = "rayrig-firewall.service" if s["firewall_enabled"] else None
    units: dict[str, tuple[list[str], str]] = {}
    package = package_of(os_name)
    if package is not None:
        argv = [package.binary, *mon.node_exporter_args(node)]
        units[package.service] = (argv, mon.drop_in_text(package, node, firewall_unit))
    else:
        args = mon.node_container_args(local_name(s["monitoring_node_exporter_image"]), node)
        units[mon.NODE_UNIT] = (
            ["docker", *args],
            mon.unit_text(mon.NODE_UNIT, "Prometheus node exporter", args, firewall_unit),
        )
    if gpus and s["monitoring_gpu_exporter"] == "dcgm":
        args = mon.gpu_container_args(local_name(s["monitoring_gpu_exporter_image"]), gpu)
        units[mon.GPU_UNIT] = (
            ["docker", *args],
            mon.unit_text(mon.GPU_UNIT, "NVIDIA DCGM exporter", args, firewall_unit),
        )
    return units


def expected_images(os_name: str, data: Mapping[str, Any], gpus: int) -> list[str]:
    """The exporter images a converged host runs (and rayrig pulled), by the names it runs them by."""
    s = settings.merge(data)
    images = [] if package_of(os_name) else [local_name(s["monitoring_node_exporter_image"])]
    if gpus and s["monitoring_gpu_exporter"] == "dcgm":
        images.append(local_name(s["monitoring_gpu_exporter_image"]))
    return images


def _file_text(state: FakeState, path: str, content: str | None) -> None:
    """``deploy.run.facts.FileText`` of ``path``, and the file among the host's files."""
    key = fact_key(FileText, f"if [ -f {path} ]", path)
    if content is None:
        state.responses[key] = ["ABSENT"]
        return
    state.responses[key] = ["EXISTS", *content.splitlines()]
    state.files[path] = (content, 644)


def facts(os_name: str, converged: bool, data: Mapping[str, Any], gpus: int, options: Mapping[str, Any]) -> FakeState:
    """The exporters step's view of one host with ``gpus`` GPUs."""
    s = settings.merge(data)
    installed = options.get("installed", converged and s["monitoring_enabled"])
    package = package_of(os_name)
    state = FakeState()
    units = expected_units(os_name, data, gpus) if installed else {}
    live = dict(options.get("live_args", {}))
    for unit, (argv, text) in units.items():
        if package is not None and unit == package.service:
            state.files[package.drop_in] = (text, 644)
            state.dirs[package.drop_in.rsplit("/", 1)[0]] = 755
        else:
            state.files[f"/etc/systemd/system/{unit}.service"] = (text, 644)
        live.setdefault(unit, argv)
    if installed and gpus and s["monitoring_gpu_exporter"] == "dcgm":
        with open(mon.COUNTERS_TEMPLATE) as counters:
            state.files[mon.COUNTERS_PATH] = (counters.read(), 644)
    if package is not None and (installed or options.get("package_only")):
        state.packages = (package.package,)
        live.setdefault(package.service, [package.binary])
    for unit in (*([package.service] if package else []), mon.NODE_UNIT, mon.GPU_UNIT):
        argv = live.get(unit)
        running = argv is not None
        service = f"{unit}.service"
        state.responses[fact_key(mon.UnitCommand, f"--property MainPID --value -- {service}", service)] = (
            ["RAYRIG_RUNNING", *(f"RAYRIG_ARG={a}" for a in argv)] if running else []
        )
        state.responses.update(systemd_unit(service, "running" if running else "dead", "enabled" if running else ""))
        state.responses.update(need_reload(service, unit in options.get("need_reload", ())))

    marker = package.package + "\n" if installed and package and not options.get("own_package") else None
    _file_text(state, mon.PACKAGE_MARKER, marker)
    images = expected_images(os_name, data, gpus) if installed else []
    _file_text(state, mon.IMAGES_RECORD, "".join(f"{i}\n" for i in images) or None)
    if marker or images:
        state.dirs[mon.STATE_DIR] = 755
    present = options.get("images_present", installed)
    for image in (local_name(s["monitoring_node_exporter_image"]), local_name(s["monitoring_gpu_exporter_image"])):
        ids = ["sha256:" + "cd" * 32] if present and image in images else []
        state.responses[fact_key(DockerImageId, f"docker image inspect --format '{{{{.Id}}}}' {image}", image)] = ids
    return state
