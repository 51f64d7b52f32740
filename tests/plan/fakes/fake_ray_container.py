"""A fake host's Ray node container, for the plan tests' fake hosts: the image (``DockerImageId``),
the ``ray-node`` container and the one a replacement cut short left (``ContainerState``), and the
unit that runs it (pyinfra's systemd facts, ``NeedDaemonReload``).

``RayContainer()`` on a fresh host: no image, no container, the unit neither enabled nor running.
On a converged host: the image is there (``IMAGE_ID``), and the unit runs a container created from
it whose hash label is that of the ``docker create`` arguments the deploy wants, built here by the
pure helpers of ``deploy.ray.ray_node`` from the host's data and facts (``expected_run_args``).
Each field changes one aspect (None: as the state says):

- ``image_present``: the image is there;
- ``present``: the container is there (by default also when ``hash`` is given);
- ``hash``: the hash label the container carries (default: that of the wanted arguments);
- ``image_id``: the image it was created from (the present image is ``IMAGE_ID``);
- ``previous_present``: a stopped ``<name>-previous`` container, left by a replacement cut short;
- ``unit_need_reload``: the unit file changed since systemd's last daemon-reload.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from deploy.contract import settings
from deploy.ray import auth, env_secret, ray_node
from deploy.run.facts import ContainerState, DockerImageId
from tests.plan.fakes.fake_os import MEM_KB, NOFILE_HARD
from tests.plan.fakes.fakestep import container_state_key, fact_key, local_digest_key, need_reload, systemd_unit

IMAGE_ID = "sha256:" + "ab" * 32
CONTAINER_ID = "c0ffee" * 10 + "beef"


@dataclass
class RayContainer:
    """A host's Ray image, node container and its unit (see the module's docstring)."""

    image_present: bool | None = None
    present: bool | None = None
    hash: str | None = None
    image_id: str = IMAGE_ID
    previous_present: bool = False
    unit_need_reload: bool = False

    def responses(self, converged: bool, s: Mapping[str, Any], wanted_hash: Callable[[], str]) -> dict[str, Any]:
        """The answers about the unit, the image and the containers (merged settings ``s``;
        ``wanted_hash``: the hash label of the arguments the deploy wants)."""
        name, image = s["ray_container_name"], s["ray_image"]
        unit = f"{name}.service"
        responses: dict[str, Any] = systemd_unit(unit, "running" if converged else "dead", "enabled" * converged)
        responses.update(need_reload(unit, self.unit_need_reload))
        has_image = converged if self.image_present is None else self.image_present
        responses[fact_key(DockerImageId, "docker image inspect", image)] = [IMAGE_ID] if has_image else []
        # The previous container's matcher comes before the generic one, which matches its command too.
        previous = ray_node.previous_name(name)
        labels = {ray_node.ROLE_LABEL: s["ray_role"]}
        key = container_state_key(previous)
        responses[key] = [container_json(previous, image, labels, running=False)] if self.previous_present else []
        present = converged or self.hash is not None if self.present is None else self.present
        found = []
        if present:
            wanted = self.hash if self.hash is not None else wanted_hash()
            labels = {ray_node.HASH_LABEL: wanted, ray_node.ROLE_LABEL: s["ray_role"]}
            if s["ray_auth"] == "token":
                labels[auth.TOKEN_LABEL] = auth.token_digest(auth.ensure_token(s))
            found = [container_json(name, image, labels, image_id=self.image_id)]
        responses[fact_key(ContainerState, "docker container inspect", name)] = found
        return responses


def container_json(
    name: str, image: str, labels: Mapping[str, str], running: bool = True, image_id: str = IMAGE_ID
) -> str:
    """One line of ContainerState's ``docker container inspect`` (``image_id``: the image it was created from)."""
    return json.dumps(
        {
            "Id": CONTAINER_ID,
            "Image": image_id,
            "Name": f"/{name}",
            "State": {"Status": "running" if running else "exited", "Running": running, "Restarting": False},
            "Config": {"Image": image, "Labels": dict(labels)},
        }
    )


def expected_run_args(
    data: Mapping[str, Any], node_ip: str, head_ip: str, gpus: int = 0,
    mem_kb: int = MEM_KB, nofile_hard: int | None = NOFILE_HARD, monitoring: bool | None = None,
) -> list[str]:  # fmt: skip
    """The ``docker create`` arguments (without the hash label) the deploy wants for a host,
    built with the pure helpers of ``deploy.ray.ray_node`` from the host's data and facts.
    ``monitoring``: the host is the head and the monitoring host (default: the head, with
    monitoring on and no other ``monitoring_host``)."""
    s = settings.merge(data)
    visible = s["nvidia_visible_devices"]
    detected = gpus if visible == "all" else len(visible)
    num_gpus = detected if s["ray_num_gpus"] == "auto" else int(s["ray_num_gpus"])
    start = ray_node.ray_start_args(s, s["ray_role"], node_ip, head_ip, num_gpus)
    shm = ray_node.shm_size(s["ray_shm_size"], mem_kb * 1024)
    nofile = ray_node.nofile_limit(s["ray_ulimit_nofile"], nofile_hard)
    digest = auth.token_digest(auth.ensure_token(s)) if s["ray_auth"] == "token" else None
    if monitoring is None:
        monitoring = head_monitors(s)
    secret = env_secret.env_digest(s["ray_env_secret"], local_digest_key(s)) if s["ray_env_secret"] else None
    return ray_node.docker_run_args(s, s["ray_role"], start, num_gpus, shm, nofile, digest, monitoring, None, secret)


def head_monitors(s: Mapping[str, Any]) -> bool:
    """Whether a host with settings ``s`` is the head and runs Prometheus (``monitoring_host`` unset,
    or its own address)."""
    here = s["monitoring_host"] in (None, s["ray_node_ip"])
    return bool(s["ray_role"] == "head" and s["monitoring_enabled"] and here)
