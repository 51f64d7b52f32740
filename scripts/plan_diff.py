"""Compare two recordings of the plan tier: what every deploy run did, test by test.

    RAYRIG_PLAN_RECORD=/tmp/before .venv/bin/python scripts/run_tests.py plan
    ... change the code ...
    RAYRIG_PLAN_RECORD=/tmp/after .venv/bin/python scripts/run_tests.py plan
    .venv/bin/python scripts/plan_diff.py /tmp/before /tmp/after

A change meant to leave the plan alone (a move, a rename, a template that replaces code) exits 0:
every test's runs have the same operations, commands and uploads, byte for byte. Otherwise it
prints where each run first differs and exits 1. The recording is tests/plan/harness.py's ``record``;
values that differ from run to run by design are masked (:data:`MASKS`).
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

#: What differs from one run to the next by design, masked before comparing: random tokens (the Ray
#: token, 256 bits) and the digests of them and of certificates on ray-node's labels (its config hash
#: too: every other input of that hash is on the same command line), and the image mirror's run tag.
MASKS = [
    (re.compile(r"\b[0-9a-f]{64}\b"), "TOKEN"),
    (re.compile(r"(rayrig\.(?:auth-token-digest|tls-digest|config-hash)=)(?:[0-9a-f]+|TLS)\b"), r"\1DIGEST"),
    (re.compile(r"rayrig-(?:\d{14}|TIME)-[0-9a-f]{6}"), "rayrig-RUN-TAG"),
]


def load(folder: Path) -> dict[str, list[dict]]:
    """Each test's runs, in the order the test made them, masked (:data:`MASKS`)."""
    runs: dict[str, list[dict]] = defaultdict(list)
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            for pattern, mask in MASKS:
                line = pattern.sub(mask, line)
            run = json.loads(line)
            runs[run["test"]].append(run)
    return dict(runs)


def first_difference(before: dict, after: dict) -> str | None:
    """Where two runs of one test first differ, with a short diff; None when they do not."""
    if before == after:
        return None
    if sorted(before["hosts"]) != sorted(after["hosts"]):
        return f"hosts {sorted(before['hosts'])} -> {sorted(after['hosts'])}"
    for name in sorted(before["hosts"]):
        old, new = before["hosts"][name], after["hosts"][name]
        if old == new:
            continue
        old_text = json.dumps(old, indent=1, sort_keys=True).splitlines()
        new_text = json.dumps(new, indent=1, sort_keys=True).splitlines()
        diff = list(difflib.unified_diff(old_text, new_text, "before", "after", n=2, lineterm=""))
        return f"host {name}:\n" + "\n".join(diff[:40])
    return f"deploy file {before['deploy']} -> {after['deploy']}"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: plan_diff.py BEFORE_FOLDER AFTER_FOLDER", file=sys.stderr)
        return 2
    before, after = (load(Path(a)) for a in argv)
    problems = []
    for test in sorted(set(before) | set(after)):
        old, new = before.get(test, []), after.get(test, [])
        if len(old) != len(new):
            problems.append(f"{test}: {len(old)} deploy runs before, {len(new)} after")
            continue
        for n, (a, b) in enumerate(zip(old, new, strict=True)):
            difference = first_difference(a, b)
            if difference:
                problems.append(f"{test} (run {n + 1}): {difference}")
    runs = sum(len(r) for r in before.values())
    for problem in problems:
        print(problem, end="\n\n")
    print(f"{len(before)} tests, {runs} deploy runs compared: {len(problems)} differ")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
