"""Fake hosts for plan tests: pyinfra ``@fake`` host data whose ``fake_responses``
answer every fact rayrig's deploy reads, per OS and per state.

States:

- ``"fresh"``: nothing installed. Base packages and Docker are missing, no
  daemon.json, no image, no ray-node container, no rayrig file on disk.
- ``"converged"``: a previous deploy with the same data completed. Every
  package is installed (in the ``dpkg -l`` / ``rpm -qa`` formats pyinfra's
  DebPackages/RpmPackages facts parse), every file rayrig puts is there with
  its mode and sha1, daemon.json holds the merged keys, Docker is enabled and
  running, the image is present and ``ray-node`` runs with the hash label of
  the desired configuration.

A host is described per concern, each a small object or step module that says what a
fresh and a converged host have: ``fake_os.HostOS``, ``fake_nvidia.HostGPUs``,
``fake_docker.HostDocker``, ``fake_ray_container.RayContainer``, and the steps
``fake_firewall``, ``fake_storage``, ``fake_monitoring`` and ``fake_monitoring_exporters``.
This module composes them with the files, directories and packages every host has.

The converged answers are built from the host's data independently of the
deploy modules' operations: file contents are written out here, and the
container's hash comes from the pure argument builders of ``deploy.ray.ray_node``
(``ray_start_args``/``docker_run_args``/``config_hash``), fed with the same
facts the fake host reports.

A fake connector matcher is a substring of the fact's shell command; the
first match wins, so specific matchers (a path) come before generic ones.
``fakestep.fact_key`` checks each matcher against its fact's command.

    hosts = cluster("ubuntu22", "fresh", gpus={"@fake/head": 8})
    # -> [("@fake/head", {...data, "fake_responses": {...}}), ...]
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from pyinfra.facts.deb import DebPackages
from pyinfra.facts.files import File, Sha1File
from pyinfra.facts.rpm import RpmPackages

from deploy.contract import settings
from deploy.firewall import nftables
from deploy.host.docker import DAEMON_JSON
from deploy.host.ray_image import registry_config
from deploy.host.secret_files import DIGEST_KEY_DIR, DIGEST_KEY_PATH, KEY_FOLLOWS, NO_KEY, keyed_digest
from deploy.monitoring import config as monitoring_config
from deploy.ray import auth, cluster_token, env_secret, gcs_store, membership, ray_node, ray_temp
from deploy.run.facts import SecretFileDigest
from deploy.storage import nfs
from deploy.storage.mounts import mount_points
from tests.plan.fakes import (
    fake_firewall,
    fake_mirror,
    fake_monitoring,
    fake_monitoring_exporters,
    fake_repo_keys,
    fake_storage,
)
from tests.plan.fakes.fake_docker import ENGINE_PACKAGES, HostDocker, engine_versions, repo_files, uses_docker_repo
from tests.plan.fakes.fake_nvidia import H100, HostGPUs, nvidia_files  # noqa: F401
from tests.plan.fakes.fake_os import FAMILY, MEM_KB, NOFILE_HARD, OS_RELEASE, OSES, UPLOAD_DIR, HostOS  # noqa: F401
from tests.plan.fakes.fake_ray_container import IMAGE_ID, RayContainer, container_json, expected_run_args, head_monitors  # noqa: F401
from tests.plan.fakes.fakestep import FakeState, fact_key, local_digest_key

# (F401: tests import H100, OS_RELEASE, OSES and container_json from here.)

FRESH = "fresh"
CONVERGED = "converged"
STATES = (FRESH, CONVERGED)

BASE_PACKAGES = {
    "ubuntu22": ("ca-certificates", "curl", "gnupg"),
    "ubuntu24": ("ca-certificates", "curl", "gnupg"),
    "debian12": ("ca-certificates", "curl", "gnupg"),
    "rocky9": ("ca-certificates", "curl", "gnupg2"),
    "al2023": ("ca-certificates", "curl-minimal", "gnupg2-minimal"),
}
#: Packages every host has, installed or not by rayrig (so the package facts are never empty).
PREINSTALLED = ("bash", "coreutils", "openssh-server", "systemd")

APT_LOCK_CONF = "/etc/apt/apt.conf.d/90rayrig-lock-timeout"
REGISTRY_CONFIG = "/etc/rayrig/docker/config.json"
#: Directories every host of a family has before rayrig runs.
SYSTEM_DIRS = {
    "apt": ("/etc/apt/apt.conf.d", "/etc/apt/sources.list.d", "/etc/systemd/system"),
    "dnf": ("/etc/yum.repos.d", "/etc/systemd/system"),
}

#: The package facts' matchers. pyinfra's ``File``/``Directory`` and ``Sha1File`` matchers are
#: per path (``_stat_matcher``, ``_sha1_matcher``), checked here on one path.
DPKG = fact_key(DebPackages, "dpkg -l")
RPM = fact_key(RpmPackages, "rpm --queryformat")


# --- Expected files on a converged host ---------------------------------------------------------


def expected_files(
    os_name: str, data: Mapping[str, Any], *, gpus: int = 0, driver: bool = True, nvswitches: int = 0
) -> dict[str, tuple[str, int]]:
    """path -> (content, mode) of every file rayrig puts on a host with ``data`` (and ``gpus``)."""
    s = settings.merge(data)
    files: dict[str, tuple[str, int]] = {DIGEST_KEY_PATH: (local_digest_key(s), 600)}
    if FAMILY[os_name] == "apt":
        files[APT_LOCK_CONF] = (f'DPkg::Lock::Timeout "{s["base_wait_timeout_s"]}";\n', 644)
    files.update(repo_files(os_name, s))
    if s["docker_registry_auth"]:
        files[REGISTRY_CONFIG] = (registry_config(s["docker_registry_auth"]), 600)
    if gpus:
        files.update(nvidia_files(os_name, data, driver, nvswitches))
    name = s["ray_container_name"]
    units = fake_storage.expected_units(os_name, s)
    table = nftables.TABLE if s["firewall_enabled"] else None
    unit = ray_node.unit_text(name, mount_points(s), units, table, ray_temp.host_path(s))
    files[f"/etc/systemd/system/{name}.service"] = (unit, 644)
    if s["ray_auth"] == "token":
        files[auth.NODE_TOKEN_PATH] = (auth.read_token(auth.ensure_token(s)) + "\n", 600)
    if s["ray_env_secret"]:
        files[env_secret.ENV_FILE] = (env_secret.env_file_text(s["ray_env_secret"]), 600)
    return files


def expected_dirs(os_name: str, data: Mapping[str, Any], *, gpus: int = 0) -> dict[str, int]:
    """path -> mode of every directory rayrig creates on a host with ``data`` (and ``gpus``)."""
    s = settings.merge(data)
    dirs = {"/etc/docker": 755, UPLOAD_DIR: 700, s["ray_temp_dir"]: 700, DIGEST_KEY_DIR: 700}
    if FAMILY[os_name] == "apt" and (uses_docker_repo(os_name, s["docker_source"]) or gpus):
        dirs["/etc/apt/keyrings"] = 755
    if s["docker_registry_auth"]:
        dirs["/etc/rayrig/docker"] = 700
    if s["ray_auth"] == "token":
        dirs[auth.NODE_TOKEN_DIR] = 700
    if s["ray_env_secret"]:
        dirs[env_secret.ENV_DIR] = 700
    if head_monitors(s) and s["monitoring_grafana"]:
        dirs[monitoring_config.ray_dashboards_dir(s)] = 755
    if s["ray_gcs_fault_tolerance"]:  # the head's; a worker asks for neither
        dirs[s["ray_gcs_storage_path"]] = 700
        dirs[gcs_store.store_path(s)] = 700
    return dirs


def expected_packages(os_name: str, data: Mapping[str, Any]) -> tuple[str, ...]:
    s = settings.merge(data)
    return (*BASE_PACKAGES[os_name], *ENGINE_PACKAGES[(os_name, s["docker_source"])], *s["base_extra_packages"])


# --- Fact answers --------------------------------------------------------------------------------


def _stat_line(path: str, mode: int, kind: str = "file") -> str:
    flag = {"file": "-", "directory": "d"}[kind]
    bits = "".join(
        ("r" if d & 4 else "-") + ("w" if d & 2 else "-") + ("x" if d & 1 else "-") for d in map(int, f"{mode:03d}")
    )
    return (
        f"user=root group=root mode={flag}{bits} atime=1718000000 mtime=1718000000 ctime=1718000000 size=4096 '{path}'"
    )


def _stat_matcher(path: str) -> str:
    """Substring of pyinfra's File/Directory fact command for ``path``."""
    return f"test -e {path} || test -L {path} )"


def _sha1_matcher(path: str) -> str:
    """Substring of pyinfra's Sha1File fact command for ``path``."""
    return f"test -e {path} && ( sha1sum {path}"


def _secret_matcher(path: str) -> str:
    """Substring of ``SecretFileDigest``'s command for ``path`` (what ``put_secret_file`` reads)."""
    return f"f={path}; k="


fact_key(File, _stat_matcher("/etc/rayrig"), "/etc/rayrig")
fact_key(Sha1File, _sha1_matcher("/etc/rayrig"), "/etc/rayrig")
fact_key(SecretFileDigest, _secret_matcher("/etc/rayrig/a"), "/etc/rayrig/a", DIGEST_KEY_PATH)


def secret_file_answer(path: str, content: str | bytes, mode: int, key: str) -> dict[str, list[str]]:
    """``SecretFileDigest``'s answer for a file at ``path`` on a host that holds the digest ``key``."""
    text = content.decode() if isinstance(content, bytes) else content
    return {_secret_matcher(path): [f"MODE={mode}", f"DIGEST={keyed_digest(key, text)}"]}


def _file_answers(
    files: Mapping[str, tuple[str, int]], dirs: Mapping[str, int], key: str | None = None
) -> dict[str, list[str]]:
    """pyinfra's ``File``, ``Sha1File`` and ``Directory`` answers for ``files`` and ``dirs``, and
    with the digest ``key`` the host holds, ``SecretFileDigest``'s for every file."""
    responses = {}
    for path, (content, mode) in files.items():
        responses[_stat_matcher(path)] = [_stat_line(path, mode)]
        responses[_sha1_matcher(path)] = [f"{hashlib.sha1(content.encode()).hexdigest()}  {path}"]
        if key is not None:
            responses.update(secret_file_answer(path, content, mode, key))
    for path, mode in dirs.items():
        responses[_stat_matcher(path)] = [_stat_line(path, mode, "directory")]
    return responses


def _dpkg_lines(packages: Iterable[str], versioned: Mapping[str, str] | None = None) -> list[str]:
    lines = [
        "Desired=Unknown/Install/Remove/Purge/Hold",
        "| Status=Not/Inst/Conf-files/Unpacked/halF-conf/Half-inst/trig-aWait/Trig-pend",
        "|/ Err?=(none)/Reinst-required (Status,Err: uppercase=bad)",
        "||/ Name           Version            Architecture Description",
        "+++-==============-==================-============-=================================",
    ]
    lines += [f"ii  {name:<14} 1.0-1ubuntu0.1     amd64        {name} package" for name in packages]
    return lines + [f"ii  {n:<14} {v:<18} amd64        {n} package" for n, v in (versioned or {}).items()]


def _rpm_lines(packages: Iterable[str], versioned: Mapping[str, str] | None = None) -> list[str]:
    return [f"{name} 1.0-1.el9" for name in packages] + [f"{n} {v}" for n, v in (versioned or {}).items()]


def _package_answers(
    os_name: str, data: Mapping[str, Any], converged: bool, steps: list[FakeState], gpus: HostGPUs
) -> dict[str, list[str]]:
    """The package fact of the host's family: what every host has, what rayrig and its steps
    installed when converged, and the NVIDIA packages with their versions."""
    installed = [*PREINSTALLED, *(expected_packages(os_name, data) if converged else ())]
    installed += [p for step in steps for p in step.packages if p not in installed]
    versioned = gpus.packages(os_name, data)
    if converged:
        versioned = {**versioned, **engine_versions(os_name, settings.merge(data))}
    if FAMILY[os_name] == "apt":
        return {DPKG: _dpkg_lines(installed, versioned)}
    return {RPM: _rpm_lines(installed, versioned)}


def _membership(
    converged: bool, s: Mapping[str, Any], members: list[str], firewall: Mapping[str, Any], recorded: Any
) -> FakeState:
    """The membership record the host keeps (``recorded``: CONVERGED for the cluster's, a list, or None)."""
    if recorded == CONVERGED:
        cidrs = firewall.get("member_cidrs", s["firewall_member_cidrs"])
        recorded = membership.cluster_membership(members, cidrs) if converged else None
    state = FakeState()
    if recorded is not None:
        record = membership.record_text(list(recorded))
        state.files[membership.MEMBERS_PATH] = (record, 644)
        state.dirs[membership.MEMBERS_PATH.rsplit("/", 1)[0]] = 755
        key = fact_key(membership.RecordedMembers, f"if [ -f {membership.MEMBERS_PATH} ]")
        state.responses[key] = ["RAYRIG_MEMBERS", *record.splitlines()]
    return state


def _digest_key_answer(files: Mapping[str, tuple[str, int]]) -> dict[str, list[str]]:
    """What ``deploy.host.secret_files`` reads of the head's digest key (when the local one is missing)."""
    key_file = files.get(DIGEST_KEY_PATH)
    return {KEY_FOLLOWS: [KEY_FOLLOWS, key_file[0].strip()] if key_file else [NO_KEY]}


def _token_answer(files: Mapping[str, tuple[str, int]]) -> dict[str, list[str]]:
    """What ``deploy.ray.cluster_token`` reads from the head's token file through sudo."""
    token_file = files.get(auth.NODE_TOKEN_PATH)
    answer = [cluster_token.TOKEN_FOLLOWS, token_file[0].strip()] if token_file else [cluster_token.NO_TOKEN]
    return {cluster_token.TOKEN_FOLLOWS: answer}


def _steps(
    os_name: str, converged: bool, data: Mapping[str, Any], members: list[str], gpus: int,
    firewall: Mapping[str, Any], storage: Mapping[str, Any], monitoring: Mapping[str, Any],
    exporters: Mapping[str, Any],
) -> list[FakeState]:  # fmt: skip
    """What the firewall, storage and monitoring steps find on the host."""
    return [
        fake_firewall.facts(os_name, converged, data, members, firewall),
        fake_storage.facts(os_name, converged, data, members, storage),
        fake_monitoring.facts(converged, data, monitoring),
        fake_monitoring_exporters.facts(os_name, converged, data, gpus, exporters),
        fake_mirror.facts(),
    ]


def host_responses(
    host_os: HostOS,
    state: str = FRESH,
    data: Mapping[str, Any] | None = None,
    *,
    gpus: HostGPUs | None = None,
    docker: HostDocker | None = None,
    container: RayContainer | None = None,
    head_ip: str = "10.0.0.1",
    members: Iterable[str] = (),
    firewall: Mapping[str, Any] | None = None,
    storage: Mapping[str, Any] | None = None,
    monitoring: Mapping[str, Any] | None = None,
    recorded: Iterable[str] | None | str = CONVERGED,
    exporters: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``fake_responses`` of one host, composed from its concerns (see ``fake_responses``)."""
    if state not in STATES:
        raise ValueError(f"state must be one of {STATES}, not {state!r}")
    os_name, data, converged = host_os.os_name, dict(data or {}), state == CONVERGED
    s = settings.merge(data)
    gpus = (gpus or HostGPUs()).settled(converged, data)
    docker, container = docker or HostDocker(), container or RayContainer()
    node_ip = str(s["ray_node_ip"] or "10.0.0.99")
    members = list(members) or [head_ip, *([node_ip] if node_ip != head_ip else [])]
    options = (firewall or {}, storage or {}, monitoring or {}, exporters or {})
    steps = _steps(os_name, converged, data, members, gpus.count, *options)

    # rayrig's files and directories, with the membership record and the daemon.json that are there
    files, dirs = {}, {}
    if converged:
        files = expected_files(os_name, data, gpus=gpus.count, driver=gpus.driver, nvswitches=gpus.nvswitches)
        dirs = expected_dirs(os_name, data, gpus=gpus.count)
    for step in steps:
        files.update(step.files)
        dirs.update(step.dirs)
    for path in SYSTEM_DIRS[FAMILY[os_name]]:
        dirs.setdefault(path, 755)
    record = _membership(converged, s, members, firewall or {}, recorded)
    files.update(record.files)
    for path, mode in record.dirs.items():
        dirs.setdefault(path, mode)
    daemon_text = docker.daemon_text(converged, s, bool(gpus.nvidia_runtime))
    if daemon_text is not None:
        files[DAEMON_JSON] = (daemon_text, 644)
        dirs.setdefault("/etc/docker", 755)

    # (DockerDaemon's first: the uptime matcher would answer that fact too)
    responses = {**docker.daemon_state(converged, DAEMON_JSON in files), **host_os.host_info(), **host_os.session()}
    responses.update({**gpus.devices(), **host_os.uptime()})
    for step in steps:
        responses.update(step.responses)
    responses.update(record.responses)
    responses.update(docker.config(daemon_text))
    key = files.get(DIGEST_KEY_PATH, (None, 0))[0]
    responses.update(_file_answers(files, dirs, key))
    responses.update(fake_repo_keys.answers(files))
    responses.update(_token_answer(files))
    responses.update(_digest_key_answer(files))
    responses.update(_package_answers(os_name, data, converged, steps, gpus))
    responses.update(docker.service(converged))
    responses.update(gpus.services())

    def wanted_hash() -> str:
        monitors = (monitoring or {}).get("head_monitors")
        run_args = expected_run_args(data, node_ip, head_ip, gpus.count, host_os.mem_kb, host_os.nofile_hard, monitors)
        return ray_node.config_hash(run_args)

    responses.update(container.responses(converged, s, wanted_hash))
    return responses


def fake_responses(
    os_name: str,
    state: str = FRESH,
    data: Mapping[str, Any] | None = None,
    *,
    head_ip: str = "10.0.0.1",
    gpus: int = 0,
    daemon_json: Mapping[str, Any] | None = None,
    daemon_json_merged: bool | None = None,
    image_present: bool | None = None,
    container_hash: str | None = None,
    container_present: bool | None = None,
    container_image_id: str = IMAGE_ID,
    unit_need_reload: bool = False,
    previous_present: bool = False,
    docker_running: bool | None = None,
    daemon_json_unread: bool = False,
    cloud_init_running: bool = False,
    mem_kb: int = MEM_KB,
    nofile_hard: int | None = NOFILE_HARD,
    driver: bool = True,
    nvswitches: int = 0,
    toolkit: bool | None = None,
    toolkit_version: str | None = None,
    nvidia_runtime: bool | None = None,
    driver_packages: bool | None = None,
    persistenced: bool | None = None,
    fabricmanager: bool | None = None,
    **steps: Any,
) -> dict[str, Any]:
    """The ``fake_responses`` of one host on ``os_name`` in ``state``, each keyword changing one aspect.

    ``data`` is the host's inventory data (rayrig keys); ``head_ip`` the head's address (for the
    converged container's hash). The keywords are fields of the concern objects (None: as the state
    says), documented there:

    - ``fake_os.HostOS``: ``cloud_init_running``, ``mem_kb``, ``nofile_hard`` (None: unlimited);
    - ``fake_nvidia.HostGPUs``: ``gpus`` (its ``count`` of H100s), ``driver``, ``nvswitches``, ``toolkit``,
      ``toolkit_version``, ``nvidia_runtime``, ``driver_packages``, ``persistenced``, ``fabricmanager``;
    - ``fake_docker.HostDocker``: ``daemon_json``, ``daemon_json_merged``, ``docker_running`` (its
      ``running``), ``daemon_json_unread``;
    - ``fake_ray_container.RayContainer``: ``image_present``, ``container_present``, ``container_hash``,
      ``container_image_id``, ``previous_present``, ``unit_need_reload``.

    ``steps`` go to ``host_responses``: ``members`` are the cluster's node addresses, the head's first
    (the firewall admits them); ``firewall``, ``storage``, ``monitoring`` (the monitoring server;
    ``cluster`` sets it) and ``exporters`` are the options of ``fake_firewall.facts``,
    ``fake_storage.facts``, ``fake_monitoring.facts`` and ``fake_monitoring_exporters.facts``.
    ``recorded`` is the membership record the host keeps (``deploy.ray.membership.MEMBERS_PATH``): by
    default, when converged, the members and every host's member networks; a list of members
    instead, or None for no record.
    """
    return host_responses(
        HostOS(os_name, mem_kb, nofile_hard, cloud_init_running),
        state,
        data,
        gpus=HostGPUs(
            gpus,
            nvswitches,
            driver,
            toolkit,
            toolkit_version,
            nvidia_runtime,
            driver_packages,
            persistenced,
            fabricmanager,
        ),
        docker=HostDocker(daemon_json, daemon_json_merged, docker_running, daemon_json_unread),
        container=RayContainer(
            image_present, container_present, container_hash, container_image_id, previous_present, unit_need_reload
        ),
        head_ip=head_ip,
        **steps,
    )


# --- Whole clusters ------------------------------------------------------------------------------

HEAD = "@fake/head"
WORKERS = ("@fake/worker-1", "@fake/worker-2")


def cluster_data(workers: int = 2) -> list[tuple[str, dict[str, Any]]]:
    """A head (10.0.0.1) and ``workers`` workers (10.0.0.2, ...), each declaring its CPUs."""
    hosts = [(HEAD, {"ray_role": "head", "ray_node_ip": "10.0.0.1"})]
    for i in range(1, workers + 1):
        hosts.append(
            (
                f"@fake/worker-{i}",
                {"ray_role": "worker", "ray_node_ip": f"10.0.0.{i + 1}", "ray_num_cpus": 16 * i},
            )
        )
    return hosts


def cluster(
    os_name: str = "ubuntu22",
    state: str = FRESH,
    hosts: list[tuple[str, Mapping[str, Any]]] | None = None,
    *,
    data: Mapping[str, Any] | None = None,
    host_data: Mapping[str, Mapping[str, Any]] | None = None,
    gpus: Mapping[str, int] | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    **common: Any,
) -> list[tuple[str, dict[str, Any]]]:
    """pyinfra (name, data) pairs of a cluster on ``os_name`` in ``state``.

    ``hosts`` defaults to ``cluster_data()``; ``data`` is added to every host,
    ``host_data`` to one host by name. ``gpus`` maps host names to their GPU
    count; ``options`` maps host names to further ``fake_responses`` keywords,
    and ``common`` keywords go to every host.
    """
    hosts = [(name, dict(d)) for name, d in (hosts or cluster_data())]
    for name, d in hosts:
        d.update(copy.deepcopy(dict(data or {})))
        d.update(copy.deepcopy(dict((host_data or {}).get(name, {}))))
    heads = [d for _n, d in hosts if d.get("ray_role") == "head"]
    head_ip = str(heads[0].get("ray_node_ip")) if heads else "10.0.0.1"
    members = [head_ip] + [str(d.get("ray_node_ip")) for _n, d in hosts if d not in heads and d.get("ray_node_ip")]
    result = []
    watcher = monitoring_host(hosts)
    view = [
        monitoring_config.Member(
            name,
            str(d.get("ray_node_ip")),
            head=d.get("ray_role") == "head",
            gpu=(gpus or {}).get(name, 0) > 0 and settings.merge(d)["monitoring_gpu_exporter"] != "none",
        )
        for name, d in hosts
        if settings.merge(d)["ray_state"] == "present"
    ]
    for name, d in hosts:
        kwargs = {"members": members, **common, **dict((options or {}).get(name, {}))}
        serves = name == watcher
        kwargs["monitoring"] = {
            "serves": serves,
            "name": name,
            "members": view,
            "head_monitors": serves and d.get("ray_role") == "head",
            **dict(kwargs.get("monitoring") or {}),
        }
        nfs_server = nfs.serves_nfs(settings.merge(d), name)
        kwargs["firewall"] = {"nfs_server": nfs_server, **dict(kwargs.get("firewall") or {})}
        responses = fake_responses(os_name, state, d, head_ip=head_ip, gpus=(gpus or {}).get(name, 0), **kwargs)
        result.append((name, {**d, "fake_responses": responses, "fake_delay": 0, "fake_delay_jitter": 0}))
    return result


def monitoring_host(hosts: list[tuple[str, Mapping[str, Any]]]) -> str | None:
    """The name of the host that runs Prometheus in a fake cluster (None: monitoring is off)."""
    present = [(n, d) for n, d in hosts if settings.merge(d)["ray_state"] == "present"]
    if not present or not settings.merge(present[0][1])["monitoring_enabled"]:
        return None
    view = [(n, str(d.get("ray_node_ip")), str(d.get("ray_role"))) for n, d in present]
    return settings.resolve_monitoring_host(settings.merge(present[0][1])["monitoring_host"], view)


# --- The reference cluster of the plan tests -------------------------------------------------------

GPU_WORKER, CPU_WORKER = WORKERS
#: What the NVIDIA Container Toolkit (nvidia-ctk runtime configure) writes to daemon.json.
NVIDIA_DAEMON_JSON = {
    "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    "default-runtime": "nvidia",
}
LAB_REGISTRY = "10.0.0.5:5000"


def reference_hosts() -> list[tuple[str, dict[str, Any]]]:
    """A CPU head declaring 8 CPUs, an 8-GPU worker declaring its GPUs and CPUs, and a
    CPU worker with a custom resource and its CPUs left to Ray."""
    return [
        (HEAD, {"ray_role": "head", "ray_node_ip": "10.0.0.1", "ray_num_cpus": 8}),
        (GPU_WORKER, {"ray_role": "worker", "ray_node_ip": "10.0.0.2", "ray_num_gpus": 8, "ray_num_cpus": 96}),
        (CPU_WORKER, {"ray_role": "worker", "ray_node_ip": "10.0.0.3", "ray_resources": {"nvme": 1}}),
    ]


def reference_cluster(os_name: str, state: str = FRESH, **kwargs: Any) -> list[tuple[str, dict[str, Any]]]:
    """``reference_hosts()`` on ``os_name``: 8 H100s and an NVIDIA daemon.json on the GPU
    worker, every host using the lab registry over plain HTTP. ``kwargs`` go to ``cluster``."""
    kwargs.setdefault("gpus", {GPU_WORKER: 8})
    kwargs.setdefault("options", {GPU_WORKER: {"daemon_json": NVIDIA_DAEMON_JSON}})
    data = {"docker_insecure_registries": [LAB_REGISTRY], **kwargs.pop("data", {})}
    return cluster(os_name, state, kwargs.pop("hosts", reference_hosts()), data=data, **kwargs)


def with_data(hosts: list[tuple[str, dict[str, Any]]], name: str, **changes: Any) -> list[tuple[str, dict[str, Any]]]:
    """``hosts`` with ``changes`` made to one host's inventory data, its facts left as they are
    (what a user does when editing the inventory of a deployed cluster)."""
    return [(n, {**d, **changes} if n == name else d) for n, d in hosts]
