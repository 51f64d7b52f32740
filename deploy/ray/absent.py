"""A host leaving the cluster: ``ray_state = "absent"``.

On a host marked absent (never the head, nor the NFS server: the inventory check refuses
both), ensures, in this order:

- its Ray node drained: Ray is asked to move no new work to it, and the step waits until the GCS
  sees no work left on the node (a drained raylet does not end by itself in Ray 2.60: whoever
  removes the node stops it, here the next step), within ``ray_drain_timeout_s`` (default 120 s).
  Past that bound, or when Ray does not take the request, the step warns (pyinfra prints it as an
  ignored error) and the removal goes on;
- the ``ray-node`` service stopped and disabled, its unit removed, the ``ray-node`` and
  ``ray-node-previous`` containers removed;
- its shared mounts unmounted and their units removed, S3 credentials and any NFS exports file
  removed (``deploy.storage.mounts.remove_storage``);
- the monitoring exporters rayrig installed removed (``deploy.monitoring.exporters.remove_exporters``),
  before the firewall that kept them to the members;
- rayrig's firewall removed: the nftables table, its unit, the drop-in and the ruleset
  (``deploy.firewall.nftables.remove_firewall``);
- the secrets rayrig put there removed: the Ray token, the secret environment
  (``ray_env_secret``), the registry credentials; and the host's membership record.

Meanwhile the other hosts drop it from their firewall member sets and NFS exports, as they
admit present hosts only; the drain runs first, while the head still admits the host. Docker,
the Ray image and the packages stay. A re-run with the host still marked absent plans nothing;
then the host can leave the inventory. Example:

    if is_absent(host):
        remove_from_cluster()   # in deploy/cluster.py, instead of the steps of a member
"""

from __future__ import annotations

import shlex
from pathlib import Path

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.facts.files import File
from pyinfra.operations import files, server

from deploy.contract.settings import host_settings
from deploy.firewall.nftables import remove_firewall
from deploy.host.ray_image import DOCKER_CONFIG_DIR
from deploy.host.secret_files import DIGEST_KEY_DIR
from deploy.monitoring.exporters import remove_exporters
from deploy.ray import auth, env_secret
from deploy.ray.membership import MEMBERS_PATH
from deploy.ray.ray_node import previous_name
from deploy.run.facts import ContainerState, fact
from deploy.run.templating import resource
from deploy.run.units import daemon_reload
from deploy.storage.mounts import remove_storage

DRAIN_SCRIPT = resource(__package__, "drain-ray-node.sh")


def drain_command(container: str, host_name: str, bound_s: int) -> str:
    """The shell command that drains the node in ``container`` within ``bound_s`` seconds.

    It runs ``drain-ray-node.sh``; every value reaches it as a positional argument.
    """
    lines = Path(DRAIN_SCRIPT).read_text().splitlines()
    script = "\n".join(line for line in lines if not line.lstrip().startswith("#"))  # its comments stay in the file
    return shlex.join(["bash", "-c", script, "drain-ray-node", container, host_name, str(int(bound_s))])


def remove_commands(container: str, containers: list[str]) -> list[str]:
    """Stop and disable the unit of ``container``, then remove the ``containers`` that exist.

    >>> remove_commands("ray-node", ["ray-node"])[-1]
    'docker rm --force ray-node'
    """
    unit = shlex.quote(f"{container}.service")
    commands = [
        f"systemctl disable --now {unit} 2>/dev/null || true",
        f"rm -rf {shlex.quote(f'/run/systemd/system/{container}.service.d')}",
    ]
    if containers:
        commands.append(shlex.join(["docker", "rm", "--force", *containers]))
    return commands


def _remove_ray_node(name: str, drain_s: int) -> None:
    unit_path = f"/etc/systemd/system/{name}.service"
    current = fact(host, ContainerState, name)
    containers = [name] if current else []
    if fact(host, ContainerState, previous_name(name)):  # a replacement cut short
        containers.append(previous_name(name))
    if current and current["running"]:
        server.shell(
            name=f"Drain the Ray node (at most {drain_s} s, ray_drain_timeout_s)",
            commands=[drain_command(name, host.name, drain_s)],
            _ignore_errors=True,  # past the bound, the node is removed all the same: a warning, not a failure
        )
    unit = fact(host, File, unit_path)
    if unit or containers:
        server.shell(name=f"Stop and remove the {name} container", commands=remove_commands(name, containers))
    if unit:
        removed = files.file(name=f"Remove the {name} systemd unit", path=unit_path, present=False)
        daemon_reload(f"Reload systemd units without {name}", [removed], [f"{name}.service"])


def rotation_advice(host_name: str, tls: bool) -> str:
    """What to do about the secrets a leaving host held, said on every deploy that removes it.

    >>> rotation_advice("gpu-3", tls=False)  # doctest: +ELLIPSIS
    'gpu-3 leaves the cluster (ray_state = "absent"); it held the cluster's Ray token: if it leaves ...'
    """
    held = "the cluster's Ray token and a TLS key signed by the cluster's CA" if tls else "the cluster's Ray token"
    rotate = "`rayrig token rotate INVENTORY`" + (" and `rayrig tls rotate INVENTORY`" if tls else "")
    return (
        f'{host_name} leaves the cluster (ray_state = "absent"); it held {held}: if it leaves because it is no '
        f"longer trusted (sold, lent, compromised), rotate {'them' if tls else 'it'} once it is gone: {rotate}"
    )


@deploy("Remove the host from the cluster")
def remove_from_cluster() -> None:
    settings = host_settings(host)
    logger.warning(rotation_advice(host.name, settings["ray_tls"] == "on"))
    _remove_ray_node(settings["ray_container_name"], settings["ray_drain_timeout_s"])
    remove_storage()
    remove_exporters()  # before the firewall: they answer anyone who asks
    remove_firewall()
    secrets = (
        ("the Ray token", auth.NODE_TOKEN_DIR),
        ("ray-node's secret environment", env_secret.ENV_DIR),
        ("the registry credentials", DOCKER_CONFIG_DIR),
        ("the cluster's key of secret files' digests", DIGEST_KEY_DIR),
    )
    for what, path in secrets:
        files.directory(name=f"Remove {what} ({path})", path=path, present=False)
    files.file(name="Remove the record of the cluster's members", path=MEMBERS_PATH, present=False)
