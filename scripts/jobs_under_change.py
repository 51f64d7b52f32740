"""Jobs under change on a lab of its own: a sweep of retried tasks runs while the cluster is changed.

    python scripts/jobs_under_change.py             # both parts
    python scripts/jobs_under_change.py --keep      # leave the lab up

tests/e2e/churnkit.py says what runs. The end is one table per part (each change and its seconds,
start to every node alive again) and the sweep's counts: tasks started, done, lost, retried. Exit
status 1 when a task was lost or a change failed. The lab (``rayrig-jobs`` unless
``RAYRIG_E2E_LAB`` says otherwise) starts fresh and is taken down at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAYRIG_E2E_LAB", "rayrig-jobs")
os.environ.pop("PYTEST_XDIST_WORKER", None)

from cloud import lab as local  # noqa: E402
from tests.e2e import churnkit  # noqa: E402
from tests.e2e.labkit import LAB, LAB_INVENTORY, Lab, deploy, fresh_lab, wait_for_alive  # noqa: E402


def report(title: str, changes: list[churnkit.Change], result: dict) -> bool:
    print(f"\n{title}\n")
    print("| change | seconds, start to every node alive | ok |")
    print("|---|---|---|")
    for c in changes:
        print(f"| {c.what} | {c.seconds:.1f} | {'yes' if c.ok else 'NO'}{': ' + c.detail if c.detail else ''} |")
    print(f"\nsweep: {result['started']} tasks started, {result['done']} done, {result['lost']} lost, "
          f"{result['retried']} retried ({result['attempts']} attempts), {result['seconds']} s; "
          f"by node: {result['by_node']}")  # fmt: skip
    if result["lost"]:
        print(f"lost, for example: {result['lost_examples']}")
    return all(c.ok for c in changes) and result["lost"] == 0 and result["done"] == result["started"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the lab up at the end")
    parser.add_argument("--parts", default="defaults,ft", help="defaults, ft or both (default: both)")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not parts or any(p not in ("defaults", "ft") for p in parts):
        parser.error(f"--parts: {args.parts!r}; choose from defaults, ft")
    started = time.monotonic()
    lab = Lab(fresh_lab(LAB))
    ok = True
    try:
        first = deploy(LAB_INVENTORY, *churnkit.NO_CHECKS)
        if first.returncode != 0:
            print("the first deploy failed", first.stdout[-3000:], first.stderr[-2000:])
            return 1
        wait_for_alive(lab)
        with tempfile.TemporaryDirectory(prefix="rayrig-jobs-") as folder:
            if "defaults" in parts:
                print("part 1: Ray's defaults, the sweep's driver on the head", flush=True)
                changes, result = churnkit.part_defaults(lab, Path(folder))
                ok &= report("Part 1: Ray's defaults, the driver on the head", changes, result)
            if "ft" in parts:
                print("part 2: ray_gcs_fault_tolerance = true, the sweep's driver on a worker", flush=True)
                changes, result = churnkit.part_gcs_fault_tolerance(lab, Path(folder))
                ok &= report("Part 2: GCS fault tolerance on, the driver on a worker", changes, result)
    finally:
        if not args.keep:
            local.down(LAB)
    print(f"\n{'every task done, none lost' if ok else 'NOT every task done'}; "
          f"{time.monotonic() - started:.0f} s in all")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
