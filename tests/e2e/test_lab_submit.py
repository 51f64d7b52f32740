"""``rayrig submit`` and the dashboard's export lines, end to end on the lab.

A job submitted from this machine through the head's tunnel, with a working directory:
one task pinned to each node (each lab host declares a custom resource named after it)
reports the node's hostname, from a module of the working directory, so the folder
reached every node. A job that raises ends the command non-zero with its error line.
Ray's own CLI, given ``rayrig dashboard``'s export lines, lists the jobs. The token is
printed nowhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deploy.contract.paths import repo_root
from rayrig.dashboard import free_port
from tests.e2e.labkit import LAB_INVENTORY, Lab, cluster_token, rayrig, rayrig_background

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SUBMIT = ["submit", LAB_INVENTORY]

JOB = """
import sys

import ray

import where

ray.init()
nodes = sys.argv[1:]
found = ray.get([where.hostname.options(resources={node: 1}).remote() for node in nodes], timeout=300)
for node, (hostname, address) in zip(nodes, found):
    print(f"task pinned to {node} ran on {hostname} ({address})", flush=True)
"""

WHERE = """
import socket

import ray


@ray.remote(num_cpus=0)
def hostname():
    return socket.gethostname(), ray.util.get_node_ip_address()
"""

FAILING = """
print("about to fail", flush=True)
raise RuntimeError("the lab's job says no")
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("project")
    for name, text in {"job.py": JOB, "where.py": WHERE, "fail.py": FAILING}.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder


def test_a_job_with_a_working_dir_runs_one_task_on_each_node_and_exits_0(lab: Lab, baseline, project):
    names = [h["name"] for h in lab.hosts]
    result = rayrig(*SUBMIT, "--working-dir", str(project), "--", "python", "job.py", *names)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for h in lab.hosts:  # a lab host's hostname is its name; ray-node shares the host's network, and so its name
        assert f"task pinned to {h['name']} ran on {h['name']} ({h['address']})" in result.stdout, result.stdout[-3000:]
    assert "SUCCEEDED" in result.stderr.splitlines()[-1]
    assert cluster_token() not in result.stdout + result.stderr


def test_a_job_that_raises_exits_1_with_its_error_line(lab: Lab, baseline, project):
    result = rayrig(*SUBMIT, "--working-dir", str(project), "--", "python", "fail.py")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "about to fail" in result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert "FAILED: Job entrypoint command failed with exit code 1: RuntimeError: the lab's job says no" in last, last


def test_no_wait_returns_the_job_id_and_rays_own_cli_follows_it_with_the_dashboards_export_lines(lab, baseline):
    submitted = rayrig(*SUBMIT, "--no-wait", "--", "python", "-c", "print('from a job nobody waits for')")
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    job_id = submitted.stdout.strip()
    assert job_id.startswith("raysubmit_") and "ray job logs -f" in submitted.stderr
    port = free_port()
    # not 9090 for Prometheus: this machine may run a Prometheus of its own
    tunnel = rayrig_background(
        "dashboard", LAB_INVENTORY, "--local-port", str(port), "--local-prometheus-port", str(free_port())
    )
    try:
        banner = []  # its length depends on what else it forwards (Prometheus, Grafana): up to the last export
        while len(banner) < 20 and not (banner and banner[-1].startswith("export RAY_AUTH_TOKEN_PATH=")):
            banner.append(tunnel.stdout.readline())
        exports = dict(
            line.removeprefix("export ").strip().split("=", 1) for line in banner if line.startswith("export ")
        )
        assert set(exports) == {"RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"}, banner
        ray = str(Path(sys.executable).with_name("ray"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | exports
        logs = subprocess.run([ray, "job", "logs", "-f", job_id], env=env, capture_output=True, text=True, timeout=300)
        assert "from a job nobody waits for" in logs.stdout, logs.stdout[-2000:] + logs.stderr[-2000:]
        without = {k: v for k, v in env.items() if k != "RAY_AUTH_TOKEN_PATH"} | {"HOME": str(repo_root() / "nowhere")}
        refused = subprocess.run([ray, "job", "logs", job_id], env=without, capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0  # the export line that names the token's file is the one that admits
    finally:
        tunnel.terminate()
        rest = tunnel.communicate(timeout=30)[0]
    assert cluster_token() not in "".join(banner) + rest
