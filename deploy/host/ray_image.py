"""Ray image: the Ray image present on every host, pulled with rayrig's registry login.

Pulls ``ray_image`` when it is absent (``ray_image_pull = "missing"``) or on
every run (``"always"``). The pull is the long pole of a first deploy, so it
runs in the background (the unit ``rayrig-image-pull``, ``pull-image.sh``)
from as soon as Docker is ready, while the NVIDIA, storage and firewall steps go
on; :func:`wait_for_image`, right before ray-node, waits for it (bounded by
``ray_image_pull_timeout_s``) and, when it failed, fails the host with the
registry's own words. With ``image_mirror = "head"`` the image comes through the
head's mirror (:mod:`deploy.host.image_mirror`). The ray-node container follows the image: one created
from another image than the one ``ray_image`` names now is replaced
(:func:`runs_other_image`, from facts, and :func:`same_image_command`, on the host
after a pull, since facts are read before the pull runs). Registry credentials (``docker_registry_auth``) go
into a Docker config file of rayrig's own, mode 0600, written like any other
file: the password is never part of a command line or of pyinfra's output.
"""

from __future__ import annotations

import base64
import json
import shlex
from io import StringIO
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import BaseStateCallback, deploy
from pyinfra.operations import files, server

from deploy.contract.settings import host_settings
from deploy.host import image_mirror
from deploy.host.secret_files import put_secret_file
from deploy.run.facts import DockerImageId, fact
from deploy.run.memo import run_memo
from deploy.run.templating import resource
from deploy.run.timings import note_host_phase

DOCKER_CONFIG_DIR = "/etc/rayrig/docker"
PULL_UNIT = "rayrig-image-pull"
PULL_SCRIPT = "/usr/local/lib/rayrig/pull-image.sh"
PULL_DIR = "/var/lib/rayrig/image-pull"
MIRROR_KEY = "ray_image"  # the head's copy of the Ray image, in image_mirror's digest record
WAIT_MARGIN_S = 60  # the wait outlasts the pull's own deadline by this much, so the pull reports first


def registry_config(auth: dict[str, str]) -> str:
    """The Docker config.json text that logs in to ``auth["registry"]``."""
    token = base64.b64encode(f"{auth['username']}:{auth['password']}".encode()).decode()
    return json.dumps({"auths": {auth["registry"]: {"auth": token}}}, indent=2) + "\n"


def pull_command(image: str, with_auth: bool) -> str:
    """The shell command that pulls ``image`` (with rayrig's credentials when set)."""
    config = f" --config {DOCKER_CONFIG_DIR}" if with_auth else ""
    return f"docker{config} pull --quiet {shlex.quote(image)}"


def fetch_commands(image: str, with_auth: bool) -> list[str]:
    """Pull ``image`` and give it the name the host runs it by: one pinned by digest is pulled by its
    digest, then tagged ``REPOSITORY:rayrig-<digest>`` (:func:`image_mirror.local_name`).

    >>> fetch_commands("r/ray:1@sha256:0123456789abcdef", with_auth=False)[1]
    'docker tag r/ray@sha256:0123456789abcdef r/ray:rayrig-0123456789ab && docker rmi r/ray@sha256:0123456789abcdef'
    """
    source, local = image_mirror.source_reference(image), image_mirror.local_name(image)
    commands = [pull_command(source, with_auth)]
    if source != local:
        commands.append(f"docker tag {shlex.quote(source)} {shlex.quote(local)} && docker rmi {shlex.quote(source)}")
    return commands


def needs_pull(settings: dict[str, Any], image_id: str | None) -> bool:
    """Whether the deploy must pull the image."""
    return settings["ray_image_pull"] == "always" or image_id is None


def runs_other_image(container: dict[str, Any] | None, image_id: str | None) -> bool:
    """Whether ``container`` (``ContainerState``) was created from another image than ``image_id``,
    the one ``ray_image`` names on the host now. Unknown on either side: no.

    >>> runs_other_image({"image_id": "sha256:aa"}, "sha256:bb"), runs_other_image({"image_id": "sha256:aa"}, None)
    (True, False)
    """
    used = (container or {}).get("image_id")
    return bool(used and image_id and used != image_id)


#: Succeeds when container $2 was created from the image that $1 names now; values are arguments, never code.
SAME_IMAGE = (
    '[ "$(docker image inspect --format "{{.Id}}" "$1")" = "$(docker container inspect --format "{{.Image}}" "$2")" ]'
)


def same_image_command(image: str, container: str) -> str:
    """A shell command that succeeds when ``container`` runs the image ``image`` names now (after a pull).

    >>> print(same_image_command("rayproject/ray:2.60.0", "ray-node"))  # doctest: +ELLIPSIS
    bash -c '[ "$(docker image inspect ... "$2")" ]' _ rayproject/ray:2.60.0 ray-node
    """
    return shlex.join(["bash", "-c", SAME_IMAGE, "_", image, container])


def start_pull_command(
    image: str,
    ref: str,
    timeout_s: int,
    *,
    with_auth: bool,
    copy_to: str = "",
    source: str = "",
    src_tls_verify: bool = True,
    warm: bool = False,
    writer: str = "",
) -> str:
    """The shell command that starts the background pull of ``image`` (the name the host runs) from ``ref``
    ("" : no pull, only the copy) and, with ``copy_to`` (path:tag in the head's mirror, through the copy's
    side at ``writer``), first copies ``source`` (upstream's reference; ``image`` when "") there; ``warm``:
    only pull ``ref`` ahead (a worker of the mirror, which pulls the head's digest later). Every value an
    argument.

    >>> print(start_pull_command("r/ray:1", "r/ray:1", 600, with_auth=False))  # doctest: +NORMALIZE_WHITESPACE
    systemctl stop rayrig-image-pull 2>/dev/null; systemctl reset-failed rayrig-image-pull 2>/dev/null;
    systemd-run --quiet --collect --unit rayrig-image-pull --property RuntimeMaxSec=660
    /usr/local/lib/rayrig/pull-image.sh /var/lib/rayrig/image-pull 600 r/ray:1 r/ray:1 '' '' '' true '' tag '' ''
    """
    config = DOCKER_CONFIG_DIR if with_auth else ""
    authfile = f"{DOCKER_CONFIG_DIR}/config.json" if with_auth and copy_to else ""
    args = [PULL_DIR, str(int(timeout_s)), image, ref, config, (source or image) if copy_to else "", copy_to]
    args += ["true" if src_tls_verify else "false", authfile, "warm" if warm else "tag"]
    args += [writer if copy_to else "", image_mirror.WRITER_CONFIG if copy_to else ""]
    return (
        f"systemctl stop {PULL_UNIT} 2>/dev/null; systemctl reset-failed {PULL_UNIT} 2>/dev/null; "
        f"systemd-run --quiet --collect --unit {PULL_UNIT} --property RuntimeMaxSec={int(timeout_s) + WAIT_MARGIN_S} "
        + shlex.join([PULL_SCRIPT, *args])
    )


def wait_command(stage: str, timeout_s: int) -> str:
    """The shell command that waits for a stage of the background pull (``copied``, ``result``) and
    fails with the tools' own words when it failed; it runs ``wait-image.sh``."""
    lines = Path(resource(__package__, "wait-image.sh")).read_text().splitlines()
    script = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
    deadline = f"$(( $(date +%s) + {int(timeout_s) + 2 * WAIT_MARGIN_S} ))"
    return shlex.join(["bash", "-c", script, "wait-image", PULL_DIR, stage]) + f" {deadline} {PULL_UNIT}"


def _pulls(state: Any) -> dict[str, str]:
    """Host name -> what its background job does in this run ("copy", "pull", "copy+pull")."""
    return run_memo(state, "image_pulls")


def _insecure(settings: dict[str, Any], image: str) -> bool:
    return image_mirror.split_reference(image)[0] in settings["docker_insecure_registries"]


@deploy("Ray image")
def ray_image() -> None:
    """Log in to the registry (when ``docker_registry_auth`` is set) and start pulling ``ray_image``
    in the background as needed (through the head's mirror with ``image_mirror = "head"``)."""
    settings = host_settings(host)
    auth = settings["docker_registry_auth"]
    if auth:
        files.directory(name="Create rayrig's Docker config directory", path=DOCKER_CONFIG_DIR, mode="700")
        put_secret_file(
            name=f"Store the login for {auth['registry']}",
            src=StringIO(registry_config(auth)),
            dest=f"{DOCKER_CONFIG_DIR}/config.json",
        )
    image_mirror.copy_tools()
    image = settings["ray_image"]
    local = image_mirror.local_name(image)  # a pinned image: pulled by its digest, run as REPOSITORY:rayrig-<digest>
    pull = needs_pull(settings, fact(host, DockerImageId, local))
    head = image_mirror.mirror_host()
    copy_to, ref, warm, writer = "", image_mirror.source_reference(image) if pull else "", False, ""
    if head is not None and image_mirror.mirrored(host):
        address = image_mirror.mirror_address(head)
        tag = image_mirror.run_tag(host.state)
        mirror_ref = image_mirror.mirror_reference(image, address, tag)
        if pull:
            ref = mirror_ref
            warm = host.name != head.name  # the head pulls by the digest it copied itself
        if host.name == head.name and image_mirror.copy_needed(needs_pull):
            copy_to = f"{image_mirror.split_reference(image)[1]}:{tag}"
            writer = image_mirror.writer_address(head)
    if not ref and not copy_to:
        return
    _pulls(host.state)[host.name] = "+".join(part for part, on in (("copy", copy_to), ("pull", ref)) if on)
    script = resource(__package__, "pull-image.sh")
    files.put(name="Install the background image pull", src=script, dest=PULL_SCRIPT, mode="755")
    if copy_to:
        what = f"Copy {image} into the head's mirror" + (" and pull it from there" if ref else "")
    else:
        what = f"Pull {image}" + (" from the head's mirror" if ref != image_mirror.source_reference(image) else "")
    server.shell(
        name=f"{what} (in the background)",
        commands=[
            start_pull_command(
                local,
                ref,
                settings["ray_image_pull_timeout_s"],
                with_auth=bool(auth),
                copy_to=copy_to,
                source=image_mirror.source_reference(image),
                src_tls_verify=not _insecure(settings, image),
                warm=warm,
                writer=writer,
            )
        ],
    )


@deploy("Ray image")
def wait_for_image() -> None:
    """Wait for the background pull :func:`ray_image` started on this host (nothing when none).

    With the mirror, the head's copy is waited for first; when it failed, the hosts that wait for
    the mirror stop at once with a message naming the head, instead of waiting for their deadline.
    """
    settings = host_settings(host)
    jobs = _pulls(host.state)
    head = image_mirror.mirror_host()
    timeout_s = settings["ray_image_pull_timeout_s"]
    # From the facts, not from what the head's load noted: every host's load runs at once, in any order.
    copying = head is not None and image_mirror.mirrored(head) and image_mirror.copy_needed(needs_pull)
    if copying and host.name == head.name:
        copied = server.shell(
            name="Wait for the head's mirror to hold the image", commands=[wait_command("copied", timeout_s)]
        )
        image_mirror.note_digest_op(host.state, MIRROR_KEY, copied)
    job = jobs.get(host.name, "")
    if "pull" not in job:
        return
    from_mirror = copying and image_mirror.mirrored(host) and host.name != head.name
    if from_mirror:
        state = host.state

        def head_failed() -> bool:
            return head in state.failed_hosts

        why = f'the head ({head.name}) could not copy the image into its mirror (image_mirror = "head"); ' + (
            "its error is above"
        )
        server.shell(
            name="Stop waiting: the head could not fill the mirror",
            commands=[f"systemctl stop {PULL_UNIT} 2>/dev/null; echo {shlex.quote(why)} >&2; exit 1"],
            _if=head_failed,
        )
    waited = server.shell(
        name=f"Wait for the pull of {settings['ray_image']}", commands=[wait_command("result", timeout_s)]
    )
    if from_mirror:  # what the tag held was only pulled ahead: the image is the digest the head copied
        image = settings["ray_image"]
        tag_ref = image_mirror.mirror_reference(image, image_mirror.mirror_address(head), image_mirror.run_tag(state))
        image_mirror.pinned_pull(
            f"Pull {image} from the head's mirror by the digest the head copied", MIRROR_KEY, head, tag_ref,
            image_mirror.local_name(image), timeout_s,
        )  # fmt: skip
    memo = run_memo(host.state, "image_pull_waits")
    if "hashes" not in memo:  # the first host of this run: one callback for the whole run
        memo["hashes"] = set()
        host.state.add_callback_handler(_PullSeconds(memo["hashes"]))
    memo["hashes"].add(waited._hash)


def pull_seconds(lines: list[str]) -> float | None:
    """The seconds a background pull took, from its wait's output ("result 0 81.2"; None: not there).

    >>> pull_seconds(["result 0 81.2"]), pull_seconds(["something else"])
    (81.2, None)
    """
    for line in reversed(lines):
        parts = line.split()
        if len(parts) == 3 and parts[0] == "result" and parts[1] == "0":
            try:
                return float(parts[2])
            except ValueError:
                return None
    return None


class _PullSeconds(BaseStateCallback):
    """Counts each host's background pull, measured on the host, in the phase table's image pull row."""

    def __init__(self, hashes: set[str]):
        self.hashes = hashes

    def operation_end(self, state: Any, op_hash: str) -> None:  # type: ignore[override]
        if op_hash not in self.hashes:
            return
        for h in state.inventory.iter_activated_hosts():
            data = state.ops.get(h, {}).get(op_hash)
            meta = data.operation_meta if data is not None else None
            if meta is None or not meta.is_complete() or not meta.did_succeed():
                continue
            seconds = pull_seconds(meta.stdout_lines)
            if seconds is not None:
                note_host_phase(state, h, "image pull", seconds)


def user_command(image: str) -> str:
    """A shell command that prints the uid ``image``'s containers run as (root in rayrig's image,
    ``ray`` in Ray's): files a ray-node container reads or writes are made that user's.

    >>> print(user_command("rayproject/ray:2.60.0"))
    docker run --rm --network=none --entrypoint id rayproject/ray:2.60.0 -u
    """
    return f"docker run --rm --network=none --entrypoint id {shlex.quote(image)} -u"
