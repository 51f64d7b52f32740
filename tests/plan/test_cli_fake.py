"""``pyinfra tests/plan/fake_inventory.py deploy/cluster.py -y -vv`` as a user runs it.

With -vv pyinfra prints every command it sends as ``[host] >>> command``: fact
commands while the deploy is prepared, operation commands once the operation
run begins.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.ray import auth

ROOT = Path(__file__).resolve().parents[2]
PYINFRA = Path(sys.executable).with_name("pyinfra")
COMMAND_LINE = re.compile(r"^\[(?P<host>[^\]]+)\]\s+>>> (?P<command>.*)$")
# The last printed line of a ray-node replacement (a multi-line script): its arguments.
REPLACEMENT = re.compile(
    r"replace-ray-node ray-node ray-node-previous (?P<host>\S+) \d+ (?P<create>docker create .*)$", re.M
)


def run_pyinfra(
    variant: str = "",
    inventory: str = "tests/plan/fake_inventory.py",
    extra: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[int, str]:
    env = {
        **os.environ,
        **(env or {}),
        "PYINFRA_FAKE_DELAY": "0",
        "PYINFRA_FAKE_DELAY_JITTER": "0",
        "PYINFRA_PROGRESS": "off",
        "RAYRIG_FAKE_VARIANT": variant,
        "NO_COLOR": "1",
    }
    proc = subprocess.run(
        [str(PYINFRA), inventory, "deploy/cluster.py", "-y", "-vv", *(extra or [])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)


def command_lines(output: str) -> list[tuple[str, str]]:
    return [(m["host"], m["command"]) for m in map(COMMAND_LINE.match, output.splitlines()) if m]


def operation_output(output: str) -> str:
    """What pyinfra printed once operations started running ('' when they never did)."""
    _before, marker, after = output.partition("--> Beginning operation run")
    return after if marker else ""


@pytest.fixture(scope="module")
def default_run() -> tuple[int, str]:
    return run_pyinfra()


def test_fake_cluster_plans_and_exits_0(default_run):
    code, output = default_run
    assert code == 0, output[-3000:]
    ops = command_lines(operation_output(output))
    creates = {match["host"]: match["create"] for match in REPLACEMENT.finditer(operation_output(output))}
    assert set(creates) == {"@fake/head", "@fake/worker-1", "@fake/worker-2"}
    assert " ray start --block " in creates["@fake/head"]
    assert " --head --port=6379 " in creates["@fake/head"]
    assert "--address=10.0.0.1:6379" in creates["@fake/worker-1"]
    assert "--address=10.0.0.1:6379" in creates["@fake/worker-2"]
    assert "--gpus=all" in creates["@fake/worker-1"] and "--num-gpus=8" in creates["@fake/worker-1"]
    assert "--gpus=all" not in creates["@fake/worker-2"]
    installs = [cmd for _host, cmd in ops if " install " in cmd and "apt-get" in cmd]
    # the later steps' distribution packages come in the base packages' transaction
    assert any(cmd.endswith(" install --no-install-recommends ca-certificates curl gnupg docker.io nftables")
               for cmd in installs), installs  # fmt: skip
    assert "Grand total" in output


def test_fake_cluster_reports_its_operations_by_name(default_run):
    _code, output = default_run
    for name in (
        "Base | Install base packages",
        "Docker | Merge rayrig's keys into daemon.json",
        "Ray node | Start the Ray head container",
        "Ray node | Start the Ray worker container",
    ):
        assert f"--> Starting operation: {name}" in output


PHASE_HEADER = "--> Phase timings (wall seconds; slowest host)"
STOPPED_HEADER = "--> Phase timings (wall seconds; slowest host, until the deploy stopped early)"
PHASE_ROW = re.compile(r"^(?P<phase>[A-Za-z][\w ]*?)\s+(?P<seconds>\d+\.\d)(?:\s+(?P<host>\S+)\s+\d+\.\d)?$")


def phase_table(output: str, header: str = PHASE_HEADER) -> dict[str, str | None]:
    """The phase table printed under ``header``: phase -> its slowest host (None: no host named).

    Without the "other" row: the fakes' few operations outside any step are instant, but on a
    loaded machine they may reach the 0.05 s from which the table shows them."""
    _before, found, after = output.partition(header + "\n")
    assert found, output[-3000:]
    rows = {}
    for line in after.splitlines()[2:]:  # below the column names and their rule
        match = PHASE_ROW.match(line)
        if not match:
            break
        if match["phase"] != "other":
            rows[match["phase"]] = match["host"]
    return rows


def test_the_deploy_ends_with_the_wall_time_of_each_phase_and_its_slowest_host(default_run):
    _code, output = default_run
    assert output.count("--> Phase timings") == 1
    # after the checks have had their say, before pyinfra's results
    assert output.index("--> Post-deploy checks skipped") < output.index(PHASE_HEADER) < output.index("--> Results:")
    rows = phase_table(output)
    expected = ["facts and plan", "base packages", "Docker", "image pull", "NVIDIA", "firewall", "Ray start"]
    expected.append("monitoring")
    assert list(rows) == [*expected, "total"], rows
    assert rows["facts and plan"] is None and rows["total"] is None
    assert rows["NVIDIA"] == "@fake/worker-1"  # the only GPU host
    assert all(rows[phase] in {"@fake/head", "@fake/worker-1", "@fake/worker-2"} for phase in expected[1:])


def test_with_the_checks_off_the_table_ends_the_last_operation():
    code, output = run_pyinfra(extra=["--data", "checks_enabled=false"])
    assert code == 0, output[-3000:]
    assert "Post-deploy checks" not in output
    assert output.count("--> Phase timings") == 1
    assert output.index("Cluster membership | Record the cluster's members") < output.index(PHASE_HEADER)
    assert list(phase_table(output))[-3:] == ["Ray start", "monitoring", "total"]


def test_a_deploy_that_stops_early_still_says_where_its_time_went(tmp_path):
    """An operation fails on every host: pyinfra stops, and the table of what ran prints at exit."""
    inventory = tmp_path / "failing_inventory.py"
    inventory.write_text(
        "from tests.plan.fakes.fakehosts import cluster\n"
        "hosts = cluster('ubuntu22', 'fresh')\n"
        "for _name, _data in hosts:  # the Ray token's directory cannot be made anywhere\n"
        "    _data['fake_responses'] = {'chmod 700 /etc/rayrig/ray': {'success': False}, **_data['fake_responses']}\n"
    )
    code, output = run_pyinfra(inventory=str(inventory))
    assert code != 0
    assert "Create the Ray token's directory" in output
    assert output.count("--> Phase timings") == 1
    rows = phase_table(output, STOPPED_HEADER)
    assert list(rows)[:3] == ["facts and plan", "base packages", "Docker"]
    assert list(rows)[-3:] == ["firewall", "Ray start", "total"]  # Ray start: the failed operation's time


@pytest.mark.parametrize(
    "variant,fragments",
    [
        (
            "two-heads",
            [
                "host @fake/head, @fake/worker-1: ray_role = 'head'",
                'expected exactly one head; the others must be "worker"',
            ],
        ),
        ("negative-gpus", ["host @fake/worker-1: ray_num_gpus = -1", 'expected a non-negative integer or "auto"']),
        ("typo", ["host @fake/worker-2: ray_num_gpu = 2", "did you mean 'ray_num_gpus'"]),
    ],
)
def test_invalid_inventory_stops_before_any_fact_or_operation(variant, fragments):
    code, output = run_pyinfra(variant)
    assert code != 0
    for fragment in fragments:
        assert fragment in output, output[-3000:]
    assert "Nothing was changed on any host." in output
    assert ">>>" not in output  # not even a fact was gathered
    assert "Loaded fact" not in output
    assert not operation_output(output)


def test_gpu_mismatch_stops_before_any_operation():
    code, output = run_pyinfra("gpu-mismatch")
    assert code != 0
    assert "host @fake/worker-1: ray_num_gpus = 4: expected 8" in output
    assert not operation_output(output)
    assert "Starting operation" not in output
    assert "Phase timings" not in output  # no operation ran: nothing to time
    # Facts were read (that is how the mismatch was found), but no operation command was sent.
    commands = [cmd for _host, cmd in command_lines(output)]
    assert any("PCI_GPUS=" in cmd for cmd in commands)
    assert not any(cmd.startswith(("apt-get", "docker create", "docker pull", "systemctl ")) for cmd in commands)


@pytest.mark.parametrize("extra", [[], ["--diff"]], ids=["plain", "diff"])
def test_registry_password_never_printed(tmp_path, extra):
    """Not in a command line, and not in the file diff pyinfra shows with --diff."""
    inventory = tmp_path / "auth_inventory.py"
    inventory.write_text(
        "from tests.plan.fakes.fakehosts import cluster\n"
        "hosts = cluster('ubuntu22', 'fresh', data={'docker_registry_auth': "
        "{'registry': 'registry.lab.example:5000', 'username': 'ray', 'password': 'hunter2-Secret'}})\n"
    )
    code, output = run_pyinfra(inventory=str(inventory), extra=extra)
    assert code == 0, output[-3000:]
    assert "Store the login for registry.lab.example:5000" in output
    assert any("pull-image.sh /var/lib/rayrig/image-pull 3600 " in cmd and " /etc/rayrig/docker " in cmd
               for _h, cmd in command_lines(output))  # fmt: skip
    if extra:
        assert "Will create /etc/docker/daemon.json" in output  # the diff is on, for other files
    assert "hunter2" not in output
    assert "cmF5Omh1bnRlcjItU2VjcmV0" not in output  # base64("ray:hunter2-Secret")


def test_a_fetched_token_is_never_printed_even_at_the_most_verbose(tmp_path):
    code, output = run_pyinfra("fetch-token", extra=["-vvv", "--debug"], env={"RAYRIG_STATE_DIR": str(tmp_path)})
    assert code == 0, output[-3000:]
    fetched = tmp_path / "clusters" / "cluster" / "ray_auth_token"
    said = [line for line in output.splitlines() if "Fetched the cluster's Ray token from the head" in line]
    assert len(said) == 1 and "[@fake/head]" in said[0] and said[0].endswith(f" into {fetched}"), said
    token = auth.read_token(fetched)
    assert len(token) == 64
    assert token not in output
    assert "Starting operation: Ray node | Start the Ray" not in output  # nothing to replace
