"""The local lab: containers on this machine that behave like fresh hosts.

``rayrig lab up`` ensures, idempotently:

1. the host image ``rayrig/lab-base:bookworm`` (Debian 12 with systemd as PID 1,
   sshd, sudo and python3, but not Docker, curl or CA certificates: the
   deploy installs those as on a fresh cloud host). It is built from
   ``debian:bookworm`` or, when that cannot be pulled, from a rootfs made with
   debootstrap and ``docker import``ed (cached as ``rayrig/lab-rootfs:bookworm``);
2. a Docker network ``NAME-net`` with a fixed /24 (10.213.0.0/24 unless taken);
3. an ed25519 key pair for the lab and a ``known_hosts`` that pins each host's key;
4. the hosts ``NAME-host-1..N`` (hostnames ``NAME-1..N``, addresses .10, .11, ...)
   with their own dockerd storage volume, reachable over SSH as ``rayrig``
   (passwordless sudo);
5. a registry ``NAME-registry`` at .2:5000 (Debian's docker-registry, no auth),
   also published on 127.0.0.1 so this machine can push to it;
6. the lab's Ray image (Ray with the default and train extras plus CPU torch),
   built offline from a wheelhouse made on this machine, pushed to the registry;
7. ``state.json`` in the lab's directory, which ``inventories/lab.py`` reads.

Everything the lab creates carries the label ``rayrig.lab=NAME``; ``rayrig lab
down`` removes exactly that and the lab's directory. Images and the wheelhouse
are cached artefacts, shared by labs, and are left alone.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from cloud.ssh import ssh_answers
from deploy.paths import state_dir
from images import RAY_VERSION, context_dir
from images.build import build_image, context_files, docker_build, push_image
from images.stream import stream_command
from images.wheelhouse import build_wheelhouse

Progress = Callable[[str], None]

DEFAULT_NAME = "rayrig-lab"
LAB_LABEL = "rayrig.lab"
ROOTFS_IMAGE = "rayrig/lab-rootfs:bookworm"
BASE_IMAGE = "rayrig/lab-base:bookworm"
REGISTRY_IMAGE = "rayrig/lab-registry:bookworm"
LAB_IMAGE_REPO = "rayrig/lab-ray"
#: The mirror of debootstrap; images/lab-base/sources.list names the same.
DEBIAN_MIRROR = "http://deb.debian.org/debian"
SSH_USER = "rayrig"
HOST_NUM_CPUS = 2
HOST_SHM_SIZE = "1g"
PREFERRED_SUBNET = "10.213.0.0/24"
REGISTRY_HOST_OCTET = 2
FIRST_HOST_OCTET = 10
#: The registry's port; images/lab-registry (Dockerfile and config.yml) listen on the same.
REGISTRY_PORT = 5000
SSH_WAIT_S = 180.0

# --------------------------------------------------------------------------
# Pure helpers (unit-tested)


def lab_dir(name: str) -> Path:
    """Return the directory of the local lab ``name`` (its key, known_hosts and state.json)."""
    if not name or "/" in name or name in {".", ".."}:
        raise ValueError(f"invalid lab name {name!r}: expected a plain name like 'rayrig-lab'")
    return state_dir() / "labs" / name


def lab_image_tag(ray_version: str = RAY_VERSION) -> str:
    """Return the local tag of the lab's Ray image."""
    return f"{LAB_IMAGE_REPO}:{ray_version}"


def parse_proc_net_route(text: str) -> list[str]:
    """Return the IPv4 networks (CIDR) routed on this machine, from ``/proc/net/route``.

    The default route is left out.
    """
    networks = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        dest = ipaddress.IPv4Address(int(fields[1], 16).to_bytes(4, "little"))
        mask = ipaddress.IPv4Address(int(fields[7], 16).to_bytes(4, "little"))
        net = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
        if net.prefixlen:
            networks.append(str(net))
    return networks


def candidate_subnets(preferred: str = PREFERRED_SUBNET) -> list[str]:
    """Return the /24s a lab may use, best first: ``preferred``, then 10.213-10.250.x.0/24."""
    out = [preferred]
    for second in range(213, 251):
        for third in (0, 1, 2, 3):
            net = f"10.{second}.{third}.0/24"
            if net not in out:
                out.append(net)
    return out


def choose_subnet(taken: Iterable[str], preferred: str = PREFERRED_SUBNET) -> str:
    """Return the first candidate /24 that overlaps none of the ``taken`` networks."""
    used = [ipaddress.ip_network(t, strict=False) for t in taken]
    for cand in candidate_subnets(preferred):
        net = ipaddress.ip_network(cand)
        if not any(net.version == u.version and net.overlaps(u) for u in used):
            return cand
    raise RuntimeError("no free /24 left in 10.213.0.0-10.250.3.0 for a lab network")


def host_address(subnet: str, index: int) -> str:
    """Return the address of host ``index`` (1-based): .10, .11, ... in ``subnet``."""
    net = ipaddress.ip_network(subnet)
    addr = net.network_address + FIRST_HOST_OCTET + index - 1
    if addr not in net or addr == net.broadcast_address:
        raise ValueError(f"host {index} does not fit in lab subnet {subnet}")
    return str(addr)


def registry_address(subnet: str) -> str:
    """Return the lab-side address of the registry (``.2:5000``)."""
    return f"{ipaddress.ip_network(subnet).network_address + REGISTRY_HOST_OCTET}:{REGISTRY_PORT}"


def host_run_flags(privileged: bool, cgroup_version: str) -> list[str]:
    """Return the ``docker run`` flags that let systemd, sshd, dockerd and FUSE run in a host container.

    ``--privileged`` where Docker allows it; otherwise (machines without
    CAP_SYS_RESOURCE, where ``--privileged`` fails with "unable to apply
    caps") every capability but SYS_RESOURCE, no seccomp or AppArmor
    confinement, and the cgroup tree mounted read-write.
    """
    flags = ["--tmpfs", "/run", "--tmpfs", "/run/lock", "--device", "/dev/fuse"]
    if privileged:
        flags.append("--privileged")
    else:
        flags += [
            "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
            "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
        ]  # fmt: skip
    if str(cgroup_version) == "2":
        flags.append("--cgroupns=private")
    else:
        flags += ["--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"]
    return flags


def make_state(
    name: str,
    subnet: str,
    hosts: int,
    key_path: Path | str,
    known_hosts_path: Path | str,
    ray_version: str = RAY_VERSION,
    registry_local: str | None = None,
) -> dict[str, Any]:
    """Return the lab's state (what ``state.json`` holds and ``inventories/lab.py`` reads)."""
    registry = registry_address(subnet)
    host_list = []
    for k in range(1, hosts + 1):
        hostname = f"{name}-{k}"
        host_list.append(
            {
                "name": hostname,
                "container": f"{name}-host-{k}",
                "address": host_address(subnet, k),
                "role": "head" if k == 1 else "worker",
                "num_cpus": HOST_NUM_CPUS,
                "resources": {hostname: 1},
            }
        )
    return {
        "name": name,
        "network": f"{name}-net",
        "subnet": subnet,
        "gateway": str(ipaddress.ip_network(subnet).network_address + 1),
        "registry": registry,
        "registry_container": f"{name}-registry",
        "registry_local": registry_local,
        "image": f"{registry}/{lab_image_tag(ray_version)}",
        "ray_version": ray_version,
        "ssh_user": SSH_USER,
        "ssh_key": str(key_path),
        "known_hosts": str(known_hosts_path),
        "hosts": host_list,
    }


def inventory_groups(state: dict[str, Any]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Return pyinfra inventory groups ``{"heads": [...], "workers": [...]}`` for a lab's state.

    Hosts are named by their lab address, so pyinfra connects to it; their
    data follows the contract in ``inventories/group_data/all.py``.
    """
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {"heads": [], "workers": []}
    for host in state["hosts"]:
        data = {
            "ssh_user": state["ssh_user"],
            "ssh_key": state["ssh_key"],
            "ssh_known_hosts_file": state["known_hosts"],
            "ssh_strict_host_key_checking": "yes",
            "_sudo": True,
            "ray_role": host["role"],
            "ray_node_ip": host["address"],
            "ray_num_cpus": host["num_cpus"],
            "ray_num_gpus": 0,
            "ray_resources": dict(host["resources"]),
            "ray_image": state["image"],
            "ray_shm_size": HOST_SHM_SIZE,
            "docker_insecure_registries": [state["registry"]],
            "checks_profile": "quick",
            # The lab's hosts share this machine's cores with whatever else runs on it, so
            # their CPU figures wander; a node is flagged only at half its peers' speed.
            "checks_outlier_fraction": 0.5,
            "ray_cluster_name": state["name"],
        }
        groups["heads" if host["role"] == "head" else "workers"].append((host["address"], data))
    return groups


def known_hosts_text(entries: Iterable[tuple[str, str]]) -> str:
    """Return a known_hosts file for ``(address, public key line)`` pairs, sorted."""
    lines = []
    for address, key_line in entries:
        fields = key_line.split()
        if len(fields) >= 2:
            lines.append(f"{address} {fields[0]} {fields[1]}")
    return "".join(f"{line}\n" for line in sorted(set(lines)))


# --------------------------------------------------------------------------
# Docker plumbing


def _docker(*args: str, check: bool = True, input_text: str | None = None) -> subprocess.CompletedProcess:
    cmd = ["docker", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, input=input_text)
    if check and out.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({out.returncode}): {out.stderr.strip()}")
    return out


def _inspect(kind: str, ref: str) -> dict[str, Any] | None:
    out = _docker(kind, "inspect", ref, check=False)
    if out.returncode != 0:
        return None
    data = json.loads(out.stdout)
    return data[0] if data else None


def _labelled(kind: str, name: str) -> list[str]:
    """Return the names of the containers, networks or volumes labelled for lab ``name``."""
    fmt = "{{.Names}}" if kind == "container" else "{{.Name}}"
    args = [kind, "ls", "--filter", f"label={LAB_LABEL}={name}", "--format", fmt]
    if kind == "container":
        args.insert(2, "--all")
    return [line for line in _docker(*args).stdout.split() if line]


def _docker_subnets() -> list[str]:
    ids = _docker("network", "ls", "--quiet").stdout.split()
    if not ids:
        return []
    nets = json.loads(_docker("network", "inspect", *ids).stdout)
    return [cfg["Subnet"] for net in nets for cfg in (net.get("IPAM") or {}).get("Config") or [] if "Subnet" in cfg]


def _routed_subnets() -> list[str]:
    try:
        return parse_proc_net_route(Path("/proc/net/route").read_text())
    except OSError:
        return []


_PRIVILEGED_WORKS: bool | None = None


def privileged_works() -> bool:
    """Return whether ``docker run --privileged`` works on this machine (checked once)."""
    global _PRIVILEGED_WORKS
    if _PRIVILEGED_WORKS is None:
        out = _docker("run", "--rm", "--privileged", "--entrypoint", "true", BASE_IMAGE, check=False)
        _PRIVILEGED_WORKS = out.returncode == 0
    return _PRIVILEGED_WORKS


def _cgroup_version() -> str:
    return _docker("info", "--format", "{{.CgroupVersion}}").stdout.strip() or "1"


@contextlib.contextmanager
def _image_lock() -> Iterator[None]:
    """Serialise image builds between labs brought up at the same time."""
    state_dir().mkdir(parents=True, exist_ok=True)
    with open(state_dir() / "images.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class _Clock:
    """Prefix progress lines with the seconds since ``up`` started."""

    def __init__(self, progress: Progress) -> None:
        self.start = time.monotonic()
        self.progress = progress

    def __call__(self, message: str) -> None:
        self.progress(f"[{time.monotonic() - self.start:6.1f}s] {message}")


# --------------------------------------------------------------------------
# Steps of `up`


def _ensure_rootfs(log: Progress) -> str:
    """Return a Debian bookworm rootfs image: debian:bookworm if we have or can pull it, else debootstrap."""
    if _inspect("image", "debian:bookworm"):
        return "debian:bookworm"
    if _inspect("image", ROOTFS_IMAGE):
        return ROOTFS_IMAGE
    if _docker("pull", "debian:bookworm", check=False).returncode == 0:
        log("rootfs: pulled debian:bookworm")
        return "debian:bookworm"
    if shutil.which("debootstrap") is None:
        raise RuntimeError(
            "cannot pull debian:bookworm and debootstrap is not installed: "
            "install debootstrap (apt-get install debootstrap) or make debian:bookworm pullable"
        )
    log(f"rootfs: debian:bookworm cannot be pulled; debootstrap bookworm from {DEBIAN_MIRROR}")
    with tempfile.TemporaryDirectory(prefix="rayrig-rootfs-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "rootfs"
        stream_command(
            ["debootstrap", "--variant=minbase", "bookworm", str(root), DEBIAN_MIRROR],
            log,
            "  [debootstrap] ",
            every_s=5.0,
            always=lambda line: line.startswith(("I: Base system installed", "E:", "W: Failure")),
        )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (root / junk).glob("*"):
                if path.is_file():
                    path.unlink()
        log(f"rootfs: docker import as {ROOTFS_IMAGE}")
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*",
             "-C", str(root), "-c", "."],
            stdout=subprocess.PIPE,
        )  # fmt: skip
        imported = subprocess.run(
            ["docker", "import", "--change", 'CMD ["/bin/bash"]', "-", ROOTFS_IMAGE],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            check=False,
        )
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0 or imported.returncode != 0:
            raise RuntimeError(f"docker import of the debootstrap rootfs failed: {imported.stderr.strip()}")
    return ROOTFS_IMAGE


def _ensure_images(log: Progress, ray_version: str) -> None:
    """Build (or find cached) the base, registry and Ray images of the lab."""
    with _image_lock():
        rootfs = _ensure_rootfs(log)
        docker_build(
            BASE_IMAGE,
            context_files(context_dir("lab-base")),
            log,
            build_args={"ROOTFS": rootfs, "SSH_USER": SSH_USER},
            labels={"rayrig.lab.image": "base"},
            base_image=rootfs,
        )
        docker_build(
            REGISTRY_IMAGE,
            context_files(context_dir("lab-registry")),
            log,
            build_args={"BASE": BASE_IMAGE},
            labels={"rayrig.lab.image": "registry"},
            base_image=BASE_IMAGE,
        )
        wheelhouse = build_wheelhouse(state_dir() / f"wheelhouse-{ray_version}", ray_version, progress=log)
        build_image(
            lab_image_tag(ray_version),
            base_image=rootfs,
            ray_version=ray_version,
            wheelhouse=wheelhouse,
            progress=log,
            labels={"rayrig.lab.image": "ray"},
        )


def _ensure_network(name: str, log: Progress) -> str:
    """Ensure the lab network exists; return its subnet."""
    net_name = f"{name}-net"
    info = _inspect("network", net_name)
    if info:
        if (info.get("Labels") or {}).get(LAB_LABEL) != name:
            raise RuntimeError(f"network {net_name} exists but was not made by lab {name!r} (label {LAB_LABEL})")
        subnet = info["IPAM"]["Config"][0]["Subnet"]
        log(f"network {net_name}: exists ({subnet})")
        return subnet
    taken = _docker_subnets() + _routed_subnets()
    for _attempt in range(10):
        subnet = choose_subnet(taken)
        gateway = str(ipaddress.ip_network(subnet).network_address + 1)
        out = _docker(
            "network", "create", "--driver", "bridge", "--subnet", subnet, "--gateway", gateway,
            "--label", f"{LAB_LABEL}={name}", net_name, check=False,
        )  # fmt: skip
        if out.returncode == 0:
            log(f"network {net_name}: created ({subnet})")
            return subnet
        if "overlap" not in out.stderr.lower():
            raise RuntimeError(f"docker network create {net_name} failed: {out.stderr.strip()}")
        taken.append(subnet)  # someone took it meanwhile: try the next one
    raise RuntimeError(f"could not create network {net_name}: every subnet tried overlapped")


def _ensure_key(directory: Path, name: str, log: Progress) -> Path:
    key = directory / "id_ed25519"
    if key.exists() and key.with_suffix(".pub").exists():
        return key
    key.unlink(missing_ok=True)
    key.with_suffix(".pub").unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"rayrig lab {name}", "-f", str(key)],
        check=True,
    )
    key.chmod(0o600)
    log(f"ssh key: generated {key}")
    return key


def _ensure_volume(volume: str, name: str) -> None:
    if not _inspect("volume", volume):
        _docker("volume", "create", "--label", f"{LAB_LABEL}={name}", volume)


def _ensure_running(container: str, create: list[str], log: Progress) -> None:
    """Start ``container`` if stopped, create it with ``docker run -d <create>`` if absent."""
    info = _inspect("container", container)
    if info is None:
        _docker("run", "--detach", "--name", container, *create)
        log(f"container {container}: created")
    elif not info["State"]["Running"]:
        _docker("start", container)
        log(f"container {container}: started")


def _ensure_registry(state: dict[str, Any], log: Progress) -> str:
    """Ensure the registry container runs; return its address on this machine (127.0.0.1:PORT)."""
    name = state["name"]
    container = state["registry_container"]
    volume = f"{name}-registry-data"
    if not _inspect("volume", volume):
        _ensure_volume(volume, name)
        _seed_registry(volume, log)
    _ensure_running(
        container,
        [
            "--label", f"{LAB_LABEL}={name}", "--restart", "unless-stopped",
            "--network", state["network"], "--ip", state["registry"].split(":")[0],
            "--publish", f"127.0.0.1::{REGISTRY_PORT}",
            "--volume", f"{volume}:/var/lib/docker-registry",
            REGISTRY_IMAGE,
        ],
        log,
    )  # fmt: skip
    port = _docker("port", container, f"{REGISTRY_PORT}/tcp").stdout.split()[0].rsplit(":", 1)[1]
    local = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://{local}/v2/", timeout=2):
                break
        except (urllib.error.URLError, OSError) as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"registry {container} does not answer on http://{local}/v2/: {exc}") from exc
            time.sleep(0.5)
    return local


def _registry_seed_paths() -> tuple[Path, Path]:
    seed = state_dir() / "registry-seed"
    return seed / "registry.tar", seed / "image-id"


def _seed_registry(volume: str, log: Progress) -> None:
    """Fill a new registry volume from the seed a previous lab left (if it holds today's lab image).

    Pushing the lab image takes a minute or more; copying the registry's
    storage from a tar takes seconds. The seed is a cached artefact in the
    state directory, like the wheelhouse; a lab's own volume is still its own.
    """
    tar_path, id_path = _registry_seed_paths()
    image = _inspect("image", lab_image_tag())
    if not image or not tar_path.exists() or not id_path.exists() or id_path.read_text().strip() != image["Id"]:
        return
    started = time.monotonic()
    with _image_lock(), tar_path.open("rb") as fh:
        out = subprocess.run(
            ["docker", "run", "--rm", "-i", "--user", "0", "--volume", f"{volume}:/dst",
             "--entrypoint", "tar", REGISTRY_IMAGE, "-C", "/dst", "-x"],
            stdin=fh, capture_output=True, text=True, check=False,
        )  # fmt: skip
    if out.returncode != 0:
        log(f"registry: could not seed {volume} from {tar_path} ({out.stderr.strip()}); will push instead")
        return
    log(f"registry: seeded {volume} from {tar_path} in {time.monotonic() - started:.1f}s")


def _save_registry_seed(volume: str, image_id: str, log: Progress) -> None:
    """Save the registry's storage as the seed for the next lab, unless the seed is current."""
    tar_path, id_path = _registry_seed_paths()
    if id_path.exists() and id_path.read_text().strip() == image_id and tar_path.exists():
        return
    tar_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tar_path.with_name(tar_path.name + ".tmp")
    with _image_lock(), tmp.open("wb") as fh:
        out = subprocess.run(
            ["docker", "run", "--rm", "--log-driver", "none", "--user", "0", "--volume", f"{volume}:/src:ro",
             "--entrypoint", "tar", REGISTRY_IMAGE, "-C", "/src", "-c", "."],
            stdout=fh, stderr=subprocess.PIPE, text=False, check=False,
        )  # fmt: skip
        if out.returncode != 0:
            tmp.unlink(missing_ok=True)
            log(f"registry: could not save a seed ({out.stderr.decode(errors='replace').strip()})")
            return
        os.replace(tmp, tar_path)
        id_path.write_text(image_id + "\n")
    log(f"registry: saved {tar_path} ({tar_path.stat().st_size / 1e9:.2f} GB) to seed the next lab's registry")


def registry_manifest_config(registry: str, repo: str, tag: str) -> str | None:
    """Return the config digest (= the image ID) of ``repo:tag`` in ``registry``, None if absent."""
    req = urllib.request.Request(
        f"http://{registry}/v2/{repo}/manifests/{tag}",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read()).get("config", {}).get("digest")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def _ensure_pushed(state: dict[str, Any], ray_version: str, log: Progress) -> None:
    """Push the lab image to the lab registry unless the registry already has this exact image."""
    local_registry = state["registry_local"]
    tag = lab_image_tag(ray_version)
    image_id = _inspect("image", tag)["Id"]  # type: ignore[index]
    if registry_manifest_config(local_registry, LAB_IMAGE_REPO, ray_version) == image_id:
        log(f"registry: {tag} already there")
    else:
        remote = f"{local_registry}/{tag}"
        _docker("tag", tag, remote)
        try:
            push_image(remote, log)
        finally:
            _docker("rmi", remote, check=False)  # only the extra tag: the image stays cached
    _save_registry_seed(f"{state['name']}-registry-data", image_id, log)


def _install_authorized_key(container: str, public_key: str) -> None:
    """Make ``public_key`` the only authorized key of the lab user in ``container`` (left alone if it is)."""
    script = (
        'set -e; home=$(getent passwd "$1" | cut -d: -f6); '
        'install -d -m 700 -o "$1" -g "$1" "$home/.ssh"; '
        'cat > "$home/.ssh/authorized_keys.new"; '
        'if cmp -s "$home/.ssh/authorized_keys.new" "$home/.ssh/authorized_keys"; '
        'then rm "$home/.ssh/authorized_keys.new"; exit 0; fi; '
        'chown "$1:$1" "$home/.ssh/authorized_keys.new"; chmod 600 "$home/.ssh/authorized_keys.new"; '
        'mv "$home/.ssh/authorized_keys.new" "$home/.ssh/authorized_keys"'
    )
    _docker("exec", "-i", container, "sh", "-c", script, "sh", SSH_USER, input_text=public_key)


def _wait(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def _host_keys(container: str) -> list[str]:
    out = _docker("exec", container, "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub")
    return [line for line in out.stdout.splitlines() if line.strip()]


def ssh_check(address: str, user: str, key: Path | str, known_hosts: Path | str, command: str = "sudo -n true") -> str:
    """Run ``command`` on ``address`` over SSH like pyinfra does (paramiko, pinned host key); return stdout."""
    import paramiko

    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            address, username=user, key_filename=str(key), timeout=10, allow_agent=False, look_for_keys=False
        )
        _stdin, stdout, stderr = client.exec_command(command, timeout=30)
        rc = stdout.channel.recv_exit_status()
        out = stdout.read().decode()
        if rc != 0:
            raise RuntimeError(f"`{command}` on {address} exited {rc}: {stderr.read().decode().strip()}")
        return out
    finally:
        client.close()


def _write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    if path.exists() and path.read_text() == text:
        return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)
    return True


def _remove_extra_hosts(name: str, wanted: set[str], log: Progress) -> None:
    """Remove host containers (and their volumes) beyond the requested count."""
    for container in _labelled("container", name):
        if container.startswith(f"{name}-host-") and container not in wanted:
            _docker("rm", "--force", "--volumes", container)
            _docker("volume", "rm", f"{container}-docker", check=False)
            log(f"container {container}: removed (lab now has {len(wanted)} hosts)")


def _ensure_hosts(state: dict[str, Any], key: Path, log: Progress) -> None:
    name = state["name"]
    wanted = {h["container"] for h in state["hosts"]}
    _remove_extra_hosts(name, wanted, log)
    existing = {h["container"]: _inspect("container", h["container"]) for h in state["hosts"]}
    missing = [c for c, info in existing.items() if info is None]
    base_id = (_inspect("image", BASE_IMAGE) or {}).get("Id")
    stale = sorted(c for c, info in existing.items() if info is not None and info.get("Image") != base_id)
    if stale:
        log(
            f"warning: {', '.join(stale)} run an older {BASE_IMAGE}; they are kept as they are "
            f"(`rayrig lab down --name {name}` then `up` recreates them)"
        )
    flags = host_run_flags(privileged_works(), _cgroup_version()) if missing else []
    for host in state["hosts"]:
        volume = f"{host['container']}-docker"
        _ensure_volume(volume, name)
        _ensure_running(
            host["container"],
            [
                "--label", f"{LAB_LABEL}={name}", "--hostname", host["name"], "--restart", "unless-stopped",
                "--network", state["network"], "--ip", host["address"], "--network-alias", host["name"],
                *flags,
                "--volume", f"{volume}:/var/lib/docker",
                BASE_IMAGE,
            ],
            log,
        )  # fmt: skip
    public_key = key.with_suffix(".pub").read_text()
    for host in state["hosts"]:
        _install_authorized_key(host["container"], public_key)
    for host in state["hosts"]:
        address = host["address"]
        _wait(f"sshd on {host['name']} ({address})", lambda a=address: ssh_answers(a, timeout=2.0), SSH_WAIT_S)
    entries = [(h["address"], line) for h in state["hosts"] for line in _host_keys(h["container"])]
    if _write_if_changed(Path(state["known_hosts"]), known_hosts_text(entries)):
        log(f"known_hosts: pinned {len(entries)} host keys in {state['known_hosts']}")
    for host in state["hosts"]:
        ssh_check(host["address"], state["ssh_user"], key, state["known_hosts"])
    log(f"hosts: {len(state['hosts'])} answer over SSH as {state['ssh_user']} with passwordless sudo")


# --------------------------------------------------------------------------
# Public API


def state_path(name: str = DEFAULT_NAME) -> Path:
    """Return the path of lab ``name``'s state.json."""
    return lab_dir(name) / "state.json"


def load_state(name: str = DEFAULT_NAME) -> dict[str, Any] | None:
    """Return lab ``name``'s state (see :func:`make_state`), or None when the lab is not up."""
    try:
        return json.loads(state_path(name).read_text())
    except FileNotFoundError:
        return None


def up(hosts: int = 3, name: str = DEFAULT_NAME, progress: Progress = print) -> dict[str, Any]:
    """Bring lab ``name`` up with ``hosts`` hosts (idempotent) and return its state.

    A second call with everything in place changes nothing and takes seconds.
    The first call on a machine builds the lab's images (minutes).
    """
    if hosts < 1:
        raise ValueError(f"a lab needs at least one host, got hosts={hosts}")
    lab_dir(name)  # validates the name
    log = _Clock(progress)
    log(f"lab {name}: up with {hosts} hosts")
    _ensure_images(log, RAY_VERSION)
    subnet = _ensure_network(name, log)
    directory = lab_dir(name)
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    key = _ensure_key(directory, name, log)
    state = make_state(name, subnet, hosts, key, directory / "known_hosts", RAY_VERSION)
    state["registry_local"] = _ensure_registry(state, log)
    _ensure_hosts(state, key, log)
    _ensure_pushed(state, RAY_VERSION, log)
    if _write_if_changed(state_path(name), json.dumps(state, indent=2) + "\n", 0o600):
        log(f"state: wrote {state_path(name)}")
    log(f"lab {name}: ready; head {state['hosts'][0]['address']}, image {state['image']}")
    return state


def down(name: str = DEFAULT_NAME, progress: Progress = print) -> None:
    """Remove everything lab ``name`` made: containers, network, volumes and its directory.

    Cached images and wheelhouses are left alone.
    """
    lab_dir(name)  # validates the name
    containers = _labelled("container", name)
    if containers:
        _docker("rm", "--force", "--volumes", *containers)
        progress(f"removed containers: {' '.join(sorted(containers))}")
    networks = _labelled("network", name)
    for network in networks:
        _docker("network", "rm", network)
    if networks:
        progress(f"removed networks: {' '.join(networks)}")
    volumes = _labelled("volume", name)
    if volumes:
        _docker("volume", "rm", *volumes)
        progress(f"removed volumes: {' '.join(sorted(volumes))}")
    if lab_dir(name).exists():
        shutil.rmtree(lab_dir(name))
        progress(f"removed {lab_dir(name)}")
    progress(f"lab {name}: down")


def status(name: str = DEFAULT_NAME) -> str:
    """Return a short report: each host with its address, role, container state and whether sshd answers."""
    state = load_state(name)
    if state is None:
        labelled = _labelled("container", name)
        extra = f" (but containers labelled for it exist: {' '.join(labelled)})" if labelled else ""
        return f"lab {name}: not up (no {state_path(name)}){extra}"
    lines = [f"lab {name}: subnet {state['subnet']}, image {state['image']}"]
    registry = _inspect("container", state["registry_container"])
    reg_state = registry["State"]["Status"] if registry else "missing"
    lines.append(f"  {'registry':<22} {state['registry']:<18} {'':<7} {reg_state:<10} {state.get('registry_local')}")
    for host in state["hosts"]:
        info = _inspect("container", host["container"])
        cstate = info["State"]["Status"] if info else "missing"
        sshd = "sshd answers" if info and ssh_answers(host["address"], timeout=2.0) else "sshd does not answer"
        lines.append(f"  {host['name']:<22} {host['address']:<18} {host['role']:<7} {cstate:<10} {sshd}")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# CLI


def _cmd_up(args: argparse.Namespace) -> int:
    state = up(args.hosts, args.name)
    print(status(state["name"]))
    print(f"\nNext: RAYRIG_LAB={state['name']} pyinfra inventories/lab.py deploy/cluster.py")
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    down(args.name)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    print(status(args.name))
    return 0 if load_state(args.name) else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig lab up|down|status`` to the CLI.

    Each leaf parser sets ``func``: a callable taking the parsed arguments and
    returning an exit status.
    """
    lab = subparsers.add_parser("lab", help="the local lab: containers that act as hosts")
    sub = lab.add_subparsers(dest="lab_command", required=True, metavar="COMMAND")
    p_up = sub.add_parser("up", help="start (or complete) the lab; builds its images the first time")
    p_up.add_argument("--hosts", type=int, default=3, help="number of hosts (default: %(default)s)")
    p_up.add_argument("--name", default=DEFAULT_NAME, help="lab name (default: %(default)s)")
    p_up.set_defaults(func=_cmd_up)
    p_down = sub.add_parser("down", help="remove every container, network and volume of the lab")
    p_down.add_argument("--name", default=DEFAULT_NAME, help="lab name (default: %(default)s)")
    p_down.set_defaults(func=_cmd_down)
    p_status = sub.add_parser("status", help="show the lab's hosts and whether they answer")
    p_status.add_argument("--name", default=DEFAULT_NAME, help="lab name (default: %(default)s)")
    p_status.set_defaults(func=_cmd_status)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m cloud.local up|down|status`` (the same as ``rayrig lab ...``)."""
    parser = argparse.ArgumentParser(prog="python -m cloud.local")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["lab", *(argv if argv is not None else sys.argv[1:])])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
