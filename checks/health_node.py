"""What the health gate asks of one host: ``rayrig-health-node VERB [options]``, one JSON object out.

Installed by the deploy on every host with ``health_gate`` (``deploy/monitoring/health.py``): this
package's copy in ``/usr/local/lib/rayrig/health``, and ``/usr/local/libexec/rayrig-health-node``,
which runs ``python3 -m checks.health_node`` as root. The gate's SSH key may run only that
command (``authorized_keys``: ``restrict,command=...``): its words then come from
``$SSH_ORIGINAL_COMMAND``, and are parsed here like any other command line: a verb and its
options, nothing else reaches a shell.

- ``signals --container C``: the ray-node unit's and container's state, the quarantine marker
  (or null), the free and total bytes of Ray's temp folder (the container's ``/tmp/ray``
  mount) and of Docker's data root;
- ``quarantine --container C --by gate|operator --reason TEXT --drain-s N``: the marker, then
  the node drained from inside its container (``ray drain-node``, a deadline of N s: no new
  work, running tasks may finish, the raylet ends once idle), and a transient timer that
  stops the unit at the deadline if it still runs. The unit's drop-in
  (``ConditionPathExists=!MARKER``) keeps it from starting again while the marker is there;
- ``drain --container C --node-id ID --reason TEXT --drain-s N``: ``ray drain-node`` from this host's
  container (the gate asks the head's, once it has marked the node's host);
- ``stop --container C``: the unit stopped now, on a quarantined host only (Ray did not drain it);
- ``admit --container C``: the marker removed, the unit started;
- ``probe --container C --work N --deadline-s S``: :mod:`checks.health_probe` in a one-off
  container of the node's image, with its container's GPUs and CPU limits, no network;
- ``ray-round --container C --work N --deadline-s S [--probe]``: on the head, the Ray nodes and
  (``--probe``) every node's probe, from a driver in its ray-node container.

Standard library only: it runs with the host's ``python3``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

MARKER = "/var/lib/rayrig/health/quarantined"
RAY_TEMP_IN_CONTAINER = "/tmp/ray"
PROBE_SOURCE = Path(__file__).with_name("health_probe.py")
RESULT = "RESULT "
DOCKER_TIMEOUT_S = 30
DRAIN_TIMER = "rayrig-health-stop"
#: A container (and unit) name as the deploy accepts it.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
MAX_REASON = 200

NODE_ID_PROGRAM = """
import ray
ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
print("RAYRIG_NODE_ID", ray.get_runtime_context().get_node_id())
"""


def _run(argv: list[str], timeout: float = DOCKER_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"no answer within {timeout:g} s")
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not installed")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def parse_marker(text: str, since: float | None = None) -> dict[str, Any]:
    """A quarantine marker's JSON; one that is not a JSON object still quarantines its host, as the operator's
    (``since``: when it was written, for one that does not say)."""
    try:
        value = json.loads(text)
    except ValueError:
        return {"since": since, "by": "operator", "reason": "an unreadable marker file"}
    return value if isinstance(value, dict) else {"since": since, "by": "operator", "reason": "?"}


def read_marker(path: str = MARKER) -> dict[str, Any] | None:
    """The quarantine marker of this host; None when there is none."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    return parse_marker(text, os.path.getmtime(path))


def write_marker(marker: dict[str, Any], path: str = MARKER) -> None:
    """Write the marker whole (a temporary file renamed over it), 0600 in a 0700 folder."""
    folder = Path(path).parent
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = folder / f".{Path(path).name}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(marker, out)
    os.replace(temp, path)


def free_space(path: str) -> dict[str, Any]:
    """``{"path", "free", "size"}`` in bytes (free: what an unprivileged writer may use); ``error`` when unreadable."""
    try:
        stat = os.statvfs(path)
    except OSError as error:
        return {"path": path, "free": None, "size": None, "error": error.strerror}
    return {"path": path, "free": stat.f_bavail * stat.f_frsize, "size": stat.f_blocks * stat.f_frsize}


def inspect(container: str) -> dict[str, Any] | None:
    """``docker inspect`` of the container; None when there is none."""
    done = _run(["docker", "container", "inspect", container])
    if done.returncode != 0:
        return None
    found = json.loads(done.stdout or "[]")
    return found[0] if found else None


def temp_folder(details: dict[str, Any] | None) -> str | None:
    """The host folder mounted at the container's ``/tmp/ray`` (Ray's temp folder)."""
    for mount in (details or {}).get("Mounts") or []:
        if mount.get("Destination") == RAY_TEMP_IN_CONTAINER:
            return mount.get("Source")
    return None


def docker_root() -> str | None:
    done = _run(["docker", "info", "--format", "{{.DockerRootDir}}"])
    return done.stdout.strip() or None if done.returncode == 0 else None


def unit_state(unit: str) -> str:
    return _run(["systemctl", "is-active", unit]).stdout.strip() or "unknown"


def signals(container: str) -> dict[str, Any]:
    details = inspect(container)
    disks = []
    temp = temp_folder(details)
    if temp:
        disks.append({"what": "Ray's temp folder", **free_space(temp)})
    root = docker_root()
    if root:
        disks.append({"what": "Docker's data root", **free_space(root)})
    state = (details or {}).get("State") or {}
    return {
        "unit": unit_state(container),
        "container": state.get("Status") or "absent",
        "started_s_ago": _seconds_since(state.get("StartedAt")) if state.get("Status") == "running" else None,
        "marker": read_marker(),
        "disks": disks,
    }


def _seconds_since(stamp: str | None) -> float | None:
    """Seconds since Docker's RFC 3339 time (nanoseconds cut to microseconds); None when unreadable."""
    if not stamp:
        return None
    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", stamp)
    if not match:
        return None
    fraction = (match[2] or ".0")[:7]
    zone = "+00:00" if match[3] == "Z" else match[3]
    try:
        started = datetime.fromisoformat(f"{match[1]}{fraction}{zone}")
    except ValueError:
        return None
    return round(time.time() - started.timestamp(), 1)


def _node_id(container: str) -> str | None:
    done = _run(["docker", "exec", container, "python", "-c", NODE_ID_PROGRAM], timeout=60)
    for line in done.stdout.splitlines():
        if line.startswith("RAYRIG_NODE_ID "):
            return line.split(" ", 1)[1].strip()
    return None


def drain(container: str, node_id: str, reason: str, drain_s: int) -> dict[str, Any]:
    """Ask Ray, from ``container`` (the head's, or the node's own), to drain node ``node_id``: no new work, running
    tasks may finish within ``drain_s``. A drained raylet does not end by itself (Ray 2.60): the transient
    timer stops the unit at the deadline."""
    done = _run(
        ["docker", "exec", container, "ray", "drain-node", "--address=auto", f"--node-id={node_id}",
         "--reason=DRAIN_NODE_REASON_PREEMPTION", f"--reason-message=rayrig health gate: {reason}",
         f"--deadline-remaining-seconds={int(drain_s)}"],
        timeout=60,
    )  # fmt: skip
    said = _last_line(done.stderr or done.stdout)
    return {"drained": done.returncode == 0, "message": said or f"exit status {done.returncode}"}


def _stop_at_deadline(container: str, drain_s: int) -> None:
    """A transient timer that stops the unit ``drain_s`` seconds from now (a node still busy at its deadline)."""
    timer = f"{DRAIN_TIMER}-{container}"
    _run(["systemctl", "stop", f"{timer}.timer"])
    _run(["systemctl", "reset-failed", f"{timer}.service"])
    _run(["systemd-run", f"--unit={timer}", f"--on-active={max(1, int(drain_s))}",
          "--description=rayrig health gate: stop a quarantined ray-node at its drain deadline",
          "/bin/systemctl", "stop", f"{container}.service"])  # fmt: skip


def quarantine(
    container: str, by: str, reason: str, drain_s: int, findings: list[Any], self_drain: bool = True
) -> dict[str, Any]:
    """Mark the host, drain its node (``self_drain``: from its own container; else the gate drains it from the
    head's, after this), and stop the unit at the deadline (at once when the drain failed)."""
    existing = read_marker()
    if existing is not None:
        if by == "operator" and existing.get("by") != "operator":  # an operator's quarantine: only they lift it
            write_marker({**existing, "by": by, "reason": reason})
            return {"action": "quarantined", "drained": False, "already": True,
                    "message": f"already out (the gate's: {existing.get('reason')}); now the operator's"}  # fmt: skip
        return {"action": "quarantined", "drained": False, "already": True,
                "message": f"already quarantined by {existing.get('by')}: {existing.get('reason')}"}  # fmt: skip
    write_marker({"since": time.time(), "by": by, "reason": reason, "findings": findings})
    unit = f"{container}.service"
    if unit_state(unit) not in ("active", "activating"):
        _run(["systemctl", "stop", unit])
        return {"action": "quarantined", "drained": False, "message": "its ray-node was not running; it stays stopped"}
    if not self_drain:
        _stop_at_deadline(container, drain_s)
        return {"action": "quarantined", "drained": None,
                "message": f"marked; its ray-node stops once drained, at the latest in {int(drain_s)} s"}  # fmt: skip
    node = _node_id(container)
    answer = drain(container, node, reason, drain_s) if node else {"drained": False, "message": "no answer"}
    said = answer["message"]
    if answer["drained"] and drain_s > 0:
        _stop_at_deadline(container, drain_s)
        return {"action": "quarantined", "drained": True,
                "message": f"drained: running tasks have {int(drain_s)} s, then its ray-node stops"}  # fmt: skip
    _run(["systemctl", "stop", unit], timeout=120)
    why = f" (Ray did not drain it: {said})" if said else ""
    return {"action": "quarantined", "drained": False, "message": f"its ray-node was stopped at once{why}"}


def admit(container: str) -> dict[str, Any]:
    """Remove the marker and start the unit again."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(MARKER)
    unit = f"{container}.service"
    _run(["systemctl", "stop", f"{DRAIN_TIMER}-{container}.timer"])
    _run(["systemctl", "reset-failed", unit])
    done = _run(["systemctl", "start", "--no-block", unit])
    if done.returncode != 0:
        return {
            "action": "admitted",
            "started": False,
            "message": f"its ray-node did not start: {_last_line(done.stderr)}",
        }
    return {"action": "admitted", "started": True, "message": "its ray-node is starting and rejoins the cluster"}


def _limits(details: dict[str, Any]) -> list[str]:
    """The container's CPU limits and GPUs as ``docker run`` options."""
    config = details.get("HostConfig") or {}
    words = []
    if config.get("NanoCpus"):
        words.append(f"--cpus={config['NanoCpus'] / 1e9:.3f}")
    elif config.get("CpuQuota") and config.get("CpuPeriod"):
        words += [f"--cpu-quota={config['CpuQuota']}", f"--cpu-period={config['CpuPeriod']}"]
    if config.get("CpusetCpus"):
        words.append(f"--cpuset-cpus={config['CpusetCpus']}")
    for request in config.get("DeviceRequests") or []:
        if "gpu" in sum(request.get("Capabilities") or [], []):
            ids = request.get("DeviceIDs") or []
            words.append(f"--gpus=device={','.join(ids)}" if ids else "--gpus=all")
    return words


def local_probe(container: str, work: int, deadline_s: float) -> dict[str, Any]:
    """The probe in a one-off container of the node's image, with its limits and GPUs."""
    details = inspect(container)
    if details is None:
        return {"seconds": None, "error": f"no {container} container to take the image from"}
    image = details.get("Image")
    argv = ["docker", "run", "--rm", "--network=none", "--pull=never", *_limits(details), "--entrypoint=python",
            image, "-c", PROBE_SOURCE.read_text(), "--local", "--work", str(int(work))]  # fmt: skip
    started = time.monotonic()
    done = _run(argv, timeout=deadline_s)
    wall = round(time.monotonic() - started, 3)
    if done.returncode == 124:
        return {"seconds": None, "wall_s": wall, "error": f"missed its deadline of {deadline_s:g} s"}
    result = _result(done.stdout)
    if done.returncode != 0 or result is None:
        return {"seconds": None, "wall_s": wall, "error": _last_line(done.stderr) or f"exit status {done.returncode}"}
    return {**result, "wall_s": wall, "error": None}


def _result(stdout: str) -> dict[str, Any] | None:
    found = [line[len(RESULT) :] for line in stdout.splitlines() if line.startswith(RESULT)]
    return json.loads(found[-1]) if found else None


def ray_round(container: str, work: int, deadline_s: float, with_probe: bool) -> dict[str, Any]:
    """The Ray nodes (and probes) from a driver in the head's ray-node container."""
    probe = ["--probe"] if with_probe else []
    argv = ["docker", "exec", container, "python", "-c", PROBE_SOURCE.read_text(), "--cluster",
            "--work", str(int(work)), "--deadline-s", str(deadline_s), *probe]  # fmt: skip
    done = _run(argv, timeout=deadline_s + 60)
    result = _result(done.stdout)
    if result is None:
        said = _last_line(done.stderr) or f"exit status {done.returncode}"
        return {"nodes": None, "probes": None, "error": f"the head's ray-node did not answer: {said}"}
    return {**result, "error": None}


def _name(text: str) -> str:
    if not _NAME.match(text):
        raise argparse.ArgumentTypeError(f"not a container name: {text!r}")
    return text


def _node_id_word(text: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{16,64}", text):
        raise argparse.ArgumentTypeError(f"not a Ray node id: {text!r}")
    return text


def _reason(text: str) -> str:
    if not text or len(text) > MAX_REASON or not text.isprintable():
        raise argparse.ArgumentTypeError(f"a reason is 1-{MAX_REASON} printable characters on one line")
    return text


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="rayrig-health-node", description="What the health gate asks of one host.")
    verbs = top.add_subparsers(dest="verb", required=True)
    for verb in ("signals", "quarantine", "drain", "stop", "admit", "probe", "ray-round"):
        one = verbs.add_parser(verb)
        one.add_argument("--container", type=_name, required=True)
        if verb == "quarantine":
            one.add_argument("--by", choices=("gate", "operator"), required=True)
            one.add_argument("--reason", type=_reason, required=True)
            one.add_argument("--drain-s", type=int, required=True)
            one.add_argument("--findings", default="[]", help="the findings, as JSON")
            one.add_argument("--no-drain", action="store_true", help="the gate drains the node from the head")
        if verb == "drain":
            one.add_argument("--node-id", type=_node_id_word, required=True)
            one.add_argument("--reason", type=_reason, required=True)
            one.add_argument("--drain-s", type=int, required=True)
        if verb in ("probe", "ray-round"):
            one.add_argument("--work", type=int, default=1000)
            one.add_argument("--deadline-s", type=float, default=60.0)
        if verb == "ray-round":
            one.add_argument("--probe", action="store_true")
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--ssh-command"]:  # the wrapper's: the words the gate sent over SSH, as one
        argv = shlex.split(argv[1]) if len(argv) == 2 else []
        if argv[:1] == ["rayrig-health-node"]:  # the gate names the command, as a user would
            argv = argv[1:]
    args = parser().parse_args(argv)
    if os.geteuid() != 0:
        print("rayrig-health-node: needs root", file=sys.stderr)
        return 1
    if shutil.which("docker") is None:
        print("rayrig-health-node: docker is not installed here", file=sys.stderr)
        return 1
    if args.verb == "signals":
        out = signals(args.container)
    elif args.verb == "quarantine":
        try:
            findings = json.loads(args.findings)
        except ValueError:
            findings = []
        found = findings if isinstance(findings, list) else []
        out = quarantine(args.container, args.by, args.reason, args.drain_s, found, self_drain=not args.no_drain)
    elif args.verb == "drain":
        out = drain(args.container, args.node_id, args.reason, args.drain_s)
    elif args.verb == "stop":  # a quarantined node Ray did not drain
        if read_marker() is None:
            out = {"stopped": False, "message": "not quarantined: its ray-node is left running"}
        else:
            done = _run(["systemctl", "stop", f"{args.container}.service"], timeout=120)
            out = {"stopped": done.returncode == 0, "message": _last_line(done.stderr) or "stopped"}
    elif args.verb == "admit":
        out = admit(args.container)
    elif args.verb == "probe":
        out = local_probe(args.container, args.work, args.deadline_s)
    else:
        out = ray_round(args.container, args.work, args.deadline_s, args.probe)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
