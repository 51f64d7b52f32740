"""Every ``rayrig`` subcommand, run as a user runs it (``python -m rayrig ...``), fails cleanly.

The subcommands come from walking the command's own argparse tree, so a new one is covered
without touching this file. Each run is a process of its own: those that fail at run time are
``python -m rayrig ...`` itself; the many others are forked, as ``python -m rayrig`` runs, from one
process that imported rayrig once (``rayrig_forks.py``), which keeps the test to seconds. Each
command gets:

- bad arguments (an unknown option, a value its option's type refuses): exit 2 and argparse's
  ``error:`` line;
- missing inputs (an inventory, a spec, a folder or file an option names, none of which exists):
  exit 2 and one line that names the missing path;
- for the commands listed in ``RUNTIME``, valid arguments on a machine where Docker, SSH and AWS
  all fail: exit 1 and one line saying what failed.

No output may hold a traceback, and before their arguments are validated no command may run
``docker``, ``ssh``, ``debootstrap`` or ``apt-get`` (stubs on PATH record any call) or reach AWS
(its endpoint is a closed local port). Commands that would start real work with valid
arguments are not run that way; ``SKIPPED_AT_RUN_TIME`` says which and why.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.contract.paths import repo_root
from rayrig.cli import build_parser, leaves

pytestmark = pytest.mark.slow

#: Positional arguments that name an input file, and a value for it that does not exist.
MISSING_INPUTS = {"inventory": "no/such/inventory.py", "spec": "no/such/spec.toml"}
#: Options that name an input (file or folder), by their dest; a missing one is refused before any work.
MISSING_OPTION_INPUTS = {"wheelhouse", "requirements", "working_dir"}
#: Positional arguments that name no input, with a valid value (so the other arguments can be tried).
NOT_INPUTS = {
    "name": "sprint42",  # rayrig cloud down NAME: a cluster's name, looked up in AWS
    "dir": "no/such/wheelhouse",  # rayrig image wheelhouse DIR: the folder to fill, created
    "host": "head",  # rayrig ssh/logs INVENTORY [HOST]
    "duration": "12h",  # rayrig cloud extend NAME DURATION
}
#: Arguments that take the rest of the command line as they are (pyinfra's, a command's).
PASSED_ON = (argparse.REMAINDER, "*")

#: Valid arguments, on a machine where Docker, SSH and AWS fail: each exits 1 with the line's words.
RUNTIME = {
    ("lab", "status"): "Docker does not answer",
    ("lab", "down"): "Docker does not answer",
    ("cloud", "ls", "--region", "us-east-1"): "cannot reach",
    ("cloud", "down", "sprint42", "--region", "us-east-1"): "cannot reach",
    ("cloud", "reap", "--region", "us-east-1"): "cannot reach",
    ("cloud", "extend", "sprint42", "12h", "--region", "us-east-1"): "cannot reach",
    ("image", "build", "--wheelhouse", "{wheelhouse}", "--tag", "rayrig-test/none:0"): "docker build",
    ("dashboard", "tests/plan/fake_inventory.py", "--local-port", "18265"): "ssh to @fake/head exited",
}
#: Commands not run with valid arguments here, and why (their failures are tested where they run).
SKIPPED_AT_RUN_TIME = {
    "rayrig lab up": "builds the lab's images and containers (minutes); the e2e tier calls what it runs, cloud.lab.up",
    "rayrig demo": "brings up the lab and deploys to it (minutes); the e2e tier runs its parts, not the command",
    "rayrig image wheelhouse": "downloads Ray's and torch's wheels (GBs)",
    "rayrig cloud up": "creates EC2 resources; the cloud tier runs it against moto",
    "rayrig deploy": "runs pyinfra against an inventory's hosts; the plan tier runs it on @fake hosts",
    "rayrig check": "runs the checks on hosts; the plan and e2e tiers run them",
    "rayrig token rotate": "deploys a new token to hosts; tests/unit/test_token_cli.py runs it on @fake hosts",
    "rayrig tls rotate": "deploys a new CA to hosts; tests/unit/test_tls_cli.py runs it around a stubbed deploy",
    "rayrig tls client-cert": "needs a cluster's CA; tests/unit/test_tls_cli.py runs it with one",
}

STUBS = {
    "docker": "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
    "ssh": "ssh: connect to host 10.0.0.1 port 22: Connection refused",
    "debootstrap": "debootstrap: must not run here",
    "apt-get": "apt-get: must not run here",
}


@dataclass(frozen=True)
class Case:
    """One run of the command: its arguments, the exit status expected and what its error line must hold."""

    argv: tuple[str, ...]
    status: int
    words: str
    label: str
    may_run_programs: bool = False


def _positionals(leaf: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in leaf._actions if not a.option_strings and a.nargs not in (*PASSED_ON, "?")]


def _path(leaf: argparse.ArgumentParser) -> tuple[str, ...]:
    return tuple(leaf.prog.split()[1:])


def usage_cases(leaf: argparse.ArgumentParser) -> list[Case]:
    """Bad arguments: exit 2 with argparse's error line."""
    path, positionals = _path(leaf), _positionals(leaf)
    filled = [MISSING_INPUTS.get(a.dest) or NOT_INPUTS.get(a.dest) for a in positionals]
    unknown = [a.dest for a, value in zip(positionals, filled, strict=True) if value is None]
    assert not unknown, (
        f"{leaf.prog}: positional argument(s) {unknown}: add each to MISSING_INPUTS (it names an input file) "
        "or NOT_INPUTS (with a valid value) in this test"
    )
    cases = [Case((*path, "--rayrig-no-such-option", *filled), 2, "unrecognized arguments", "unknown option")]
    for action in leaf._actions:
        if action.option_strings and action.type not in (None, str, Path) and action.dest not in MISSING_OPTION_INPUTS:
            option, named = action.option_strings[-1], "/".join(action.option_strings)  # argparse's "-n/--lines"
            cases.append(Case((*path, *filled, option, "not-a-value!"), 2, f"argument {named}", f"bad {option}"))
        if action.option_strings and action.choices:
            option = action.option_strings[-1]
            cases.append(Case((*path, *filled, option, "not-a-choice"), 2, "invalid choice", f"bad {option}"))
    return cases


def missing_input_cases(leaf: argparse.ArgumentParser) -> list[Case]:
    """Inputs that do not exist: exit 2 and one line naming the missing path."""
    path, positionals = _path(leaf), _positionals(leaf)
    filled = [MISSING_INPUTS.get(a.dest) or NOT_INPUTS[a.dest] for a in positionals]
    cases = [
        Case((*path, *filled), 2, value, f"missing {action.dest}")
        for action, value in zip(positionals, filled, strict=True)
        if action.dest in MISSING_INPUTS
    ]
    for action in leaf._actions:
        if action.option_strings and action.dest in MISSING_OPTION_INPUTS:
            missing = f"no/such/{action.dest}"
            valid = [NOT_INPUTS.get(a.dest, "tests/plan/fake_inventory.py") for a in positionals]
            option = action.option_strings[-1]
            cases.append(Case((*path, *valid, option, missing), 2, missing, f"missing {option}"))
    return cases


def all_cases(wheelhouse: Path) -> list[Case]:
    """The runs, the slower first (those that fail at run time get further), so that they overlap the others."""
    cases = []
    for argv, words in RUNTIME.items():
        argv = tuple(arg.format(wheelhouse=wheelhouse) for arg in argv)
        cases.append(Case(argv, 1, words, "fails at run time", may_run_programs=True))
    for leaf in leaves(build_parser()):
        cases += usage_cases(leaf) + missing_input_cases(leaf)
    return cases


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment where Docker, SSH and AWS fail, and every call of the stubbed programs is recorded."""
    root = tmp_path_factory.mktemp("machine")
    stubs = root / "bin"
    stubs.mkdir()
    for program, says in STUBS.items():
        stub = stubs / program
        stub.write_text(f'#!/bin/sh\necho "{program} $*" >> "$RAYRIG_TEST_CALLS"\necho "{says}" >&2\nexit 1\n')
        stub.chmod(0o755)
    with socket.socket() as sock:  # a port nobody listens on: AWS "cannot be reached"
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RAYRIG_", "RAY_"))}
    env.update(
        PATH=f"{stubs}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        RAYRIG_STATE_DIR=str(root / "state"),
        RAYRIG_AWS_ENDPOINT_URL=f"http://127.0.0.1:{closed_port}",
        RAYRIG_AWS_MAX_ATTEMPTS="1",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(root / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(root / "no-aws-credentials"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    wheelhouse = root / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "ray-0-py3-none-any.whl").write_bytes(b"")
    env["WHEELHOUSE"] = str(wheelhouse)
    return env


def run(case: Case, env: dict[str, str], calls: Path) -> tuple[int, str, str]:
    """``python -m rayrig ARGV``: its exit status and output."""
    result = subprocess.run(
        [sys.executable, "-m", "rayrig", *case.argv],
        cwd=repo_root(),
        env={**env, "RAYRIG_TEST_CALLS": str(calls)},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    return result.returncode, result.stdout, result.stderr


def run_forked(cases: list[Case], env: dict[str, str], calls: list[Path]) -> list[tuple[int, str, str]]:
    """Each case as ``python -m rayrig ARGV`` runs it, in children forked from one process (rayrig_forks.py)."""
    todo = [{"argv": list(c.argv), "env": {"RAYRIG_TEST_CALLS": str(p)}} for c, p in zip(cases, calls, strict=True)]
    result = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("rayrig_forks.py"))],
        cwd=repo_root(),
        env={**env, "PYTHONPATH": str(repo_root())},
        input=json.dumps(todo),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return [(r["status"], r["stdout"], r["stderr"]) for r in json.loads(result.stdout)]


def test_every_command_fails_with_one_line_and_the_documented_exit_status(machine, tmp_path):
    cases = all_cases(Path(machine["WHEELHOUSE"]))
    commands = {leaf.prog for leaf in leaves(build_parser())}
    assert {"rayrig lab up", "rayrig cloud ls", "rayrig image build", "rayrig dashboard"} <= commands
    assert set(SKIPPED_AT_RUN_TIME) <= commands, "a skipped command is gone: drop it from SKIPPED_AT_RUN_TIME"
    calls = [tmp_path / f"calls-{i}" for i in range(len(cases))]
    own = [i for i, case in enumerate(cases) if case.may_run_programs]  # python -m rayrig itself
    forked = [i for i in range(len(cases)) if i not in own]

    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        in_children = pool.submit(run_forked, [cases[i] for i in forked], machine, [calls[i] for i in forked])
        by_itself = {i: pool.submit(run, cases[i], machine, calls[i]) for i in own}
        results = dict(zip(forked, in_children.result(), strict=True))
        results.update({i: future.result() for i, future in by_itself.items()})

    problems = []
    for i, case in enumerate(cases):
        problems += judge(case, *results[i], calls[i])
    assert not problems, f"{len(problems)} of {len(cases)} runs went wrong:\n" + "\n".join(problems)


def judge(case: Case, status: int, out: str, err: str, calls: Path) -> list[str]:
    """What is wrong with one run: each problem as a line naming the command line."""
    where = f"rayrig {' '.join(case.argv)} ({case.label})"
    problems = []
    if "Traceback" in out + err:
        problems.append(f"{where}: a traceback:\n{err}")
    if status != case.status:
        problems.append(f"{where}: exit status {status}, expected {case.status}; stderr:\n{err}")
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("  ", "usage:", "       "))]
    if case.status == 2 and "error:" in err:  # argparse's: usage, then one error line
        if not (len(lines) == 1 and lines[0].startswith("rayrig") and ": error: " in lines[0]):
            problems.append(f"{where}: expected argparse's one error line, got:\n{err}")
        elif case.words not in lines[0]:
            problems.append(f"{where}: the error line does not say {case.words!r}: {lines[0]}")
    elif len(lines) != 1 or not lines[0].startswith(f"rayrig {case.argv[0]}"):
        problems.append(f"{where}: expected one line starting with the command, got:\n{err}")
    elif case.words not in lines[0]:
        problems.append(f"{where}: the error line does not say {case.words!r}: {lines[0]}")
    if calls.exists() and not case.may_run_programs:
        problems.append(f"{where}: ran before validating its arguments: {calls.read_text().strip()}")
    return problems
