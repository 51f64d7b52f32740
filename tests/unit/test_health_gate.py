"""The health gate's parts that run on the hosts: the code the deploy copies, the node command's words."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from checks import health_node
from deploy.monitoring import health

ROOT = Path(__file__).resolve().parents[2]


def test_the_copied_modules_are_all_the_gate_and_the_node_command_import(tmp_path: Path):
    (tmp_path / "checks").mkdir()
    for module in health.CODE_MODULES:
        shutil.copy(ROOT / "checks" / f"{module}.py", tmp_path / "checks" / f"{module}.py")
    program = "import checks.health_gate, checks.health_node, checks.health_probe; print('ok')"
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); {program}"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.stdout.strip() == "ok", done.stderr


def test_the_words_sent_over_ssh_are_parsed_as_a_verb_and_its_options():
    argv = ["--ssh-command", "rayrig-health-node quarantine --container ray-node --by gate --reason 'disk full; x'"
            " --drain-s 30"]  # fmt: skip
    words = health_node.shlex.split(argv[1])[1:]
    args = health_node.parser().parse_args(words)
    assert (args.verb, args.container, args.by, args.reason, args.drain_s) == (
        "quarantine", "ray-node", "gate", "disk full; x", 30,
    )  # fmt: skip


@pytest.mark.parametrize(
    "words",
    [
        ["signals", "--container", "ray-node;rm -rf /"],
        ["quarantine", "--container", "ray-node", "--by", "root", "--reason", "x", "--drain-s", "1"],
        ["quarantine", "--container", "ray-node", "--by", "gate", "--reason", "two\nlines", "--drain-s", "1"],
        ["shell", "--container", "ray-node"],
    ],
)
def test_anything_but_a_verb_and_its_checked_options_is_refused(words, capsys):
    with pytest.raises(SystemExit) as stopped:
        health_node.parser().parse_args(words)
    assert stopped.value.code == 2


def test_the_authorized_keys_line_allows_the_node_command_only():
    line = health.authorized_line("ssh-ed25519 AAAAC3Nza")
    assert line == 'restrict,command="/usr/local/libexec/rayrig-health-node" ssh-ed25519 AAAAC3Nza rayrig-health-gate'


def test_the_ray_node_drop_in_keeps_the_unit_from_starting_while_the_marker_is_there():
    assert f"ConditionPathExists=!{health_node.MARKER}" in health.drop_in_text()


def test_a_marker_is_written_whole_and_private(tmp_path: Path):
    path = tmp_path / "health" / "quarantined"
    health_node.write_marker({"since": 1.0, "by": "gate", "reason": "r"}, str(path))
    assert health_node.read_marker(str(path)) == {"since": 1.0, "by": "gate", "reason": "r"}
    assert path.stat().st_mode & 0o777 == 0o600
    assert health_node.read_marker(str(tmp_path / "none")) is None


def test_the_probe_container_gets_the_node_containers_limits_and_gpus():
    details = {"HostConfig": {"NanoCpus": 33_000_000, "CpusetCpus": "0-1",
                              "DeviceRequests": [{"Capabilities": [["gpu"]], "DeviceIDs": ["0", "3"]}]}}  # fmt: skip
    assert health_node._limits(details) == ["--cpus=0.033", "--cpuset-cpus=0-1", "--gpus=device=0,3"]


def test_the_deploy_reads_a_marker_as_the_node_does_and_an_empty_one_still_keeps_the_node_out():
    fact = health.QuarantineMarker()
    assert fact.process([]) is None
    assert fact.process([health.MARKER_FOLLOWS, '{"by": "gate", "reason": "r", "since": 1.0}']) == {
        "by": "gate", "reason": "r", "since": 1.0,
    }  # fmt: skip
    assert fact.process([health.MARKER_FOLLOWS])["reason"] == "an unreadable marker file"
    assert health_node.parse_marker("", 5.0) == {"since": 5.0, "by": "operator", "reason": "an unreadable marker file"}
