"""Which post-deploy checks a run chooses: the benchmark only after a ray-node was created or replaced.

@fake hosts have no cluster to check, so the checks themselves are skipped; the line that says
so names the checks a real run would have made and why, as the report does.
"""

from __future__ import annotations

import pytest

from tests.plan.fakes.fakehosts import GPU_WORKER, reference_cluster, with_data
from tests.plan.harness import ROOT, run_deploy

SKIPPED = "--> Post-deploy checks skipped: @fake hosts have no cluster to check"
QUICK = "(quick: no ray-node was created or replaced in this run; run `rayrig check` for the benchmark)"


def checks_line(err: str) -> str:
    [line] = [line for line in err.splitlines() if line.startswith(SKIPPED)]
    return line[len(SKIPPED) + 1 :]


@pytest.mark.parametrize("os_name", ["ubuntu22", "rocky9"])
def test_a_converged_rerun_runs_the_quick_checks(os_name, capsys):
    run = run_deploy(reference_cluster(os_name, "converged"))
    assert run.changed_hosts == {}
    assert checks_line(capsys.readouterr().err) == QUICK


def test_a_first_deploy_runs_the_full_checks_naming_the_new_nodes(capsys):
    hosts = reference_cluster("ubuntu22", "fresh")
    run_deploy(hosts)
    names = ", ".join(name for name, _data in hosts)  # in the inventory's order
    line = checks_line(capsys.readouterr().err)
    assert line == f"(full: a ray-node was created or replaced in this run (on {names}))"


def test_replacing_one_worker_runs_the_full_checks_naming_it(capsys):
    run = run_deploy(with_data(reference_cluster("ubuntu22", "converged"), GPU_WORKER, ray_num_cpus=64))
    assert set(run.changed_hosts) == {GPU_WORKER}
    line = checks_line(capsys.readouterr().err)
    assert line == f"(full: a ray-node was created or replaced in this run (on {GPU_WORKER}))"


def test_checks_mode_full_runs_the_full_checks_on_a_converged_rerun(capsys):
    hosts = [(name, {**data, "checks_mode": "full"}) for name, data in reference_cluster("ubuntu22", "converged")]
    assert run_deploy(hosts).changed_hosts == {}
    assert checks_line(capsys.readouterr().err) == '(full: checks_mode = "full")'


def test_checks_mode_quick_runs_the_quick_checks_after_a_replacement(capsys):
    hosts = [(name, {**data, "checks_mode": "quick"}) for name, data in reference_cluster("ubuntu22", "converged")]
    run = run_deploy(with_data(hosts, GPU_WORKER, ray_num_cpus=64))
    assert set(run.changed_hosts) == {GPU_WORKER}
    assert checks_line(capsys.readouterr().err).startswith('(quick: checks_mode = "quick"; run `rayrig check ')


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("auto", "(full: `rayrig check` runs the full checks)"),
        ("quick", '(quick: checks_mode = "quick"; run `rayrig check INVENTORY --data checks_mode=full` for the '
                  "benchmark)"),
    ],
)  # fmt: skip
def test_the_checks_alone_run_full_unless_checks_mode_is_quick(mode, expected, capsys):
    hosts = [(name, {**data, "checks_mode": mode}) for name, data in reference_cluster("ubuntu22", "converged")]
    run = run_deploy(hosts, deploy_file=ROOT / "deploy" / "check.py")
    assert run.changed_hosts == {}
    assert checks_line(capsys.readouterr().err) == expected


def test_checks_disabled_skip_them_whatever_the_mode(capsys):
    converged = reference_cluster("ubuntu22", "converged")
    hosts = [(name, {**data, "checks_enabled": False, "checks_mode": "full"}) for name, data in converged]
    run_deploy(hosts)
    assert SKIPPED not in capsys.readouterr().err
