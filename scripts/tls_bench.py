"""What Ray TLS costs on a running cluster: three measurements from the head's ray-node, as JSON.

    python scripts/tls_bench.py inventories/lab.py [--tasks 2000] [--object-mb 200] [--repeats 3]

Run from the repository root against a deployed cluster (not in CI: it needs the cluster). It
copies the ``checks`` package into the head's ray-node over the inventory's SSH settings (as the
post-deploy checks do), runs one Python driver there (``docker exec``: the container's environment
gives it the cluster's token and, with ``ray_tls = "on"``, Ray's TLS variables), removes the copy,
and prints one JSON object:

- ``scheduling``: the checks' scheduling test (:func:`checks.cluster_bench.run_sweep_test`: 64
  small SPREAD tasks that must reach every node), its wall time;
- ``small_tasks``: ``--tasks`` no-op tasks (``num_cpus=0``, SPREAD over the nodes) submitted at
  once, after a warm-up; tasks per second, best of ``--repeats``;
- ``large_object``: an object of ``--object-mb`` MB made by a task on the head and read by a task
  on another node (node affinity, so the bytes cross the network); MB per second, best of
  ``--repeats``.

``tls`` says which mode the cluster ran in (``RAY_USE_TLS`` in the container). To compare, alternate
the two modes in one session, so that the lab's load is alike for both::

    for i in 1 2 3; do
      for mode in off on; do
        pyinfra inventories/lab.py deploy/cluster.py -y --data ray_tls=$mode --data checks_enabled=False
        python scripts/tls_bench.py inventories/lab.py > tls-$mode-$i.json
      done
    done

(``RAYRIG_LAB`` names the lab, as for every command on it.) Then divide: on/off for the times,
off/on for the rates. Exit status: 0 measured, 1 the run failed (the remote error is printed), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere: the project's packages live in the root
    sys.path.insert(0, str(ROOT))

from checks.full import cleanup_command, install_command, made_dir, package_tarball, workdir_command  # noqa: E402
from rayrig.inventory import Host, OperateError, load_inventory, ssh_argv  # noqa: E402

#: The driver that runs in the head's ray-node (``python - TASKS OBJECT_MB REPEATS``); prints ``RESULT <json>``.
BENCH_PROGRAM = r"""
import json, os, statistics, sys, time
import numpy as np
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from checks import cluster_bench

tasks, object_mb, repeats = (int(a) for a in sys.argv[1:4])
cluster_bench.connect("auto", logging_level="ERROR")
nodes = cluster_bench.mark_busy(cluster_bench.cluster_nodes())  # as the checks run it
result = {"tls": os.environ.get("RAY_USE_TLS") == "1", "nodes": len(nodes), "ray": ray.__version__}

started = time.perf_counter()
sweep = cluster_bench.run_sweep_test(nodes)
result["scheduling"] = {
    "elapsed_s": round(time.perf_counter() - started, 3),
    "tasks": sweep.get("tasks"),
    "completed": sweep.get("completed"),
    "missing_nodes": sweep.get("missing_nodes"),
}

@ray.remote(num_cpus=0, scheduling_strategy="SPREAD")
def noop(i):
    return i

ray.get([noop.remote(i) for i in range(min(200, tasks))])  # warm-up: workers started on every node
rates = []
for _ in range(repeats):
    t0 = time.perf_counter()
    ray.get([noop.remote(i) for i in range(tasks)])
    rates.append(tasks / (time.perf_counter() - t0))
result["small_tasks"] = {"tasks": tasks, "tasks_per_s": round(max(rates), 1),
                         "median_tasks_per_s": round(statistics.median(rates), 1)}

here = ray.get_runtime_context().get_node_id()
others = [n["node_id"] for n in nodes if n["node_id"] != here]
if others:
    def on(node_id):
        return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)

    @ray.remote(num_cpus=0)
    def make(mb):
        return np.ones(mb * 2**20, dtype=np.uint8)

    @ray.remote(num_cpus=0)
    def read(array):
        return int(array[::4096].sum())

    speeds = []
    for _ in range(repeats):
        ref = make.options(scheduling_strategy=on(here)).remote(object_mb)
        ray.wait([ref], fetch_local=False)  # made and sealed on the head; nothing fetched yet
        t0 = time.perf_counter()
        ray.get(read.options(scheduling_strategy=on(others[0])).remote(ref))
        speeds.append(object_mb / (time.perf_counter() - t0))
        del ref
    result["large_object"] = {"mb": object_mb, "mb_per_s": round(max(speeds), 1),
                              "median_mb_per_s": round(statistics.median(speeds), 1)}
else:
    result["large_object"] = {"skipped": "one node only: nothing to move between nodes"}
print("RESULT " + json.dumps(result), flush=True)
"""


def remote_run(head: Host, command: str, stdin: bytes | None = None, timeout: float = 900) -> str:
    """Run ``command`` on the head (through its sudo when the inventory says so); its output, or exit 1."""
    line = shlex.join([*head.as_root, "sh", "-c", command]) if head.as_root else command
    result = subprocess.run(ssh_argv(head, line, batch=True), input=stdin or b"", capture_output=True, timeout=timeout)
    output = result.stdout.decode(errors="replace")
    if result.returncode != 0:
        print(f"on {head.name}: {command[:200]} failed ({result.returncode}):", file=sys.stderr)
        print((output + result.stderr.decode(errors="replace"))[-4000:], file=sys.stderr)
        raise SystemExit(1)
    return output


def measure(head: Host, tasks: int, object_mb: int, repeats: int) -> dict:
    """Copy the checks package into the head's ray-node, run the driver there, and clean up."""
    host_dir = made_dir(remote_run(head, workdir_command()).splitlines())
    if not host_dir:
        raise SystemExit(f"on {head.name}: no private folder made for the benchmark")
    container_dir = None
    try:
        unpack = f"cat > {shlex.quote(host_dir)}/checks.tgz && {install_command(head.container, host_dir)}"
        container_dir = made_dir(remote_run(head, unpack, package_tarball().getvalue()).splitlines())
        if not container_dir:
            raise SystemExit(f"on {head.name}: the checks package was not copied into {head.container}")
        driver = ["docker", "exec", "-i", "--workdir", container_dir, head.container, "python", "-"]
        output = remote_run(
            head, shlex.join([*driver, str(tasks), str(object_mb), str(repeats)]), BENCH_PROGRAM.encode()
        )
    finally:
        remote_run(head, cleanup_command(head.container, host_dir, container_dir))
    results = [line[len("RESULT ") :] for line in output.splitlines() if line.startswith("RESULT ")]
    if not results:
        raise SystemExit(f"on {head.name}: the driver printed no RESULT line:\n{output[-3000:]}")
    return json.loads(results[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inventory", help="pyinfra inventory of the deployed cluster, e.g. inventories/lab.py")
    parser.add_argument("--tasks", type=int, default=2000, help="no-op tasks per round (default 2000)")
    parser.add_argument("--object-mb", type=int, default=200, help="size of the object moved between nodes (MB)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the small tasks and of the object move")
    args = parser.parse_args(argv)
    if min(args.tasks, args.object_mb, args.repeats) < 1:
        parser.error("--tasks, --object-mb and --repeats must be at least 1")
    try:
        head = load_inventory(args.inventory).head
    except OperateError as error:
        print(f"tls_bench: {error}", file=sys.stderr)
        return 2
    print(json.dumps(measure(head, args.tasks, args.object_mb, args.repeats), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
