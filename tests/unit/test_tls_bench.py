"""scripts/tls_bench.py: the driver it runs in the head's ray-node, and how it gets there and back."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from checks.full import DIR_MARKER
from rayrig.inventory import load_inventory

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tls_bench.py"
spec = importlib.util.spec_from_file_location("tls_bench", SCRIPT)
tls_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tls_bench)

RESULT = {"tls": True, "nodes": 3, "small_tasks": {"tasks_per_s": 900.0}}


@pytest.fixture
def head(tmp_path):
    inventory = tmp_path / "inv.py"
    inventory.write_text("heads = [('10.0.0.1', {'ray_role': 'head', 'ssh_user': 'ubuntu', '_sudo': True})]\n")
    return load_inventory(str(inventory)).head


def fake_ssh(calls, driver_output):
    def run(argv, input=b"", **_kwargs):
        remote = argv[-1]
        calls.append((remote, input))
        if "mktemp -d -t" in remote and "docker cp" not in remote:
            out = f"{DIR_MARKER}/tmp/rayrig-checks.abc\n"
        elif "docker cp" in remote:
            out = f"{DIR_MARKER}/tmp/rayrig-checks.in\n"
        elif "python -" in remote:
            out = driver_output
        else:
            out = ""
        return subprocess.CompletedProcess(argv, 0, out.encode(), b"")

    return run


def test_the_driver_runs_in_the_heads_container_through_sudo_and_everything_is_removed(head, monkeypatch):
    calls = []
    monkeypatch.setattr(tls_bench.subprocess, "run", fake_ssh(calls, "ray warning\nRESULT " + json.dumps(RESULT)))
    assert tls_bench.measure(head, 2000, 200, 3) == RESULT
    remotes = [remote for remote, _stdin in calls]
    assert all(r.startswith("sudo -n sh -c ") for r in remotes)  # never a password prompt
    (driver,) = [(r, stdin) for r, stdin in calls if "python -" in r]
    assert "docker exec -i --workdir /tmp/rayrig-checks.in ray-node python - 2000 200 3" in driver[0]
    assert driver[1] == tls_bench.BENCH_PROGRAM.encode()
    assert "rm -rf -- /tmp/rayrig-checks.abc" in remotes[-1] and "/tmp/rayrig-checks.in" in remotes[-1]


def test_a_driver_without_a_result_fails_after_cleaning_up(head, monkeypatch):
    calls = []
    monkeypatch.setattr(tls_bench.subprocess, "run", fake_ssh(calls, "Traceback: no cluster\n"))
    with pytest.raises(SystemExit, match="printed no RESULT line"):
        tls_bench.measure(head, 10, 1, 1)
    assert "rm -rf -- /tmp/rayrig-checks.abc" in calls[-1][0]


def test_the_driver_is_valid_python_and_measures_the_three_things():
    compile(tls_bench.BENCH_PROGRAM, "bench", "exec")
    for part in ("run_sweep_test", '"small_tasks"', '"large_object"', "NodeAffinitySchedulingStrategy"):
        assert part in tls_bench.BENCH_PROGRAM


def test_bad_counts_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as exit_:
        tls_bench.main(["inventories/lab.py", "--tasks", "0"])
    assert exit_.value.code == 2
    assert "--tasks, --object-mb and --repeats must be at least 1" in capsys.readouterr().err
