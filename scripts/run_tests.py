"""Run every test tier, each in its own pytest process, and sum up.

pyinfra's command-line module patches the process with gevent when it is
imported (the plan tier does), which breaks Ray and TLS clients in the same
process; one process per tier keeps the tiers independent. The tiers run in
``TIERS`` order whatever order they are named in, every tier even when an
earlier one fails; the exit status is non-zero if any failed.

When the e2e tier will run after the plan or cloud tier, the lab it uses comes
up meanwhile (``python -m tests.e2e.labkit``: the images built the first time,
the hosts started), in a process of its own whose output goes to a file; the
e2e tier waits for it, and its lab fixture then finds the lab in place (or
tries again and fails with its own error). Not during the unit tier: its tests
on a real local Ray measure time.

The end is one table of the tiers (tests and seconds each), the ten slowest
tests of the run, and one closing line, ``N passed, N failed, N skipped``.

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
from dataclasses import dataclass, field
from pathlib import Path

TIERS = ("unit", "plan", "cloud", "e2e")
#: The tiers the e2e tier's lab may come up alongside: not the unit tier, whose tests on a real
#: local Ray measure time and would be slowed by the image builds.
LAB_MEANWHILE = ("plan", "cloud")
#: pytest-xdist workers per tier, for tiers whose tests are independent and CPU-bound (this
#: machine has 2 cores). The e2e tier shares one lab and runs in one process.
WORKERS = {"unit": "2", "plan": "2", "cloud": "2"}
SLOWEST = 10
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class TierResult:
    tier: str
    status: int
    seconds: float
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    times: list[tuple[float, str]] = field(default_factory=list)  # (seconds, test id) of each test


def read_junit(junit: Path, result: TierResult) -> TierResult:
    """Fill ``result``'s counts and test times from a JUnit XML report (an error when pytest wrote none)."""
    if not junit.exists():
        result.errors = 1
        return result
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    result.passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    result.failed, result.errors, result.skipped = total["failures"], total["errors"], total["skipped"]
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        result.times.append((float(case.get("time", 0) or 0), name))
    return result


def ordered(argv: list[str]) -> tuple[list[str], list[str]]:
    """The tiers named in ``argv`` in ``TIERS`` order (all of them when none is named), and the rest."""
    named = {a for a in argv if a in TIERS}
    tiers = [t for t in TIERS if t in named] or list(TIERS)
    return tiers, [a for a in argv if a not in TIERS]


def lab_comes_up_meanwhile(tiers: list[str]) -> str | None:
    """The tier alongside which the e2e tier's lab comes up, or None (the e2e tier brings it up itself)."""
    if "e2e" not in tiers:
        return None
    return next((t for t in tiers if t in LAB_MEANWHILE), None)


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


def pytest_command(tier: str, junit: Path, extra: list[str]) -> list[str]:
    command = [sys.executable, "-m", "pytest", f"tests/{tier}", f"--junitxml={junit}", *extra]
    workers = WORKERS.get(tier)
    if workers and not any(a.startswith(("-n", "--numprocesses", "no:xdist")) for a in extra):
        command[3:3] = ["-n", workers]
    return command


def summary(results: list[TierResult]) -> list[str]:
    """The table of the tiers, the slowest tests, and the closing line."""
    lines = ["", "==> time per tier"]
    for r in results:
        state = "ok" if r.status == 0 else f"FAILED (pytest exit {r.status})"
        lines.append(f"  {r.tier:6s} {r.seconds:8.1f} s  {r.passed:4d} passed  {r.failed:3d} failed  "
                     f"{r.errors:3d} errors  {r.skipped:3d} skipped  {state}")  # fmt: skip
    lines.append(f"  {'total':6s} {sum(r.seconds for r in results):8.1f} s")
    slowest = sorted(((s, f"{r.tier}: {name}") for r in results for s, name in r.times), reverse=True)[:SLOWEST]
    if slowest:
        lines.append(f"==> the {len(slowest)} slowest tests")
        lines += [f"  {seconds:8.1f} s  {name}" for seconds, name in slowest]
    passed = sum(r.passed for r in results)
    failed = sum(r.failed + r.errors for r in results)
    skipped = sum(r.skipped for r in results)
    lines.append(f"{passed} passed, {failed} failed, {skipped} skipped")
    return lines


def main(argv: list[str]) -> int:
    tiers, extra = ordered(argv)
    meanwhile = lab_comes_up_meanwhile(tiers)
    results: list[TierResult] = []
    with tempfile.TemporaryDirectory() as tmp:
        lab = None
        for tier in tiers:
            junit = Path(tmp) / f"{tier}.xml"
            if tier == meanwhile:
                lab = start_lab(Path(tmp) / "lab-up.log")
            if tier == "e2e" and lab is not None:
                wait_for_lab(*lab)
            print(f"==> tier {tier}", flush=True)
            started = time.monotonic()
            status = subprocess.call(pytest_command(tier, junit, extra), cwd=ROOT)
            results.append(read_junit(junit, TierResult(tier, status, time.monotonic() - started)))
    print("\n".join(summary(results)), flush=True)
    return 0 if all(r.status == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
