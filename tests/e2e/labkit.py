"""What every end-to-end scenario on the local lab shares: the lab, the deploy, Ray inside the head.

Real sshd hosts with systemd, pyinfra over SSH, Docker installed inside each
host, the Ray image pulled from the lab's registry, a real Ray cluster.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from cloud import lab as local
from cloud import ssh as remote
from deploy import auth, settings
from deploy.paths import repo_root

LAB = os.environ.get("RAYRIG_E2E_LAB", "rayrig-e2e")
HOSTS = 3


def deploy(inventory: str | Path, *extra: str) -> subprocess.CompletedProcess:
    """Run the deploy with pyinfra, as a user would, and return its output."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pyinfra", str(inventory), "deploy/cluster.py", "-y", *extra],
        cwd=repo_root(),
        env={**os.environ, "RAYRIG_LAB": LAB},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    print(f"deploy of {inventory} took {time.monotonic() - started:.1f} s")
    if result.returncode != 0:
        print(result.stdout[-6000:], result.stderr[-4000:])
    return result


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def changed_operations(output: str) -> dict[str, int]:
    """pyinfra's own report: per host, how many operations changed something.

    pyinfra prints ``[host] Success`` for an operation that ran commands and
    ``[host] No changes`` for one that did not; its results table ends with a
    "Grand total" row whose Success column must agree.
    """
    changed: dict[str, int] = {}
    total_success = None
    for line in ANSI.sub("", output).splitlines():
        match = re.search(r"\[(?P<host>[^\]]+)\]\s+(?P<status>Success|No changes)\b", line)
        if match:
            changed.setdefault(match["host"], 0)
            changed[match["host"]] += match["status"] == "Success"
        if line.strip().startswith("Grand total"):
            total_success = line.split()[3]
    assert total_success is not None, "pyinfra printed no results table"
    assert (total_success == "-") == (sum(changed.values()) == 0), (total_success, changed)
    return changed


class Lab:
    """The lab under test: its state, and commands on its hosts."""

    def __init__(self, state: dict):
        self.state = state
        self.hosts = state["hosts"]
        self.head = next(h for h in self.hosts if h["role"] == "head")
        self.workers = [h for h in self.hosts if h["role"] != "head"]

    def target(self, h: dict) -> remote.SshTarget:
        return remote.SshTarget(
            h["address"], self.state["ssh_user"], Path(self.state["ssh_key"]), Path(self.state["known_hosts"])
        )

    def sh(self, h: dict, command: str, timeout: float = 300) -> str:
        status, output = remote.run(self.target(h), command, timeout=timeout)
        assert status == 0, f"{command!r} on {h['address']} failed ({status}): {output[-3000:]}"
        return output

    def container_id(self, h: dict) -> str:
        return self.sh(h, "sudo docker inspect --format '{{.Id}}' ray-node").strip()

    def ray_python(self, code: str, timeout: float = 300) -> dict:
        """Run Python inside the head's ray-node container; it prints one line ``RESULT <json>``.

        Ray's own warnings share the output stream, so the result line is marked.
        """
        script = textwrap.dedent(code)
        command = "sudo docker exec -i ray-node python -"
        status, output = remote.run_with_input(self.target(self.head), command, script, timeout=timeout)
        assert status == 0, f"python in the head container failed ({status}): {output[-3000:]}"
        results = [line[len("RESULT ") :] for line in output.splitlines() if line.startswith("RESULT ")]
        assert results, f"no RESULT line in: {output[-3000:]}"
        return json.loads(results[-1])


CLUSTER_STATE = """
import json, time, ray
ray.init(address="auto", logging_level="ERROR")
deadline = time.time() + {wait}
while True:
    nodes = [n for n in ray.nodes() if n["Alive"]]
    if len(nodes) >= {expect} or time.time() > deadline:
        break
    time.sleep(2)
print("RESULT", json.dumps({{"nodes": [{{"id": n["NodeID"], "ip": n["NodeManagerAddress"], "resources": n["Resources"]}}
                            for n in nodes],
                  "total": ray.cluster_resources()}}))
"""


def cluster_state(lab: Lab, expect: int = HOSTS, wait: int = 90) -> dict:
    return lab.ray_python(CLUSTER_STATE.format(expect=expect, wait=wait))


def wait_for_total_cpus(lab: Lab, cpus: float, seconds: int = 120) -> dict:
    """The cluster state once its CPU total is ``cpus`` (replaced nodes take a moment to rejoin)."""
    deadline = time.monotonic() + seconds
    while True:
        state = cluster_state(lab)
        if state["total"].get("CPU") == cpus and len(state["nodes"]) == HOSTS:
            return state
        if time.monotonic() > deadline:
            return state
        time.sleep(3)


def report_paths(output: str) -> tuple[Path, Path]:
    """The JSON report and the plot the checks say they saved."""
    json_path = re.search(r"--> JSON report: (\S+)", output)
    plot_path = re.search(r"--> bus bandwidth plot: (\S+)", output)
    assert json_path and plot_path, output[-3000:]
    return Path(json_path[1]), Path(plot_path[1])


def outsider_probe(lab: Lab, targets: list[tuple[str, int]]) -> dict[str, bool]:
    """Which ``address:port`` a container on the lab network, not in the inventory, can connect to."""
    probes = " ".join(
        f"(timeout 3 bash -c 'exec 3<>/dev/tcp/{a}/{p}' 2>/dev/null && echo OPEN {a}:{p} || echo SHUT {a}:{p}) &"
        for a, p in targets
    )
    result = subprocess.run(
        ["docker", "run", "--rm", "--network", lab.state["network"], local.BASE_IMAGE, "bash", "-c", probes + " wait"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    found = dict(reversed(line.split()) for line in result.stdout.splitlines() if line.strip())
    return {target: status == "OPEN" for target, status in found.items()}


def member_can_connect(lab: Lab, member: dict, address: str, port: int) -> bool:
    command = f"timeout 3 bash -c 'exec 3<>/dev/tcp/{address}/{port}' && echo OPEN || echo SHUT"
    return lab.sh(member, command).strip().endswith("OPEN")


def ray_ports() -> dict[str, int]:
    return settings.defaults()["ray_ports"]


def cluster_token() -> str:
    return auth.read_token(auth.token_path(settings.merge({"ray_cluster_name": LAB})))


def inventory_with(path: Path, address: str, changes: dict) -> Path:
    """The lab's inventory with ``changes`` in one host's data, written to ``path``."""
    path.write_text(
        textwrap.dedent(
            f"""
            import runpy
            lab = runpy.run_path({str(repo_root() / "inventories" / "lab.py")!r})
            changes = {changes!r}
            heads = [(name, {{**data, **changes}} if name == {address!r} else data) for name, data in lab["heads"]]
            workers = [(name, {{**data, **changes}} if name == {address!r} else data) for name, data in lab["workers"]]
            """
        )
    )
    return path


BUCKET = "rayrig-e2e"  # the bucket moto's server holds for the shared-storage scenarios
S3_SECRET = "e2e-Secret-Key-do-not-print"


def inventory_for_all(path: Path, changes: dict) -> Path:
    """The lab's inventory with ``changes`` in every host's data, written to ``path``."""
    path.write_text(
        textwrap.dedent(
            f"""
            import runpy
            lab = runpy.run_path({str(repo_root() / "inventories" / "lab.py")!r})
            changes = {changes!r}
            heads = [(name, {{**data, **changes}}) for name, data in lab["heads"]]
            workers = [(name, {{**data, **changes}}) for name, data in lab["workers"]]
            """
        )
    )
    return path


if __name__ == "__main__":  # python -m tests.e2e.labkit: the e2e tier's lab up, ahead of it (scripts/run_tests.py)
    local.up(hosts=HOSTS, name=LAB)
