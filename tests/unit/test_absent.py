"""Removing a host from the cluster (deploy/ray/absent.py): the commands it builds."""

from __future__ import annotations

import shlex
import subprocess

from deploy.ray.absent import drain_command, remove_commands


def test_the_drain_reaches_its_values_as_arguments_and_parses():
    words = shlex.split(drain_command("ray-node", "gpu-01;touch /tmp/P", 90))
    assert words[:2] == ["bash", "-c"]
    assert words[3:] == ["drain-ray-node", "ray-node", "gpu-01;touch /tmp/P", "90"]
    script = words[2]
    assert "gpu-01" not in script and not any(line.lstrip().startswith("#") for line in script.splitlines())
    assert '--deadline-remaining-seconds="$bound"' in script and 'timeout "$bound" docker wait "$name"' in script
    assert subprocess.run(["bash", "-n", "-c", script], capture_output=True).returncode == 0


def test_removal_stops_the_unit_then_removes_the_containers_that_exist():
    assert remove_commands("ray-node", ["ray-node", "ray-node-previous"]) == [
        "systemctl disable --now ray-node.service 2>/dev/null || true",
        "rm -rf /run/systemd/system/ray-node.service.d",
        "docker rm --force ray-node ray-node-previous",
    ]
    assert remove_commands("ray-node", [])[-1] == "rm -rf /run/systemd/system/ray-node.service.d"
