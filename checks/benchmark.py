"""The post-deploy benchmark's command line: this machine (``--local``, torch only) or the Ray cluster
(``--cluster``, in the head's ray-node container: devices, all-reduce and a scheduling smoke test);
the report is judged (:mod:`checks.verdict`), printed (:mod:`checks.report`) and written as JSON.

Exit status: 0 PASS or WARN, 1 FAIL, 2 usage error. The report's schema: docs/design/benchmark-report.md.

    python -m checks.benchmark --local --json /tmp/bench.json
    python -m checks.benchmark --cluster --out /tmp/rayrig-bench.json --budget 600 --peer-factor 3 --timeout 300
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from . import REPORT_SCHEMA, gpu_health, report, specs, verdict
from .cluster_bench import DEFAULT_SWEEP_TASKS, BenchConfig, connect, run_cluster
from .deadlines import DEFAULT_NODE_TIMEOUT_S, DEFAULT_PEER_FACTOR, Budget
from .progress import log, phase, versions


def run_local(quick: bool = False) -> dict[str, Any]:
    """Benchmark this machine's GPUs (or CPU) with torch only; see the schema above."""
    from . import kernels  # imports torch: heavy, and --help or a missing torch must not need it

    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    with phase("devices", timing):
        result = kernels.run_local(quick=quick)
    specs.annotate(result["devices"])
    health = gpu_health.probe_local(result["nodes"][0]["host"], sum(d["kind"] == "gpu" for d in result["devices"]))
    if health is not None:  # nvidia-smi is here: what it, the kernel log and DCGM say (judged in the verdict)
        result["gpu_health"] = health
    result["versions"] = versions()
    result["timing"] = {**timing, "total_s": round(time.perf_counter() - t0, 3)}
    return result


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text}")
    return value


def _above(minimum: float, what: str) -> Callable[[str], float]:
    """An argparse type: a number above ``minimum``, else a usage error that says it expected ``what``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = minimum
        if not value > minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    return parse


_seconds = _above(0, "a number of seconds above 0")
_factor = _above(1, "a factor above 1 (times the peers' median)")


def _bytes(text: str) -> int:
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    text = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    try:
        return int(float(number) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 1048576, 1M or 1GiB, got {text!r}") from None


def partial_writer(path: str | None) -> Callable[[dict[str, Any]], None] | None:
    """What writes the report after each phase to ``path`` (atomically: a temporary file, then renamed),
    so that a run stopped later still leaves the phases it finished; None without a path."""
    if not path:
        return None

    def write_partial(result: dict[str, Any]) -> None:
        report.write_json(result, path)

    return write_partial


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m checks.benchmark``."""
    parser = argparse.ArgumentParser(
        prog="python -m checks.benchmark",
        description="Benchmark GPUs (or CPUs) and judge them against their datasheet and their peers.",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", action="store_true", help="this machine only, torch without Ray")
    where.add_argument("--cluster", action="store_true", help="the whole Ray cluster (run on the head)")
    parser.add_argument("--quick", action="store_true", help="fewer iterations and smaller sizes")
    parser.add_argument("--json", "--out", dest="json", metavar="PATH", help="write the JSON report here")
    parser.add_argument("--plot", metavar="PATH", help="PNG of all-reduce bus bandwidth (needs matplotlib)")
    parser.add_argument("--address", default="auto", help="Ray address for --cluster (default: auto)")
    parser.add_argument(
        "--matmul-min-fraction",
        type=_fraction,
        default=verdict.DEFAULT_MATMUL_MIN_FRACTION,
        help="checks_matmul_min_fraction: minimum matmul TFLOPS / datasheet (default 0.65)",
    )
    parser.add_argument(
        "--membw-min-fraction",
        type=_fraction,
        default=verdict.DEFAULT_MEMBW_MIN_FRACTION,
        help="checks_membw_min_fraction: minimum copy GB/s / datasheet (default 0.80)",
    )
    parser.add_argument(
        "--outlier-fraction",
        type=_fraction,
        default=verdict.DEFAULT_OUTLIER_FRACTION,
        help="checks_outlier_fraction: minimum fraction of the peers' median (default 0.9)",
    )
    parser.add_argument("--allreduce-min-bytes", type=_bytes, help="smallest all-reduce message (default 1MiB)")
    parser.add_argument(
        "--allreduce-max-bytes", type=_bytes, help="largest all-reduce message (default 1GiB on GPUs, 64MiB on CPUs)"
    )
    parser.add_argument("--allreduce-iters", type=int, help="timed all-reduce calls per size (default 20)")
    parser.add_argument(
        "--cpu-workers-per-node",
        type=int,
        default=1,
        help="all-reduce workers per node on CPU-only clusters (default 1)",
    )
    parser.add_argument(
        "--sweep-tasks", type=int, default=DEFAULT_SWEEP_TASKS, help="tasks in the scheduling smoke test (default 64)"
    )
    parser.add_argument(
        "--host-alias",
        action="append",
        default=[],
        metavar="IP=NAME",
        help="name the node at IP as NAME in the report (repeatable), e.g. the inventory's host names",
    )
    parser.add_argument(
        "--expect-nodes", default="", metavar="IP,IP,...",
        help="wait until exactly these nodes are alive before measuring (the inventory's addresses)",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=_seconds, default=DEFAULT_NODE_TIMEOUT_S, metavar="SECONDS",
        help="checks_node_timeout_s: the longest one node's measurement may take, with or without peers to judge "
             f"by; a node still running then is stopped and named (default {DEFAULT_NODE_TIMEOUT_S:g})",
    )  # fmt: skip
    parser.add_argument(
        "--budget", type=_seconds, metavar="SECONDS",
        help="checks_timeout_s, less what the checks before it took: the whole run ends with a verdict by then; "
             "a phase with no time left is not started, and the report says so (default: no budget)",
    )  # fmt: skip
    parser.add_argument(
        "--peer-factor", type=_factor, default=DEFAULT_PEER_FACTOR, metavar="F",
        help="checks_peer_timeout_factor: a node still running when the median node has finished F times over "
             f"is stopped, named and left out of the later phases (default {DEFAULT_PEER_FACTOR:g})",
    )  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="show Ray's worker logs")
    return parser


def bench_config(args: argparse.Namespace, aliases: dict[str, str]) -> BenchConfig:
    """The run's configuration from its command line."""
    return BenchConfig(
        quick=args.quick,
        allreduce_min_bytes=args.allreduce_min_bytes,
        allreduce_max_bytes=args.allreduce_max_bytes,
        allreduce_iters=args.allreduce_iters,
        cpu_workers_per_node=args.cpu_workers_per_node,
        sweep_tasks=args.sweep_tasks,
        timeout_s=args.timeout,
        host_aliases=aliases,
        expect_ips=[ip.strip() for ip in args.expect_nodes.split(",") if ip.strip()] or None,
        peer_factor=args.peer_factor,
        budget=Budget(args.budget) if args.budget else None,
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table and the verdict, write the JSON; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    aliases = {}
    for item in args.host_alias:
        ip, sep, name = item.partition("=")
        if not sep or not ip.strip() or not name.strip():
            parser.error(f"--host-alias expects IP=NAME, got {item!r}")
        aliases[ip.strip()] = name.strip()
    t0 = time.perf_counter()
    try:
        if args.local:
            result = run_local(quick=args.quick)
        else:
            log(f"connecting to Ray at {args.address}")
            connect(args.address, log_to_driver=args.verbose)
            result = run_cluster(bench_config(args, aliases), on_phase=partial_writer(args.json))
    except RuntimeError as exc:  # the cluster never settled: a report that says so, judged FAIL
        result = {"schema": REPORT_SCHEMA, "mode": "cluster", "quick": args.quick, "error": str(exc),
                  "nodes": [], "devices": [], "allreduce": None, "sweep_test": None}  # fmt: skip
    except ImportError as exc:
        missing = exc.name or str(exc)
        hint = "pip install rayrig[bench] (torch)" if missing == "torch" else "pip install rayrig[train]"
        print(f"benchmark: {missing} is not installed: {hint}", file=sys.stderr)
        return 1
    thresholds = {
        "matmul_min_fraction": args.matmul_min_fraction,
        "membw_min_fraction": args.membw_min_fraction,
        "outlier_fraction": args.outlier_fraction,
    }
    judged = verdict.evaluate(result, **thresholds)
    result["verdict"] = {**judged.as_dict(), "thresholds": thresholds}
    print(report.render(result, judged))
    if args.json:
        path = report.write_json(result, args.json)
        log(f"JSON report written to {path}")
    if args.plot:
        plotted = report.plot_busbw(result, args.plot)
        log(f"plot written to {plotted}" if plotted else "no plot (no all-reduce sweep, or no matplotlib)")
    log(f"finished in {time.perf_counter() - t0:.1f} s: {judged.status}")
    return judged.exit_code


if __name__ == "__main__":
    sys.exit(main())
