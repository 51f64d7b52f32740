"""The lab's registry: its container, the lab's Ray image pushed to it, and a seed that spares the next lab the push.

The registry is Debian's docker-registry (``images/lab-registry/``), plain HTTP
without auth, at ``.2:5000`` on the lab network and published on 127.0.0.1 so
that this machine can push to it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from cloud.lab.engine import docker, ensure_running, ensure_volume, image_lock, inspect
from cloud.lab.state import (
    LAB_IMAGE_REPO,
    LAB_LABEL,
    PROMETHEUS_IMAGE,
    PROMETHEUS_REPO,
    PROMETHEUS_TAG,
    REGISTRY_IMAGE,
    REGISTRY_PORT,
    LabError,
    lab_image_tag,
)
from deploy.contract.paths import state_dir
from images.build import push_image
from images.stream import Progress


def ensure_registry(state: dict[str, Any], log: Progress) -> str:
    """Ensure the registry container runs; return its address on this machine (127.0.0.1:PORT)."""
    name = state["name"]
    container = state["registry_container"]
    volume = f"{name}-registry-data"
    if not inspect("volume", volume):
        ensure_volume(volume, name)
        _seed_registry(volume, log)
    ensure_running(
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
    port = docker("port", container, f"{REGISTRY_PORT}/tcp").stdout.split()[0].rsplit(":", 1)[1]
    local = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://{local}/v2/", timeout=2):
                break
        except (urllib.error.URLError, OSError) as exc:
            if time.monotonic() > deadline:
                raise LabError(f"registry {container} does not answer on http://{local}/v2/: {exc}") from exc
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
    image = inspect("image", lab_image_tag())
    if not image or not tar_path.exists() or not id_path.exists() or id_path.read_text().strip() != image["Id"]:
        return
    started = time.monotonic()
    with image_lock(), tar_path.open("rb") as fh:
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
    with image_lock(), tmp.open("wb") as fh:
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


def _push_once(local_registry: str, tag: str, repo: str, version: str, log: Progress) -> str:
    """Push the local image ``tag`` as ``repo:version`` unless the registry has this exact image; its ID."""
    image_id = inspect("image", tag)["Id"]  # type: ignore[index]
    if registry_manifest_config(local_registry, repo, version) == image_id:
        log(f"registry: {tag} already there")
    else:
        remote = f"{local_registry}/{tag}"
        docker("tag", tag, remote)
        try:
            push_image(remote, log)
        finally:
            docker("rmi", remote, check=False)  # only the extra tag: the image stays cached
    return image_id


def push_to_lab(state: dict[str, Any], tag: str, version: str, log: Progress) -> str:
    """Push the local image ``tag`` (a project image on the lab's Ray image) into the lab's registry as
    ``LAB_IMAGE_REPO:version``, unless it has this exact image; return the name the lab's hosts pull it by
    (for ``ray_image``). The Ray image's repository, because the registry holds its layers there: a
    registry seeded from a tar is one this machine's Docker never pushed to, so under another repository
    it would send every layer again, not the project's alone."""
    local = f"{LAB_IMAGE_REPO}:{version}"
    docker("tag", tag, local)
    try:
        _push_once(state["registry_local"], local, LAB_IMAGE_REPO, version, log)
    finally:
        docker("rmi", local, check=False)  # only the extra tag: the image stays cached as ``tag``
    return f"{state['registry']}/{local}"


def ensure_pushed(state: dict[str, Any], ray_version: str, log: Progress) -> None:
    """Push the lab's Ray image and its Prometheus to the lab registry, unless it has these exact images."""
    local_registry = state["registry_local"]
    _push_once(local_registry, PROMETHEUS_IMAGE, PROMETHEUS_REPO, PROMETHEUS_TAG, log)
    image_id = _push_once(local_registry, lab_image_tag(ray_version), LAB_IMAGE_REPO, ray_version, log)
    _save_registry_seed(f"{state['name']}-registry-data", image_id, log)
