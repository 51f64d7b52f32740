"""Run many ``rayrig`` command lines as ``python -m rayrig`` runs them, each in a process of its own.

Starting Python and importing rayrig takes most of a failing command's second; here it is done
once, and each command line runs in a child forked from that process, exactly as
``python -m rayrig ARGS`` would run it (``runpy`` runs ``rayrig/__main__.py``; an exception that
escapes is printed as Python prints it, with its traceback, and exits 1).

    python tests/unit/rayrig_forks.py < cases.json > results.json

Each case is ``{"argv": [...], "env": {...}}`` (``env`` is added to this process's environment);
each result ``{"status": N, "stdout": "...", "stderr": "..."}``, in the same order.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import rayrig.cli  # noqa: F401  # imported once, here, so that no child imports it again


def _child(argv: list[str], env: dict[str, str], out: Path, err: Path) -> int:
    """In the forked child: the command's exit status, with its stdin empty and its output in files."""
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
    os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
    os.environ.update(env)
    sys.argv = ["rayrig", *argv]
    try:
        runpy.run_module("rayrig", run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            return exit.code or 0
        print(exit.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


def run(argv: list[str], env: dict[str, str], folder: Path) -> dict[str, Any]:
    """One command line in a forked child: its exit status and output."""
    out, err = folder / "stdout", folder / "stderr"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            status = _child(argv, env, out, err)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    _, wait_status = os.waitpid(pid, 0)
    return {
        "status": os.waitstatus_to_exitcode(wait_status),
        "stdout": out.read_text(errors="replace"),
        "stderr": err.read_text(errors="replace"),
    }


def main() -> int:
    cases = json.load(sys.stdin)
    with tempfile.TemporaryDirectory(prefix="rayrig-forks-") as scratch:
        results = []
        for i, case in enumerate(cases):
            folder = Path(scratch) / str(i)
            folder.mkdir()
            results.append(run(case["argv"], case.get("env", {}), folder))
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
