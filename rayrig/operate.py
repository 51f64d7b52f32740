"""A running cluster from the operator's machine: what its hosts say, and commands on them.

``rayrig status`` asks every host at once, each over its own SSH connection and within a
timeout (:func:`ask_cluster`): the ray-node unit's state, the container's, the Ray version
inside it; and the head, inside its ray-node, for the cluster as Ray sees it (the quick
checks' program, :mod:`checks.cluster_state`, run from its source) and for ``ray status``.
The container's environment names the cluster's token file, so no token leaves the host
and none is ever read here. :func:`build_status` turns the answers into one report::

    answers = ask_cluster(inventory, timeout=45)
    report = build_status(inventory, answers, latest_report(...))
    report["ok"]   # every inventory host an alive Ray node

The probe also reads the health gate's quarantine marker (:data:`QUARANTINE_MARKER`, see
docs/design/health-gate.md): a quarantined member makes ``report["ok"]`` false, and
``report["quarantined"]`` names it.

The other commands' remote command lines are built here too (:func:`exec_command`,
:func:`journal_command`, :func:`ray_logs_command`, and for ``rayrig health`` :func:`health_node_command`
and :func:`read_file_command`), every word quoted with ``shlex``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from checks.health_node import MARKER
from checks.quick import quick_command, quick_reasons, result_of
from checks.verdict import INFO
from deploy.monitoring import health as health_files
from deploy.ray.ray_temp import CONTAINER_PATH
from rayrig.inventory import EXIT_FAILURE, Host, Inventory, OperateError, ssh_argv, unreachable

#: ssh's own exit status when it failed (no connection, refused key, changed host key).
SSH_FAILED = 255
#: Ray's own logs inside the ray-node container: the newest session's.
RAY_LOGS = f"{CONTAINER_PATH}/session_latest/logs"
#: What ``rayrig logs --ray`` shows of every node, and of the head besides.
NODE_LOG_FILES = ("raylet.out", "raylet.err")
HEAD_LOG_FILES = ("gcs_server.out", "gcs_server.err")

#: The health gate's files (docs/design/health-gate.md), where the deploy puts them: on every host the
#: quarantine marker (JSON: since, by, reason, findings; while it is there the ray-node unit does not
#: start) and the command the gate runs there; on the monitoring host every host's state and the timeline.
QUARANTINE_MARKER = MARKER
HEALTH_NODE = health_files.NODE_COMMAND
HEALTH_STATE = health_files.STATE_FILE
HEALTH_EVENTS = health_files.EVENTS_FILE
#: :func:`read_file_command`'s exit status when the file does not exist.
ABSENT = 3
#: Who quarantined a host (the marker's ``by``), in words.
WHO = {"gate": "the health gate", "operator": "an operator"}

#: One SSH command per host for ``rayrig status``; $1 the container (and unit) name, $2 "sudo" or "",
#: $3 the quarantine marker. Prints ``UNIT state``, ``CONTAINER state`` (``absent`` when there is none),
#: ``RAY_VERSION v`` for a running container, ``ERROR line`` when Docker could not be asked, and
#: ``QUARANTINE json`` (the marker on one line; empty when unreadable) while the host is quarantined.
PROBE_SCRIPT = r"""
c=$1 root=$2 marker=$3
as_root() { if [ -n "$root" ]; then sudo -n "$@"; else "$@"; fi; }
echo "UNIT $(systemctl is-active "$c" 2>/dev/null || true)"
if out=$(as_root docker inspect --format '{{.State.Status}}' "$c" 2>&1); then
  echo "CONTAINER $out"
else
  case $out in
    *"No such"*) echo "CONTAINER absent" ;;
    *) echo "CONTAINER unknown"; printf 'ERROR %s\n' "$(printf '%s\n' "$out" | tail -n 1)" ;;
  esac
fi
if [ "$out" = running ]; then
  v=$(as_root docker exec "$c" python -c 'import importlib.metadata as m; print(m.version("ray"))' 2>/dev/null)
  echo "RAY_VERSION ${v:-unknown}"
fi
if as_root test -e "$marker"; then
  printf 'QUARANTINE %s\n' "$(as_root cat -- "$marker" 2>/dev/null | tr '\n' ' ')"
fi
"""


@dataclass(frozen=True)
class Answer:
    """What one SSH command gave back; ``status`` None when no answer came within the timeout."""

    status: int | None
    stdout: str = ""
    stderr: str = ""

    @property
    def reached(self) -> bool:
        """Whether the command ran there (ssh itself neither failed nor timed out)."""
        return self.status is not None and self.status != SSH_FAILED

    @property
    def last_words(self) -> str:
        """The last line of its error output (ssh's message when it could not connect)."""
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else ""


def run(host: Host, remote: str, timeout: float | None) -> Answer:
    """Run the shell command line ``remote`` on ``host`` (no terminal, no input); its answer."""
    try:
        result = subprocess.run(
            ssh_argv(host, remote, batch=True, stdin=False),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return Answer(None, "", f"no answer within {timeout:g} s")
    except FileNotFoundError:
        raise OperateError(
            "ssh: the OpenSSH client is not installed here (e.g. apt-get install openssh-client)"
        ) from None
    return Answer(result.returncode, result.stdout, result.stderr)


def run_all(jobs: Mapping[str, tuple[Host, str]], timeout: float | None) -> dict[str, Answer]:
    """Each job ``key: (host, command)`` at once, each within ``timeout``; the answers by key."""
    if not jobs:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(jobs))) as pool:
        futures = {key: pool.submit(run, host, remote, timeout) for key, (host, remote) in jobs.items()}
        return {key: future.result() for key, future in futures.items()}


# --- the remote command lines ------------------------------------------------------------------


def probe_command(host: Host) -> str:
    """The command that prints the host's unit, container and Ray version (:data:`PROBE_SCRIPT`)."""
    root = "sudo" if host.as_root else ""
    return shlex.join(["bash", "-c", PROBE_SCRIPT, "_", host.container, root, QUARANTINE_MARKER])


def cluster_command(head: Host, expected: Sequence[str]) -> str:
    """The cluster as Ray sees it now, from the head's ray-node (the quick checks' program, no wait)."""
    prefix = shlex.join(head.as_root) + " " if head.as_root else ""
    return prefix + quick_command(head.container, expected, wait_s=0)


def ray_status_command(head: Host) -> str:
    """``ray status`` inside the head's ray-node (already authenticated: its environment names the token file)."""
    return shlex.join([*head.as_root, "docker", "exec", head.container, "ray", "status"])


def exec_command(host: Host, command: Sequence[str], *, on_host: bool = False, stdin: str = "none") -> str:
    """The command line that runs ``command`` in the host's ray-node, or on the host itself.

    Several words run as given, each quoted; one word with blanks in it is a shell command line
    (``sh -c``), so that ``rayrig exec INV -- 'ls /tmp | wc -l'`` pipes where it runs.
    ``stdin``: ``"tty"`` (an interactive terminal: ``docker exec -it``), ``"pipe"`` (this
    process's input goes to the command: ``-i``) or ``"none"``.
    """
    if not command:
        raise OperateError("no command to run (give it after --, e.g. -- ray --version)", 2)
    line = len(command) == 1 and any(c.isspace() for c in command[0])
    if on_host:
        return command[0] if line else shlex.join(command)
    words = ["sh", "-c", command[0]] if line else list(command)
    flags = {"tty": ["-it"], "pipe": ["-i"]}.get(stdin, [])
    return shlex.join([*host.as_root, "docker", "exec", *flags, host.container, *words])


def journal_command(host: Host, lines: int, follow: bool) -> str:
    """The ray-node unit's journal on the host: its last ``lines``, then new ones with ``follow``."""
    unit = f"{host.container}.service"
    follows = ["-f"] if follow else []
    return shlex.join([*host.as_root, "journalctl", "--no-pager", "-u", unit, "-n", str(lines), *follows])


def ray_logs_command(host: Host, lines: int, follow: bool) -> str:
    """Ray's own logs in the host's ray-node: the raylet's, and the GCS server's on the head.

    With ``follow``, ``tail -F`` follows them by name: a restarted node's new session too.
    """
    files = NODE_LOG_FILES + (HEAD_LOG_FILES if host.role == "head" else ())
    paths = [f"{RAY_LOGS}/{name}" for name in files]
    tail = ["tail", "-n", str(lines), *(["-F"] if follow else []), "--", *paths]
    return shlex.join([*host.as_root, "docker", "exec", host.container, *tail])


def health_node_command(host: Host, verb: str, *options: str) -> str:
    """The health gate's command on the host, as root: ``rayrig-health-node VERB OPTIONS...``, such as
    ``sudo -n /usr/local/libexec/rayrig-health-node admit --container ray-node``."""
    return shlex.join([*host.as_root, HEALTH_NODE, verb, *options])


def read_file_command(host: Host, path: str) -> str:
    """The command that prints the file ``path`` of the host, read as root; exit status :data:`ABSENT`
    when there is no such file (the folder may be root's alone, so the test runs as root too)."""
    script = f'[ -e "$1" ] || exit {ABSENT}; exec cat -- "$1"'
    return shlex.join([*host.as_root, "sh", "-c", script, "_", path])


def monitoring_host(inventory: Inventory) -> Host:
    """The host that runs the cluster's monitoring and the health gate: ``monitoring_host`` (a host's
    name or address), the head when None; found as ``rayrig dashboard`` finds it."""
    return inventory.pick(inventory.head.settings["monitoring_host"])


# --- rayrig status -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Answers:
    """What ``rayrig status`` asked: each host's probe (by host name), the head's cluster state and ``ray status``."""

    hosts: Mapping[str, Answer]
    cluster: Answer | None
    ray_status: Answer | None


def ask_cluster(inventory: Inventory, timeout: float) -> Answers:
    """Every host's probe, and the head's cluster state and ``ray status``, all at once."""
    head = inventory.head
    jobs = {f"host {host.name}": (host, probe_command(host)) for host in inventory.hosts}
    jobs["cluster"] = (head, cluster_command(head, [h.node_ip for h in inventory.members]))
    jobs["ray status"] = (head, ray_status_command(head))
    answers = run_all(jobs, timeout)
    return Answers(
        hosts={host.name: answers[f"host {host.name}"] for host in inventory.hosts},
        cluster=answers["cluster"],
        ray_status=answers["ray status"],
    )


def parse_probe(answer: Answer) -> dict[str, str]:
    """``{"unit", "container", "ray_version", "error", "quarantine"}`` from a probe's lines (``KEY value``)."""
    found: dict[str, str] = {}
    for line in answer.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key in ("UNIT", "CONTAINER", "RAY_VERSION", "ERROR", "QUARANTINE"):
            found[key.lower()] = value.strip()
    return found


def parse_quarantine(marker: str | None) -> dict[str, Any]:
    """A host's ``"health"`` from its quarantine marker's text (None: no marker):
    ``{"status": "ok"|"quarantined", "since", "by", "reason"}``.

    A marker that is not JSON still means quarantined (the unit stays stopped while it is there).

    >>> parse_quarantine('{"since": 1764583200, "by": "gate", "reason": "probe: missed its deadline"}')["by"]
    'gate'
    """
    if marker is None:
        return {"status": "ok", "since": None, "by": None, "reason": None}
    try:
        data = json.loads(marker)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return {"status": "quarantined", "since": None, "by": None,
                "reason": f"its marker {QUARANTINE_MARKER} is not a JSON object"}  # fmt: skip
    since = data.get("since")
    by, reason = data.get("by"), data.get("reason")
    return {
        "status": "quarantined",
        "since": since if isinstance(since, (int, float)) and not isinstance(since, bool) else None,
        "by": by if isinstance(by, str) and by else None,
        "reason": reason if isinstance(reason, str) and reason else None,
    }


def declared(host: Host) -> dict[str, Any]:
    """What the inventory declares of the node, in Ray's names (``"auto"`` counts stay ``"auto"``)."""
    settings = host.settings
    return {"CPU": settings["ray_num_cpus"], "GPU": settings["ray_num_gpus"], **settings["ray_resources"]}


def _declaration(host: Host) -> dict[str, Any]:
    """The quick checks' declaration of a host (:func:`checks.quick.quick_reasons`)."""
    gpus = host.settings["ray_num_gpus"]
    return {
        "name": host.name,
        "address": host.node_ip,
        "num_cpus": host.settings["ray_num_cpus"],
        "num_gpus": None if gpus == "auto" else gpus,
        "resources": host.settings["ray_resources"],
        "ray_version": host.settings["ray_version"],
    }


def _cluster_part(inventory: Inventory, answer: Answer | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``"cluster"`` part of the report, and the alive nodes by address."""
    head = inventory.head
    part: dict[str, Any] = {
        "name": head.settings["ray_cluster_name"],
        "head": head.name,
        "nodes_alive": None,
        "ray_version": None,
        "total": None,
        "problems": [],
        "error": None,
    }
    state = result_of(answer.stdout.splitlines()) if answer is not None and answer.status == 0 else None
    if state is None:
        if answer is not None and not answer.reached:
            part["error"] = f"the head did not answer over SSH ({answer.last_words or 'no message'})"
        else:
            said = f" ({answer.last_words})" if answer is not None and answer.last_words else ""
            part["error"] = f"could not read the cluster's state from the head's ray-node{said}"
        return part, {}
    nodes = {node["ip"]: node for node in state["nodes"]}
    reasons = quick_reasons([_declaration(h) for h in inventory.members], state)
    part.update(
        nodes_alive=len(nodes),
        ray_version=state.get("ray_version"),
        total=state.get("total"),
        problems=[{"host": r.host, "message": r.message} for r in reasons if r.level != INFO],
    )
    return part, nodes


def _host_part(host: Host, answer: Answer | None, nodes: Mapping[str, Any], inventory: str) -> dict[str, Any]:
    probe = parse_probe(answer) if answer is not None and answer.reached else {}
    node = nodes.get(host.node_ip)
    error = probe.get("error")
    if answer is not None and not answer.reached:
        error = unreachable(host, inventory, answer.last_words or "no message")
    elif answer is not None and answer.status != 0 and not probe:
        error = f"the probe failed with exit status {answer.status} ({answer.last_words or 'no message'})"
    health = parse_quarantine(probe.get("quarantine"))
    if not probe:  # the probe did not run there: the marker is not known
        health = {**health, "status": "unknown"}
    return {
        "name": host.name,
        "address": host.address,
        "node_ip": host.node_ip,
        "role": host.role,
        "member": host.present,
        "unit": probe.get("unit") or None,
        "container": probe.get("container") or None,
        "ray_version": probe.get("ray_version") or None,
        "declared": declared(host),
        "registered": node.get("resources") if node else None,
        "alive": node is not None,
        "reached": answer is not None and answer.reached,
        "error": error,
        "health": health,
    }


def build_status(inventory: Inventory, answers: Answers, checks: Mapping[str, Any] | None) -> dict[str, Any]:
    """The report of ``rayrig status``: ``{"hosts", "cluster", "checks", "ok", "not_alive", "quarantined"}``.

    ``answers``: :func:`ask_cluster`'s; ``checks``: :func:`checks.report.latest_report`'s.
    ``ok`` when every member (a host not marked ``ray_state = "absent"``) is an alive Ray node and
    none is quarantined by the health gate; ``not_alive`` and ``quarantined`` name the members that
    are not alive, and those quarantined (each host's ``"health"`` says since when, by whom, why).
    """
    cluster, nodes = _cluster_part(inventory, answers.cluster)
    ray_status = answers.ray_status
    cluster["ray_status"] = ray_status.stdout.rstrip() if ray_status is not None and ray_status.status == 0 else None
    hosts = [_host_part(h, answers.hosts.get(h.name), nodes, inventory.path) for h in inventory.hosts]
    not_alive = [h["name"] for h in hosts if h["member"] and not h["alive"]]
    quarantined = [h["name"] for h in hosts if h["member"] and h["health"]["status"] == "quarantined"]
    return {
        "hosts": hosts,
        "cluster": cluster,
        "checks": dict(checks) if checks else {"verdict": None, "report": None, "plot": None},
        "ok": not not_alive and not quarantined,
        "not_alive": not_alive,
        "quarantined": quarantined,
    }


def why_not_alive(host: Mapping[str, Any]) -> str:
    """A short reason a member is not an alive node, from what its host said."""
    if not host["reached"]:
        return "unreachable over SSH"
    if host["health"]["status"] == "quarantined":
        return f"quarantined by {WHO.get(host['health']['by'], 'the health gate or an operator')}"
    if host["error"]:
        return host["error"]
    said = [f"{part} {host[part]}" for part in ("unit", "container") if host[part]]
    return ", ".join(said) or "no answer"


def local_time(epoch: float) -> str:
    """``2026-12-01 10:00:00``: the moment ``epoch`` (seconds) in this machine's time zone."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def shorten(text: str, width: int) -> str:
    """``text`` on one line in at most ``width`` characters: cut at a word's end when one is near, then ``…``."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    blank = cut.rfind(" ")
    if blank > width // 2:
        cut = cut[:blank]
    return cut.rstrip(" ,;:.") + "…"


def exit_status(report: Mapping[str, Any]) -> int:
    """0 when every member is an alive node and none is quarantined, else 1."""
    return 0 if report["ok"] else EXIT_FAILURE
