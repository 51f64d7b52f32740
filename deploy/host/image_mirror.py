"""The head's image mirror (``image_mirror = "head"``): the Ray image comes from upstream once per cluster.

Without it every host pulls ``ray_image`` from its registry: for N hosts the
registry serves the image N times, over the one uplink a lab usually shares.
With it the head runs a registry (Debian's ``docker-registry``, the Distribution
registry) on ``image_mirror_port``; when any host needs the image, the head copies
it there from upstream with ``skopeo copy`` (layers as they are, not recompressed,
so the manifest and the image ID stay the same), and every host, the head
included, pulls it from the head over the cluster's network and tags it with the
name ``ray_image`` gives.

Why a copy and not the registry's pull-through proxy mode: the Distribution
registry 2.8 (the one Debian and Ubuntu ship) fetches every blob twice from
upstream on its first request, one stream for the client and one for its cache,
and once more for each client that asks while the blob is in flight. A copy made
before anyone pulls fetches each layer exactly once, and it works the same for
Docker Hub, nvcr.io and private registries (rayrig's ``docker_registry_auth``
reaches skopeo as its source credentials). Docker's own ``registry-mirrors``
covers Docker Hub only; rayrig rewrites the reference instead.

Each run copies to a tag of its own (``rayrig-<time>-<random>``), so a host can
never pull an older copy that an earlier run left under the same name. The
registry answers plain HTTP: every host lists it in Docker's
``insecure-registries`` (turning the mirror on restarts Docker once on every
host), and the head's firewall admits its port from the cluster's members only.
The head must be a Debian or Ubuntu host (the packages); the workers may be any.
"""

from __future__ import annotations

import secrets
import time
from io import StringIO
from typing import Any

from pyinfra import host, inventory
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.operations import files, server, systemd

from deploy.contract.settings import host_data, host_settings, merge, node_address, present_hosts
from deploy.run.facts import DockerImageId, fact
from deploy.run.memo import run_memo

PACKAGES = ("docker-registry", "skopeo")
SERVICE = "docker-registry"
CONFIG_PATH = "/etc/docker/registry/config.yml"
STORAGE = "/var/lib/docker-registry"
HEAD = "head"


class MirrorError(PyinfraError):
    """The image mirror cannot run where the data asks for it."""


def registry_config(port: int) -> str:
    """The registry's config.yml: plain HTTP on ``port``, storage on the head's disk, deletes allowed.

    >>> "addr: :5000" in registry_config(5000)
    True
    """
    return (
        '# rayrig: the cluster\'s image mirror (image_mirror = "head"); rayrig rewrites this file.\n'
        "version: 0.1\n"
        "log:\n  level: warn\n  accesslog:\n    disabled: false\n"
        f"storage:\n  filesystem:\n    rootdirectory: {STORAGE}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: :{int(port)}\n  headers:\n    X-Content-Type-Options: [nosniff]\n"
    )


def split_reference(image: str) -> tuple[str, str]:
    """(registry, repository path) of an image reference, the way Docker reads it: the first part
    names a registry when it has a dot or a colon or is ``localhost``; else the image is Docker Hub's.

    >>> split_reference("rayproject/ray:2.60.0"), split_reference("nvcr.io/nvidia/pytorch@sha256:ab")
    (('docker.io', 'rayproject/ray'), ('nvcr.io', 'nvidia/pytorch'))
    >>> split_reference("10.0.0.2:5000/lab/ray:2.60.0"), split_reference("ubuntu")
    (('10.0.0.2:5000', 'lab/ray'), ('docker.io', 'library/ubuntu'))
    """
    name = image.split("@", 1)[0]
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = "docker.io", name
    last_slash = path.rfind("/")
    colon = path.rfind(":")
    if colon > last_slash:
        path = path[:colon]
    if registry == "docker.io" and "/" not in path:
        path = f"library/{path}"
    return registry, path


def mirror_reference(image: str, address: str, tag: str) -> str:
    """Where ``image`` lives in the mirror at ``address`` (host:port) for one run's ``tag``.

    >>> mirror_reference("nvcr.io/nvidia/pytorch:24.01-py3", "10.0.0.1:5000", "rayrig-1")
    '10.0.0.1:5000/nvidia/pytorch:rayrig-1'
    """
    return f"{address}/{split_reference(image)[1]}:{tag}"


def _head() -> Any:
    return next(h for h in inventory if merge(host_data(h))["ray_role"] == "head")


def mirror_host() -> Any | None:
    """The head when the cluster uses the head's mirror (the head's ``image_mirror``), else None."""
    head = _head()
    return head if host_settings(head)["image_mirror"] == HEAD else None


def runs_mirror(h: Any) -> bool:
    """Whether ``h`` is the head that runs the cluster's mirror (``image_mirror = "head"``)."""
    head = mirror_host()
    return head is not None and head.name == h.name


def mirror_address(head: Any) -> str:
    """host:port of the head's mirror on the cluster's network (an IPv6 address in brackets)."""
    address = node_address(head)
    if ":" in address:
        address = f"[{address}]"
    return f"{address}:{int(host_settings(head)['image_mirror_port'])}"


def run_tag(state: Any) -> str:
    """This run's tag in the mirror, the same for every host of the run."""
    memo = run_memo(state, "image_mirror")
    if "tag" not in memo:
        memo["tag"] = f"rayrig-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
    return memo["tag"]


def image_id(h: Any) -> str | None:
    """The ID of the image ``h``'s ``ray_image`` names on ``h`` (None: not there)."""
    return fact(h, DockerImageId, host_settings(h)["ray_image"])


def mirrored(h: Any) -> bool:
    """Whether ``h`` takes the Ray image from the head's mirror in this run: the mirror is on,
    the head is part of the run, and ``h`` wants the head's ``ray_image``."""
    head = mirror_host()
    return bool(
        head is not None and head.connected and host_settings(h)["ray_image"] == host_settings(head)["ray_image"]
    )


def copy_needed(needs_pull: Any) -> bool:
    """Whether the head must copy its ``ray_image`` into the mirror in this run: some host that takes
    the image from the mirror needs a pull (``needs_pull(settings, image_id)``)."""
    return any(
        mirrored(h) and needs_pull(host_settings(h), image_id(h)) for h in present_hosts(inventory) if h.connected
    )


def check_mirror_host(platform_family: str) -> None:
    """Stop when the head cannot run the mirror (its packages are Debian's and Ubuntu's)."""
    if platform_family != "apt":
        raise MirrorError(
            f'host {host.name}: image_mirror = "head" needs a Debian or Ubuntu head (it installs the '
            'docker-registry and skopeo packages); set image_mirror = "off" for this cluster'
        )


@deploy("Image mirror")
def mirror_service() -> None:
    """On the head, with ``image_mirror = "head"``: the registry configured and running.

    Its packages come with Docker's (``deploy.host.docker``), in the same package transaction.
    """
    if not runs_mirror(host):
        return
    port = host_settings(host)["image_mirror_port"]
    config = files.put(
        name="Configure the image mirror's registry",
        src=StringIO(registry_config(port)),
        dest=CONFIG_PATH,
        mode="644",
    )
    systemd.service(name="Enable and start the image mirror", service=SERVICE, running=True, enabled=True)
    server.shell(
        name="Restart the image mirror for its configuration",
        commands=[f"systemctl restart {SERVICE}.service"],
        _if=config.did_change,
    )
