"""Ray node: the ``ray-node`` container running ``ray start`` on every host, supervised by a systemd
unit, labelled with a hash of its configuration, and replaced (never destroyed first) when that
changes, the head first and the workers in batches.

How it behaves, head failure included: docs/design/ray-node.md.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from io import StringIO
from pathlib import Path
from typing import Any

import click
from pyinfra import host, inventory
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.files import Directory
from pyinfra.operations import files, server, systemd

from deploy.contract.ports import ray_metrics_env
from deploy.contract.settings import host_data, host_settings, merge, node_address, present_hosts
from deploy.contract.storage import shared_dir
from deploy.firewall import nftables
from deploy.host import efa, image_mirror
from deploy.host.base import platform
from deploy.host.ray_image import needs_pull, runs_other_image, same_image_command, user_command
from deploy.host.secret_files import cluster_digest_key, put_secret_file
from deploy.monitoring import config as monitoring_config
from deploy.monitoring import health
from deploy.monitoring import server as monitoring_server
from deploy.ray import auth, env_secret, gcs_store, ray_temp, tls_ca, tls_node
from deploy.ray.cluster_token import settle_token_once
from deploy.run import rolling
from deploy.run.facts import ContainerState, DockerImageId, HostInfo, NvidiaDevices, fact
from deploy.run.memo import run_memo
from deploy.run.replacements import note_replacement
from deploy.run.templating import put_template, render, resource
from deploy.run.units import daemon_reload
from deploy.storage.mounts import mount_points, mount_units

HASH_LABEL = "rayrig.config-hash"
ROLE_LABEL = "rayrig.role"
TOKEN_LABEL = auth.TOKEN_LABEL  # says when the token changed, nothing about it
UNIT_TEMPLATE = resource(__package__, "ray-node.service.j2")  # the systemd unit that supervises the container
UNIT_WAIT_S = 60  # how long the unit waits for the firewall table, then for the mounts, before it tries again
#: Replaces the container, keeping the previous one until the new one joined.
REPLACE_SCRIPT = resource(__package__, "replace-ray-node.sh")


class GpuCountError(PyinfraError):
    """The declared GPU count differs from what the host has."""


def resolve_num_gpus(
    declared: int | str, gpus: dict[str, Any], host_name: str, visible: str | list[int] = "all"
) -> int:
    """The GPU count Ray gets: the declared one, checked against the host, or the detected one.

    With a device list (``nvidia_visible_devices``) the count is the list's length, and
    every index must name a GPU the host has.
    """
    detected = gpus["driver"]["count"] if gpus.get("driver") else gpus.get("pci_count", 0)
    available = int(detected)
    if visible != "all":
        missing = [i for i in visible if i >= detected]
        if missing:
            raise GpuCountError(
                f"host {host_name}: nvidia_visible_devices = {list(visible)!r}: expected GPU indices "
                f"below {detected}, the number of NVIDIA GPUs the host has"
            )
        available = len(visible)
    if declared == "auto":
        return available
    if int(declared) != available:
        what = (
            "the number of NVIDIA GPUs the host has"
            if visible == "all"
            else f"the number of GPUs in nvidia_visible_devices {list(visible)!r}"
        )
        raise GpuCountError(
            f"host {host_name}: ray_num_gpus = {declared!r}: expected {available}, "
            f'{what} (set it to {available} or "auto")'
        )
    return int(declared)


def gpus_option(visible: str | list[int]) -> str:
    """docker's ``--gpus`` for ``nvidia_visible_devices``: all GPUs or the listed ones.

    >>> gpus_option("all"), gpus_option([0, 1])
    ('--gpus=all', '--gpus="device=0,1"')
    """
    if visible == "all":
        return "--gpus=all"
    return '--gpus="device=' + ",".join(str(int(i)) for i in visible) + '"'


def shm_size(setting: str, mem_bytes: int | None) -> str:
    """``--shm-size`` for the container: the setting, or 30% of host memory for "auto"."""
    if setting != "auto":
        return setting
    if not mem_bytes:
        return "2g"
    return f"{max(64, int(mem_bytes * 0.3) // 2**20)}m"


def nofile_limit(setting: int | None, hard_limit: int | None) -> int | None:
    """The open-files limit for the container: the setting capped at the host's hard limit."""
    if setting is None:
        return None
    return min(setting, hard_limit) if hard_limit else setting


def ray_start_args(settings: dict[str, Any], role: str, node_ip: str, head_address: str, num_gpus: int) -> list[str]:
    """The ``ray start`` command line for a node."""
    ports = settings["ray_ports"]
    args = ["ray", "start", "--block", "--disable-usage-stats", f"--node-ip-address={node_ip}"]
    if role == "head":
        args += [
            "--head",
            f"--port={ports['gcs']}",
            f"--ray-client-server-port={ports['client_server']}",
            "--include-dashboard=true",
            f"--dashboard-host={settings['ray_dashboard_host']}",
            f"--dashboard-port={ports['dashboard']}",
        ]
    else:
        args.append(f"--address={head_address}:{ports['gcs']}")
    args += [
        f"--node-manager-port={ports['node_manager']}",
        f"--object-manager-port={ports['object_manager']}",
        f"--runtime-env-agent-port={ports['runtime_env_agent']}",
        f"--dashboard-agent-grpc-port={ports['dashboard_agent_grpc']}",
        f"--dashboard-agent-listen-port={ports['dashboard_agent_http']}",
        f"--metrics-export-port={ports['metrics_export']}",
        f"--min-worker-port={ports['worker_min']}",
        f"--max-worker-port={ports['worker_max']}",
        f"--num-gpus={num_gpus}",
    ]
    if settings["ray_num_cpus"] != "auto":
        args.append(f"--num-cpus={settings['ray_num_cpus']}")
    if settings["ray_resources"]:
        args.append("--resources=" + json.dumps(settings["ray_resources"], sort_keys=True, separators=(",", ":")))
    if settings["ray_object_store_bytes"]:
        args.append(f"--object-store-memory={settings['ray_object_store_bytes']}")
    return args


def docker_run_args(
    settings: dict[str, Any],
    role: str,
    start_args: list[str],
    num_gpus: int,
    shm: str,
    nofile: int | None,
    token_digest: str | None = None,
    monitoring: bool = False,
    tls_digest: str | None = None,
    env_digest: str | None = None,
) -> list[str]:
    """``docker create`` arguments for the ray-node container, without the hash label.

    ``token_digest`` (``auth.token_digest``) is set when Ray token authentication
    is on: the token file is mounted read-only, and a new token replaces the
    container. Every shared-storage mount point is bind-mounted at its own path
    (the unit is PartOf= their units, so a remount restarts the container and it
    sees the new one; no mount propagation is needed). ``monitoring``: the head is the monitoring
    host; its dashboard finds Prometheus and Grafana, and it writes Ray's Grafana dashboards to a
    folder shared with the host (:func:`deploy.monitoring.config.ray_head_env`). ``tls_digest``
    (:func:`deploy.ray.tls_node.certificate_digest`) is set when Ray TLS is on: the node's TLS folder is
    mounted read-only, Ray's TLS variables name its files, and a new certificate replaces the container.
    ``env_digest`` (:func:`deploy.ray.env_secret.env_digest`) labels the container with its secret
    environment (``ray_env_secret``): a changed value replaces it.
    """
    args = [
        "docker", "create",
        f"--name={settings['ray_container_name']}",
        "--network=host",
        f"--shm-size={shm}",
        f"--label={ROLE_LABEL}={role}",
    ]  # fmt: skip
    if nofile:
        args.append(f"--ulimit=nofile={nofile}:{nofile}")
    args += hardening_args(settings)
    args += efa.run_args(settings)  # an EFA host's devices and memlock limit
    env = {
        **ray_metrics_env(settings["ray_ports"], role),  # the head's metrics ports, which ray start cannot set
        **ray_temp.rotation_env(settings),
        **gcs_store.container_env(settings, role),
        **(monitoring_config.ray_head_env(settings) if monitoring else {}),  # ray_env may set them otherwise
        **efa.container_env(settings),  # an EFA host's libfabric and NCCL settings; ray_env may set them otherwise
        **shared_env(settings),  # RAYRIG_SHARED_DIR: where jobs keep their results; ray_env may set it otherwise
        **settings["ray_env"],
        **auth.container_env(settings),
        **tls_ca.container_env(settings),  # {} when ray_tls is off
    }
    args += [f"--env={name}={value}" for name, value in sorted(env.items())]
    args += env_secret.run_args(settings, env_digest)  # ray_env_secret: from a 0600 file, never on the command line
    if settings["ray_auth"] == "token":
        token = auth.NODE_TOKEN_PATH
        args += [f"--label={TOKEN_LABEL}={token_digest}", f"--mount=type=bind,src={token},dst={token},readonly"]
    args += tls_node.run_args(settings, tls_digest)
    args += [f"--mount=type=bind,src={p},dst={p}" for p in mount_points(settings)]
    args.append(ray_temp.mount_arg(settings))  # Ray's sessions, logs and spilled objects on the host
    args += gcs_store.mount_args(settings, role)
    if monitoring and settings["monitoring_grafana"]:
        dashboards = monitoring_config.ray_dashboards_dir(settings)
        args.append(f"--mount=type=bind,src={dashboards},dst={dashboards}")
    if num_gpus > 0:
        args.append(gpus_option(settings.get("nvidia_visible_devices", "all")))
    return args + [image_mirror.local_name(settings["ray_image"]), *start_args]


def shared_env(settings: dict[str, Any]) -> dict[str, str]:
    """``RAYRIG_SHARED_DIR``, the folder on shared storage where jobs keep their results (the examples read
    it), when the host has a writable shared mount (:func:`deploy.contract.storage.shared_dir`).

    >>> shared_env({"storage_shared_dir": "/mnt/shared/results", "storage_nfs_mounts": [], "storage_s3_mounts": []})
    {'RAYRIG_SHARED_DIR': '/mnt/shared/results'}
    """
    folder = shared_dir(settings)
    return {} if folder is None else {"RAYRIG_SHARED_DIR": folder}


#: Of Docker's default capabilities, those Ray and its jobs use as root in the container: files owned by
#: others on shared storage and in Ray's temp folder (CHOWN, DAC_OVERRIDE, FOWNER, FSETID), worker
#: processes of another user (KILL), and images that drop to a user of their own (SETGID, SETUID).
#: Dropped: NET_RAW (raw sockets on the host network: spoofing), NET_BIND_SERVICE (Ray's ports are
#: above 1024), MKNOD, AUDIT_WRITE, SYS_CHROOT, SETFCAP and SETPCAP.
RAY_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID")


def hardening_args(settings: dict[str, Any]) -> list[str]:
    """``docker create`` arguments that take from ray-node what Ray does not need (``ray_container_hardened``).

    >>> hardening_args({"ray_container_hardened": True})[:2]
    ['--security-opt=no-new-privileges', '--cap-drop=ALL']
    >>> hardening_args({"ray_container_hardened": False})
    []
    """
    if not settings["ray_container_hardened"]:
        return []
    return ["--security-opt=no-new-privileges", "--cap-drop=ALL", *(f"--cap-add={c}" for c in RAY_CAPABILITIES)]


def config_hash(run_args: list[str]) -> str:
    """A short, stable hash of the container's desired configuration."""
    return hashlib.sha256("\0".join(run_args).encode()).hexdigest()[:16]


def with_hash_label(run_args: list[str]) -> list[str]:
    """``run_args`` with the configuration-hash label inserted before the image."""
    digest = config_hash(run_args)
    image_at = run_args.index("create") + 1
    return run_args[:image_at] + [f"--label={HASH_LABEL}={digest}"] + run_args[image_at:]


def is_current(container: dict[str, Any] | None, run_args: list[str]) -> bool:
    """Whether the running container already has the desired configuration."""
    if not container:
        return False
    alive = container["running"] or container["restarting"]
    return alive and container["labels"].get(HASH_LABEL) == config_hash(run_args)


#: Waits until $1:$2 accepts TCP connections; the address reaches bash as an argument, never as code.
WAIT_FOR_PORT = 'until (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; do sleep 1; done'


def previous_name(container: str) -> str:
    """The name a replaced container keeps, stopped, until its successor has joined the cluster."""
    return f"{container}-previous"


def replace_command(container: str, host_name: str, wait_s: int, create_args: list[str]) -> str:
    """The shell command that replaces ``container`` by the one ``create_args`` creates.

    It runs ``replace-ray-node.sh``; every value reaches it as a positional
    argument. The new node has ``wait_s`` seconds to join the cluster, or the previous
    container comes back and the command fails naming ``host_name`` and Ray's error line.
    """
    lines = Path(REPLACE_SCRIPT).read_text().splitlines()
    script = "\n".join(line for line in lines if not line.lstrip().startswith("#"))  # its comments stay in the file
    values = [container, previous_name(container), host_name, str(int(wait_s)), *create_args]
    return shlex.join(["bash", "-c", script, "replace-ray-node", *values])


def wait_for_port_command(address: str, port: int, seconds: int) -> str:
    """A shell command that waits until ``address:port`` accepts TCP connections.

    >>> print(wait_for_port_command("10.0.0.1", 6379, 120))
    timeout 120 bash -c 'until (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; do sleep 1; done' _ 10.0.0.1 6379
    """
    return shlex.join(["timeout", str(int(seconds)), "bash", "-c", WAIT_FOR_PORT, "_", address, str(int(port))])


def head_host() -> Any:
    """The inventory's head host (validation guarantees exactly one)."""
    return next(h for h in inventory if merge(host_data(h))["ray_role"] == "head")


def desired_run_args(current_host: Any) -> tuple[str, list[str]]:
    """(role, docker run arguments without the label) for a host, from its data and facts."""
    settings = host_settings(current_host)
    info = fact(current_host, HostInfo)
    role = settings["ray_role"]
    env_secret.check_env_secret(settings, current_host.name)
    num_gpus = resolve_num_gpus(
        settings["ray_num_gpus"],
        fact(current_host, NvidiaDevices),
        current_host.name,
        settings["nvidia_visible_devices"],
    )
    if settings["ray_efa"]:
        efa.check_devices(settings, fact(current_host, efa.EfaDevices), current_host.name)
    start = ray_start_args(settings, role, node_address(current_host), node_address(head_host()), num_gpus)
    shm = shm_size(settings["ray_shm_size"], info["mem_bytes"])
    nofile = nofile_limit(settings["ray_ulimit_nofile"], info["nofile_hard"])
    token = settle_token_once(current_host.state, inventory) if settings["ray_auth"] == "token" else None
    digest = auth.token_digest(token) if token else None
    monitoring = monitoring_server.head_runs_monitoring(current_host)
    certificate = tls_node.certificate_digest(tls_node.node_certificate(current_host))
    secret_env = settings["ray_env_secret"]
    env = env_secret.env_digest(secret_env, cluster_digest_key(current_host)) if secret_env else None
    return role, docker_run_args(settings, role, start, num_gpus, shm, nofile, digest, monitoring, certificate, env)


def node_view(current_host: Any) -> rolling.Node:
    """What this run finds and wants of a host's ray-node (read once per host and run)."""
    memo = run_memo(current_host.state, "ray_nodes")
    if current_host.name not in memo:
        settings = host_settings(current_host)
        name = settings["ray_container_name"]
        role, run_args = desired_run_args(current_host)
        container = fact(current_host, ContainerState, name)
        left_over = fact(current_host, ContainerState, previous_name(name))  # a replacement cut short
        image_id = fact(current_host, DockerImageId, image_mirror.local_name(settings["ray_image"]))
        kept = container or left_over  # what runs, or what a failed replacement would bring back
        stale = bool(left_over) or not is_current(container, run_args) or runs_other_image(container, image_id)
        pulls = needs_pull(settings, image_id)  # the image the pull brings is known only once it ran
        memo[current_host.name] = rolling.Node(
            name=current_host.name,
            role=role,
            running=rolling.version(kept["image"], kept["labels"].get(HASH_LABEL)) if kept else None,
            wanted=rolling.version(settings["ray_image"], config_hash(run_args)),
            replace=stale or pulls,
            if_new_image=pulls and not stale,
        )
    return memo[current_host.name]


def run_nodes(current_host: Any) -> list[rolling.Node]:
    """Every member's ``node_view`` in this run (the hosts it connected to), in inventory order."""
    state = current_host.state
    return [node_view(h) for h in present_hosts(inventory) if h.connected and state.is_host_in_limit(h)]


def unit_text(
    container: str,
    mounts: list[str] | tuple[str, ...] = (),
    units: list[str] | tuple[str, ...] = (),
    firewall_table: str | None = None,
    temp_dir: str | None = None,
) -> str:
    """The systemd unit that supervises the container (``ray-node.service.j2``).

    With ``firewall_table`` (rayrig's nftables table), the container starts only once
    that table is loaded. With shared ``mounts`` (their systemd ``units``, in the same
    order), it starts only once they are mounted: the unit wants them and waits for
    them (``UNIT_WAIT_S``), then fails and is started again (``Restart=always``), which
    tries the mounts again; a remount restarts the container (``PartOf=``) so that its
    bind mounts show the new mount. With ``temp_dir`` (``ray_temp_dir``), each start removes
    all but the newest sessions there (:mod:`deploy.ray.ray_temp`).
    """
    return render(UNIT_TEMPLATE, **_unit_values(container, mounts, units, firewall_table, temp_dir))


def _unit_values(
    container: str, mounts: Any, units: Any, firewall_table: str | None, temp_dir: str | None = None
) -> dict[str, Any]:
    return {
        "temp_dir": temp_dir,
        "sessions_kept": ray_temp.SESSIONS_KEPT,
        "container": container,
        "mounts": list(mounts),
        "units": list(units),
        "firewall_table": firewall_table,
        "firewall_unit": nftables.UNIT,
        "nft": nftables.NFT,
        "wait_s": UNIT_WAIT_S,
        "start_timeout_s": 2 * UNIT_WAIT_S + 30,
    }


def host_unit_values(settings: dict[str, Any]) -> dict[str, Any]:
    """The unit's template values for the current host."""
    table = nftables.TABLE if settings["firewall_enabled"] else None
    units = mount_units(settings, platform(), host.name)
    name = settings["ray_container_name"]
    return _unit_values(name, mount_points(settings), units, table, ray_temp.host_path(settings))


@deploy("Ray node")
def ray_node() -> None:
    settings = host_settings(host)
    role, run_args = desired_run_args(host)
    # Files the container writes or reads are owned by the user it runs as (root in rayrig's image, ray in Ray's).
    uid = user_command(image_mirror.local_name(settings["ray_image"]))
    own_files, certificate = _secrets(settings, uid)
    own_files += _folders(settings, role, uid)
    marker = health.quarantine_marker(host)
    if marker is not None and role == "worker":
        click.echo(f"--> {health.kept_out_message(host.name, marker)}", err=True)
        return
    view = _unit(settings)
    if not view.replace:
        if not certificate:
            tls_node.remove_files()
        return
    _replace(settings, role, run_args, own_files, view)
    if not certificate:
        tls_node.remove_files()  # once ray-node runs without the folder: a restored previous one may mount it


def _secrets(settings: dict[str, Any], uid: str) -> tuple[list[str], Any]:
    """The token, the node's TLS files and the workload secrets on the host: (the commands that give
    the container's user its files, the node's certificate or None)."""
    own_files = []
    if settings["ray_auth"] == "token":
        token = settle_token_once(host.state, inventory)
        files.directory(name="Create the Ray token's directory", path=auth.NODE_TOKEN_DIR, mode="700")
        put_secret_file(
            name="Store the cluster's Ray token",
            src=StringIO(auth.read_token(token) + "\n"),
            dest=auth.NODE_TOKEN_PATH,
        )
        own_files.append(f'chown "$({uid})" {auth.NODE_TOKEN_PATH}')  # and 0600
    certificate = tls_node.node_certificate(host)
    if certificate:
        own_files.append(tls_node.install_files(certificate, uid))

    if settings["ray_env_secret"]:
        files.directory(
            name="Create the directory of ray-node's secret environment", path=env_secret.ENV_DIR, mode="700"
        )
        put_secret_file(
            name="Store ray-node's secret environment (ray_env_secret)",
            src=StringIO(env_secret.env_file_text(settings["ray_env_secret"])),
            dest=env_secret.ENV_FILE,
        )
    else:
        files.file(
            name="Remove ray-node's secret environment (no ray_env_secret)", path=env_secret.ENV_FILE, present=False
        )
    return own_files, certificate


def _folders(settings: dict[str, Any], role: str, uid: str) -> list[str]:
    """Ray's temp folder, the head's GCS store and Grafana dashboards folders: the commands that give
    the container's user the ones it writes."""
    own_files = []
    files.directory(name="Create Ray's temp folder (ray_temp_dir)", path=settings["ray_temp_dir"], mode="700")
    if settings["ray_gcs_fault_tolerance"] and role == "head":
        store = gcs_store.store_path(settings)
        if not host.get_fact(Directory, path=store):  # a first deploy, or the store in the folder itself
            server.shell(
                name="Give the GCS store a folder of its own under a root-only parent (ray_gcs_fault_tolerance)",
                commands=[gcs_store.layout_command(settings)],
            )
        files.directory(
            name="Keep the GCS store's parent folder root's own, 0700 (ray_gcs_storage_path)",
            path=settings["ray_gcs_storage_path"],
            user="root",
            group="root",
            mode="700",
        )
        files.directory(name="Create the folder of the GCS store (ray_gcs_fault_tolerance)", path=store, mode="700")
        own_files.append(f'chown "$({uid})" {shlex.quote(store)}')

    if role == "head" and monitoring_server.head_runs_monitoring(host) and settings["monitoring_grafana"]:
        dashboards = monitoring_config.ray_dashboards_dir(settings)
        files.directory(name="Create the folder of Ray's Grafana dashboards", path=dashboards, mode="755")
        own_files.append(f'chown "$({uid})" {shlex.quote(dashboards)}')
    return own_files


def _unit(settings: dict[str, Any]) -> Any:
    """The container's systemd unit installed, and kept enabled and running unless this run replaces
    the container (a run that pulls, and may replace it only if the pull brought another image: both).
    Returns what this run does to the container (:func:`node_view`)."""
    name = settings["ray_container_name"]
    unit = put_template(
        f"Install the {name} systemd unit",
        UNIT_TEMPLATE,
        f"/etc/systemd/system/{name}.service",
        **host_unit_values(settings),
    )
    view = node_view(host)
    if not view.replace or view.if_new_image:
        daemon_reload("Reload systemd units", [unit], [f"{name}.service"])
        systemd.service(
            name=f"Keep the {name} service enabled and running",
            service=f"{name}.service",
            running=True,
            enabled=True,
        )
    return view


def _replace(settings: dict[str, Any], role: str, run_args: list[str], own_files: list[str], view: Any) -> None:
    """The container created or replaced: the head first, then the workers in batches once the head
    answers; a failure stops the deploy (:mod:`deploy.run.rolling`)."""
    name = settings["ray_container_name"]
    note_replacement(host.state, host.name)  # the post-deploy checks run the benchmark after a replacement
    replace = [
        "systemctl daemon-reload",
        *own_files,
        ray_temp.own_command(settings),
        replace_command(name, host.name, settings["ray_replace_timeout_s"], with_hash_label(run_args)),
    ]
    if view.if_new_image:  # this run pulls: replace only if the pull brought another image
        same = same_image_command(image_mirror.local_name(settings["ray_image"]), name)
        replace = [f"{same} || {{ {' && '.join(replace)}; }}"]
    nodes = run_nodes(host)
    gate = rolling.gate(host.state, nodes)  # a failure in the steps below stops the deploy
    if role == "head":
        _start_head(settings, replace, gate)
    else:
        _start_worker(settings, replace, gate, nodes)


def _start_head(settings: dict[str, Any], replace: list[str], gate: Any) -> None:
    """The head's container replaced, then its GCS port listening."""
    wait = settings["ray_head_wait_s"]
    gcs = settings["ray_ports"]["gcs"]
    quoted = shlex.quote(settings["ray_container_name"])
    gate.watch(host.name, server.shell(name="Start the Ray head container", commands=replace), "the head")
    listening = server.shell(
        name="Wait for the Ray head to listen",
        commands=[
            f"{wait_for_port_command(node_address(host), gcs, wait)} || {{ docker logs --tail 40 {quoted}; exit 1; }}"
        ],
    )
    gate.watch(host.name, listening, "the head")


def _start_worker(settings: dict[str, Any], replace: list[str], gate: Any, nodes: Any) -> None:
    """A worker's container replaced in its batch, once the head answers."""
    wait = settings["ray_head_wait_s"]
    gcs = settings["ray_ports"]["gcs"]
    head_address = node_address(head_host())
    answered = server.shell(
        name="Wait for the Ray head to answer",
        commands=[wait_for_port_command(head_address, gcs, wait)],
    )
    gate.watch(host.name, answered, "the wait for the head")
    workers = sum(1 for h in present_hosts(inventory) if host_settings(h)["ray_role"] == "worker")
    batches = rolling.worker_batches(nodes, rolling.batch_size(settings["ray_rolling_batch"], workers))
    index = next(i for i, batch in enumerate(batches) if host.name in batch)
    with rolling.own_slot(host, index):  # one operation per batch, run in batch order
        started = server.shell(name=rolling.batch_step_name(index, batches), commands=replace)
    gate.watch(host.name, started, f"batch {index + 1} of {len(batches)}")
