"""The head's image mirror (``image_mirror = "head"``): the Ray image comes from upstream once per cluster.

Without it every host pulls ``ray_image`` from its registry: for N hosts the
registry serves the image N times, over the one uplink a lab usually shares.
With it the head runs a registry (Debian's ``docker-registry``, the Distribution
registry) on ``image_mirror_port``; when any host needs the image, the head copies
it there from upstream with ``skopeo copy --preserve-digests`` (upstream's manifest
byte for byte, so its digest is upstream's), and every host, the head included,
pulls that digest, ``HEAD:PORT/REPO@sha256:...``, from the head over the cluster's
network and tags it with the name ``ray_image`` gives. The head's own pull reads the
digest on the head; the others get it from the deploy, which reads what the head's
copy printed (:class:`PinnedPull`, a command made when it runs): a tag in the mirror
is never what decides which image a host runs.

Nothing but the head's copy writes into the mirror. The registry the cluster pulls
from is read-only (deletes off too) and listens on the head's cluster address only;
``mirror-copy.sh`` writes through a second registry process on the same storage,
on the head's loopback, only while a copy runs. The package's unit is masked until
rayrig's configuration is written (:func:`hold_until_configured`), and the registry
starts after the firewall, behind its guard (``deploy.firewall.guard``).

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
registry answers plain HTTP (the digest, not the channel, keeps the image whole): every host lists it in Docker's
``insecure-registries`` (turning the mirror on restarts Docker once on every
host), and the head's firewall admits its port from the cluster's members only.
The head must be a Debian or Ubuntu host (the packages); the workers may be any.
"""

from __future__ import annotations

import re
import secrets
import shlex
import time
from io import StringIO
from typing import Any

from pyinfra import host, inventory
from pyinfra.api import StringCommand, deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.files import File, Link
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from deploy.contract.settings import host_data, host_settings, merge, node_address, present_hosts
from deploy.firewall import guard
from deploy.run.facts import DockerImageId, fact
from deploy.run.memo import run_memo
from deploy.run.templating import render, resource
from deploy.run.units import daemon_reload

PACKAGES = ("docker-registry", "skopeo")
SERVICE = "docker-registry"
CONFIG_PATH = "/etc/docker/registry/config.yml"
WRITER_CONFIG = "/etc/docker/registry/rayrig-copy.yml"
COPY_SCRIPT = "/usr/local/lib/rayrig/mirror-copy.sh"
MASK_PATH = f"/etc/systemd/system/{SERVICE}.service"
DROP_IN_PATH = f"/etc/systemd/system/{SERVICE}.service.d/rayrig.conf"
REGISTRY_TEMPLATE = resource(__package__, "registry.yml.j2")
DROP_IN_TEMPLATE = resource(__package__, "docker-registry-rayrig.conf.j2")
STORAGE = "/var/lib/docker-registry"
HEAD = "head"
#: What the head's copy prints last (mirror-copy.sh), and its wait ("copied 0 12.3 sha256:...").
DIGEST_LINE = re.compile(r"(?:digest|copied 0 [0-9.]+) (sha256:[0-9a-f]{64})")


class MirrorError(PyinfraError):
    """The image mirror cannot run where the data asks for it."""


def registry_config(addr: str, *, read_only: bool = True) -> str:
    """The registry's config.yml (``registry.yml.j2``): plain HTTP on ``addr`` (host:port), storage on
    the head's disk, deletes off; ``read_only``: every write refused, the cluster's side. The copy's
    side (:data:`WRITER_CONFIG`) writes, on the head's loopback only, while a copy runs.

    >>> text = registry_config("10.0.0.1:5000")
    >>> "addr: 10.0.0.1:5000" in text, "readonly:" in text, "enabled: false" in text
    (True, True, True)
    """
    role = "the cluster's side: read-only" if read_only else "the copy's side (mirror-copy.sh): loopback only"
    return render(REGISTRY_TEMPLATE, addr=addr, storage=STORAGE, read_only=read_only, role=role)


def writer_address(head: Any) -> str:
    """Where the copy's side of the mirror listens while a copy runs: the head's loopback, the mirror's port."""
    return f"127.0.0.1:{int(host_settings(head)['image_mirror_port'])}"


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


def split_digest(image: str) -> tuple[str, str | None]:
    """(the reference without its digest, the digest or None).

    >>> split_digest("r/ray:1@sha256:ab"), split_digest("r/ray:1")
    (('r/ray:1', 'sha256:ab'), ('r/ray:1', None))
    """
    name, sep, digest = image.partition("@")
    return name, (digest if sep else None)


def _repository(name: str) -> str:
    """A reference without digest, its tag taken off (a registry's port is not a tag)."""
    colon = name.rfind(":")
    return name[:colon] if colon > name.rfind("/") else name


def source_reference(image: str) -> str:
    """Where an image is fetched from upstream: a reference pinned by digest by its digest alone, since
    skopeo refuses a tag beside a digest ("both a tag and digest are currently not supported"); the
    registry then serves that digest or nothing.

    >>> source_reference("10.0.0.5:5000/r/ray:1@sha256:ab"), source_reference("r/ray:1")
    ('10.0.0.5:5000/r/ray@sha256:ab', 'r/ray:1')
    """
    name, digest = split_digest(image)
    return f"{_repository(name)}@{digest}" if digest else image


def local_name(image: str) -> str:
    """The name a host runs ``image`` by. A reference pinned by digest is pulled by its digest and named
    ``REPOSITORY:rayrig-<the digest's first 12 hex digits>``: Docker tags no digest ("refusing to create a
    tag with a digest reference"), and a name that changes with the digest cannot be taken for another
    image by ``ray_image_pull = "missing"`` (only a pull of that digest gives it).

    >>> local_name("r/ray:2.60.0@sha256:0123456789abcdef0123"), local_name("r/ray:2.60.0")
    ('r/ray:rayrig-0123456789ab', 'r/ray:2.60.0')
    """
    name, digest = split_digest(image)
    if digest is None:
        return image
    return f"{_repository(name)}:rayrig-{digest.partition(':')[2][:12]}"


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
    return fact(h, DockerImageId, local_name(host_settings(h)["ray_image"]))


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


def hold_until_configured() -> None:
    """Before the package install on the head: the registry's unit masked, so that the package does not
    start it with its own configuration (every interface, writes allowed) before :func:`mirror_service`
    has written rayrig's and the firewall is loaded."""
    if runs_mirror(host) and fact(host, Link, MASK_PATH) is None and not fact(host, File, CONFIG_PATH):
        server.shell(
            name="Keep the image mirror's registry stopped until it is configured",
            commands=[f"systemctl mask {SERVICE}.service"],
        )
        run_memo(host.state, "image_mirror_masked")[host.name] = True


def copy_tools() -> None:
    """On the head, with ``image_mirror = "head"``: the copy's side of the mirror configured (the
    registry on the head's loopback that only ``mirror-copy.sh`` starts) and the script installed."""
    if not runs_mirror(host):
        return
    files.put(
        name="Configure the image mirror's copy side (loopback, only while a copy runs)",
        src=StringIO(registry_config(writer_address(host), read_only=False)),
        dest=WRITER_CONFIG,
        mode="644",
    )
    files.put(
        name="Install the image mirror's copy",
        src=resource(__package__, "mirror-copy.sh"),
        dest=COPY_SCRIPT,
        mode="755",
    )


@deploy("Image mirror")
def mirror_service() -> None:
    """On the head, with ``image_mirror = "head"``: the registry configured read-only on the head's cluster
    address, behind rayrig's firewall (started once its table is loaded, stopped by its guard without
    one), running. Its packages come with Docker's (``deploy.host.docker``), in the same transaction.

        mirror_service()  # after firewall(): nothing answers before the table is loaded
    """
    if not runs_mirror(host):
        return
    settings = host_settings(host)
    config = files.put(
        name="Configure the image mirror's registry (read-only, on the cluster's address)",
        src=StringIO(registry_config(mirror_address(host))),
        dest=CONFIG_PATH,
        mode="644",
    )
    changed = [config]
    if settings["firewall_enabled"]:
        changed.append(
            files.put(
                name="Put the image mirror behind rayrig's firewall",
                src=StringIO(guard.guarded_drop_in()),
                dest=DROP_IN_PATH,
                mode="644",
            )
        )
    elif fact(host, File, DROP_IN_PATH):
        changed.append(files.file(name="Remove the image mirror's firewall drop-in", path=DROP_IN_PATH, present=False))
    daemon_reload("Reload systemd units for the image mirror", changed, [f"{SERVICE}.service"])
    if run_memo(host.state, "image_mirror_masked").get(host.name) or fact(host, Link, MASK_PATH) is not None:
        server.shell(name="Let the image mirror's registry start", commands=[f"systemctl unmask {SERVICE}.service"])
    systemd.service(name="Enable and start the image mirror", service=SERVICE, running=True, enabled=True)
    systemd.service(
        name="Restart the image mirror for its configuration",
        service=SERVICE,
        restarted=True,
        _if=any_changed(*changed),
    )


# --- Every host pulls the digest the head copied ---------------------------------------------------


def note_digest_op(state: Any, key: str, op: Any) -> None:
    """Remember that the head's operation ``op`` prints the digest of ``key``'s copy (``digest sha256:...``)."""
    run_memo(state, "mirror_digests")[key] = op._hash


def digest_in(lines: list[str]) -> str | None:
    """The digest the head's copy printed last, or None.

    >>> digest_in(["noise", "digest sha256:" + "ab" * 32])[:13], digest_in(["copied 0 4.2"])
    ('sha256:ababab', None)
    """
    for line in reversed(lines):
        match = DIGEST_LINE.fullmatch(line.strip())
        if match:
            return match[1]
    return None


class MirrorDigest:
    """The digest the head's copy of ``key`` printed in this run, read once that operation has run."""

    def __init__(self, state: Any, head_name: str, key: str):
        self.state, self.head_name, self.key = state, head_name, key

    def get(self) -> str | None:
        op_hash = run_memo(self.state, "mirror_digests").get(self.key)
        head = self.state.inventory.get_host(self.head_name)
        data = self.state.ops.get(head, {}).get(op_hash) if op_hash else None
        meta = data.operation_meta if data is not None else None
        if meta is None or not meta.is_complete() or not meta.did_succeed():
            return None
        return digest_in(meta.stdout_lines)


def pinned_pull_command(tag_ref: str, digest: str, image: str, timeout_s: int) -> str:
    """Pull ``digest`` from the mirror repository of ``tag_ref`` and name it ``image``; the run's tag and
    the digest's names are then taken off (whatever image the tag held goes with it).

    >>> print(pinned_pull_command("10.0.0.1:5000/r/ray:rayrig-1", "sha256:ab", "r/ray:1", 60))
    timeout 60 docker pull --quiet 10.0.0.1:5000/r/ray@sha256:ab && docker tag 10.0.0.1:5000/r/ray@sha256:ab r/ray:1 \
&& { docker rmi 10.0.0.1:5000/r/ray@sha256:ab 10.0.0.1:5000/r/ray:rayrig-1 >/dev/null 2>&1 || true; }
    """
    pinned = shlex.quote(f"{tag_ref.rsplit(':', 1)[0]}@{digest}")
    return (
        f"timeout {int(timeout_s)} docker pull --quiet {pinned} && docker tag {pinned} {shlex.quote(image)} "
        f"&& {{ docker rmi {pinned} {shlex.quote(tag_ref)} >/dev/null 2>&1 || true; }}"
    )


class PinnedPull:
    """A command made when it runs (``str()`` at execution), once the head's copy has printed its digest:
    :func:`pinned_pull_command`. Before the deploy runs, it shows the digest as a placeholder; when the
    head printed none, the command fails and says so."""

    def __init__(self, digest: MirrorDigest, tag_ref: str, image: str, timeout_s: int):
        self.digest, self.tag_ref, self.image, self.timeout_s = digest, tag_ref, image, timeout_s

    def __str__(self) -> str:
        digest = self.digest.get()
        if digest is None and not self.digest.state.is_executing:
            digest = "<the digest the head copied>"
        if digest is None:
            why = (
                f"the head ({self.digest.head_name}) printed no digest for its copy of {self.image} into its mirror "
                '(image_mirror = "head"): its error is above'
            )
            return shlex.join(["sh", "-c", 'echo "$1" >&2; exit 1', "_", why])
        return pinned_pull_command(self.tag_ref, digest, self.image, self.timeout_s)


def pinned_pull(name: str, key: str, head: Any, tag_ref: str, image: str, timeout_s: int) -> None:
    """The operation ``name``: this host pulls ``image``'s copy from the head's mirror by the digest the
    head's copy of ``key`` printed earlier in this run (:class:`PinnedPull`)."""
    late = PinnedPull(MirrorDigest(host.state, head.name, key), tag_ref, image, timeout_s)
    server.shell(name=name, commands=[StringCommand(late)])
