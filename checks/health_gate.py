"""The health gate: a service on the monitoring host that takes a sick worker out of the cluster by
itself, and lets it back in once it is well (docs/design/health-gate.md).

    python3 -m checks.health_gate --config /etc/rayrig/health/gate.json   # rayrig-health.service

Every ``interval_s`` a round:

1. every host's signals (:mod:`checks.health_node` ``signals``: its unit, container, quarantine
   marker, free space), over SSH with the gate's own key, or directly on this host;
2. from the head (``ray-round``): the alive Ray nodes, and every ``probe_interval_s`` the
   functional probe on each of them;
3. from Prometheus (on this host's loopback): the node exporters' targets and the GPU findings
   of :func:`checks.monitoring.gpu_reasons` over the last ``2 x interval_s``;
4. each quarantined worker's recheck: its signals, Prometheus's findings, and the probe in a
   one-off container of its image (``probe``), judged against the last peers' median;
5. :func:`checks.health_judge.decide`, then its actions (``quarantine``, ``admit``);
6. ``state.json`` rewritten, the events appended to ``events.jsonl``, the metrics served on
   ``127.0.0.1:metrics_port``.

The gate never runs a deploy and never changes a node's configuration: it writes or removes the
quarantine marker, drains a node in Ray, and stops or starts the ray-node unit. Standard library
only: it runs with the host's ``python3``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from . import health_judge as judge
from . import monitoring
from .reasons import FAIL, Reason

NODE_COMMAND = "/usr/local/libexec/rayrig-health-node"
SSH_TIMEOUT_S = 10
CALL_TIMEOUT_S = 120
PROMETHEUS_TIMEOUT_S = 10


class Gate:
    """The gate's configuration and its calls to the hosts, Ray and Prometheus."""

    def __init__(self, config: Mapping[str, Any]):
        self.config = config
        self.hosts: dict[str, dict[str, Any]] = {h["name"]: h for h in config["hosts"]}
        self.head = next(h["name"] for h in config["hosts"] if h["role"] == "head")
        self.state_dir = Path(config["state_dir"])
        self.limits = judge.Limits(
            fail_after=config["fail_after"],
            pass_after=config["pass_after"],
            max_quarantined=config["max_quarantined"],
            min_free_fraction=config["min_free_fraction"],
            probe_fraction=config["probe_fraction"],
        )
        self.last_probe = 0.0
        self.median_s: float | None = None  # the last in-cluster probes' median, for the rechecks
        self.metrics = ""
        self.lock = threading.Lock()

    # --- calls ---------------------------------------------------------------------------------

    def ssh_argv(self, host: Mapping[str, Any], words: Sequence[str]) -> list[str]:
        argv = ["ssh", "-i", self.config["ssh_key"], "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                "-o", f"UserKnownHostsFile={self.config['known_hosts']}", "-o", "StrictHostKeyChecking=yes",
                "-o", f"ConnectTimeout={SSH_TIMEOUT_S}", "-p", str(host.get("port") or 22)]  # fmt: skip
        if host.get("user"):
            argv += ["-l", host["user"]]
        return [*argv, "--", host["address"], shlex.join(["rayrig-health-node", *words])]

    def call(self, name: str, words: Sequence[str], timeout: float = CALL_TIMEOUT_S) -> dict[str, Any]:
        """One verb of :mod:`checks.health_node` on host ``name``: its JSON, or ``{"error": ...}``."""
        host = self.hosts[name]
        argv = [NODE_COMMAND, *words] if name == self.config["self"] else self.ssh_argv(host, words)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"no answer within {timeout:g} s"}
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        if done.returncode != 0 or not lines:
            said = [line for line in done.stderr.splitlines() if line.strip()]
            return {"error": said[-1] if said else f"exit status {done.returncode}"}
        try:
            return json.loads(lines[-1])
        except ValueError:
            return {"error": f"an answer that is not JSON: {lines[-1][:200]}"}

    def call_all(self, jobs: Mapping[str, Sequence[str]], timeout: float = CALL_TIMEOUT_S) -> dict[str, dict[str, Any]]:
        if not jobs:
            return {}
        with ThreadPoolExecutor(max_workers=min(32, len(jobs))) as pool:
            futures = {name: pool.submit(self.call, name, words, timeout) for name, words in jobs.items()}
            return {name: future.result() for name, future in futures.items()}

    # --- Prometheus ----------------------------------------------------------------------------

    def prometheus_findings(self) -> tuple[dict[str, list[Reason]], str | None]:
        """Each host's exporter and GPU findings; an error line when Prometheus could not be read."""
        url = self.config["prometheus"]
        hosts = [{"name": h["name"], "address": h["node_ip"], "jobs": ["node"]} for h in self.hosts.values()]
        found: dict[str, list[Reason]] = {h: [] for h in self.hosts}
        try:
            rows = monitoring.target_rows(hosts, monitoring.active_targets(url, PROMETHEUS_TIMEOUT_S))
            for reason in monitoring.target_reasons(rows, 0):  # missing or down: FAIL; not scraped yet: WARN
                found[reason.host].append(reason)
            exported = {s["metric"].get("__name__") for s in monitoring.query(url, monitoring.exported_query(),
                                                                              PROMETHEUS_TIMEOUT_S)}  # fmt: skip
            window = max(60, 2 * int(self.config["interval_s"]))
            queries = monitoring.gpu_queries(exported, window)
            series = {kind: monitoring.query(url, expr, PROMETHEUS_TIMEOUT_S) for kind, (_m, expr) in queries.items()}
            metrics = {kind: metric for kind, (metric, _e) in queries.items()}
            for reason in monitoring.gpu_reasons(series, metrics, hosts, window):
                if reason.host in found:
                    found[reason.host].append(reason)
        except monitoring.PrometheusError as error:
            return found, f"Prometheus: {error}"
        return found, None

    # --- a round -------------------------------------------------------------------------------

    def round(self, states: Mapping[str, judge.HostState], now: float) -> tuple[dict[str, Any], list[judge.Action]]:
        cfg, container = self.config, self.config["container"]
        quarantined = {h for h, s in states.items() if s.status == judge.QUARANTINED}
        probe_due = now - self.last_probe >= cfg["probe_interval_s"]
        work, deadline = str(cfg["probe_work"]), str(cfg["probe_deadline_s"])
        jobs = {name: ["signals", "--container", container] for name in self.hosts}
        signals = self.call_all(jobs)
        ray_round = self.call(self.head, ["ray-round", "--container", container, "--work", work,
                                          "--deadline-s", deadline, *(["--probe"] if probe_due else [])],
                              timeout=cfg["probe_deadline_s"] + CALL_TIMEOUT_S)  # fmt: skip
        prom, prom_error = self.prometheus_findings()
        by_ip = {h["node_ip"]: name for name, h in self.hosts.items()}
        nodes = {by_ip[n["ip"]]: n for n in ray_round.get("nodes") or [] if n.get("ip") in by_ip}
        probes: dict[str, dict[str, Any]] = {}
        if probe_due and ray_round.get("probes") is not None:
            self.last_probe = now
            probes = {by_ip[ip]: p for ip, p in ray_round["probes"].items() if ip in by_ip}
            medians = judge.peer_median(probes)
        else:
            medians = {}
        if probes:
            times = [p["seconds"] for p in probes.values() if p.get("seconds") is not None]
            self.median_s = statistics.median(times) if times else self.median_s
        rechecks = self.call_all({name: ["probe", "--container", container, "--work", work, "--deadline-s", deadline]
                                  for name in quarantined if "error" not in signals.get(name, {"error": 1})},
                                 timeout=cfg["probe_deadline_s"] + CALL_TIMEOUT_S)  # fmt: skip
        fails: dict[str, list[dict[str, Any]]] = {}
        markers: dict[str, Any] = {}
        notes: dict[str, list[dict[str, Any]]] = {}
        for name, host in self.hosts.items():
            said = signals.get(name) or {}
            reached = "error" not in said
            if reached:
                markers[name] = said.get("marker")
            reasons: list[Reason] = list(prom.get(name, []))
            if reached:
                reasons += judge.disk_findings(name, said.get("disks") or [], cfg["min_free_fraction"])
            if name in quarantined:
                if not reached:
                    continue  # not judged: its counts stay
                reasons += judge.probe_findings(name, rechecks.get(name), self.median_s, cfg["probe_fraction"],
                                                cfg["probe_deadline_s"])  # fmt: skip
            else:
                if ray_round.get("error") is None:
                    age = said.get("started_s_ago")
                    starting = age if age is not None and age < cfg.get("start_grace_s", 120) else None
                    reasons += judge.ray_findings(name, nodes.get(name), host["declared"], starting)
                if name in probes:
                    reasons += judge.probe_findings(name, probes[name], medians.get(name), cfg["probe_fraction"],
                                                    cfg["probe_deadline_s"])  # fmt: skip
                if not reached:
                    reasons.append(Reason(FAIL, f"the gate cannot reach it: {said.get('error')}", host=name,
                                          source="the gate's SSH connection to the host"))  # fmt: skip
            fails[name] = judge.reason_dicts(reasons)
            notes[name] = [r.as_dict() for r in reasons if r.level != FAIL]
        if ray_round.get("error"):
            # Without the head's view no node is judged by Ray; a head that does not answer is itself a finding.
            fails.setdefault(self.head, []).append({"level": FAIL, "message": ray_round["error"], "host": self.head,
                                                    "source": judge.SOURCE_RAY})  # fmt: skip
        roles = {name: h["role"] for name, h in self.hosts.items()}
        new, actions = judge.decide(states, fails, markers, roles, self.limits, now)
        done = self.act(actions, states, new, nodes)
        record = {
            "updated": now,
            "probe": {
                "at": self.last_probe or None,
                "median_s": self.median_s,
                "times": {h: p.get("seconds") for h, p in probes.items()},
            },  # fmt: skip
            "errors": [e for e in (prom_error, ray_round.get("error")) if e],
            "hosts": {name: {**new[name].as_dict(), "notes": notes.get(name, [])} for name in self.hosts},
            "states": new,
        }
        return record, done

    def act(self, actions: Sequence[judge.Action], states: Mapping[str, judge.HostState],
            new: dict[str, judge.HostState], nodes: Mapping[str, Any]) -> list[judge.Action]:  # fmt: skip
        """Carry out the round's quarantines and admissions; one that fails leaves its host as it was (``new``
        is set back) and is said as "not acted on". Returns what was done and said."""
        done = []
        for action in actions:
            if action.observed or action.action in (judge.REPORT, judge.HELD):
                done.append(action)
                continue
            if action.action == judge.QUARANTINE:
                answer = self.quarantine(action, nodes.get(action.host))
            else:
                answer = self.call(action.host, ["admit", "--container", self.config["container"]])
            if "error" in answer:
                new[action.host] = states.get(action.host, judge.HostState())
                done.append(judge.Action(judge.HELD, action.host, f"could not be {action.action}: {answer['error']}",
                                         findings=action.findings))  # fmt: skip
            else:
                done.append(judge.Action(action.action, action.host, f"{action.reason} ({answer.get('message')})",
                                         findings=action.findings))  # fmt: skip
        return done

    def quarantine(self, action: judge.Action, node: Mapping[str, Any] | None) -> dict[str, Any]:
        """Mark the host first (its unit then stays stopped once its raylet ends), then drain its node from the
        head's container: a starved node's own container could take minutes to ask."""
        cfg, container = self.config, self.config["container"]
        reason, drain_s = action.reason[:200], str(cfg["drain_timeout_s"])
        words = ["quarantine", "--container", container, "--by", "gate", "--reason", reason, "--drain-s", drain_s,
                 "--findings", json.dumps(list(action.findings)), *(["--no-drain"] if node else [])]  # fmt: skip
        answer = self.call(action.host, words)
        if "error" in answer or not node or answer.get("already"):
            return answer
        drained = self.call(self.head, ["drain", "--container", container, "--node-id", node["node_id"],
                                        "--reason", reason, "--drain-s", drain_s])  # fmt: skip
        if drained.get("drained"):
            return {**answer, "drained": True,
                    "message": f"drained: running tasks have {drain_s} s, then its ray-node stops"}  # fmt: skip
        said = drained.get("message") or drained.get("error")
        stopped = self.call(action.host, ["stop", "--container", container])
        how = "its ray-node was stopped at once" if stopped.get("stopped") else f"its ray-node stops in {drain_s} s"
        return {**answer, "drained": False, "message": f"Ray did not drain it ({said}): {how}"}

    # --- files and metrics -------------------------------------------------------------------------

    def load_states(self) -> dict[str, judge.HostState]:
        try:
            data = json.loads((self.state_dir / "state.json").read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return {
            name: judge.HostState.from_dict(h) for name, h in (data.get("hosts") or {}).items() if name in self.hosts
        }

    def save(self, record: Mapping[str, Any], events: Sequence[Mapping[str, Any]], count: int) -> None:
        state = {k: v for k, v in record.items() if k != "states"}
        state["round"] = count
        _write(self.state_dir / "state.json", json.dumps(state, indent=1))
        if events:
            with open(self.state_dir / "events.jsonl", "a") as out:
                for event in events:
                    out.write(json.dumps(event) + "\n")
        lines = [
            "# HELP rayrig_node_quarantined 1 while the host is out of the cluster (health gate).",
            "# TYPE rayrig_node_quarantined gauge",
        ]
        hosts = record["hosts"]
        for name, h in hosts.items():
            by = f',by="{h["by"]}"' if h["by"] else ""
            lines.append(f'rayrig_node_quarantined{{host="{name}"{by}}} {int(h["status"] == judge.QUARANTINED)}')
        lines += ["# HELP rayrig_node_health_findings The host's FAIL findings in the gate's last round.",
                  "# TYPE rayrig_node_health_findings gauge"]  # fmt: skip
        lines += [f'rayrig_node_health_findings{{host="{n}"}} {len(h["findings"]) if h["status"] != "ok" else 0}'
                  for n, h in hosts.items()]  # fmt: skip
        lines += ["# HELP rayrig_health_round_timestamp_seconds When the gate's last round ended.",
                  "# TYPE rayrig_health_round_timestamp_seconds gauge",
                  f"rayrig_health_round_timestamp_seconds {time.time():.3f}", ""]  # fmt: skip
        with self.lock:
            self.metrics = "\n".join(lines)

    def serve_metrics(self) -> ThreadingHTTPServer:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                with gate.lock:
                    body = gate.metrics.encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", int(self.config["metrics_port"])), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


def _write(path: Path, text: str) -> None:
    temp = path.with_name(f".{path.name}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(temp, path)


def log(message: str) -> None:
    print(message, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The health gate (rayrig-health.service).")
    parser.add_argument("--config", required=True)
    parser.add_argument("--rounds", type=int, default=0, help="stop after this many rounds (0: never)")
    args = parser.parse_args(argv)
    gate = Gate(json.loads(Path(args.config).read_text()))
    gate.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    gate.serve_metrics()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    states = gate.load_states()
    count = 0
    log(f"rayrig health gate: {len(gate.hosts)} hosts, a round every {gate.config['interval_s']} s")
    while not stop.is_set():
        started = time.time()
        record, actions = gate.round(states, started)
        states = record["states"]
        count += 1
        events = [a.event(time.time()) for a in actions]
        gate.save(record, events, count)
        for event in events:
            log(f"{event['host']}: {event['action']} by {event['by']}: {event['reason']}")
        for error in record["errors"]:
            log(f"round {count}: {error}")
        if args.rounds and count >= args.rounds:
            break
        stop.wait(max(1.0, gate.config["interval_s"] - (time.time() - started)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
