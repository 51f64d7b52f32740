"""Monitoring exporters: a node exporter on every host (the distribution's package, or a container on
Amazon Linux 2023), NVIDIA's DCGM exporter on the GPU hosts; what rayrig installed is recorded and
removed with ``monitoring_enabled = False``.

Packages, units, ports and removal: docs/design/monitoring-exporters.md.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from io import StringIO
from typing import Any

from pyinfra import host, inventory
from pyinfra.api import FactBase, deploy
from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import Directory, File
from pyinfra.facts.rpm import RpmPackages
from pyinfra.operations import apt, dnf, files, server, systemd
from pyinfra.operations.util import any_changed

from deploy.contract.ports import exporter_ports
from deploy.contract.settings import host_settings, node_address, present_hosts
from deploy.firewall import nftables
from deploy.host import image_mirror
from deploy.host.base import missing_packages, platform
from deploy.host.epel import ensure_epel
from deploy.host.platform import Platform, detect
from deploy.host.ray_image import DOCKER_CONFIG_DIR, fetch_commands
from deploy.ray.ray_node import resolve_num_gpus, wait_for_port_command
from deploy.run.facts import DockerImageId, FileText, HostInfo, NvidiaDevices, fact
from deploy.run.templating import put_template, render, resource
from deploy.run.units import NeedDaemonReload, daemon_reload

NODE_UNIT = "rayrig-node-exporter"
GPU_UNIT = "rayrig-gpu-exporter"
UNIT_TEMPLATE = resource(__package__, "rayrig-exporter.service.j2")
DROP_IN_TEMPLATE = resource(__package__, "node-exporter-rayrig.conf.j2")
STATE_DIR = "/var/lib/rayrig/exporters"
#: Written before rayrig installs the node exporter package (it holds the package's name):
#: only a package rayrig installed is removed with ``monitoring_enabled = False``.
PACKAGE_MARKER = f"{STATE_DIR}/node-exporter-package"
#: The exporter images rayrig pulled, one a line: removed when no longer used.
IMAGES_RECORD = f"{STATE_DIR}/images"
COPY_DIGEST_FILE = "/var/lib/rayrig/mirror-copy.digest"  # the head's copy of an exporter image writes its digest
PORT_WAIT_S = 60  # how long a (re)started exporter has to answer on its port
#: The DCGM exporter's counters (``dcgm-counters.csv``): its defaults plus the fields the
#: checks and alert rules read that it leaves out (clock event reasons, violations, ECC totals).
COUNTERS_TEMPLATE = resource(__package__, "dcgm-counters.csv")
COUNTERS_PATH = "/etc/rayrig/dcgm-counters.csv"
COUNTERS_IN_CONTAINER = "/etc/dcgm-exporter/rayrig-counters.csv"


@dataclass(frozen=True)
class NodeExporterPackage:
    """The node exporter as a distribution packages it."""

    package: str
    service: str  # its systemd unit, without ".service"
    binary: str

    @property
    def drop_in(self) -> str:
        return f"/etc/systemd/system/{self.service}.service.d/rayrig.conf"


DEBIAN_PACKAGE = NodeExporterPackage(
    "prometheus-node-exporter", "prometheus-node-exporter", "/usr/bin/prometheus-node-exporter"
)
EPEL_PACKAGE = NodeExporterPackage("node-exporter", "node_exporter", "/usr/bin/node_exporter")


def node_exporter_package(plat: Platform) -> NodeExporterPackage | None:
    """The node exporter package of a platform; None where there is none (Amazon Linux 2023: the container).

    >>> node_exporter_package(detect({"id": "rocky", "version_id": "9.4"})).package
    'node-exporter'
    """
    if plat.family == "apt":
        return DEBIAN_PACKAGE
    if plat.id in ("rocky", "rhel", "almalinux"):
        return EPEL_PACKAGE
    return None


def listen_address(address: str, port: int) -> str:
    """host:port for an exporter's listener (an IPv6 address in brackets).

    >>> listen_address("10.0.0.2", 9100), listen_address("fd00::2", 9400)
    ('10.0.0.2:9100', '[fd00::2]:9400')
    """
    return f"[{address}]:{int(port)}" if ":" in address else f"{address}:{int(port)}"


def node_exporter_args(listen: str) -> list[str]:
    """The node exporter's flags (package and container alike, after ``--path.rootfs`` in the container)."""
    return [f"--web.listen-address={listen}"]


def node_container_args(image: str, listen: str) -> list[str]:
    """``docker run`` arguments of the node exporter container (Amazon Linux 2023).

    >>> node_container_args("quay.io/prometheus/node-exporter:v1.9.1", "10.0.0.2:9100")[-3:]
    ['quay.io/prometheus/node-exporter:v1.9.1', '--path.rootfs=/host', '--web.listen-address=10.0.0.2:9100']
    """
    return [
        "run", "--rm", f"--name={NODE_UNIT}", "--pull=never", "--net=host", "--pid=host",
        "--volume=/:/host:ro,rslave", image, "--path.rootfs=/host", *node_exporter_args(listen),
    ]  # fmt: skip


def gpu_container_args(image: str, listen: str) -> list[str]:
    """``docker run`` arguments of the DCGM exporter container: every GPU, host networking, the
    listener through ``DCGM_EXPORTER_LISTEN`` and rayrig's counters file through
    ``DCGM_EXPORTER_COLLECTORS`` (the environment of its ``--address`` and ``--collectors``: the
    image's entrypoint passes no flags of ours on).

    >>> gpu_container_args("nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04", "10.0.0.2:9400")[3:]
    ['--pull=never', '--net=host', '--gpus=all', '--env=DCGM_EXPORTER_LISTEN=10.0.0.2:9400', \
'--volume=/etc/rayrig/dcgm-counters.csv:/etc/dcgm-exporter/rayrig-counters.csv:ro', \
'--env=DCGM_EXPORTER_COLLECTORS=/etc/dcgm-exporter/rayrig-counters.csv', \
'nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04']
    """
    return [
        "run", "--rm", f"--name={GPU_UNIT}", "--pull=never", "--net=host", "--gpus=all",
        f"--env=DCGM_EXPORTER_LISTEN={listen}", f"--volume={COUNTERS_PATH}:{COUNTERS_IN_CONTAINER}:ro",
        f"--env=DCGM_EXPORTER_COLLECTORS={COUNTERS_IN_CONTAINER}", image,
    ]  # fmt: skip


def _firewall_unit(settings: dict[str, Any]) -> str | None:
    return nftables.UNIT if settings["firewall_enabled"] else None


def unit_text(name: str, description: str, args: list[str], firewall_unit: str | None = nftables.UNIT) -> str:
    """The systemd unit of an exporter container (``rayrig-exporter.service.j2``)."""
    return render(UNIT_TEMPLATE, container=name, description=description, args=args, firewall_unit=firewall_unit)


def drop_in_text(package: NodeExporterPackage, listen: str, firewall_unit: str | None = nftables.UNIT) -> str:
    """rayrig's drop-in for a node exporter package's unit (``node-exporter-rayrig.conf.j2``)."""
    args = node_exporter_args(listen)
    return render(DROP_IN_TEMPLATE, binary=package.binary, args=args, firewall_unit=firewall_unit)


def copy_command(
    image: str, dest: str, writer: str, *, authfile: str = "", tls_verify: bool = True, timeout_s: int = 3600
) -> str:
    """The head's copy of ``image`` into its mirror as ``dest`` (path:tag), through the copy's side at
    ``writer`` (``mirror-copy.sh``, as the Ray image is copied); it prints the digest every host pulls.

    >>> print(copy_command("quay.io/a/b:1", "a/b:rayrig-1", "127.0.0.1:5000", timeout_s=60))
    /usr/local/lib/rayrig/mirror-copy.sh quay.io/a/b:1 a/b:rayrig-1 127.0.0.1:5000 \
/etc/docker/registry/rayrig-copy.yml /var/lib/rayrig/mirror-copy.digest true '' 60
    """
    return shlex.join(
        [image_mirror.COPY_SCRIPT, image, dest, writer, image_mirror.WRITER_CONFIG, COPY_DIGEST_FILE,
         "true" if tls_verify else "false", authfile, str(int(timeout_s))]
    )  # fmt: skip


def record_command(image: str) -> str:
    """Adds ``image`` to the record of the images rayrig pulled (once)."""
    quoted, record = shlex.quote(image), shlex.quote(IMAGES_RECORD)
    add = f"grep -qxF -- {quoted} {record} 2>/dev/null || echo {quoted} >> {record}"
    return f"mkdir -p {shlex.quote(STATE_DIR)} && {{ {add}; }}"


def forget_images_command(images: Iterable[str]) -> str:
    """Removes ``images`` (when no container uses them) and takes them off the record."""
    images = sorted(images)
    record = shlex.quote(IMAGES_RECORD)
    remove = " ".join(f"docker image rm -- {shlex.quote(i)} >/dev/null 2>&1 || true;" for i in images)
    patterns = " ".join(f"-e {shlex.quote(i)}" for i in images)
    return f"{remove} grep -vxF {patterns} {record} > {record}.new; mv {record}.new {record}"


# --- Facts ----------------------------------------------------------------------------------------


class UnitCommand(FactBase):
    """The command line (argv) of a systemd unit's main process as it runs now, or None when it
    runs none. What an exporter was started with, whatever its unit file says since."""

    @staticmethod
    def default() -> None:
        return None

    def command(self, unit: str) -> str:
        pid = f"$(systemctl show --property MainPID --value -- {shlex.quote(unit)} 2>/dev/null)"
        return (
            f'pid={pid}; if [ -n "$pid" ] && [ "$pid" != 0 ] && [ -r "/proc/$pid/cmdline" ]; then '
            "echo RAYRIG_RUNNING; tr '\\0' '\\n' < \"/proc/$pid/cmdline\" | sed 's/^/RAYRIG_ARG=/'; fi"
        )

    def process(self, output: list[str]) -> list[str] | None:
        if "RAYRIG_RUNNING" not in output:
            return None
        return [line[len("RAYRIG_ARG=") :] for line in output if line.startswith("RAYRIG_ARG=")]


# --- Who wants what -------------------------------------------------------------------------------


def gpu_count(h: Any) -> int:
    """The GPUs Ray gets on ``h`` (declared, or detected): a GPU host has at least one."""
    settings = host_settings(h)
    return resolve_num_gpus(
        settings["ray_num_gpus"], fact(h, NvidiaDevices), h.name, settings["nvidia_visible_devices"]
    )


def wanted_images(h: Any) -> dict[str, str]:
    """unit -> image of the exporter containers ``h`` runs (none without ``monitoring_enabled``)."""
    settings = host_settings(h)
    if not settings["monitoring_enabled"]:
        return {}
    wanted = {}
    if node_exporter_package(detect(fact(h, HostInfo), h.name)) is None:
        wanted[NODE_UNIT] = settings["monitoring_node_exporter_image"]
    if settings["monitoring_gpu_exporter"] == "dcgm" and gpu_count(h) > 0:
        wanted[GPU_UNIT] = settings["monitoring_gpu_exporter_image"]
    return wanted


def exporter_targets(address: str, settings: dict[str, Any], gpus: int) -> dict[str, str]:
    """job -> host:port of the exporters a host runs (``address``: its node address, ``gpus``:
    :func:`gpu_count`), the Prometheus jobs ``node`` and ``gpu``; none with monitoring off.

    >>> s = {"monitoring_enabled": True, "monitoring_gpu_exporter": "dcgm",
    ...      "monitoring_ports": {"node_exporter": 9100, "gpu_exporter": 9400}}
    >>> exporter_targets("10.0.0.2", s, 8), exporter_targets("10.0.0.3", s, 0)
    ({'node': '10.0.0.2:9100', 'gpu': '10.0.0.2:9400'}, {'node': '10.0.0.3:9100'})
    """
    ports = exporter_ports(settings)
    targets = {"node": listen_address(address, ports["node_exporter"])} if ports else {}
    if "gpu_exporter" in ports and gpus > 0:
        targets["gpu"] = listen_address(address, ports["gpu_exporter"])
    return targets


def _run_hosts() -> list[Any]:
    return [h for h in present_hosts(inventory) if h.connected and host.state.is_host_in_limit(h)]


# --- Steps ----------------------------------------------------------------------------------------


def _copy_into_mirror() -> None:
    """On the head that runs the mirror (``image_mirror = "head"``): every exporter image some host of
    this run lacks, copied once from upstream into the mirror, before any host pulls it from there."""
    head = image_mirror.mirror_host()
    if head is None or host.name != head.name:
        return
    settings = host_settings(head)
    hosts = _run_hosts()
    images = sorted({i for h in hosts for i in wanted_images(h).values() if not _present(h, i)})
    auth = f"{DOCKER_CONFIG_DIR}/config.json" if settings["docker_registry_auth"] else ""
    for image in images:  # on the head alone: no other host has an operation here
        insecure = image_mirror.split_reference(image)[0] in settings["docker_insecure_registries"]
        dest = f"{image_mirror.split_reference(image)[1]}:{image_mirror.run_tag(host.state)}"
        copy = copy_command(
            image_mirror.source_reference(image), dest, image_mirror.writer_address(head), authfile=auth,
            tls_verify=not insecure,
            timeout_s=settings["ray_image_pull_timeout_s"],
        )  # fmt: skip
        copied = server.shell(name=f"Copy the exporter image {image} to the head's mirror", commands=[copy])
        image_mirror.note_digest_op(host.state, _digest_key(image), copied)


def _present(h: Any, image: str) -> bool:
    """Whether ``h`` holds ``image`` under the name it runs it by (:func:`image_mirror.local_name`)."""
    return bool(fact(h, DockerImageId, image_mirror.local_name(image)))


def _pull(image: str, settings: dict[str, Any]) -> None:
    """``image`` on this host, pulled like the Ray image: from the head's mirror when it runs one
    (and is part of this run), else from its registry with rayrig's login; then recorded under the
    name the host runs it by (an image pinned by digest is pulled by that digest)."""
    if _present(host, image):
        return
    local = image_mirror.local_name(image)
    head = image_mirror.mirror_host()
    timeout_s = int(settings["ray_image_pull_timeout_s"])
    if head is not None and head.connected:
        what = f"Fetch the exporter image {image} through the head's mirror, by the digest the head copied"
        image_mirror.pinned_pull(what, _digest_key(image), head, _mirror_ref(image, head), local, timeout_s)
        server.shell(name=f"Record the exporter image {image}", commands=[record_command(local)])
        return
    pull, *tag = fetch_commands(image, bool(settings["docker_registry_auth"]))
    server.shell(name=f"Fetch the exporter image {image}", commands=[f"timeout {timeout_s} {pull}", *tag,
                                                                      record_command(local)])  # fmt: skip


def _digest_key(image: str) -> str:
    return f"exporter image {image}"


def _mirror_ref(image: str, head: Any) -> str:
    return image_mirror.mirror_reference(image, image_mirror.mirror_address(head), image_mirror.run_tag(host.state))


def _keep_running(service: str, desired: list[str], changed: list[Any], port: int) -> None:
    """``service`` enabled and running with ``desired`` as its arguments (argv after the program);
    restarted when it runs with others, or when one of ``changed`` changed something (a package
    install starts it with the package's flags); then it must answer on ``port``."""
    live = fact(host, UnitCommand, f"{service}.service")
    stale = live is not None and live[-len(desired) :] != desired  # the tail: a wrapper may run the program
    started = systemd.service(
        name=f"Enable and start {service}", service=f"{service}.service", running=True, enabled=True
    )
    ops = [started]
    if stale or changed:
        condition = {} if stale else {"_if": any_changed(*changed)}
        restart = f"systemctl restart {shlex.quote(service)}.service"
        ops.append(server.shell(name=f"Restart {service} with rayrig's flags", commands=[restart], **condition))
    logs = f"journalctl --unit {shlex.quote(service)}.service --lines 20 --no-pager >&2"
    server.shell(
        name=f"Wait for {service} to answer on port {port}",
        commands=[f"{wait_for_port_command(node_address(host), port, PORT_WAIT_S)} || {{ {logs}; exit 1; }}"],
        _if=any_changed(*ops),
    )


def _package_node_exporter(package: NodeExporterPackage, plat: Platform, settings: dict[str, Any], listen: str) -> None:
    installs = []
    if missing_packages([package.package]):
        if package is EPEL_PACKAGE:
            ensure_epel("for the node exporter")
        # Recorded first: a run cut short after the install still knows the package is rayrig's.
        files.put(
            name="Record that rayrig installs the node exporter package",
            src=StringIO(package.package + "\n"),
            dest=PACKAGE_MARKER,
            mode="644",
        )
        install = f"Install the node exporter package ({package.package})"
        if plat.family == "apt":
            installs.append(apt.packages(name=install, packages=[package.package], update=True, no_recommends=True))
        else:
            installs.append(dnf.packages(name=install, packages=[package.package]))
    drop_in = put_template(
        f"Make {package.service} listen on the node's address",
        DROP_IN_TEMPLATE,
        package.drop_in,
        binary=package.binary,
        args=node_exporter_args(listen),
        firewall_unit=_firewall_unit(settings),
    )
    daemon_reload(f"Reload systemd units for {package.service}", [drop_in], [f"{package.service}.service"])
    _keep_running(package.service, node_exporter_args(listen), installs, settings["monitoring_ports"]["node_exporter"])


def _container(
    unit: str, description: str, args: list[str], settings: dict[str, Any], port: int, changed: list[Any] | None = None
) -> None:
    path = f"/etc/systemd/system/{unit}.service"
    unit_file = put_template(
        f"Install the {unit} unit",
        UNIT_TEMPLATE,
        path,
        container=unit,
        description=description,
        args=args,
        firewall_unit=_firewall_unit(settings),
    )
    daemon_reload(f"Reload systemd units for {unit}", [unit_file], [f"{unit}.service"])
    _keep_running(unit, args, changed or [], port)


def _remove_units(units: Iterable[str]) -> None:
    """Stop, disable and remove rayrig's exporter units that are there."""
    removed = []
    units = [f"{unit}.service" for unit in units]
    for unit in units:
        path = f"/etc/systemd/system/{unit}"
        if fact(host, File, path):
            systemd.service(name=f"Stop and disable {unit}", service=unit, running=False, enabled=False)
            removed.append(files.file(name=f"Remove the {unit} unit", path=path, present=False))
    # Also when an earlier run removed the files and died before the reload.
    if removed or any(fact(host, NeedDaemonReload, unit) for unit in units):
        daemon_reload("Reload systemd units without rayrig's exporters", removed, units)


def _remove_counters() -> None:
    if fact(host, File, COUNTERS_PATH):
        files.file(name="Remove the DCGM exporter's counters", path=COUNTERS_PATH, present=False)


def _recorded_images() -> set[str]:
    text = fact(host, FileText, IMAGES_RECORD)
    return {line.strip() for line in (text or "").splitlines() if line.strip()}


def remove_exporters() -> None:
    """Take away what this step installed; plan nothing where there is nothing."""
    _remove_units((NODE_UNIT, GPU_UNIT))
    _remove_counters()
    marker = fact(host, FileText, PACKAGE_MARKER)
    ours = (marker or "").strip()
    for package in (DEBIAN_PACKAGE, EPEL_PACKAGE):
        if not fact(host, File, package.drop_in):
            continue
        folder = shlex.quote(package.drop_in.rsplit("/", 1)[0])  # and its folder, unless others' drop-ins are there
        drop_in = server.shell(
            name=f"Remove rayrig's drop-in for {package.service}",
            commands=[f"rm -f {shlex.quote(package.drop_in)}", f"rmdir --ignore-fail-on-non-empty {folder}"],
        )
        daemon_reload(f"Reload systemd units for {package.service}", [drop_in], [f"{package.service}.service"])
        if package.package != ours:  # the host's own package: back to its own flags
            server.shell(
                name=f"Restart {package.service} with its own flags",
                commands=[f"systemctl try-restart {shlex.quote(package.service)}.service"],
            )
    if ours:
        installed = fact(host, DebPackages if platform().family == "apt" else RpmPackages) or {}
        if ours in installed:
            module = apt if platform().family == "apt" else dnf
            module.packages(name="Remove the node exporter package rayrig installed", packages=[ours], present=False)
    images = _recorded_images()
    if images:
        server.shell(name="Remove the exporter images rayrig pulled", commands=[forget_images_command(images)])
    if marker is not None or images or fact(host, Directory, STATE_DIR):
        files.directory(name="Remove rayrig's exporter records", path=STATE_DIR, present=False)


@deploy("Monitoring exporters")
def monitoring_exporters() -> None:
    settings = host_settings(host)
    if not settings["monitoring_enabled"]:
        remove_exporters()
        return
    ports = exporter_ports(settings)
    address = node_address(host)
    wanted = wanted_images(host)
    plat = platform()
    _copy_into_mirror()  # before any host pulls (pyinfra runs each operation on every host before the next)
    if NODE_UNIT in wanted:
        _pull(wanted[NODE_UNIT], settings)
    if GPU_UNIT in wanted:
        _pull(wanted[GPU_UNIT], settings)

    package = node_exporter_package(plat)
    node_listen = listen_address(address, ports["node_exporter"])
    if package is not None:
        _package_node_exporter(package, plat, settings, node_listen)
    else:
        image = image_mirror.local_name(wanted[NODE_UNIT])
        _container(NODE_UNIT, "Prometheus node exporter", node_container_args(image, node_listen), settings,
                   ports["node_exporter"])  # fmt: skip
    if GPU_UNIT in wanted:
        counters = files.put(
            name="Install the DCGM exporter's counters", src=COUNTERS_TEMPLATE, dest=COUNTERS_PATH,
            mode="644",
        )  # fmt: skip
        gpu_image = image_mirror.local_name(wanted[GPU_UNIT])
        args = gpu_container_args(gpu_image, listen_address(address, ports["gpu_exporter"]))
        _container(GPU_UNIT, "NVIDIA DCGM exporter", args, settings, ports["gpu_exporter"], [counters])
    else:
        _remove_units((GPU_UNIT,))
        _remove_counters()
    unused = _recorded_images() - {image_mirror.local_name(i) for i in wanted.values()}
    if unused:
        server.shell(name="Remove the exporter images no longer used", commands=[forget_images_command(unused)])
