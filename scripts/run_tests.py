"""Run every test tier, each in its own pytest process, and sum up.

pyinfra's command-line module patches the process with gevent when it is
imported (the plan tier does), which breaks Ray and TLS clients in the same
process; one process per tier keeps the tiers independent. Every tier runs
even when an earlier one fails; the exit status is non-zero if any failed.

When the e2e tier runs after the plan or cloud tier, the lab it uses comes up
meanwhile (``python -m tests.e2e.labkit``: the images built the first time,
the hosts started), in a process of its own whose output goes to a file; the
e2e tier waits for it, and its lab fixture then finds the lab in place (or
tries again and fails with its own error). Not during the unit tier: its tests
on a real local Ray measure time.

    python scripts/run_tests.py                 # unit, plan, cloud, e2e
    python scripts/run_tests.py unit plan -x    # some tiers, extra pytest arguments
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

TIERS = ("unit", "plan", "cloud", "e2e")
#: The tiers the e2e tier's lab may come up alongside: not the unit tier, whose tests on a real
#: local Ray measure time and would be slowed by the image builds.
LAB_MEANWHILE = ("plan", "cloud")
ROOT = Path(__file__).resolve().parent.parent


def counts(junit: Path) -> dict[str, int]:
    """passed/failed/skipped/errors from a JUnit XML report (zeros when pytest wrote none)."""
    if not junit.exists():
        return {"passed": 0, "failed": 0, "skipped": 0, "errors": 1}
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return {"passed": passed, "failed": total["failures"], "skipped": total["skipped"], "errors": total["errors"]}


def start_lab(log: Path) -> tuple[subprocess.Popen, Path, float]:
    """Bring the e2e tier's lab up in the background, its output to ``log``."""
    print(f"==> the e2e tier's lab comes up meanwhile (its output: {log})", flush=True)
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.labkit"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    return process, log, time.monotonic()


def wait_for_lab(process: subprocess.Popen, log: Path, started: float) -> None:
    """Wait for the background lab up; say how it went (its output when it failed)."""
    status = process.wait()
    print(f"==> the lab came up in the background: exit {status}, {time.monotonic() - started:.1f} s", flush=True)
    if status != 0:
        print(log.read_text()[-6000:], flush=True)


def main(argv: list[str]) -> int:
    tiers = [a for a in argv if a in TIERS] or list(TIERS)
    extra = [a for a in argv if a not in TIERS]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        lab = None
        for tier in tiers:
            junit = Path(tmp) / f"{tier}.xml"
            if lab is None and tier in LAB_MEANWHILE and "e2e" in tiers:
                lab = start_lab(Path(tmp) / "lab-up.log")
            if tier == "e2e" and lab is not None:
                wait_for_lab(*lab)
            print(f"==> tier {tier}", flush=True)
            started = time.monotonic()
            status = subprocess.call(
                [sys.executable, "-m", "pytest", f"tests/{tier}", f"--junitxml={junit}", "--durations=12", *extra],
                cwd=ROOT,
            )
            results.append((tier, status, time.monotonic() - started, counts(junit)))
    print("\n==> time per tier")
    for tier, status, seconds, c in results:
        state = "ok" if status == 0 else f"FAILED (pytest exit {status})"
        print(f"  {tier:6s} {seconds:8.1f} s  {c['passed']:4d} passed  {c['failed']:3d} failed  "
              f"{c['errors']:3d} errors  {c['skipped']:3d} skipped  {state}")  # fmt: skip
    passed = sum(c["passed"] for *_, c in results)
    failed = sum(c["failed"] + c["errors"] for *_, c in results)
    skipped = sum(c["skipped"] for *_, c in results)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0 if all(status == 0 for _, status, _, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
