"""Run every test tier, never two tiers in one pytest process, and sum up.

pyinfra's command-line module patches the process with gevent when it is
imported (the plan tier does), which breaks Ray and TLS clients in the same
process; separate processes keep the tiers independent. The tiers run in
``TIERS`` order whatever order they are named in, every tier even when an
earlier one fails; the exit status is non-zero if any failed.

A tier runs in one or more passes. The unit tier's tests on a real local Ray
(marked ``real_ray``) measure time: they run first and alone, one at a time;
the rest of the unit tier runs on every core (pytest-xdist), and the plan tier in
two pytest processes side by side, each on half its files (pyinfra's command-line
module patches its process with gevent, which stalls xdist's workers). The e2e
tier runs the lab's scenarios on two workers with a lab each (``--dist loadfile``:
a module stays on one worker and its lab; each module starts from its baseline, so
any worker may take any module). Those scenarios mostly wait on the lab (deploys
over SSH, Ray's and Prometheus's timers), so two passes run beside them, each in
one process of its own: the cloud tier (moto) and the e2e modules that need Docker
but not the lab (marked ``no_lab``). Without the lab's scenarios in the run they
run in the foreground, the cloud tier on every core.

When the e2e tier will run, the lab it uses comes up meanwhile, from the first
pass that tolerates it (after the real-Ray pass): ``python -m tests.e2e.labkit``
builds the images the first time and starts the hosts, then builds the workloads'
development image (``examples/images/dev``), in a process of its own
whose output goes to a file; the e2e tier waits for it, and its lab fixture then
finds the lab in place (or tries again and fails with its own error).

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
#: pytest-xdist workers for the passes whose tests are independent and CPU-bound (2 cores here).
WORKERS = "2"
#: The lab's scenarios' workers, one lab each (RAYRIG_E2E_WORKERS to try another number). Two keep 2 cores
#: about 80% busy; three overloaded them: every module ran slower and tests failed under the load
#: (docs/development.md, "CI").
LAB_WORKERS = os.environ.get("RAYRIG_E2E_WORKERS", "2")


@dataclass(frozen=True)
class Pass:
    """One pytest run of a tier: its marker expression, whether on every core, and whether the e2e
    tier's lab may come up alongside it (the image builds would skew tests that measure time)."""

    tier: str
    marker: str | None = None
    parallel: bool = True
    lab_meanwhile: bool = True
    needs_lab: bool = False
    dist: str | None = None  # xdist's --dist: "loadfile" keeps a module on one worker (and its lab)
    shards: int = 0  # instead of xdist: this many pytest processes side by side, each on some of the files
    beside_lab: bool = False  # in the background beside the lab's scenarios when they run (output printed after)
    workers: str = WORKERS  # xdist's workers when parallel (the lab's scenarios: one lab each)


PASSES = {
    "unit": (Pass("unit", "real_ray", parallel=False, lab_meanwhile=False), Pass("unit", "not real_ray")),
    # pyinfra's CLI module patches its process with gevent, which stalls xdist's workers: shards instead
    "plan": (Pass("plan", parallel=False, shards=int(WORKERS)),),
    # moto's servers in this process: beside the lab's scenarios, which mostly wait on the lab
    "cloud": (Pass("cloud", beside_lab=True),),
    "e2e": (
        # Docker but not the lab: beside the lab's scenarios too
        Pass("e2e", "no_lab", parallel=False, beside_lab=True),
        # one lab per worker; a module and its tests stay on one worker, in MODULE_ORDER as workers free up
        Pass("e2e", "not no_lab", lab_meanwhile=False, needs_lab=True, dist="loadfile", workers=LAB_WORKERS),
    ),
}
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
    """Add a JUnit XML report's counts and test times to ``result`` (an error when pytest wrote none)."""
    if not junit.exists():
        result.errors += 1
        return result
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    result.passed += total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    result.failed += total["failures"]
    result.errors += total["errors"]
    result.skipped += total["skipped"]
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        result.times.append((float(case.get("time", 0) or 0), name))
    return result


def ordered(argv: list[str]) -> tuple[list[str], list[str]]:
    """The tiers named in ``argv`` in ``TIERS`` order (all of them when none is named), and the rest."""
    named = {a for a in argv if a in TIERS}
    tiers = [t for t in TIERS if t in named] or list(TIERS)
    return tiers, [a for a in argv if a not in TIERS]


def passes(tiers: list[str]) -> list[Pass]:
    return [p for tier in tiers for p in PASSES[tier]]


def lab_comes_up_meanwhile(tiers: list[str]) -> Pass | None:
    """The pass alongside which the e2e tier's lab comes up, or None (the e2e tier brings it up itself)."""
    if "e2e" not in tiers:
        return None
    return next((p for p in passes(tiers) if p.lab_meanwhile), None)


def start_lab(log: Path, workers: int) -> tuple[subprocess.Popen, Path, float]:
    """Bring the e2e tier's labs (one per xdist worker) up in the background, their output to ``log``."""
    print(f"==> the e2e tier's labs come up meanwhile (their output: {log})", flush=True)
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.labkit", "up", str(workers)], cwd=ROOT, stdout=out,
            stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    return process, log, time.monotonic()


def wait_for_lab(process: subprocess.Popen, log: Path, started: float) -> None:
    """Wait for the background lab up; say how it went (its output when it failed)."""
    status = process.wait()
    print(f"==> the lab came up in the background: exit {status}, {time.monotonic() - started:.1f} s", flush=True)
    if status != 0:
        print(log.read_text()[-6000:], flush=True)


def in_background(step: Pass, steps: list[Pass]) -> bool:
    """Whether ``step`` runs in the background: beside the lab's scenarios, when ``steps`` has them."""
    return step.beside_lab and any(p.needs_lab for p in steps)


def pytest_command(step: Pass, junit: Path, extra: list[str], background: bool = False) -> list[str]:
    """The pass's pytest command line; in the background one process (the lab's workers have the cores)."""
    command = [sys.executable, "-m", "pytest", f"tests/{step.tier}", f"--junitxml={junit}"]
    if step.marker:
        command += ["-m", step.marker]
    if step.parallel and not background and not argv_workers(extra):
        # --no-loadscope-reorder: modules in collection order (MODULE_ORDER), not by their number of tests
        command += ["-n", step.workers] + (["--dist", step.dist, "--no-loadscope-reorder"] if step.dist else [])
    return command + extra


def argv_workers(extra: list[str]) -> bool:
    """Whether the extra arguments already say how many xdist workers (or none)."""
    return any(a.startswith(("-n", "--numprocesses", "no:xdist")) for a in extra)


def lab_workers(extra: list[str]) -> int:
    """How many labs the e2e tier's lab pass uses: one per xdist worker (0: no workers, one lab)."""
    if argv_workers(extra):
        for flag, value in zip(extra, extra[1:], strict=False):
            if flag in ("-n", "--numprocesses") and value.isdigit():
                return int(value)
        return 0
    lab_pass = PASSES["e2e"][-1]
    return int(lab_pass.workers) if lab_pass.parallel else 0


def shard_files(tier: str, shards: int) -> list[list[str]]:
    """The tier's test files in ``shards`` lists of about the same size (largest first, each to the
    lightest list so far): each list is one pytest process."""
    files = sorted((ROOT / "tests" / tier).glob("test_*.py"), key=lambda f: (-f.stat().st_size, f.name))
    lists: list[list[str]] = [[] for _ in range(shards)]
    sizes = [0] * shards
    for f in files:
        lightest = sizes.index(min(sizes))
        lists[lightest].append(str(f.relative_to(ROOT)))
        sizes[lightest] += f.stat().st_size
    return [sorted(x) for x in lists if x]


def run_shards(step: Pass, junit: Path, extra: list[str]) -> tuple[int, list[Path]]:
    """Run the pass's shards side by side; print each one's output once all are done. The worst exit
    status (5, no test in a shard, counts as none) and the reports they wrote."""
    runs = []
    for n, files in enumerate(shard_files(step.tier, step.shards)):
        report = junit.with_name(f"{junit.stem}-{n}.xml")
        log = junit.with_name(f"{junit.stem}-{n}.log")
        command = [sys.executable, "-m", "pytest", *files, f"--junitxml={report}", *extra]
        with log.open("w") as out:
            runs.append((subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT), report, log))
    statuses = []
    for process, _report, log in runs:
        status = process.wait()
        statuses.append(0 if status == 5 else status)
        print(log.read_text(), end="", flush=True)
    return max(statuses), [report for _process, report, _log in runs]


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


def note_status(result: TierResult, step: Pass, status: int) -> None:
    """A pass's exit status on its tier (5, no test, is a failure only where no marker selects)."""
    if status not in (0, 5) or (status == 5 and not step.marker):
        result.status = result.status or status


def finish_beside(beside: list[tuple], results: dict[str, TierResult]) -> None:
    """Wait for the passes that ran in the background; print each one's output and count its tests."""
    for done, process, report, log, began in beside:
        status = process.wait()
        print(f"==> tier {done.tier}" + (f" ({done.marker})" if done.marker else "")
              + f", in the background: exit {status}", flush=True)  # fmt: skip
        print(log.read_text(), end="", flush=True)
        result = read_junit(report, results[done.tier])
        # its own time, not the wait for it; beside a pass of its tier, the longer of the two (they overlap)
        result.seconds = max(result.seconds, junit_seconds(report) or time.monotonic() - began)
        note_status(result, done, status)
    beside.clear()


def junit_seconds(junit: Path) -> float:
    """The seconds pytest says its run took (0 when it wrote no report)."""
    if not junit.exists():
        return 0.0
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    return sum(float(s.get("time", 0) or 0) for s in suites)


def main(argv: list[str]) -> int:
    tiers, extra = ordered(argv)
    meanwhile = lab_comes_up_meanwhile(tiers)
    results = {tier: TierResult(tier, 0, 0.0) for tier in tiers}
    steps = passes(tiers)
    with tempfile.TemporaryDirectory() as tmp:
        lab = None
        beside: list[tuple] = []  # the passes running in the background: (step, process, junit, log, started)
        for number, step in enumerate(steps):
            junit = Path(tmp) / f"{number}-{step.tier}.xml"
            if step == meanwhile:
                lab = start_lab(Path(tmp) / "lab-up.log", lab_workers(extra))
            if step.needs_lab and lab is not None:
                wait_for_lab(*lab)
                lab = None
            print(f"==> tier {step.tier}" + (f" ({step.marker})" if step.marker else ""), flush=True)
            started = time.monotonic()
            if in_background(step, steps):
                log = junit.with_suffix(".log")
                with log.open("w") as out:
                    process = subprocess.Popen(pytest_command(step, junit, extra, background=True), cwd=ROOT,
                                               stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
                print(f"    in the background, beside the lab's scenarios (its output: {log})", flush=True)
                beside.append((step, process, junit, log, started))
                continue
            if step.shards:
                status, reports = run_shards(step, junit, extra)
            else:
                status, reports = subprocess.call(pytest_command(step, junit, extra), cwd=ROOT), [junit]
            result = results[step.tier]
            for report in reports:
                read_junit(report, result)
            result.seconds += time.monotonic() - started
            note_status(result, step, status)
            if step.needs_lab and meanwhile is not None:  # a lab no worker took down (it got no scenario)
                subprocess.call([sys.executable, "-m", "tests.e2e.labkit", "down", str(lab_workers(extra))],
                                cwd=ROOT, stdout=subprocess.DEVNULL)  # fmt: skip
            if step.needs_lab:
                finish_beside(beside, results)
        finish_beside(beside, results)
    print("\n".join(summary(list(results.values()))), flush=True)
    return 0 if all(r.status == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
