"""The post-deploy checks of a whole cluster, driven from the operator's machine through its nodes.

Five parts, one verdict:

1. preflight on every node (:mod:`checks.preflight`): the GPUs the driver sees
   against ``ray_num_gpus``, the same GPUs inside the ray-node container, the
   Ray version inside the container against ``ray_version``, the container's
   shared-memory size, nvidia-fabricmanager active on NVSwitch systems, and on nodes with GPUs
   what the host's tools say about each (:mod:`checks.gpu_health`);
2. cluster state from inside the head container (:mod:`checks.cluster_state`):
   every inventory host is an alive Ray node, and the cluster's CPU, GPU and
   custom-resource totals equal the declarations;
3. shared storage (:mod:`checks.shared_storage`), when a node has a shared
   mount: a round trip through every mount on every node that has it;
4. monitoring (:mod:`checks.monitoring`), when it is on: Prometheus on the monitoring host has
   every host's exporters and Ray node as up targets, and no GPU had an XID error, throttled or
   hit an uncorrectable ECC error in ``checks_monitoring_window_s``;
5. the benchmark (:mod:`checks.benchmark` ``--cluster``) inside the head
   container, which drives every node through Ray.

The whole run has one budget, the head's ``checks_timeout_s`` (:mod:`checks.run_budget`):
preflight reads every node at once, each within ``checks_node_timeout_s`` (a node that does not
answer by then is a FAIL naming it); parts 2 to 5 get what is left, and a part with nothing left
is not started and says so. The benchmark is told the budget left (``--budget``, with
``--peer-factor`` and ``--timeout`` for its per-node deadlines), ``timeout`` stops it if it
overruns, and its report, written after every phase, is fetched whatever its exit status.

These are the full checks. A deploy that created or replaced no ray-node container runs the
quick checks instead (:mod:`checks.quick`: alive nodes, their resources, one Ray version, in one
command); ``deploy/post_checks.py`` chooses.

The checks package is copied into the head's ray-node container once, before
the cluster state, and parts 2 to 5 run from that copy (``python -m``); the monitoring part runs
on the monitoring host, from a copy of its own where that is not the head. A copy
goes through a fresh private directory on the head (``mktemp -d``, 0700) and
another inside the container, made for this run and removed at its end, failed
or not: no fixed path in ``/tmp`` that another local user could claim first and
fill with code of theirs. The JSON report and the all-reduce plot are saved on
this machine, in the head's ``checks_report_dir``. The checks observe and change nothing.

Example (what ``deploy/post_checks.py`` does with pyinfra's connections)::

    run = run_checks(nodes, head, {n.name: settings_of(n) for n in nodes},
                     {n.name: gpu_facts_of(n) for n in nodes}, progress=print)
    print(report.render(run.result, run.verdict))
"""

from __future__ import annotations

import io
import json
import re
import shlex
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import monitoring, nccl_net, preflight, run_budget, shared_storage
from . import report as report_mod
from . import verdict as verdict_mod
from .deadlines import Budget
from .fanout import each_at_once
from .node import Node
from .run_budget import BENCHMARK_MARGIN_S, EXIT_MARKER, MIN_PART_S, PROBE_GRACE_S, Parts
from .verdict import FAIL, WARN, Reason, Verdict

PACKAGE_DIR = Path(__file__).resolve().parent
WORKDIR_TEMPLATE = "rayrig-checks.XXXXXXXXXX"  # mktemp's: a fresh 0700 directory, on the head and in its container
DIR_MARKER = "RAYRIG_CHECKS_DIR="  # the line that names the directory a command made
_SAFE_DIR = re.compile(r"/[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")
CLUSTER_WAIT_S = 180  # how long the cluster state waits for every expected node to be alive
CLUSTER_STATE_STARTUP_S = 30  # beyond its wait: Python, connecting to Ray
# $1 seconds, then the command: stopped by `timeout` after them, where the container has `timeout`
BOUNDED = 'if command -v timeout >/dev/null 2>&1; then s=$1; shift; exec timeout -k 5 "$s" "$@"; fi; shift; exec "$@"'


@dataclass
class ChecksRun:
    """What a run of the checks found, and where its report went."""

    verdict: Verdict
    result: dict[str, Any]  # the report: the benchmark's, with preflight, cluster state, storage and verdict
    json_path: Path
    plot_path: Path | None  # None without an all-reduce sweep to plot, or without matplotlib


def run_checks(
    nodes: Sequence[Node],
    head: Node,
    settings: Mapping[str, Mapping[str, Any]],
    gpus: Mapping[str, Mapping[str, Any]],
    progress: Callable[[str], None],
    why: str = "the full checks were asked for",
) -> ChecksRun:
    """Preflight, cluster state, shared storage and benchmark; the combined verdict and the saved report.

    + nodes: every inventory host, in the inventory's order (``head`` among them)
    + settings: each node's settings (the data contract's keys), by node name
    + gpus: the GPU facts (see :mod:`checks.preflight`) of each node this run reaches, by
      node name; a node without them (outside pyinfra's ``--limit``) is not inspected, but
      is still expected in the cluster
    + progress: called with each progress line
    + why: why the full checks run, for the report (``"rayrig check runs the full checks"``)
    """
    head_settings = settings[head.name]
    container = head_settings["ray_container_name"]
    progress("--> Running the post-deploy checks (preflight, cluster state, shared storage, monitoring, benchmark)")
    parts = Parts(Budget(head_settings["checks_timeout_s"]))

    with parts.part("preflight"):
        cap = parts.budget.cap(head_settings["checks_node_timeout_s"])
        preflights, reasons = preflight_all(nodes, container, settings, gpus, cap)
    declarations = [
        declaration(node, settings[node.name], preflight.detected_gpus(gpus[node.name]) if node.name in gpus else None)
        for node in nodes
    ]
    expected_ips = [d["address"] for d in declarations]
    aliases = {d["address"]: d["name"] for d in declarations if d["address"] != d["name"]}

    cluster_state = storage = bench = None
    watched = None  # the monitoring part's section; None: not reached
    with checks_on_head(head, container) as dirs:
        if dirs is None:
            reasons.append(Reason(FAIL, "could not copy the checks into the head's container"))
        else:
            cluster_state = _cluster_state(head, container, dirs, expected_ips, parts, reasons)
            if cluster_state is not None:
                reasons += preflight.cluster_reasons(declarations, cluster_state)

            storage = _storage(nodes, head, container, dirs, settings, aliases, parts, progress, reasons)

            watched, found = _monitoring(nodes, head, container, dirs, settings, gpus, parts, progress)
            reasons += found

            bench = _benchmark(nodes, head, container, dirs, settings, declarations, parts, reasons)

    thresholds = {
        "matmul_min_fraction": head_settings["checks_matmul_min_fraction"],
        "membw_min_fraction": head_settings["checks_membw_min_fraction"],
        "outlier_fraction": head_settings["checks_outlier_fraction"],
    }
    verdict = combined_verdict(bench or {}, reasons, thresholds)
    result = {
        **(bench or {}),
        "checks": {"mode": "full", "why": why},
        "preflight": preflights,
        "cluster_state": cluster_state,
        "storage": storage,
        "monitoring": watched,
        "budget": parts.as_dict(),
        "verdict": {**verdict.as_dict(), "thresholds": thresholds},
    }
    report_dir = Path(head_settings["checks_report_dir"]).expanduser()
    json_path, plot_path = report_mod.save_report(result, report_dir, head_settings["ray_cluster_name"])
    return ChecksRun(verdict, result, json_path, plot_path)


def _storage(
    nodes: Sequence[Node],
    head: Node,
    container: str,
    dirs: Any,
    settings: Mapping[str, Mapping[str, Any]],
    aliases: dict[str, str],
    parts: Parts,
    progress: Callable[[str], None],
    reasons: list[Reason],
) -> dict[str, Any] | None:
    """The shared-storage round trip on every node (its reasons added to ``reasons``); None: no shared
    mounts, nothing in the report's text."""
    mounts = shared_storage.storage_mounts({node.address: settings[node.name] for node in nodes})
    if not mounts:
        return None
    if parts.left() < MIN_PART_S:
        reasons.append(parts.not_run("storage"))
        return None
    progress(f"--> Shared storage: a round trip through {len(mounts)} mount(s) on every node")
    limit = min(shared_storage.check_timeout(), int(parts.left()))
    with parts.part("storage"):
        _ok, lines = head.run(storage_command(container, mounts, workdir=dirs.container, limit_s=limit))
    storage = shared_storage.parse_result(lines) or {
        "error": f"no result (timed out after {limit} s, or Python failed there)"
    }
    reasons += shared_storage.storage_reasons(storage, aliases)
    storage["hosts"] = aliases
    return storage


def _benchmark(
    nodes: Sequence[Node],
    head: Node,
    container: str,
    dirs: Any,
    settings: Mapping[str, Mapping[str, Any]],
    declarations: list[dict[str, Any]],
    parts: Parts,
    reasons: list[Reason],
) -> dict[str, Any] | None:
    """The benchmark in the head's container, within what is left of the budget (its reasons added to
    ``reasons``); None: not run, or no report."""
    if parts.left() - BENCHMARK_MARGIN_S < MIN_PART_S:
        reasons.append(parts.not_run("benchmark"))
        return None
    head_settings = settings[head.name]
    expected_ips = [d["address"] for d in declarations]
    aliases = {d["address"]: d["name"] for d in declarations if d["address"] != d["name"]}
    command = benchmark_command(container, head_settings, aliases, expected_ips, dirs, left_s=parts.left())
    with parts.part("benchmark"):
        _ok, lines = head.run(command, print_output=True)
    bench = _fetch_report(head, dirs.host)  # whatever the exit: a stopped one leaves its phases
    if run_budget.exit_status(lines) in run_budget.STOPPED:
        reasons.append(run_budget.benchmark_stopped(parts.budget.total_s))
    if bench is None:
        reasons.append(Reason(FAIL, "the benchmark did not produce a report"))
    else:  # which network NCCL used on each node, and whether the EFA hosts use their EFA
        efa_hosts = [node.name for node in nodes if settings[node.name].get("ray_efa")]
        names = {d["address"]: d["name"] for d in declarations}
        reasons += nccl_net.network_reasons(bench.get("allreduce"), efa_hosts, names)
    return bench


def preflight_all(
    nodes: Sequence[Node],
    container: str,
    settings: Mapping[str, Mapping[str, Any]],
    gpus: Mapping[str, Mapping[str, Any]],
    cap_s: float,
) -> tuple[dict[str, Any], list[Reason]]:
    """Every node's preflight at once (:func:`checks.preflight.check_node`), each within ``cap_s``
    seconds; what each read, by node name, and the reasons, both in the nodes' order.

    A node that has not answered ``cap_s`` (and the connection's grace) after the start is a FAIL
    naming it; a node without GPU facts (outside the run) a WARN.
    """
    reached = [node for node in nodes if node.name in gpus]

    def one(node: Node) -> tuple[dict[str, Any], list[Reason]]:
        return preflight.check_node(node, container, settings[node.name], gpus[node.name], cap_s)

    answered = each_at_once(reached, one, limit_s=cap_s + PROBE_GRACE_S)
    answers = dict(zip([n.name for n in reached], answered, strict=True))
    preflights: dict[str, Any] = {}
    reasons: list[Reason] = []
    for node in nodes:
        answer = answers.get(node.name)
        if answer is None:
            reasons.append(Reason(WARN, "preflight skipped (not part of this run)", host=node.name))
        elif answer.late or answer.value is None:
            preflights[node.name] = {"gpus": dict(gpus[node.name]), "error": f"no answer in {answer.seconds:g} s"}
            reasons.append(Reason(FAIL, f"preflight did not answer in {answer.seconds:g} s", host=node.name))
        else:
            preflights[node.name], found = answer.value
            reasons += found
    return preflights, reasons


def _cluster_state(head: Node, container: str, dirs: HeadDirs, expected_ips: list[str], parts: Parts,
                   reasons: list[Reason]) -> dict[str, Any] | None:  # fmt: skip
    """The cluster state read from the head's container within what is left of the budget (None: not read,
    with the reason added)."""
    left = int(parts.left())
    if left < MIN_PART_S:
        reasons.append(parts.not_run("cluster_state"))
        return None
    wait_s = max(1, min(CLUSTER_WAIT_S, left - CLUSTER_STATE_STARTUP_S))
    command = cluster_state_command(container, expected_ips, wait_s, workdir=dirs.container, limit_s=left)
    with parts.part("cluster_state"):
        ok, lines = head.run(command)
    results = [line[len("RESULT ") :] for line in lines if line.startswith("RESULT ")]
    state = json.loads(results[-1]) if ok and results else None
    if state is None:
        reasons.append(Reason(FAIL, "could not read the cluster state from the head container"))
    return state


def _monitoring(nodes: Sequence[Node], head: Node, container: str, dirs: HeadDirs,
                settings: Mapping[str, Mapping[str, Any]], gpus: Mapping[str, Mapping[str, Any]], parts: Parts,
                progress: Callable[[str], None]) -> tuple[dict[str, Any] | None, list[Reason]]:  # fmt: skip
    """What Prometheus says (:mod:`checks.monitoring`), read on the monitoring host within what is left of
    the budget: the report's section and the reasons. Off (``monitoring_enabled``, ``checks_monitoring``):
    a section that says so, and no reason."""
    head_settings = settings[head.name]
    why_not = monitoring.skipped(head_settings)
    if why_not:
        return {"skipped": why_not}, []
    named = head_settings["monitoring_host"]
    where = monitoring.monitoring_node(nodes, head, named)
    if where is None:
        message = f"monitoring_host = {named!r} is neither the name nor the address of a host of this inventory"
        return {"error": message}, [Reason(FAIL, f"{message}: Prometheus not read")]
    left = int(parts.left())
    if left < MIN_PART_S:
        return None, [parts.not_run("monitoring")]
    port = head_settings["monitoring_prometheus_port"]
    quickest = monitoring.time_needed({"wait_s": 0, "timeout_s": monitoring.REQUEST_TIMEOUT_S})
    cfg = monitoring.config(where.name, port, nodes, head_settings, gpus,
                            wait_s=min(monitoring.WAIT_S, left - quickest))  # fmt: skip
    limit = min(monitoring.time_needed(cfg), left)
    window = monitoring.span(cfg["window_s"])
    progress(f"--> Monitoring: Prometheus on {where.name}: every host's targets, GPU errors in the last {window}")
    lines: list[str] = []
    with parts.part("monitoring"):
        if where is head:
            _ok, lines = head.run(monitoring_command(container, cfg, workdir=dirs.container, limit_s=limit))
        else:
            with checks_on_head(where, container) as there:
                if there is not None:
                    _ok, lines = where.run(monitoring_command(container, cfg, workdir=there.container, limit_s=limit))
    section = monitoring.parse_result(lines)
    if section is None:
        message = f"monitoring: no result from {where.name}'s {container} container (timed out after {limit} s, "
        message += "or the checks could not be copied there, or Python failed there)"
        return {"prometheus": cfg["url"], "host": where.name, "error": message}, [Reason(FAIL, message)]
    return section, monitoring.reasons(section, cfg)


@dataclass(frozen=True)
class HeadDirs:
    """This run's private directories: ``host`` on the head, ``container`` in its ray-node container."""

    host: str
    container: str


@contextmanager
def checks_on_head(head: Node, container: str) -> Iterator[HeadDirs | None]:
    """The checks package copied into the head's ``container`` through this run's private directories
    (None when that failed); both directories are removed on the way out, whatever happened."""
    host_dir = container_dir = None
    try:
        ok, lines = head.run(workdir_command())
        host_dir = made_dir(lines) if ok else None
        if host_dir and head.put_file(package_tarball(), f"{host_dir}/checks.tgz"):
            ok, lines = head.run(install_command(container, host_dir))
            container_dir = made_dir(lines) if ok else None
        yield HeadDirs(host_dir, container_dir) if host_dir and container_dir else None
    finally:
        if host_dir:
            head.run(cleanup_command(container, host_dir, container_dir))


def declaration(node: Node, settings: Mapping[str, Any], detected_gpus: int | None) -> dict[str, Any]:
    """What the inventory declares for one node's Ray resources.

    ``num_gpus`` is the detected count where ``ray_num_gpus`` is ``"auto"`` (None when the node
    was not inspected).
    """
    declared = settings["ray_num_gpus"]
    return {
        "name": node.name,
        "address": node.address,
        "num_cpus": settings["ray_num_cpus"],
        "num_gpus": detected_gpus if declared == "auto" else declared,
        "resources": settings["ray_resources"],
    }


def _fetch_report(head: Node, host_dir: str) -> dict[str, Any] | None:
    with tempfile.TemporaryDirectory(prefix="rayrig-report-") as folder:
        local_copy = Path(folder) / "report.json"
        if not head.get_file(f"{host_dir}/report.json", str(local_copy)):
            return None
        return json.loads(local_copy.read_text())


def combined_verdict(bench: dict[str, Any], extra: list[Reason], thresholds: dict[str, float]) -> Verdict:
    """The benchmark's own verdict with the preflight, cluster-state and storage reasons first."""
    judged = verdict_mod.evaluate(bench, **thresholds) if bench else Verdict([Reason(FAIL, "no benchmark report")])
    return Verdict(extra + judged.reasons)


# --- the commands the head runs ----------------------------------------------------------------


def package_tarball() -> io.BytesIO:
    """The ``checks`` package as a tar.gz, to copy into the head container."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(PACKAGE_DIR.glob("*.py")):
            tar.add(path, arcname=f"checks/{path.name}")
    buffer.seek(0)
    return buffer


def workdir_command() -> str:
    """The shell command that makes this run's private directory on the head (0700) and names it."""
    return f"d=$(mktemp -d -t {WORKDIR_TEMPLATE}) && echo {DIR_MARKER}$d"


def made_dir(lines: list[str]) -> str | None:
    """The directory named by :func:`workdir_command` or :func:`install_command` in their output (None
    without one, or with a path that is not a plain absolute one)."""
    named = [line.strip()[len(DIR_MARKER) :] for line in lines if line.strip().startswith(DIR_MARKER)]
    if not named or not _SAFE_DIR.fullmatch(named[-1]) or "/../" in f"{named[-1]}/":
        return None
    return named[-1]


def install_command(container: str, host_dir: str) -> str:
    """The shell command that unpacks the copied tarball (``host_dir/checks.tgz``) and copies the package
    into a fresh private directory of the head's ``container``, which it names (:func:`made_dir`)."""
    c, h = shlex.quote(container), shlex.quote(host_dir)
    return " && ".join(
        [
            f"tar -xzf {h}/checks.tgz -C {h}",
            f"d=$(docker exec {c} mktemp -d -t {WORKDIR_TEMPLATE})",
            '[ -n "$d" ]',
            f'docker cp {h}/checks {c}:"$d"/',
            f"echo {DIR_MARKER}$d",
        ]
    )


def cleanup_command(container: str, host_dir: str, container_dir: str | None) -> str:
    """The shell command that removes this run's directories, on the head and in its ``container``."""
    command = f"rm -rf -- {shlex.quote(host_dir)}"
    if container_dir:  # as root: ``docker cp`` made the package root's, whoever the container runs as
        command += f"; docker exec --user root {shlex.quote(container)} rm -rf -- {shlex.quote(container_dir)}"
    return command


def _in_container(container: str, workdir: str, module: str, *args: str) -> str:
    """``python -m checks.<module> ARGS`` in ``container``, from the package :func:`install_command` put in
    ``workdir``."""
    command = ["docker", "exec", "--workdir", workdir, container, "python", "-m", f"checks.{module}", *args]
    return shlex.join(command)


def cluster_state_command(container: str, expected_ips: list[str], wait_s: int = CLUSTER_WAIT_S, *,
                          workdir: str, limit_s: int | None = None) -> str:  # fmt: skip
    """The shell command that prints the cluster state once the expected nodes are alive (or time is up),
    stopped by ``timeout`` after ``limit_s`` (default: the wait and the program's start-up)."""
    expect = ",".join(sorted(expected_ips))
    limit = min(wait_s + CLUSTER_STATE_STARTUP_S, limit_s) if limit_s is not None else wait_s + CLUSTER_STATE_STARTUP_S
    command = _in_container(container, workdir, "cluster_state", "--expect", expect, "--wait", str(wait_s))
    return f"timeout -k 10 {int(limit)} {command}"


def storage_command(
    container: str,
    mounts: list[dict[str, Any]],
    *,
    workdir: str,
    read_wait_s: float = shared_storage.READ_WAIT_S,
    task_timeout_s: float = shared_storage.TASK_TIMEOUT_S,
    limit_s: int | None = None,
) -> str:
    """The shell command that runs the shared-storage check in the head's ``container``, bounded by ``timeout``
    (after the check's own longest time, or ``limit_s`` when that is less: what is left of the budget)."""
    config = shared_storage.probe_config(mounts, read_wait_s=read_wait_s, task_timeout_s=task_timeout_s)
    limit = shared_storage.check_timeout(task_timeout_s, read_wait_s)
    limit = min(limit, int(limit_s)) if limit_s is not None else limit
    return f"timeout -k 10 {limit} " + _in_container(container, workdir, "storage_probe", json.dumps(config))


def monitoring_command(container: str, cfg: Mapping[str, Any], *, workdir: str, limit_s: int) -> str:
    """The shell command that reads Prometheus (:mod:`checks.monitoring`, its ``cfg``) in ``container``,
    stopped by ``timeout`` after ``limit_s`` seconds."""
    return f"timeout -k 5 {int(limit_s)} " + _in_container(container, workdir, "monitoring", json.dumps(cfg))


def benchmark_command(container: str, settings: Mapping[str, Any], aliases: dict[str, str],
                      expected_ips: list[str], dirs: HeadDirs, left_s: float | None = None) -> str:  # fmt: skip
    """The shell command that runs the cluster benchmark in the head container and copies its report out
    (into ``dirs.host``), whatever its exit status (a stopped benchmark leaves the phases it finished).

    + left_s: the seconds left of the checks' budget (default: all of ``checks_timeout_s``). The benchmark
      aims to finish :data:`BENCHMARK_MARGIN_S` before that (``--budget``); ``timeout`` stops it at
      ``left_s`` inside the container and stops ``docker exec`` a margin later on the head. The command
      prints its exit status after :data:`checks.run_budget.EXIT_MARKER`.
    """
    left = int(settings["checks_timeout_s"] if left_s is None else left_s)
    args = [
        "--cluster",
        "--expect-nodes", ",".join(sorted(expected_ips)),
        "--out", f"{dirs.container}/report.json",
        "--matmul-min-fraction", str(settings["checks_matmul_min_fraction"]),
        "--membw-min-fraction", str(settings["checks_membw_min_fraction"]),
        "--outlier-fraction", str(settings["checks_outlier_fraction"]),
        "--budget", str(max(1, left - BENCHMARK_MARGIN_S)),
        "--peer-factor", str(settings["checks_peer_timeout_factor"]),
        "--timeout", str(settings["checks_node_timeout_s"]),
    ]  # fmt: skip
    if settings["checks_profile"] == "quick":
        args.append("--quick")
    for ip, name in sorted(aliases.items()):
        args += ["--host-alias", f"{ip}={name}"]
    # `timeout` where the container has it: stopping `docker exec` on the head would leave the benchmark running
    inner = ["sh", "-c", BOUNDED, "_", str(left), "python", "-m", "checks.benchmark", *args]
    run = shlex.join(["timeout", "-k", "10", str(left + BENCHMARK_MARGIN_S),
                      "docker", "exec", "--workdir", dirs.container, container, *inner])  # fmt: skip
    report = shlex.quote(f"{container}:{dirs.container}/report.json")
    return " && ".join(
        [
            f"{run}; status=$?",
            f"echo {EXIT_MARKER}$status",
            f"docker cp {report} {shlex.quote(dirs.host + '/report.json')}",
            "exit $(( status > 1 ? status : 0 ))",
        ]
    )
