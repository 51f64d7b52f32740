"""Ray's service-discovery file for Prometheus, and nothing else of Ray's folder.

Ray's head writes every alive node's metrics address to ``prom_metrics_service_discovery.json`` in
its temp folder (``/tmp/ray`` in ray-node, ``ray_temp_dir/tmp`` on the host), replacing it by a
rename. A bind mount of that one file would keep showing Prometheus the file it replaced, and a
mount of the whole folder shows it Ray's sessions, logs and sockets too. So on the head, when it
runs Prometheus, ``rayrig-ray-sd.service`` (``ray-sd-copy.sh``) copies the file every 5 s, when it
changed, into :data:`deploy.monitoring.config.RAY_SD_DIR`, a root-owned folder of its own that
Prometheus mounts read-only and reads ``ray.json`` from. Every other host, and a head that no longer
runs Prometheus, has none of it. Example::

    ensure(settings)   # on the head that runs Prometheus, before Prometheus's container
    remove(found)      # everywhere else (found: which of PATHS are there)
"""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from deploy.monitoring import config as mc
from deploy.ray import ray_temp
from deploy.run.templating import put_template, resource
from deploy.run.units import daemon_reload

UNIT = "rayrig-ray-sd.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
UNIT_TEMPLATE = resource(__package__, "rayrig-ray-sd.service.j2")
SCRIPT = "/usr/local/lib/rayrig/ray-sd-copy.sh"
SCRIPT_SOURCE = resource(__package__, "ray-sd-copy.sh")


def unit_values(settings: dict[str, Any]) -> dict[str, str]:
    """The template values of ``rayrig-ray-sd.service.j2``: the copier's command line (as systemd reads
    it) and the one folder it writes.

    >>> unit_values({"ray_temp_dir": "/var/lib/rayrig/ray"})["exec_start"]
    '/bin/bash /usr/local/lib/rayrig/ray-sd-copy.sh /var/lib/rayrig/ray/tmp /var/lib/rayrig/ray-sd'
    """
    words = ["/bin/bash", SCRIPT, ray_temp.host_path(settings), mc.RAY_SD_DIR]
    return {"exec_start": shlex.join(words).replace("%", "%%").replace("$", "$$"), "folder": mc.RAY_SD_DIR}


def ensure(settings: dict[str, Any]) -> None:
    """The copier installed, enabled and running (restarted when its script or unit changed)."""
    files.directory(name=f"Create {mc.RAY_SD_DIR}", path=mc.RAY_SD_DIR, mode="755")
    script = files.put(
        name="Install the copier of Ray's service-discovery file", src=SCRIPT_SOURCE, dest=SCRIPT, mode="755"
    )
    unit = put_template(f"Install the {UNIT} systemd unit", UNIT_TEMPLATE, UNIT_PATH, **unit_values(settings))
    daemon_reload(f"Reload systemd units for {UNIT}", [unit], [UNIT])
    systemd.service(name=f"Keep {UNIT} enabled and running", service=UNIT, running=True, enabled=True)
    systemd.service(
        name=f"Restart {UNIT} for its new script or unit", service=UNIT, restarted=True,
        _if=any_changed(script, unit),
    )  # fmt: skip


#: What of the copier may be on a host: its unit, its script and its folder.
PATHS = (UNIT_PATH, SCRIPT, mc.RAY_SD_DIR)


def remove(found: set[tuple[str, str]]) -> None:
    """Take the copier and its folder away where they are (a host that does not run Prometheus on the
    head); ``found``: which of :data:`PATHS` exist, as ``("PATH", path)`` (the monitoring step's
    ``Leftovers`` fact)."""
    if ("PATH", UNIT_PATH) in found:
        systemd.service(name=f"Stop and disable {UNIT}", service=UNIT, running=False, enabled=False)
        unit = files.file(name=f"Remove the {UNIT} systemd unit", path=UNIT_PATH, present=False)
        systemd.daemon_reload(name=f"Reload systemd units without {UNIT}", _if=unit.did_change)
    if ("PATH", SCRIPT) in found:
        files.file(name="Remove the copier of Ray's service-discovery file", path=SCRIPT, present=False)
    if ("PATH", mc.RAY_SD_DIR) in found:
        files.directory(name=f"Remove {mc.RAY_SD_DIR}", path=mc.RAY_SD_DIR, present=False)
