"""A deploy stopped with Ctrl-C exits 130 (deploy/run/interrupt.py), through pyinfra's real command line.

pyinfra's CLI answers SIGINT with exit status 0; a deploy file that calls ``exit_130_on_interrupt``
exits 130 instead. Both run here on ``@local`` with one operation that sleeps, and get SIGINT to
their process group (what Ctrl-C in a terminal sends) once that operation has started.
"""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.run.interrupt import INTERRUPTED

ROOT = Path(__file__).resolve().parents[2]

DEPLOY = """
import sys
sys.path.insert(0, {root!r})
from pyinfra.operations import server
{hook}
server.shell(name="Sleep a while", commands=["sleep 60"])
"""
HOOK = "from deploy.run.interrupt import exit_130_on_interrupt\nexit_130_on_interrupt()"


def interrupted_deploy(tmp_path: Path, hook: str) -> tuple[int, str]:
    """Run the deploy on @local, SIGINT once its operation started; its exit status and output."""
    deploy = tmp_path / "deploy.py"
    deploy.write_text(DEPLOY.format(root=str(ROOT), hook=hook))
    log = tmp_path / "out.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "pyinfra", "@local", str(deploy), "-y"],
            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while "Starting operation: Sleep a while" not in log.read_text():
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            time.sleep(0.5)  # into the operation
            os.killpg(process.pid, signal.SIGINT)
            status = process.wait(timeout=30)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    return status, log.read_text()


def test_ctrl_c_during_an_operation_ends_the_deploy_with_130(tmp_path):
    status, output = interrupted_deploy(tmp_path, HOOK)
    assert status == INTERRUPTED == 130, output
    assert "Exiting upon user request!" in output  # pyinfra's own line is still said


def test_without_it_pyinfras_command_line_says_0_which_is_why_the_deploy_installs_it(tmp_path):
    """pyinfra's own behaviour, pinned: if a pyinfra release exits non-zero by itself, this fails and
    deploy/run/interrupt.py can go."""
    status, output = interrupted_deploy(tmp_path, "")
    assert status == 0, output
    assert "Exiting upon user request!" in output


@pytest.mark.parametrize("deploy_file", ["cluster.py", "check.py"])
def test_the_deploy_and_the_checks_install_it_before_anything_else_runs(deploy_file):
    tree = ast.parse((ROOT / "deploy" / deploy_file).read_text())
    statements = [node for node in tree.body if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr))
                  or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call))]  # fmt: skip
    first = statements[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Call), ast.dump(first)
    assert ast.unparse(first.value.func) == "exit_130_on_interrupt"


def test_installed_twice_it_wraps_the_handler_once_and_keeps_what_it_wraps():
    from deploy.run import interrupt

    previous = signal.getsignal(signal.SIGINT)
    try:
        interrupt.exit_130_on_interrupt()
        once = signal.getsignal(signal.SIGINT)
        interrupt.exit_130_on_interrupt()
        assert signal.getsignal(signal.SIGINT) is once
        with pytest.raises(KeyboardInterrupt):  # around Python's default handler: KeyboardInterrupt, as before
            once(signal.SIGINT, None)
    finally:
        signal.signal(signal.SIGINT, previous)
