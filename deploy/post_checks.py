"""Post-deploy checks: the last step of the deploy, and ``checks/post_deploy.py`` on its own.

The checks observe the cluster and change nothing, so they do not run as
pyinfra operations (which would count as changes). Instead this step adds one
operation that plans no command, and a pyinfra callback runs the checks when
that operation has ended on every host: after everything else, over the
connections pyinfra already holds. A FAIL verdict makes pyinfra exit non-zero.
``checks_enabled = false`` (on the head) skips them.
"""

from __future__ import annotations

import json
import os
import weakref
from pathlib import Path
from typing import Any

import click
from pyinfra import host, inventory
from pyinfra.api import BaseStateCallback, StringCommand, operation
from pyinfra.api.exceptions import PyinfraError
from pyinfra.connectors.fake import FakeConnector

from checks import report as report_mod
from checks import runner
from checks import storage as storage_check
from checks.verdict import FAIL
from deploy.ray_node import head_host
from deploy.settings import host_data, host_settings, node_address

_MARKERS: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()  # per State
MIN_SHM_BYTES = 512 * 2**20  # below this, Ray's object store spills to disk: worth a warning


class ChecksFailed(PyinfraError):
    """The post-deploy checks' verdict is FAIL."""


@operation()
def _checks_marker():
    """Plans nothing: marks the point after which the post-deploy checks run."""
    return
    yield  # a generator that yields no command


def post_deploy_checks(always: bool = False) -> None:
    """Run the post-deploy checks once every host has finished the deploy.

    The deploy skips them when the head's ``checks_enabled`` is false;
    ``always`` (``checks/post_deploy.py``) runs them regardless.
    """
    state = host.state
    if not always and not host_settings(head_host())["checks_enabled"]:
        return
    meta = _checks_marker(name="Post-deploy checks (run after the last operation)")
    markers = _MARKERS.get(state)
    if markers is None:
        markers = _MARKERS[state] = set()
        state.add_callback_handler(_RunChecks(markers))
    markers.add(meta._hash)


class _RunChecks(BaseStateCallback):
    def __init__(self, markers: set[str]):
        self.markers = markers
        self.done = False

    def operation_end(self, state: Any, op_hash: str) -> None:  # type: ignore[override]
        if op_hash not in self.markers or self.done:
            return
        self.done = True
        failed = [h.name for h in state.inventory.iter_activated_hosts() if h in state.failed_hosts]
        if failed:
            click.echo(f"--> Post-deploy checks skipped: the deploy failed on {', '.join(failed)}", err=True)
            return
        run_checks(state)


def _sudo(h: Any) -> dict[str, Any]:
    return {"_sudo": bool(host_data(h).get("_sudo"))}


def _sh(h: Any, script: str, print_output: bool = False) -> tuple[bool, list[str]]:
    ok, output = h.run_shell_command(StringCommand(script), print_output=print_output, **_sudo(h))
    return ok, output.stdout_lines


def run_checks(state: Any) -> runner.Verdict:
    """Preflight, cluster state, shared storage and benchmark; print the verdict; raise ``ChecksFailed`` on FAIL."""
    head = head_host()
    if not head.connected:
        click.echo("--> Post-deploy checks skipped: the head is not part of this run (--limit?)", err=True)
        return runner.Verdict([])
    if isinstance(head.connector, FakeConnector):
        click.echo("--> Post-deploy checks skipped: @fake hosts have no cluster to check", err=True)
        return runner.Verdict([])
    settings = host_settings(head)
    container = settings["ray_container_name"]
    click.echo("--> Running the post-deploy checks (preflight, cluster state, shared storage, benchmark)", err=True)

    reasons: list[runner.Reason] = []
    declarations = []
    preflight: dict[str, Any] = {}
    settings_by_node: dict[str, dict[str, Any]] = {}
    for h in inventory:
        s = host_settings(h)
        settings_by_node[node_address(h)] = s
        detected = None
        if h.connected:
            ok, lines = _sh(h, runner.PREFLIGHT_SCRIPT.format(container=container))
            facts = runner.parse_preflight(lines)
            preflight[h.name] = facts
            reasons += runner.preflight_reasons(h.name, s, facts, MIN_SHM_BYTES)
            detected = len(facts["host_gpus"]) or int(facts.get("pci_gpus") or 0)
        else:  # outside --limit: not inspected, but its node is still expected in the cluster
            reasons.append(runner.Reason(runner.WARN, "preflight skipped (not part of this run)", host=h.name))
        declarations.append(
            {
                "name": h.name,
                "address": node_address(h),
                "num_cpus": s["ray_num_cpus"],
                "num_gpus": detected if s["ray_num_gpus"] == "auto" else s["ray_num_gpus"],
                "resources": s["ray_resources"],
            }
        )

    expected_ips = [d["address"] for d in declarations]
    ok, lines = _sh(head, runner.cluster_state_command(container, expected_ips))
    results = [line[len("RESULT ") :] for line in lines if line.startswith("RESULT ")]
    cluster_state = json.loads(results[-1]) if ok and results else None
    if cluster_state is None:
        reasons.append(runner.Reason(FAIL, "could not read the cluster state from the head container"))
    else:
        reasons += runner.cluster_reasons(declarations, cluster_state)

    aliases = {d["address"]: d["name"] for d in declarations if d["address"] != d["name"]}
    storage = None  # no shared mounts: nothing to check, nothing in the report's text
    mounts = storage_check.storage_mounts(settings_by_node)
    if mounts:
        click.echo(f"--> Shared storage: a round trip through {len(mounts)} mount(s) on every node", err=True)
        ok, lines = _sh(head, storage_check.storage_check_command(container, mounts))
        storage = storage_check.parse_result(lines) or {
            "error": f"no result (timed out after {storage_check.check_timeout()} s, or Python failed there)"
        }
        reasons += storage_check.storage_reasons(storage, aliases)
        storage["hosts"] = aliases
    head.put_file(runner.package_tarball(), f"{runner.REMOTE_DIR}.tgz")
    prepare = f"mkdir -p {runner.REMOTE_DIR} && mv {runner.REMOTE_DIR}.tgz {runner.REMOTE_DIR}/checks.tgz && "
    ok, _ = _sh(head, prepare + runner.benchmark_command(container, settings, aliases, expected_ips), print_output=True)
    bench: dict[str, Any] = {}
    local_copy = Path(os.environ.get("TMPDIR", "/tmp")) / f"rayrig-report-{os.getpid()}.json"
    if ok and head.get_file(f"{runner.REMOTE_DIR}/report.json", str(local_copy)):
        bench = json.loads(local_copy.read_text())
        local_copy.unlink()
    else:
        reasons.append(runner.Reason(FAIL, "the benchmark did not produce a report"))

    thresholds = {
        "matmul_min_fraction": settings["checks_matmul_min_fraction"],
        "membw_min_fraction": settings["checks_membw_min_fraction"],
        "outlier_fraction": settings["checks_outlier_fraction"],
    }
    verdict = runner.combined_verdict(bench, reasons, thresholds)
    result = {
        **bench,
        "preflight": preflight,
        "cluster_state": cluster_state,
        "storage": storage,
        "verdict": {**verdict.as_dict(), "thresholds": thresholds},
    }
    report_dir = Path(settings["checks_report_dir"]).expanduser()
    json_path, plot_path = runner.save_report(result, report_dir, settings["ray_cluster_name"])
    click.echo(report_mod.render(result, verdict))
    click.echo(f"--> JSON report: {json_path.resolve()}")
    plot = plot_path.resolve() if plot_path else "not written (pip install matplotlib)"
    click.echo(f"--> bus bandwidth plot: {plot}")
    if verdict.status == FAIL:
        raise ChecksFailed(f"post-deploy checks: FAIL (report: {json_path.resolve()})")
    return verdict
