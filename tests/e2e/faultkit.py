"""Faults on purpose: a deploy cut at an operation pyinfra reports, then the next plain run converges.

One round: the lab is brought to where the scenario starts (fresh hosts, or the baseline deployment
for a change), the scenario's deploy runs, and when pyinfra starts the operation drawn as the cut
point a fault hits it:

- ``kill``: the deploy process killed (SIGKILL), as a laptop that lost power;
- ``interrupt``: SIGINT to the deploy's process group, as Ctrl-C in the terminal;
- ``ssh-drop``: one host's network disconnected for some seconds, then connected again (same address);
- ``dockerd``: the Docker engine restarted on one host;
- ``reboot``: one host restarted (its container: systemd comes up again, as after a reboot);
- ``disk-full``: rayrig's folder on one host (``/etc/rayrig``) on a small filesystem filled to the
  last byte, so that every write there fails with ENOSPC.

The cut deploy runs to its end (or is the one killed); the fault is cleared (network back, the
filler removed); the next plain deploy of the same inventory must then converge:

- it exits 0, and every host is an alive Ray node with the CPUs and resources it declares;
- the run after it changes nothing (pyinfra compares every file, unit and secret rayrig writes
  with what it would write: a half-written one would change);
- no ``ray-node-previous`` container is left on any host, and nothing rayrig owns is empty or a
  temporary file left behind;
- every node holds the same cluster token (and, with TLS, the same CA);
- rayrig's firewall table is loaded on every host.

A full disk cannot converge while it is full: the cut deploy must fail naming the host and the
cause, and the run after the cleanup converges like the others. A deploy cut by Ctrl-C must exit
130 (``deploy/run/interrupt.py``), not pyinfra's own 0.

The faults act from this machine on the lab's containers (``docker exec``, ``docker network``), as a
cloud console would: never through the SSH path a fault may have cut.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

from cloud import lab as local
from cloud.ec2 import waits
from cloud.lab.engine import docker
from cloud.lab.state import lab_image_tag
from deploy.contract.paths import repo_root
from deploy.firewall import nftables
from deploy.ray import auth, ray_node, tls_ca
from deploy.run.interrupt import INTERRUPTED
from tests.e2e.labkit import (
    ANSI,
    HOSTS,
    LAB,
    LAB_INVENTORY,
    Lab,
    changed_operations,
    cluster_state,
    deploy,
    deploy_command,
    inventory_variant,
    upstream_digest,
)

KINDS = ("kill", "interrupt", "ssh-drop", "dockerd", "reboot", "disk-full")
#: What the cut deploy does: a first deploy of fresh hosts, or a change of a deployed cluster (an image roll,
#: TLS turned on, a fourth host joining with a plain deploy).
SCENARIOS = ("first", "image", "tls", "grown")
NO_CHECKS = ("--data", "checks_enabled=False")
OPERATION = re.compile(r"^--> Starting operation: (.*?)\s*$")
#: Operations a scenario's deploy starts, before a run of it was seen (then: as many as its last plain run).
EXPECTED_OPERATIONS = {"first": 61, "image": 58, "tls": 60, "grown": 61}
ROLLED_TAG_SUFFIX = "-faults"
RAYRIG_DIR = "/etc/rayrig"
FULL_MOUNT_MIB = 8
TABLE_LOADED = f"nft list table {nftables.TABLE} >/dev/null 2>&1 && echo loaded"
#: rayrig's files that are empty, or a temporary file an upload or a rename cut short left behind.
LEFT_BEHIND = (
    f"find {RAYRIG_DIR} /etc/systemd/system -xdev \\( -name '*rayrig*' -o -path '{RAYRIG_DIR}/*' \\) "
    "\\( -empty -type f -o -name '*.tmp' -o -name '.*.new' -o -name '*.partial' \\) -print"
)
CUT_DEPLOY_LIMIT_S = 900  # a cut deploy still running after this long is itself a finding: it hangs
INTERRUPT_GRACE_S = 120  # Ctrl-C: how long pyinfra may take to stop before it counts as hanging


@dataclasses.dataclass
class Round:
    number: int
    scenario: str
    kind: str
    host: str  # the host the fault hit ("" for kill and interrupt: the operator's process)
    cut_at: int  # the operation (1-based) whose start fired the fault
    operations: int  # how many operations the scenario's deploy starts
    operation: str = ""  # the cut operation's name, as pyinfra printed it
    cut_rc: int | None = None  # the cut deploy's exit status (None: it hung and was killed)
    converged: bool = False
    converge_s: float = 0.0
    problems: list[str] = dataclasses.field(default_factory=list)


def in_host(h: dict, command: str, timeout: float = 120, check: bool = True) -> str:
    """A shell command as root in the lab host's container, from this machine (not over SSH)."""
    result = subprocess.run(["docker", "exec", h["container"], "sh", "-c", command], capture_output=True,
                            text=True, timeout=timeout, check=False)  # fmt: skip
    if check and result.returncode != 0:
        raise RuntimeError(f"{command!r} in {h['container']} failed: {(result.stdout + result.stderr)[-2000:]}")
    return result.stdout


def wait_for_ssh(h: dict, seconds: float = 180) -> None:
    if waits.wait_for_ssh([h["address"]], timeout_s=seconds, say=lambda _line: None):
        raise RuntimeError(f"{h['name']}: sshd does not answer {seconds:.0f} s after the fault")


# --- The faults --------------------------------------------------------------------------------------------


def fill_rayrig_folder(h: dict) -> None:
    """rayrig's folder on a small tmpfs holding what it held, filled to the last byte."""
    in_host(
        h,
        f"""set -e
d={RAYRIG_DIR}; mkdir -p "$d"; keep=$(mktemp -d); cp -a "$d/." "$keep/"
mount -t tmpfs -o size={FULL_MOUNT_MIB}m,mode=0755 rayrig-fault-full "$d"; cp -a "$keep/." "$d/"; rm -rf "$keep"
dd if=/dev/zero of="$d/.rayrig-fault-fill" bs=64k 2>/dev/null || true
dd if=/dev/zero of="$d/.rayrig-fault-fill-tail" bs=1 2>/dev/null || true""",
    )


def free_rayrig_folder(h: dict) -> None:
    """The filler gone: the small filesystem stays, with room again (a disk someone cleaned up)."""
    in_host(h, f"rm -f {RAYRIG_DIR}/.rayrig-fault-fill {RAYRIG_DIR}/.rayrig-fault-fill-tail")


def unmount_rayrig_folder(h: dict) -> None:
    """rayrig's folder back on the host's own disk, with what the small filesystem held."""
    in_host(
        h,
        f"""set -e
d={RAYRIG_DIR}; mountpoint -q "$d" || exit 0
keep=$(mktemp -d); cp -a "$d/." "$keep/"; umount "$d"; rm -rf "$d"; mkdir -p "$d"; cp -a "$keep/." "$d/"
rm -rf "$keep"
""",
    )


def drop_network(lab: Lab, h: dict) -> None:
    docker("network", "disconnect", lab.state["network"], h["container"])


def restore_network(lab: Lab, h: dict) -> None:
    attached = docker("inspect", "--format", "{{json .NetworkSettings.Networks}}", h["container"]).stdout
    if lab.state["network"] not in attached:
        docker("network", "connect", "--ip", h["address"], lab.state["network"], h["container"])


def reboot(h: dict) -> None:
    subprocess.run(["docker", "restart", "--time", "10", h["container"]], check=True, capture_output=True, timeout=180)


def restart_dockerd(h: dict) -> None:
    in_host(h, "systemctl restart docker", timeout=180)


# --- One cut deploy ------------------------------------------------------------------------------------------


def cut_deploy(lab: Lab, inventory: str | Path, extra: tuple[str, ...], r: Round, victim: dict | None, rng):
    """Run the deploy; when it starts operation ``r.cut_at``, the fault. Returns the deploy's output."""
    process = subprocess.Popen(
        deploy_command(inventory, *extra),
        cwd=repo_root(), env={**os.environ, "RAYRIG_LAB": LAB}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    timer = threading.Timer(CUT_DEPLOY_LIMIT_S, lambda: os.killpg(process.pid, signal.SIGKILL))
    timer.start()
    started = 0
    pending: list[threading.Thread] = []
    try:
        for line in process.stdout:
            lines.append(line)
            found = OPERATION.match(ANSI.sub("", line))
            if not found:
                continue
            started += 1
            if started != r.cut_at:
                continue
            r.operation = found[1]
            time.sleep(rng.uniform(0, 2))  # into the operation, not only at its start
            if r.kind == "kill":
                os.killpg(process.pid, signal.SIGKILL)
            elif r.kind == "interrupt":
                os.killpg(process.pid, signal.SIGINT)
                stopper = threading.Timer(INTERRUPT_GRACE_S, lambda: os.killpg(process.pid, signal.SIGKILL))
                stopper.start()
                pending.append(stopper)
            elif r.kind == "ssh-drop":
                drop_network(lab, victim)
                seconds = rng.uniform(10, 45)
                back = threading.Timer(seconds, restore_network, (lab, victim))
                back.start()
                pending.append(back)
            elif r.kind == "dockerd":
                restart_dockerd(victim)
            elif r.kind == "reboot":
                reboot(victim)
            elif r.kind == "disk-full":
                fill_rayrig_folder(victim)
        process.wait()
    finally:
        timer.cancel()
        for thread in pending:
            if isinstance(thread, threading.Timer) and thread.function is restore_network:
                thread.join()  # the network comes back at its time
            else:
                thread.cancel()
    if started < r.cut_at:  # the deploy ended before the cut point: fewer operations than drawn from
        r.operations = started
    hung = process.returncode == -signal.SIGKILL and r.kind != "kill"
    r.cut_rc = None if hung else process.returncode
    if not r.operation:
        r.operation = "(the deploy ended first)"
    return "".join(lines)


# --- Convergence ------------------------------------------------------------------------------------------


def problems_after(lab: Lab, tls: bool) -> list[str]:
    """What is wrong with a cluster a plain deploy just converged: [] when nothing."""
    found: list[str] = []
    state = cluster_state(lab, expect=len(lab.hosts), wait=120)
    nodes = {n["ip"]: n for n in state["nodes"]}
    for h in lab.hosts:
        node = nodes.get(h["address"])
        if node is None:
            found.append(f"{h['name']}: not an alive Ray node")
            continue
        if node["resources"].get("CPU") != h["num_cpus"]:
            found.append(f"{h['name']}: {node['resources'].get('CPU')} CPUs, declares {h['num_cpus']}")
        found += [f"{h['name']}: {k} = {node['resources'].get(k)}, declares {v}" for k, v in h["resources"].items()
                  if node["resources"].get(k) != v]  # fmt: skip
    tokens, cas = set(), set()
    for h in lab.hosts:
        if in_host(h, f"docker ps -aq --filter name=^{ray_node.previous_name('ray-node')}$").strip():
            found.append(f"{h['name']}: a {ray_node.previous_name('ray-node')} container is left")
        if in_host(h, TABLE_LOADED, check=False).strip() != "loaded":
            found.append(f"{h['name']}: rayrig's firewall table is not loaded")
        left = in_host(h, LEFT_BEHIND, check=False).split()
        found += [f"{h['name']}: {path} is empty or a temporary file" for path in left]
        tokens.add(in_host(h, f"sha256sum < {auth.NODE_TOKEN_PATH}", check=False).strip())
        if tls:
            cas.add(in_host(h, f"sha256sum < {tls_ca.NODE_CA_CERT}", check=False).strip())
    if len(tokens) != 1 or not next(iter(tokens)).strip(" -"):
        found.append(f"the nodes hold {len(tokens)} different cluster tokens")
    if tls and (len(cas) != 1 or not next(iter(cas)).strip(" -")):
        found.append(f"the nodes hold {len(cas)} different CAs")
    return found


def converge(lab: Lab, inventory: str | Path, extra: tuple[str, ...], r: Round, tls: bool) -> int:
    """The next plain deploy, then the run after it, then what they left: into ``r``. How many
    operations the plain deploy started."""
    started = time.monotonic()
    result = deploy(inventory, *extra)
    r.converge_s = time.monotonic() - started
    operations = sum(bool(OPERATION.match(line)) for line in ANSI.sub("", result.stdout).splitlines())
    if result.returncode != 0:
        r.problems.append(f"the next plain deploy failed: {last_error(result.stdout + result.stderr)}")
        return operations
    r.problems += problems_after(lab, tls)
    again = deploy(inventory, *extra)
    if again.returncode != 0:
        r.problems.append(f"the run after it failed: {last_error(again.stdout + again.stderr)}")
    else:
        changed = {h: n for h, n in changed_operations(again.stdout + again.stderr).items() if n}
        if changed:
            r.problems.append(f"the run after it changed operations: {changed}")
    r.converged = not r.problems
    return operations


def last_error(output: str) -> str:
    lines = [
        line.strip()
        for line in ANSI.sub("", output).splitlines()
        if "error" in line.lower() and "No Change" not in line
    ]  # fmt: skip (not the results table's header)
    return (lines[-1] if lines else output.strip().splitlines()[-1] if output.strip() else "no output")[-300:]


# --- The scenarios ----------------------------------------------------------------------------------------------


class Campaign:
    """Rounds on one lab: each scenario's deploy cut by each kind of fault, at drawn operations."""

    def __init__(self, lab: Lab, folder: Path, seed: int, log=print):
        self.lab, self.folder, self.seed, self.log = lab, folder, seed, log
        self.rng = random.Random(seed)
        self.operations = dict(EXPECTED_OPERATIONS)
        self.rolled: str | None = None
        self.rows: list[Round] = []

    def inventory(self, scenario: str) -> tuple[Path | str, tuple[str, ...]]:
        if scenario in ("first", "grown"):  # the lab's inventory lists the lab's hosts: four once grown
            return LAB_INVENTORY, NO_CHECKS
        if scenario == "image":
            return inventory_variant(self.folder / "rolled.py", {"ray_image": self.rolled_image()}), NO_CHECKS
        return inventory_variant(self.folder / "tls.py", {"ray_tls": "on"}), NO_CHECKS

    def rolled_image(self) -> str:
        """A second tag of the lab's image in its registry, pinned by digest (pushed once)."""
        if self.rolled is None:
            tag = lab_image_tag() + ROLLED_TAG_SUFFIX  # repository:tag, in the lab's registry
            pushed = f"{self.lab.state['registry_local']}/{tag}"
            for command in (["tag", lab_image_tag(), pushed], ["push", pushed], ["rmi", pushed]):
                docker(*command)
            self.rolled = f"{self.lab.state['registry']}/{tag}@{upstream_digest(self.lab, tag)}"
        return self.rolled

    def prepare(self, scenario: str) -> None:
        """Fresh hosts for a first deploy; else the baseline deployment (a re-run that changes nothing
        when the lab is there already), and for a grown member a fourth, fresh host beside it."""
        if scenario == "first":
            local.down(LAB)
            self.lab = Lab(local.up(hosts=HOSTS, name=LAB))
            return
        self.shrink()
        result = deploy(LAB_INVENTORY, *NO_CHECKS)
        if result.returncode != 0:
            raise RuntimeError(f"the baseline deploy failed: {last_error(result.stdout + result.stderr)}")
        if scenario == "grown":
            self.lab = Lab(local.up(hosts=HOSTS + 1, name=LAB))

    def shrink(self) -> None:
        """Back to the lab's three hosts after a grown round: the fourth marked absent and deployed, then gone."""
        extra = local.load_state(LAB)["hosts"][HOSTS:]
        if not extra:
            return
        absent = inventory_variant(self.folder / "absent.py", {"ray_state": "absent"}, only=extra[0]["address"])
        result = deploy(absent, *NO_CHECKS)
        if result.returncode != 0:
            raise RuntimeError(f"removing {extra[0]['name']} failed: {last_error(result.stdout + result.stderr)}")
        self.lab = Lab(local.up(hosts=HOSTS, name=LAB))

    def draw(self, number: int, scenario: str, kind: str) -> Round:
        total = self.operations[scenario]
        hosts = [h["name"] for h in self.lab.hosts[:HOSTS]]
        if scenario == "grown":  # the joining host too (named as the lab names its hosts)
            hosts.append(f"{LAB}-{HOSTS + 1}")
        host = "" if kind in ("kill", "interrupt") else self.rng.choice(hosts)
        # a full disk bites only before the writes into rayrig's folder, which come in the first half
        last = total if kind != "disk-full" else max(1, total // 2)
        return Round(number, scenario, kind, host, self.rng.randint(1, last), total)

    def run_round(self, r: Round) -> Round:
        self.prepare(r.scenario)
        victim = next((h for h in self.lab.hosts if h["name"] == r.host), None)
        inventory, extra = self.inventory(r.scenario)
        self.log(f"round {r.number}: {r.scenario} deploy, {r.kind}{' on ' + r.host if r.host else ''} "
                 f"at operation {r.cut_at} of about {r.operations}")  # fmt: skip
        try:
            output = cut_deploy(self.lab, inventory, extra, r, victim, self.rng)
            if r.cut_rc not in (0, None):
                self.log(f"round {r.number}: the cut deploy exited {r.cut_rc}: {last_error(output)}")
            if r.kind == "interrupt" and r.cut_at <= r.operations and r.cut_rc != INTERRUPTED:
                r.problems.append(f"Ctrl-C ended the deploy with exit status {r.cut_rc}, not {INTERRUPTED}")
            if r.kind == "disk-full" and victim is not None:
                cause = "No space left on device" in output
                named = cause and (victim["name"] in output or victim["address"] in output)
                # exit 0: nothing the deploy had left to do needed the room (the checks below still hold it
                # to a converged cluster); a failure must name the host and the cause
                if r.cut_rc != 0 and not named:
                    r.problems.append(f"the failure does not name the host and the cause: {last_error(output)}")
                free_rayrig_folder(victim)
            if r.kind in ("reboot", "ssh-drop") and victim is not None:
                restore_network(self.lab, victim)
                wait_for_ssh(victim)
            operations = converge(self.lab, inventory, extra, r, tls=r.scenario == "tls")
            if operations:  # the plain run of the same inventory starts about the operations the cut one would
                self.operations[r.scenario] = min(operations, r.operations)
        finally:
            if r.kind == "disk-full" and victim is not None:
                unmount_rayrig_folder(victim)
        r.converged = not r.problems
        self.rows.append(r)
        self.log(row(r))
        return r

    def plan(self, rounds: int, kinds: tuple[str, ...], scenarios: tuple[str, ...]) -> list[Round]:
        """``rounds`` rounds: each run of ``len(kinds)`` rounds has every kind once (in a drawn order),
        and a kind meets the next scenario in each run, so that every pair comes up within
        ``len(kinds) * len(scenarios)`` rounds."""
        order, picked = list(kinds), []
        self.rng.shuffle(order)
        for cycle in range(-(-rounds // len(order))):
            pairs = [(scenarios[(j + cycle) % len(scenarios)], kind) for j, kind in enumerate(order)]
            self.rng.shuffle(pairs)
            picked += pairs
        return [self.draw(n + 1, s, k) for n, (s, k) in enumerate(picked[:rounds])]


HEADER = ("round", "scenario", "fault", "host", "cut at", "cut rc", "converged", "converge s", "what was wrong")


def row(r: Round) -> str:
    cut = f"{r.cut_at}/{r.operations} {r.operation[:60]}".replace("|", "\\|")  # pyinfra's names hold " | "
    rc = "hung" if r.cut_rc is None else str(r.cut_rc)
    return " | ".join((str(r.number), r.scenario, r.kind, r.host or "-", cut, rc, "yes" if r.converged else "NO",
                       f"{r.converge_s:.1f}", "; ".join(r.problems).replace("|", "\\|") or "-"))  # fmt: skip


def table(rows: list[Round]) -> str:
    """A Markdown table of the rounds (what the closing note and the docs quote)."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + row(r) + " |" for r in rows]
    return "\n".join(lines)
