"""Post-deploy checks: the last step of the deploy, and ``deploy/check.py`` on its own.

The checks observe the cluster and change nothing, so they do not run as
pyinfra operations (which would count as changes). Instead this step adds one
operation that plans no command, and a pyinfra callback runs the checks when
that operation has ended on every host: after everything else, over the
connections pyinfra already holds. A FAIL verdict makes pyinfra exit non-zero.
``checks_enabled = false`` (on the head) skips them.

Which checks run (:func:`choose_mode`, the head's ``checks_mode``): the deploy runs the full
checks, with the benchmark, when it created or replaced a ray-node container
(:mod:`deploy.run.replacements`), and the quick checks (:mod:`checks.quick`) otherwise;
``deploy/check.py`` (``rayrig check``) runs the full checks. ``checks_mode = "full"`` or
``"quick"`` chooses one for both.

The checks themselves are :func:`checks.full.run_checks`; this module hands
them each host as a :class:`checks.node.Node` (:class:`PyinfraNode`), with its
settings and GPU facts, and prints what they found.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import IO, Any

import click
from pyinfra import host, inventory
from pyinfra.api import BaseStateCallback, StringCommand, operation
from pyinfra.api.exceptions import PyinfraError
from pyinfra.connectors.fake import FakeConnector

from checks import report
from checks.fanout import MAX_WORKERS
from checks.full import run_checks as run_cluster_checks
from checks.quick import run_quick_checks
from checks.verdict import FAIL, Verdict
from deploy.contract.settings import host_data, host_settings, node_address, present_hosts
from deploy.host.secret_files import AS_SSH_USER, ESCALATION
from deploy.monitoring import health
from deploy.ray.ray_node import head_host
from deploy.run.facts import NvidiaDevices, fact
from deploy.run.memo import run_memo
from deploy.run.replacements import replaced_hosts
from deploy.run.timings import checks_phase, report_phases, table_after_checks

FULL, QUICK = "full", "quick"
NAMED_HOSTS = 5  # the replaced hosts the report names; more are counted


class ChecksFailed(PyinfraError):
    """The post-deploy checks' verdict is FAIL."""


def choose_mode(setting: str, always: bool, replaced: list[str]) -> tuple[str, str]:
    """Which checks run, ``"full"`` or ``"quick"``, and why (the report says it).

    + setting: the head's ``checks_mode`` (``"auto"``, ``"full"`` or ``"quick"``)
    + always: the checks alone (``deploy/check.py``, ``rayrig check``), not the deploy's last step
    + replaced: the hosts whose ray-node container this run created or replaced

    >>> choose_mode("auto", False, ["10.0.0.2"])
    ('full', 'a ray-node was created or replaced in this run (on 10.0.0.2)')
    """
    if setting == QUICK:
        return QUICK, 'checks_mode = "quick"; run `rayrig check INVENTORY --data checks_mode=full` for the benchmark'
    if setting == FULL:
        return FULL, 'checks_mode = "full"'
    if always:
        return FULL, "`rayrig check` runs the full checks"
    if replaced:
        more = f" and {len(replaced) - NAMED_HOSTS} more" if len(replaced) > NAMED_HOSTS else ""
        return FULL, f"a ray-node was created or replaced in this run (on {', '.join(replaced[:NAMED_HOSTS])}{more})"
    return QUICK, "no ray-node was created or replaced in this run; run `rayrig check` for the benchmark"


@operation()
def _checks_marker():
    """Plans nothing: marks the point after which the post-deploy checks run."""
    return
    yield  # a generator that yields no command


def post_deploy_checks(always: bool = False) -> None:
    """Run the post-deploy checks once every host has finished the deploy.

    The deploy skips them when the head's ``checks_enabled`` is false;
    ``always`` (``deploy/check.py``) runs them regardless.
    """
    state = host.state
    if not always and not host_settings(head_host())["checks_enabled"]:
        return
    meta = _checks_marker(name="Post-deploy checks (run after the last operation)")
    memo = run_memo(state, "post_checks")
    if "markers" not in memo:  # the first host of this run: one callback for the whole run
        memo["markers"] = set()
        state.add_callback_handler(_RunChecks(memo["markers"], always))
        table_after_checks(state)  # the phase timings print after the checks' verdict
    memo["markers"].add(meta._hash)


class _RunChecks(BaseStateCallback):
    def __init__(self, markers: set[str], always: bool):
        self.markers = markers
        self.always = always
        self.done = False

    def operation_end(self, state: Any, op_hash: str) -> None:  # type: ignore[override]
        if op_hash not in self.markers or self.done:
            return
        self.done = True
        with checks_phase(state):
            failed = [h.name for h in state.inventory.iter_activated_hosts() if h in state.failed_hosts]
            if failed:
                click.echo(f"--> Post-deploy checks skipped: the deploy failed on {', '.join(failed)}", err=True)
                return
            run_checks(state, always=self.always)


class PyinfraNode:
    """A pyinfra host as the checks' :class:`checks.node.Node`: commands over pyinfra's connection.

    Commands and file transfers run with the host's ``_sudo`` (from its data), as the deploy's
    operations do. A transfer through sudo passes through a fresh 0700 directory of the SSH
    user's (``mktemp -d``), removed afterwards, never through pyinfra's default ``/tmp/pyinfra-*``.
    """

    def __init__(self, host: Any):
        self.host = host
        self.name: str = host.name
        self.address: str = node_address(host)
        data = host_data(host)
        self.escalation = {key: True for key in ESCALATION if data.get(key)}

    def run(self, command: str, print_output: bool = False) -> tuple[bool, list[str]]:
        """Run ``command`` on the host; its success and its stdout lines."""
        ok, output = self.host.run_shell_command(StringCommand(command), print_output=print_output, **self.escalation)
        return ok, output.stdout_lines

    def put_file(self, source: IO[bytes], remote_path: str) -> bool:
        """Upload ``source`` to ``remote_path``."""
        with self._staging() as staging:
            if staging is None:
                return False
            temp = {"remote_temp_filename": f"{staging}/upload"} if staging else {}
            return bool(self.host.put_file(source, remote_path, **temp, **self.escalation))

    def get_file(self, remote_path: str, local_path: str) -> bool:
        """Download ``remote_path`` to ``local_path``."""
        with self._staging() as staging:
            if staging is None:
                return False
            temp = {"remote_temp_filename": f"{staging}/download"} if staging else {}
            return bool(self.host.get_file(remote_path, local_path, **temp, **self.escalation))

    @contextmanager
    def _staging(self) -> Iterator[str | None]:
        """A fresh 0700 directory of the SSH user's for one transfer through sudo, removed afterwards
        ("" when the host needs none; None when it could not be made)."""
        if not self.escalation:
            yield ""
            return
        make = StringCommand("mktemp", "-d", "-t", "rayrig-transfer.XXXXXXXXXX")
        ok, output = self.host.run_shell_command(make, **AS_SSH_USER)
        path = output.stdout_lines[-1].strip() if ok and output.stdout_lines else ""
        if not path.startswith("/"):
            yield None
            return
        try:
            yield path
        finally:
            self.host.run_shell_command(StringCommand("rm", "-rf", "--", path), **AS_SSH_USER)


def gpu_facts(hosts: list[Any]) -> dict[str, Any]:
    """Each host's GPU facts, read from every host at once (gevent's greenlets under pyinfra), by host name
    in the hosts' order. Read afresh, not through the deploy's per-run memo: the deploy may have just
    installed the driver."""
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_WORKERS, len(hosts)))) as pool:
        facts = list(pool.map(lambda h: h.get_fact(NvidiaDevices), hosts))
    return {h.name: found for h, found in zip(hosts, facts, strict=True)}


def _say(line: str) -> None:
    click.echo(line, err=True)


def run_checks(state: Any, always: bool = False) -> Verdict:
    """Run the checks :func:`choose_mode` chose on the inventory; print the report and the verdict;
    raise ``ChecksFailed`` on FAIL. ``always``: the checks alone (``deploy/check.py``)."""
    head = head_host()
    if not head.connected:
        click.echo("--> Post-deploy checks skipped: the head is not part of this run (--limit?)", err=True)
        return Verdict([])
    hosts = present_hosts(inventory)  # a host marked absent has left the cluster
    out = [h for h in hosts if h is not head and health.quarantine_marker(h) is not None]
    if out:  # the health gate keeps them out of the cluster until they are admitted
        names = ", ".join(h.name for h in out)
        click.echo(f"--> Left out of the checks, quarantined by the health gate: {names} (rayrig health)", err=True)
        hosts = [h for h in hosts if h not in out]
    settings = {h.name: host_settings(h) for h in hosts}
    replaced = set(replaced_hosts(state))
    mode, why = choose_mode(settings[head.name]["checks_mode"], always, [h.name for h in hosts if h.name in replaced])
    if isinstance(head.connector, FakeConnector):
        click.echo(f"--> Post-deploy checks skipped: @fake hosts have no cluster to check ({mode}: {why})", err=True)
        return Verdict([])
    nodes = [PyinfraNode(h) for h in hosts]
    head_node = nodes[hosts.index(head)]
    if mode == QUICK:
        # only "auto" GPU counts need the GPU facts: the deploy's own reading where it made one
        auto = [h for h in hosts if h.connected and settings[h.name]["ray_num_gpus"] == "auto"]
        run = run_quick_checks(nodes, head_node, settings, {h.name: fact(h, NvidiaDevices) for h in auto}, _say, why)
    else:
        gpus = gpu_facts([h for h in hosts if h.connected])
        run = run_cluster_checks(nodes, head_node, settings, gpus, _say, why)
    report_phases(state, run.json_path)
    click.echo(report.render(run.result, run.verdict))
    click.echo(f"--> JSON report: {run.json_path.resolve()}")
    if mode == FULL:
        plot = run.plot_path.resolve() if run.plot_path else "not written (pip install matplotlib)"
        click.echo(f"--> bus bandwidth plot: {plot}")
    if run.verdict.status == FAIL:
        raise ChecksFailed(f"post-deploy checks ({mode}): FAIL (report: {run.json_path.resolve()})")
    return run.verdict
