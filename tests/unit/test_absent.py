"""Removing a host from the cluster (deploy/ray/absent.py): the commands it builds."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.ray.absent import DRAIN_SCRIPT, drain_command, remove_commands

#: A leaving host's docker, systemctl and mkdir (so that nothing reaches this machine's /run/systemd):
#: the node answers with its id, Ray takes the drain, and the GCS sees work on the node for BUSY polls.
FAKE_DOCKER = r"""#!/bin/bash
echo "docker $*" >>"$STATE/calls"
case "$1 $3" in
  "exec python")
    case "$5" in
      *RAYRIG_NODE_ID*) echo "RAYRIG_NODE_ID n0de" ;;
      *get_cluster_resource_state*)
        [ "$6" = n0de ] || exit 3
        n=$(cat "$STATE/polls" 2>/dev/null || echo 0); echo $((n + 1)) >"$STATE/polls"
        [ "$n" -ge "$BUSY" ] ;;
      *) exit 2 ;;
    esac ;;
  "exec ray") ;;
  "container --format") echo "$RUNNING" ;;
  *) echo "fake docker: unexpected $*" >&2; exit 2 ;;
esac
"""


def drain(tmp_path: Path, bound: int, busy: int, running: str = "true") -> tuple[subprocess.CompletedProcess, float]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("docker", FAKE_DOCKER), ("systemctl", "#!/bin/sh\n"), ("mkdir", "#!/bin/sh\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STATE": str(tmp_path), "BUSY": str(busy),
           "RUNNING": running}  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(["bash", "-c", drain_command("rayrig-test-ray-node", "gpu-07", bound)], env=env,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    return result, time.monotonic() - started


def test_the_drain_reaches_its_values_as_arguments_and_parses():
    words = shlex.split(drain_command("ray-node", "gpu-01;touch /tmp/P", 90))
    assert words[:2] == ["bash", "-c"]
    assert words[3:] == ["drain-ray-node", "ray-node", "gpu-01;touch /tmp/P", "90"]
    script = words[2]
    assert "gpu-01" not in script and not any(line.lstrip().startswith("#") for line in script.splitlines())
    assert '--deadline-remaining-seconds="$bound"' in script and 'docker exec "$name" python -c "$IDLE"' in script
    assert subprocess.run(["bash", "-n", "-c", script], capture_output=True).returncode == 0


def test_removal_stops_the_unit_then_removes_the_containers_that_exist():
    assert remove_commands("ray-node", ["ray-node", "ray-node-previous"]) == [
        "systemctl disable --now ray-node.service 2>/dev/null || true",
        "rm -rf /run/systemd/system/ray-node.service.d",
        "docker rm --force ray-node ray-node-previous",
    ]
    assert remove_commands("ray-node", [])[-1] == "rm -rf /run/systemd/system/ray-node.service.d"


def test_the_drain_ends_once_the_gcs_sees_no_work_left_on_the_node_not_at_its_bound(tmp_path):
    result, took = drain(tmp_path, bound=40, busy=2)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "gpu-07: the node is drained"
    assert (tmp_path / "polls").read_text().strip() == "3" and took < 20, took  # two busy polls, a second apart


def test_a_node_with_work_past_the_bound_is_a_warning_naming_the_host(tmp_path):
    result, took = drain(tmp_path, bound=2, busy=1000)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (  # (before it: the drop-in the fake mkdir did not make)
        "warning: gpu-07: the node still had work after 2 s (ray_drain_timeout_s); it is removed now"
    )
    assert took < 20


def test_a_container_that_ended_on_its_own_is_drained(tmp_path):
    result, _took = drain(tmp_path, bound=40, busy=1000, running="false")
    assert result.returncode == 0 and "the node is drained" in result.stdout, result.stderr


def idle_check() -> str:
    """The drain script's Python that asks the GCS whether the node has work left."""
    return re.search(r"^IDLE='\n(.*?)^'$", Path(DRAIN_SCRIPT).read_text(), re.S | re.M)[1]


def test_the_gcs_check_says_idle_on_an_idle_node_and_busy_while_a_task_holds_its_cpu(local_ray):
    import ray  # noqa: PLC0415 (the real Ray of the local_ray fixture)

    node = ray.get_runtime_context().get_node_id()
    env = {**os.environ, "RAY_ADDRESS": local_ray["address"]}

    def check() -> int:
        return subprocess.run([sys.executable, "-c", idle_check(), node], env=env, capture_output=True,
                              timeout=60).returncode  # fmt: skip

    assert check() == 0

    @ray.remote(num_cpus=1)
    def hold(seconds):
        time.sleep(seconds)

    held = hold.remote(30)
    deadline = time.monotonic() + 20
    while check() != 1:  # the GCS's view follows the raylet's within a second or so
        assert time.monotonic() < deadline, "the check never saw the task's CPU in use"
        time.sleep(0.5)
    ray.cancel(held, force=True)
    deadline = time.monotonic() + 30
    while check() != 0:
        assert time.monotonic() < deadline, "the check never saw the node idle again"
        time.sleep(0.5)
    with pytest.raises(Exception):  # noqa: B017 (cancelled: TaskCancelledError or WorkerCrashedError)
        ray.get(held, timeout=30)
