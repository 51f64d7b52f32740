"""The health gate's parts on the hosts (``health_gate``): the service on the monitoring host, and
on every host what it may run there (docs/design/health-gate.md).

- :func:`health_node_side`, before the ray-node step: the copy of the gate's code, the command
  the gate runs (``rayrig-health-node``), the ray-node unit's drop-in that keeps a quarantined
  node stopped, and on the other hosts the gate's key in the SSH user's ``authorized_keys``,
  for that command only;
- :func:`health_gate_service`, after the monitoring server: on the monitoring host the gate's
  configuration, its key and the hosts' pinned keys, and ``rayrig-health.service``.

The gate's key is the cluster's, kept beside its token on the operator's machine
(``.rayrig/clusters/<ray_cluster_name>/health_gate_key``, 0600), made at the first deploy with
the gate on: its public half is known when the deploy is planned, before any host changes.
With ``health_gate = False`` every part is removed, the quarantine marker too, before the
ray-node step: a node kept out starts again.
"""

from __future__ import annotations

import json
import os
import shlex
from io import StringIO
from pathlib import Path
from typing import Any

from pyinfra import host, inventory
from pyinfra.api import FactBase, deploy
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from checks import health_gate
from checks.health_node import MARKER, parse_marker
from deploy.contract.paths import state_dir
from deploy.contract.settings import host_data, host_settings, is_absent, node_address, present_hosts
from deploy.host.secret_files import put_secret_file
from deploy.monitoring.server import monitoring_host_name
from deploy.run.facts import fact
from deploy.run.memo import run_memo
from deploy.run.templating import put_template, resource
from deploy.run.units import daemon_reload

GATE_UNIT = "rayrig-health"
UNIT_TEMPLATE = resource(__package__, "rayrig-health.service.j2")
NODE_TEMPLATE = resource(__package__, "rayrig-health-node.sh")
CODE_DIR = "/usr/local/lib/rayrig/health"
NODE_COMMAND = health_gate.NODE_COMMAND
CONFIG_DIR = "/etc/rayrig/health"
CONFIG = f"{CONFIG_DIR}/gate.json"
STATE_DIR = "/var/lib/rayrig/health"
KEY = f"{STATE_DIR}/id_ed25519"
KNOWN_HOSTS = f"{STATE_DIR}/known_hosts"
STATE_FILE = f"{STATE_DIR}/state.json"
EVENTS_FILE = f"{STATE_DIR}/events.jsonl"
#: The gate's own files in STATE_DIR, which also holds a host's quarantine marker.
GATE_FILES = (KEY, KNOWN_HOSTS, STATE_FILE, EVENTS_FILE)
UNIT_PATH = f"/etc/systemd/system/{GATE_UNIT}.service"
KEY_COMMENT = "rayrig-health-gate"
#: The modules of ``checks`` the gate and the node command import (tests/unit/test_health_gate.py checks the list).
CODE_MODULES = (
    "__init__", "allreduce_plan", "deadlines", "gpu_health", "health_gate", "health_judge", "health_node",
    "health_probe", "maths", "monitoring", "node", "nvidia_text", "preflight", "reasons", "specs", "verdict",
)  # fmt: skip
CODE_MEMO = "health_gate_code"
CHECKS_DIR = Path(__file__).resolve().parents[2] / "checks"


def gate_host() -> Any:
    """The host that runs the gate (the monitoring host) while ``health_gate`` is on; None otherwise."""
    hosts = list(present_hosts(inventory))
    if not hosts or not host_settings(hosts[0])["health_gate"]:
        return None
    name = monitoring_host_name()
    return next((h for h in hosts if h.name == name), None)


def drop_in_path(container: str) -> str:
    return f"/etc/systemd/system/{container}.service.d/rayrig-health.conf"


def drop_in_text() -> str:
    return (
        "# rayrig (health_gate): a node the health gate has taken out of the cluster stays stopped,\n"
        "# across restarts and reboots, until it is admitted again (rayrig health admit).\n"
        f"[Unit]\nConditionPathExists=!{MARKER}\n"
    )


MARKER_FOLLOWS = "RAYRIG-QUARANTINED"


class QuarantineMarker(FactBase):
    """The host's quarantine marker (its JSON, as :func:`checks.health_node.parse_marker` reads it), None when
    there is none. A marker that exists keeps the unit stopped, empty or not: its existence is what is asked."""

    def command(self) -> str:
        return f"if [ -e {MARKER} ]; then echo {MARKER_FOLLOWS}; cat {MARKER}; fi; true"

    def process(self, output: list[str]) -> dict[str, Any] | None:
        if not output or output[0].strip() != MARKER_FOLLOWS:
            return None
        return parse_marker("\n".join(output[1:]))


class HostKeys(FactBase):
    """The host's SSH host keys (``type base64`` lines)."""

    @staticmethod
    def default() -> list[str]:
        return []

    def command(self) -> str:
        return "cat /etc/ssh/ssh_host_*_key.pub 2>/dev/null || true"

    def process(self, output: list[str]) -> list[str]:
        return [" ".join(line.split()[:2]) for line in output if line.startswith(("ssh-", "ecdsa-"))]


class UserHome(FactBase):
    """A user's home folder (None when there is no such user)."""

    def command(self, user: str) -> str:
        return f"getent passwd {shlex.quote(user)} | cut -d: -f6"

    def process(self, output: list[str]) -> str | None:
        return output[0].strip() if output and output[0].strip() else None


def quarantine_marker(h: Any) -> dict[str, Any] | None:
    """``h``'s quarantine marker while the gate is on (None: not quarantined, or the gate is off)."""
    if not host_settings(h)["health_gate"] or not h.connected:
        return None
    return fact(h, QuarantineMarker)


def kept_out_message(name: str, marker: dict[str, Any]) -> str:
    """What the deploy says of a quarantined host it leaves out."""
    by, reason = marker.get("by") or "the gate", marker.get("reason") or "no reason given"
    return (f"{name} is quarantined by the health gate ({by}: {reason}): its ray-node stays stopped and is "
            "not replaced; `rayrig health admit INVENTORY HOST` lets it back, and a deploy after that "
            "updates it")  # fmt: skip


def ssh_user(h: Any) -> str:
    """The user the deploy (and so the gate) logs in as on ``h``."""
    return host_data(h).get("ssh_user") or "root"


def ssh_port(h: Any) -> int:
    return int(host_data(h).get("ssh_port") or 22)


def key_path(settings: dict[str, Any]) -> Path:
    return state_dir() / "clusters" / settings["ray_cluster_name"] / "health_gate_key"


def gate_key(settings: dict[str, Any]) -> tuple[str, str]:
    """The gate's key (OpenSSH private key text, public key line), made once per cluster, 0600."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: PLC0415

    path = key_path(settings)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        private = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(private)
    text = path.read_text()
    key = serialization.load_ssh_private_key(text.encode(), password=None)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return text, public.decode()


def authorized_line(public: str) -> str:
    """The ``authorized_keys`` line that lets the gate's key run ``rayrig-health-node`` and nothing else."""
    return f'restrict,command="{NODE_COMMAND}" {public} {KEY_COMMENT}'


def _code() -> None:
    """The gate's code and the node command; the operations are kept for the service's restart."""
    files.directory(name="Create the health gate's code folder", path=f"{CODE_DIR}/checks", mode="755")
    ops = [
        files.put(
            name=f"Copy checks/{module}.py for the health gate",
            src=str(CHECKS_DIR / f"{module}.py"),
            dest=f"{CODE_DIR}/checks/{module}.py",
            mode="644",
        )  # fmt: skip
        for module in CODE_MODULES
    ]
    run_memo(host.state, CODE_MEMO)[host.name] = ops
    put_template("Install rayrig-health-node, what the gate runs on this host", NODE_TEMPLATE, NODE_COMMAND,
                 mode="755", path=NODE_COMMAND, code_dir=CODE_DIR)  # fmt: skip


def _had_gate() -> bool:
    """Whether the gate's key may be in this host's ``authorized_keys``: the operator's machine has it."""
    return key_path(host_settings(host)).exists()


def _authorized_keys_path(h: Any) -> str | None:
    user = ssh_user(h)
    home = fact(h, UserHome, user) or ("/root" if user == "root" else None)
    return f"{home}/.ssh/authorized_keys" if home else None


@deploy("Health gate (on every host)")
def health_node_side() -> None:
    """The node's part of the gate, or none of it (``health_gate = False``)."""
    settings = host_settings(host)
    container = settings["ray_container_name"]
    gate = gate_host()
    authorized = _authorized_keys_path(host) if gate is not None or _had_gate() else None
    if gate is None or is_absent(host):  # off, or a host leaving the cluster: none of it
        _remove_node_side(container, authorized)
        return
    _code()
    drop_in = files.put(name="Keep a quarantined ray-node stopped (health_gate)", src=StringIO(drop_in_text()),
                        dest=drop_in_path(container), mode="644")  # fmt: skip
    daemon_reload("Reload systemd units for the health gate's drop-in", [drop_in], [f"{container}.service"])
    if authorized is None:
        return
    if gate.name == host.name:
        files.line(name="No health gate key on its own host", path=authorized, line=f".* {KEY_COMMENT}$",
                   present=False)  # fmt: skip
        return
    _private, public = gate_key(settings)
    files.directory(name="Create the SSH user's .ssh folder", path=os.path.dirname(authorized), mode="700",
                    user=ssh_user(host), group=None)  # fmt: skip
    files.line(name="Let the health gate's key run rayrig-health-node only (authorized_keys)", path=authorized,
               line=f".* {KEY_COMMENT}$", replace=authorized_line(public))  # fmt: skip


class Leftovers(FactBase):
    """Which of ``paths`` exist, and ``KEY`` when ``authorized`` names the gate's key: one round trip
    on a host that never had the gate."""

    @staticmethod
    def default() -> set[str]:
        return set()

    def command(self, paths: tuple[str, ...], authorized: str | None) -> str:
        words = " ".join(shlex.quote(p) for p in paths)
        grep = f"grep -qs -- ' {KEY_COMMENT}$' {shlex.quote(authorized)} && echo KEY; " if authorized else ""
        return f'for p in {words}; do [ -e "$p" ] && echo "$p"; done; {grep}true'

    def process(self, output: list[str]) -> set[str]:
        return {line.strip() for line in output if line.strip()}


def _leftovers(authorized: str | None) -> set[str]:
    """What of the gate is on this host: the node's part and the service's, in one fact that both removers
    read (the same arguments: one round trip per run)."""
    paths = (drop_in_path(host_settings(host)["ray_container_name"]), STATE_DIR, NODE_COMMAND, CODE_DIR,
             UNIT_PATH, CONFIG_DIR, *GATE_FILES)  # fmt: skip
    return fact(host, Leftovers, paths, authorized)


def _remove_node_side(container: str, authorized: str | None) -> None:
    found = _leftovers(authorized)
    if not found:
        return
    if "KEY" in found and authorized is not None:
        files.line(name="Remove the health gate's key (health_gate off)", path=authorized, line=f".* {KEY_COMMENT}$",
                   present=False)  # fmt: skip
    drop_in = files.file(name="Remove the health gate's ray-node drop-in", path=drop_in_path(container), present=False)
    files.directory(name="Remove the health gate's folder, a quarantine marker too (health_gate off)", path=STATE_DIR,
                    present=False)  # fmt: skip
    if drop_in_path(container) in found:  # its folder too, when the gate's was its only drop-in
        folder = shlex.quote(os.path.dirname(drop_in_path(container)))
        server.shell(name="Remove the ray-node unit's drop-in folder if it is empty",
                     commands=[f"rmdir --ignore-fail-on-non-empty {folder}"])  # fmt: skip
    systemd.daemon_reload(name="Reload systemd units without the health gate's drop-in", _if=drop_in.did_change)
    files.file(name="Remove rayrig-health-node", path=NODE_COMMAND, present=False)
    files.directory(name="Remove the health gate's code", path=CODE_DIR, present=False)


def gate_config(settings: dict[str, Any], gate_name: str) -> dict[str, Any]:
    """The gate's ``gate.json``: the hosts and the ``health_*`` values."""
    hosts = []
    for h in present_hosts(inventory):
        s = host_settings(h)
        gpus = s["ray_num_gpus"]
        hosts.append({
            "name": h.name, "address": node_address(h), "node_ip": node_address(h), "port": ssh_port(h),
            "user": ssh_user(h), "role": s["ray_role"],
            "declared": {"CPU": s["ray_num_cpus"], "GPU": None if gpus == "auto" else gpus, **s["ray_resources"]},
        })  # fmt: skip
    return {
        "self": gate_name,
        "container": settings["ray_container_name"],
        "prometheus": f"http://127.0.0.1:{int(settings['monitoring_prometheus_port'])}",
        "metrics_port": settings["health_metrics_port"],
        "state_dir": STATE_DIR,
        "ssh_key": KEY,
        "known_hosts": KNOWN_HOSTS,
        "interval_s": settings["health_interval_s"],
        "probe_interval_s": settings["health_probe_interval_s"],
        "probe_deadline_s": settings["health_probe_deadline_s"],
        "probe_work": settings["health_probe_work"],
        "probe_fraction": settings["health_probe_fraction"],
        "min_free_fraction": settings["health_min_free_fraction"],
        "fail_after": settings["health_fail_after"],
        "pass_after": settings["health_pass_after"],
        "drain_timeout_s": settings["health_drain_timeout_s"],
        "max_quarantined": settings["health_max_quarantined"],
        "start_grace_s": settings["ray_replace_timeout_s"],  # a (re)started node has that long to join
        "hosts": hosts,
    }


def known_hosts_text() -> str:
    """Every other host's SSH host keys, by the address and port the gate dials."""
    lines = []
    for h in present_hosts(inventory):
        target = node_address(h) if ssh_port(h) == 22 else f"[{node_address(h)}]:{ssh_port(h)}"
        lines += [f"{target} {key}" for key in fact(h, HostKeys)]
    return "\n".join(lines) + "\n"


@deploy("Health gate (the service)")
def health_gate_service() -> None:
    """On the monitoring host with ``health_gate``: the gate configured and running; elsewhere none of it."""
    settings = host_settings(host)
    gate = gate_host()
    if gate is None or gate.name != host.name:
        _remove_service(gate is None)
        return
    files.directory(name="Create the health gate's configuration folder", path=CONFIG_DIR, mode="755")
    files.directory(name="Create the health gate's state folder", path=STATE_DIR, mode="700")
    text = json.dumps(gate_config(settings, host.name), indent=1, sort_keys=True) + "\n"
    config = files.put(name="Write the health gate's configuration", src=StringIO(text), dest=CONFIG, mode="644")
    private, _public = gate_key(settings)
    put_secret_file(name="Store the health gate's SSH key", src=StringIO(private), dest=KEY)
    pinned = files.put(name="Pin the hosts' SSH keys for the health gate", src=StringIO(known_hosts_text()),
                       dest=KNOWN_HOSTS, mode="600")  # fmt: skip
    unit = put_template(f"Install the {GATE_UNIT} systemd unit", UNIT_TEMPLATE, UNIT_PATH, code_dir=CODE_DIR,
                        config=CONFIG, monitoring_unit="rayrig-prometheus.service")  # fmt: skip
    daemon_reload(f"Reload systemd units for {GATE_UNIT}", [unit], [f"{GATE_UNIT}.service"])
    systemd.service(name=f"Keep {GATE_UNIT} enabled and running", service=f"{GATE_UNIT}.service", running=True,
                    enabled=True)  # fmt: skip
    code = run_memo(host.state, CODE_MEMO).get(host.name, [])
    systemd.service(name=f"Restart {GATE_UNIT} for its new configuration or code", service=f"{GATE_UNIT}.service",
                    restarted=True, _if=any_changed(config, pinned, unit, *code))  # fmt: skip


def _remove_service(gate_off: bool) -> None:
    """None of the service on this host; the gate's files only (not a quarantine marker) while the gate is on."""
    everything = gate_off or is_absent(host)  # the node's part goes too, the folder with it (health_node_side)
    found = _leftovers(_authorized_keys_path(host) if everything and _had_gate() else None)
    if UNIT_PATH in found:
        systemd.service(name=f"Stop and disable {GATE_UNIT}", service=f"{GATE_UNIT}.service", running=False,
                        enabled=False)  # fmt: skip
        unit = files.file(name=f"Remove the {GATE_UNIT} unit", path=UNIT_PATH, present=False)
        systemd.daemon_reload(name=f"Reload systemd units without {GATE_UNIT}", _if=unit.did_change)
    if CONFIG_DIR in found:
        files.directory(name="Remove the health gate's configuration", path=CONFIG_DIR, present=False)
    if everything:
        return
    for path in GATE_FILES:
        if path in found:
            files.file(name=f"Remove {path} (the gate runs on another host)", path=path, present=False)
