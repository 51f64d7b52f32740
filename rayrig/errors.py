"""How the ``rayrig`` command fails: its exit statuses, and one line for each failure a user can meet.

Every command runs through :func:`run_command`, which turns an exception into one line on stderr,

    rayrig image build: wheelhouse /missing: no such directory; make it with `rayrig image wheelhouse /missing`

(the command, what failed and why, then what to do), optionally followed by indented lines of
detail (each problem of a spec, the last lines a failed ``docker build`` printed), and into the
exit status. No expected failure shows a Python traceback; ``RAYRIG_DEBUG=1`` prints it above
the line. An exception nobody expected still gets its line, which says that it is a bug.

    0    success
    1    a failure at run time (Docker, AWS, SSH, a deploy, a check), or a bug
    2    bad usage: argparse's errors, and an input named on the command line that is missing
         or invalid (an inventory, a spec, a wheelhouse); nothing was changed
    130  interrupted (Ctrl-C)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import paramiko
from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError
from pyinfra.api.exceptions import PyinfraError

from cloud.ec2 import CloudError, SpecError
from cloud.ec2.aws import explain_error
from cloud.lab import LabError
from deploy.ray.auth import TokenError
from deploy.ray.tls_ca import TLSError
from images.stream import CommandError
from rayrig.dashboard import DashboardError
from rayrig.inventory import OperateError
from rayrig.jobs import JobError
from rayrig.run import InventoryFileError

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
#: Set to 1 to see the traceback of a failure above its line.
DEBUG_ENV = "RAYRIG_DEBUG"
BUG_HINT = f"run with {DEBUG_ENV}=1 for the traceback; this is a bug: report it"

#: What to do when one of the programs rayrig runs is not installed.
INSTALL_HINTS = {
    "docker": "install and start Docker: `make docker` does it (root with apt), or `sudo apt-get install docker.io`",
    "dockerd": "install Docker: `make docker` does it (root with apt), or `sudo apt-get install docker.io`",
    "ssh": "install the OpenSSH client (`sudo apt-get install openssh-client`)",
    "debootstrap": "install debootstrap (`sudo apt-get install debootstrap`), or `make docker` as root",
    "pyinfra": "install rayrig's dependencies: `make venv`, then use .venv/bin/rayrig",
}


class RayrigError(Exception):
    """An expected failure: ``message`` says what failed and why, ``hint`` what to do next.

    ``details`` are more lines (one problem each) printed indented below the message.
    """

    status = EXIT_FAILURE

    def __init__(self, message: str, hint: str | None = None, details: list[str] | tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = list(details)


class UsageError(RayrigError):
    """An input named on the command line is missing or invalid; nothing was done (exit 2)."""

    status = EXIT_USAGE


@dataclass
class Failure:
    """What the user reads about a failure, and the exit status."""

    message: str
    hint: str | None = None
    status: int = EXIT_FAILURE
    details: list[str] = field(default_factory=list)

    def lines(self, command: str) -> list[str]:
        """The line ``COMMAND: MESSAGE; HINT``, then the details, indented."""
        head = f"{command}: {self.message.rstrip()}"
        if self.hint:
            if head.endswith((".", ";", ":")) and not head.endswith(" ."):  # a sentence's end, not `docker build .`
                head = head[:-1]
            head += f"; {self.hint}"
        return [head, *(f"  {line}" for line in self.details)]


def _first_and_rest(text: str) -> tuple[str, list[str]]:
    lines = [line.rstrip() for line in str(text).strip().splitlines() if line.strip()]
    return (lines[0] if lines else ""), [line.strip() for line in lines[1:]]


def _os_failure(exc: OSError) -> Failure:
    program = os.path.basename(str(exc.filename or ""))
    if isinstance(exc, FileNotFoundError) and program in INSTALL_HINTS and exc.filename == program:
        return Failure(f"{program}: command not found", INSTALL_HINTS[program])
    if exc.filename is not None:
        what = exc.filename if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}"
        return Failure(f"{what}: {exc.strerror or exc}", "check the path and its permissions")
    message, details = _first_and_rest(str(exc))
    return Failure(message, None, EXIT_FAILURE, details)


def _spec_failure(exc: SpecError) -> Failure:
    hint = "nothing was created and AWS was not contacted"
    if len(exc.problems) == 1:  # the problem names the file and the key
        return Failure(f"invalid cluster spec: {exc.problems[0]}", f"fix it; {hint}", EXIT_USAGE)
    return Failure(f"invalid cluster spec {exc.source} ({len(exc.problems)} problems, below)", f"fix them; {hint}",
                   EXIT_USAGE, [f"- {problem}" for problem in exc.problems])  # fmt: skip


def _process_failure(exc: subprocess.CalledProcessError) -> Failure:
    command = exc.cmd if isinstance(exc.cmd, str) else " ".join(map(str, exc.cmd))
    output = exc.stderr or exc.output or ""
    if isinstance(output, bytes):
        output = output.decode(errors="replace")
    last = [line.strip() for line in output.splitlines() if line.strip()][-1:]
    return Failure(f"`{command}` exited with status {exc.returncode}" + (f": {last[0]}" if last else ""),
                   "see its output above")  # fmt: skip


def _ssh_failure(exc: paramiko.SSHException) -> Failure:
    if isinstance(exc, paramiko.BadHostKeyException):
        return Failure(
            f"SSH: the host key of {exc.hostname} is not the one in known_hosts",
            "if the host was rebuilt, remove its old key (ssh-keygen -R HOST); otherwise do not connect",
        )
    if isinstance(exc, paramiko.AuthenticationException):
        return Failure(f"SSH: the host refused the login ({exc})", "check ssh_user and ssh_key in the inventory")
    return Failure(f"SSH: {exc}", "check that `ssh USER@HOST` works from this machine")


def explain(exc: BaseException) -> Failure:
    """The line for ``exc``: its own words for rayrig's errors, one line for the libraries' errors,
    and a bug report line for anything else."""
    if isinstance(exc, RayrigError):
        message, rest = _first_and_rest(exc.message)
        return Failure(message, exc.hint, exc.status, rest + exc.details)
    if isinstance(exc, (InventoryFileError, OperateError, DashboardError)):
        message, details = _first_and_rest(str(exc))
        return Failure(message, None, exc.status, details)
    if isinstance(exc, SpecError):
        return _spec_failure(exc)
    if isinstance(exc, (CloudError, LabError, TokenError, TLSError, PyinfraError, JobError)):
        message, details = _first_and_rest(str(exc))
        return Failure(message, None, EXIT_FAILURE, details)
    if isinstance(exc, CommandError):
        message, details = _first_and_rest(str(exc))
        return Failure(message, "see the output above", EXIT_FAILURE, details)
    if isinstance(exc, (ClientError, BotoCoreError, ResponseParserError)):
        return Failure(explain_error(exc, "AWS"))
    if isinstance(exc, paramiko.SSHException):
        return _ssh_failure(exc)
    if isinstance(exc, subprocess.CalledProcessError):
        return _process_failure(exc)
    if isinstance(exc, subprocess.TimeoutExpired):
        return Failure(f"`{exc.cmd}` did not finish within {exc.timeout:.0f} s", "see its output above; then retry")
    if isinstance(exc, OSError):
        return _os_failure(exc)
    message, _ = _first_and_rest(str(exc))
    return Failure(f"unexpected {type(exc).__name__}" + (f": {message}" if message else ""), BUG_HINT)


def debugging() -> bool:
    """Whether ``RAYRIG_DEBUG`` asks for tracebacks."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "no", "false")


def report(command: str, failure: Failure) -> int:
    """Print ``failure`` on stderr (its line first) and return its exit status."""
    print("\n".join(failure.lines(command)), file=sys.stderr, flush=True)
    return failure.status


def run_command(func: Callable[[argparse.Namespace], int | None], args: argparse.Namespace, command: str) -> int:
    """Run a command's function: its exit status, or the status of the failure it raised, reported
    as one line on stderr (``command`` first, such as ``rayrig cloud ls``)."""
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        if debugging():
            traceback.print_exc()
        return report(command, Failure("interrupted", status=EXIT_INTERRUPTED))
    except BrokenPipeError:
        # The reader of stdout went away (`rayrig cloud ls | head -1`): nothing left to say to it.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE
    except Exception as exc:
        if debugging():
            traceback.print_exc()
        return report(command, explain(exc))
