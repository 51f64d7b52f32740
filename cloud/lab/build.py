"""The lab's images: a Debian rootfs, the host image, the registry image, Prometheus and the lab's Ray image.

Their build contexts are ``images/lab-base/``, ``images/lab-registry/``, ``images/lab-prometheus/``
and ``images/ray/``. Images are cached artefacts shared by every lab on this
machine: a build is skipped when its inputs did not change
(:func:`images.build.docker_build`), and builds are serialised between labs.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from cloud.lab.engine import docker, image_lock, inspect
from cloud.lab.state import (
    BASE_IMAGE,
    DEBIAN_MIRROR,
    PROMETHEUS_IMAGE,
    REGISTRY_IMAGE,
    ROOTFS_IMAGE,
    SSH_USER,
    LabError,
    lab_image_tag,
)
from deploy.contract.paths import state_dir
from images import context_dir
from images.build import build_image, context_files, docker_build
from images.stream import Progress, stream_command
from images.wheelhouse import build_wheelhouse


def ensure_rootfs(log: Progress) -> str:
    """Return a Debian bookworm rootfs image: debian:bookworm if we have or can pull it, else debootstrap."""
    if inspect("image", "debian:bookworm"):
        return "debian:bookworm"
    if inspect("image", ROOTFS_IMAGE):
        return ROOTFS_IMAGE
    if docker("pull", "debian:bookworm", check=False).returncode == 0:
        log("rootfs: pulled debian:bookworm")
        return "debian:bookworm"
    if shutil.which("debootstrap") is None:
        raise LabError(
            "cannot pull debian:bookworm (no registry serves it here) and debootstrap, which makes it "
            "instead, is not installed; install it: `make docker` as root (scripts/ensure-lab-tools.sh), "
            "or `sudo apt-get install debootstrap`"
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
            raise LabError(f"docker import of the debootstrap rootfs failed: {imported.stderr.strip()}")
    return ROOTFS_IMAGE


def ensure_images(log: Progress, ray_version: str) -> None:
    """Build (or find cached) the base, registry and Ray images of the lab."""
    with image_lock():
        rootfs = ensure_rootfs(log)
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
        build_prometheus(log)
        wheelhouse = build_wheelhouse(state_dir() / f"wheelhouse-{ray_version}", ray_version, progress=log)
        build_image(
            lab_image_tag(ray_version),
            base_image=rootfs,
            ray_version=ray_version,
            wheelhouse=wheelhouse,
            progress=log,
            labels={"rayrig.lab.image": "ray"},
        )


def build_prometheus(log: Progress) -> str:
    """Build (or find cached) the lab's Prometheus, Debian's package on the lab's host image
    (``images/lab-prometheus``); return its ID. The deploy runs it on the lab's head as
    ``monitoring_prometheus_image``, since the lab cannot pull Prometheus's own image."""
    return docker_build(
        PROMETHEUS_IMAGE,
        context_files(context_dir("lab-prometheus")),
        log,
        build_args={"BASE": BASE_IMAGE},
        labels={"rayrig.lab.image": "prometheus"},
        base_image=BASE_IMAGE,
    )
