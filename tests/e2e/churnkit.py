"""Jobs under change: a sweep of short retried tasks keeps running while the tool changes the cluster.

A driver on one node (:data:`SWEEP`) keeps ``IN_FLIGHT`` tasks of 2 to 4 s running (each may be retried
``MAX_RETRIES`` times when its node goes) until it is told to stop, then waits for every task it
started and prints one ``RESULT`` line: tasks started, done, lost (a task that failed for good),
retried (a task that started more than once: each attempt tells a tally actor on the driver's node, which
no change touches), and where they ran.

Two parts, each with the sweep running throughout:

1. Ray's defaults, the driver on the head: one at a time, a worker's ray-node replaced by a deploy (a
   change to that host's ``ray_env`` alone: the rolling replacement an image change makes, on one
   node), a fourth host added with a plain deploy, that host removed (``ray_state = "absent"``), a
   worker's host rebooted.
2. ``ray_gcs_fault_tolerance = true``, the driver on a worker: the head's ray-node restarted, then the
   head replaced by a deploy (a change to its ``ray_env`` alone).

``ray_image`` is one value for the whole cluster (the head is replaced first in an image roll, and every
node after it), so no driver would outlive a whole image roll: the replacement it makes is the one
part 1 makes on a worker and part 2 on the head.

Each change is timed from its start to every node alive again. The part passes when every task
started is done and none is lost.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cloud import lab as local
from cloud import ssh as remote
from tests.e2e import faultkit
from tests.e2e.labkit import HOSTS, LAB, Lab, alive_nodes, deploy, inventory_variant, wait_for_alive

IN_FLIGHT = 8
MAX_RETRIES = 10
STOP_FILE = "/tmp/rayrig-sweep-stop"
NO_CHECKS = ("--data", "checks_enabled=False")

SWEEP = textwrap.dedent(
    f"""
    import json, os, random, sys, time
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address="auto", logging_level="ERROR")

    @ray.remote(num_cpus=0)
    class Tally:  # on the driver's own node, which no change touches: every attempt of every task says so
        def __init__(self):
            self.starts = {{}}
        def started(self, i):
            self.starts[i] = self.starts.get(i, 0) + 1
        def counts(self):
            return self.starts

    here = ray.get_runtime_context().get_node_id()
    tally = Tally.options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()

    @ray.remote(num_cpus=0.5, max_retries={MAX_RETRIES})
    def step(i, seconds, tally):
        tally.started.remote(i)
        time.sleep(seconds)
        return ray.util.get_node_ip_address()

    rng, pending, done, lost, started = random.Random(1), {{}}, {{}}, {{}}, 0
    began = last = time.time()
    while True:
        while not os.path.exists({STOP_FILE!r}) and len(pending) < {IN_FLIGHT}:
            pending[step.remote(started, rng.uniform(2, 4), tally)] = started
            started += 1
        if not pending:
            break
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=5)
        for ref in ready:
            i = pending.pop(ref)
            try:
                done[i] = ray.get(ref)
            except Exception as error:  # a task that failed for good: lost
                lost[i] = f"{{type(error).__name__}}: {{str(error)[:300]}}"
        if time.time() - last >= 10:
            last = time.time()
            print("PROGRESS", json.dumps({{"t": round(last - began), "started": started, "done": len(done),
                                          "lost": len(lost)}}), flush=True)
    starts = ray.get(tally.counts.remote())
    by_node = {{}}
    for ip in done.values():
        by_node[ip] = by_node.get(ip, 0) + 1
    print("RESULT", json.dumps({{"started": started, "done": len(done), "lost": len(lost),
                                "lost_examples": list(lost.values())[:3],
                                "retried": sum(1 for n in starts.values() if n > 1),
                                "attempts": sum(starts.values()), "by_node": by_node,
                                "seconds": round(time.time() - began, 1)}}), flush=True)
    """
)


@dataclass
class Change:
    what: str
    seconds: float = 0.0
    ok: bool = True
    detail: str = ""


@dataclass
class Sweep:
    """The sweep's driver, running in the ray-node container of ``host`` over one SSH session."""

    lab: Lab
    host: dict
    lines: list[str] = field(default_factory=list)
    status: int | None = None
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.lab.sh(self.host, f"sudo docker exec ray-node rm -f {STOP_FILE}")
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        target = self.lab.target(self.host)
        command = "sudo docker exec -i ray-node python -u -"
        self.status, output = remote.run_with_input(target, command, SWEEP, timeout=3600)
        self.lines = output.splitlines()

    def stop(self, seconds: float = 900) -> dict:
        self.lab.sh(self.host, f"sudo docker exec ray-node touch {STOP_FILE}")
        if self.thread is not None:
            self.thread.join(seconds)
        results = [line[len("RESULT ") :] for line in self.lines if line.startswith("RESULT ")]
        if (self.thread is not None and self.thread.is_alive()) or not results:
            tail = "\n".join(self.lines[-20:])
            raise RuntimeError(f"the sweep gave no result (status {self.status}): {tail}")
        return json.loads(results[-1])


def timed(lab: Lab, what: str, action, expect: int = HOSTS, renewed: tuple[dict, ...] = (), log=print) -> Change:
    """Run ``action`` (a deploy, a reboot), then wait for ``expect`` alive nodes, the hosts in ``renewed`` with
    new nodes (the GCS lists a rebooted host's old node as alive until it misses its health checks); the
    change's time, start to alive."""
    change = Change(what)
    addresses = {h["address"] for h in renewed}
    seen = alive_nodes(lab)
    old = [n["id"] for n in seen if n["ip"] in addresses] if not isinstance(seen, str) else []
    started = time.monotonic()
    result = action()
    if isinstance(result, subprocess.CompletedProcess):
        said = result.stdout + result.stderr
        warnings = [line.strip() for line in said.splitlines() if "warning:" in line.lower()]
        if result.returncode != 0:
            change.ok, change.detail = False, faultkit.last_error(said)
        elif warnings:
            change.detail = "; ".join(dict.fromkeys(warnings))
    wait_for_alive(lab, expect, seconds=300, new_ids_of=old)
    change.seconds = time.monotonic() - started
    said = f"{'' if change.ok else ' FAILED'}{': ' + change.detail if change.detail else ''}"
    log(f"  {what}: {change.seconds:.1f} s{said}")
    return change


def part_defaults(lab: Lab, folder: Path, log=print) -> tuple[list[Change], dict]:
    """Ray's defaults: the sweep on the head while a worker rolls, a host joins and leaves, a worker reboots."""
    worker = lab.workers[1]
    per_host = {worker["address"]: {"ray_env": {"RAYRIG_SWEEP": "replaced"}}}
    sweep = Sweep(lab, lab.head)
    sweep.start()
    changes: list[Change] = []
    try:
        time.sleep(30)
        # the worker's change stays in every later deploy; the lab's inventory lists the lab's hosts when it runs
        changed = inventory_variant(folder / "changed.py", {}, per_host=per_host)
        changes.append(timed(lab, f"{worker['name']}'s ray-node replaced (its ray_env)",
                             lambda: deploy(changed, *NO_CHECKS), renewed=(worker,), log=log))  # fmt: skip
        grown = Lab(local.up(hosts=HOSTS + 1, name=LAB))
        fourth = grown.hosts[HOSTS]
        changes.append(timed(lab, f"{fourth['name']} added",
                             lambda: deploy(changed, *NO_CHECKS), expect=HOSTS + 1, log=log))  # fmt: skip
        leaving = {**per_host, fourth["address"]: {"ray_state": "absent"}}
        absent = inventory_variant(folder / "absent.py", {}, per_host=leaving)
        changes.append(timed(lab, f"{fourth['name']} removed (ray_state = \"absent\")",
                             lambda: deploy(absent, *NO_CHECKS), log=log))  # fmt: skip
        local.up(hosts=HOSTS, name=LAB)

        def reboot():
            faultkit.reboot(worker)
            faultkit.wait_for_ssh(worker)

        changes.append(timed(lab, f"{worker['name']}'s host rebooted", reboot, renewed=(worker,), log=log))
        time.sleep(20)
    finally:
        result = sweep.stop()
    return changes, result


def part_gcs_fault_tolerance(lab: Lab, folder: Path, log=print) -> tuple[list[Change], dict]:
    """GCS fault tolerance on: the sweep on a worker while the head's ray-node restarts."""
    everywhere = {"ray_gcs_fault_tolerance": True}
    ft = inventory_variant(folder / "ft.py", everywhere)
    result = deploy(ft, *NO_CHECKS)
    if result.returncode != 0:
        said = faultkit.last_error(result.stdout + result.stderr)
        raise RuntimeError(f"the deploy with GCS fault tolerance failed: {said}")
    wait_for_alive(lab, HOSTS)
    sweep = Sweep(lab, lab.workers[0])
    sweep.start()
    changes: list[Change] = []
    try:
        time.sleep(30)
        changes.append(timed(lab, "the head's ray-node restarted",
                             lambda: lab.sh(lab.head, "sudo systemctl restart ray-node"),
                             renewed=(lab.head,), log=log))  # fmt: skip
        time.sleep(20)
        head = {lab.head["address"]: {"ray_env": {"RAYRIG_SWEEP": "replaced"}}}
        ft_head = inventory_variant(folder / "ft-head.py", everywhere, per_host=head)
        changes.append(timed(lab, "the head's ray-node replaced (its ray_env)",
                             lambda: deploy(ft_head, *NO_CHECKS), renewed=(lab.head,), log=log))  # fmt: skip
        time.sleep(20)
    finally:
        result = sweep.stop()
    return changes, result
