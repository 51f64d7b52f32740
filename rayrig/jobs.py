"""A job on the cluster through Ray's Jobs API, over the dashboard's tunnel (``rayrig submit``).

The Jobs API is HTTP, so this machine's Ray need not match the cluster's as the Ray
Client's would. The client is Ray's own ``JobSubmissionClient`` (``ray[default]`` is one
of rayrig's dependencies), so a job is submitted exactly as ``ray job submit`` does it:
the ``--working-dir`` is zipped (honouring ``.gitignore``), named by a hash of its
content and uploaded to ``/api/packages/gcs/...`` unless the cluster has it already,
and the job's logs arrive over the dashboard's websocket as the job writes them.

The token: the dashboard admits a request that carries ``Authorization: Bearer
<token>`` (Ray's ``http_token_authentication``; Ray's own clients build that header
from ``RAY_AUTH_TOKEN_PATH`` when ``RAY_AUTH_MODE=token``). rayrig reads the local copy
of the cluster's token (``auth.token_path``) and hands the header to the client in
memory: it is on no command line, in no environment and in no message. An explicit
header also wins over a ``RAY_AUTH_TOKEN_PATH`` of another cluster in the user's shell.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import shlex
import string
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.ray import auth

#: What a job ends as, and the exit status ``rayrig submit`` ends with for it.
EXIT_STATUS = {"SUCCEEDED": 0, "FAILED": 1, "STOPPED": 1}
TERMINAL = tuple(EXIT_STATUS)
#: How Ray's job supervisor starts the message of a failed entrypoint; the log's tail follows it.
LOG_TAIL_MARK = re.compile(r",? last available logs \(truncated to [\d,]+ chars\):\s*$")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: What the Jobs API answers while the head has no job agent yet (just started), and how long to wait for one.
NO_AGENT = "No available agent to submit job"
AGENT_WAIT_S, AGENT_RETRY_S = 60.0, 2.0
ID_CHARACTERS = "".join(sorted(set(string.ascii_letters + string.digits) - set("IloO0")))


class JobError(Exception):
    """The job could not be submitted or followed; the message says what failed and what to do."""


def auth_headers(token_file: Path | None) -> dict[str, str]:
    """The header that admits this machine to the cluster's dashboard (none without token authentication).

    The token stays in this mapping, in memory; errors name the file, never its content.
    """
    if token_file is None:
        return {}
    if not token_file.is_file():
        raise JobError(
            f"there is no local copy of the cluster's Ray token ({token_file}). A deploy from this machine "
            "fetches it from the head (`rayrig deploy INVENTORY`), or copy the head's "
            f"{auth.NODE_TOKEN_PATH} there (mode 0600)"
        )
    token = auth.read_token(token_file)
    if not token:
        raise JobError(f"the cluster's Ray token file {token_file} is empty")
    return {"Authorization": f"Bearer {token}"}


def environment(pairs: Sequence[str], local: Mapping[str, str]) -> dict[str, str]:
    """The job's environment variables from ``--env`` values: ``NAME=VALUE``, or ``NAME`` for this
    machine's value of it (a secret then stays off the command line)."""
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not ENV_NAME.match(name):
            raise ValueError(f"--env {name!r}: expected NAME=VALUE or NAME, NAME a variable name such as WANDB_MODE")
        if not sep:
            if name not in local:
                raise ValueError(f"--env {name}: {name} is not set here (give NAME=VALUE, or export {name} first)")
            value = local[name]
        env[name] = value
    return env


def runtime_env(working_dir: Path | None, env: Mapping[str, str]) -> dict[str, Any]:
    """The job's ``runtime_env``: the folder Ray uploads as its working directory, its variables."""
    runtime: dict[str, Any] = {}
    if working_dir is not None:
        runtime["working_dir"] = str(working_dir)
    if env:
        runtime["env_vars"] = dict(env)
    return runtime


def connect(address: str, headers: Mapping[str, str]) -> Any:
    """Ray's ``JobSubmissionClient`` for the dashboard at ``address``, once it answered with its version."""
    # Importing Ray takes a second and loads its native library: only the commands that submit pay for it.
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    logging.getLogger("ray.dashboard.modules.job.sdk").setLevel(logging.WARNING)  # "WebSocket closed ..."
    try:
        return JobSubmissionClient(address, headers=dict(headers))
    except AuthenticationError as error:
        raise JobError(_refused(error)) from None
    except (OSError, RuntimeError, ValueError) as error:  # requests' errors are OSErrors
        raise JobError(f"the dashboard at {address} does not answer as Ray's Jobs API: {_first_line(error)}") from None


def submission_id() -> str:
    """A new ID for a job, in the form the Jobs API makes them (``raysubmit_`` and 16 unambiguous characters)."""
    return "raysubmit_" + "".join(secrets.choice(ID_CHARACTERS) for _ in range(16))


def submit(client: Any, command: Sequence[str], runtime: Mapping[str, Any], wait_s: float = AGENT_WAIT_S) -> str:
    """Submit ``command`` with ``runtime``; the job's submission ID. The head runs it with a shell,
    each argument quoted as the user gave it.

    A head that has just started has no job agent yet, and the Jobs API says so ("No available
    agent to submit job, please try again later"): the submission is tried again for up to
    ``wait_s``, with the same ID, so that one that got through before its answer was lost is
    found rather than started twice.
    """
    # Ray's exception for a refused token, from the module connect() loaded.
    from ray.exceptions import AuthenticationError

    job_id, deadline, tried = submission_id(), time.monotonic() + wait_s, False
    while True:
        try:
            return client.submit_job(entrypoint=shlex.join(command), runtime_env=dict(runtime), submission_id=job_id)
        except AuthenticationError as error:
            raise JobError(_refused(error)) from None
        except RuntimeError as error:
            if tried and f"{job_id} already exists" in str(error):
                return job_id  # an earlier try got through
            if NO_AGENT not in str(error) or time.monotonic() > deadline:
                raise JobError(f"the job was not submitted: {_first_line(error)}") from None
        except (OSError, ValueError) as error:
            raise JobError(f"the job was not submitted: {_first_line(error)}") from None
        tried = True
        time.sleep(AGENT_RETRY_S)


def follow(client: Any, job_id: str, write: Callable[[str], Any]) -> None:
    """Pass the job's logs to ``write`` as they come, until the job ends (the dashboard then closes the stream)."""

    async def tail() -> None:
        async for chunk in client.tail_job_logs(job_id):
            write(chunk)

    # Ray's client streams through aiohttp (a dependency of ray[default]); loaded with it, only to follow a job.
    from aiohttp import ClientError

    try:
        asyncio.run(tail())
    except (ClientError, OSError, RuntimeError) as error:
        raise JobError(f"lost the job's log stream: {_first_line(error)}") from None


@dataclass(frozen=True)
class Outcome:
    """How a job ended: its status, and for a job that did not succeed, its error line."""

    status: str
    error: str

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.status]


def outcome(client: Any, job_id: str, wait_s: float = 30) -> Outcome:
    """The job's end, once the Jobs API records it (the log stream can close a moment before)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            info = client.get_job_info(job_id)
        except (OSError, RuntimeError) as error:
            raise JobError(f"could not read the job's status: {_first_line(error)}") from None
        status = str(info.status)
        if status in TERMINAL:
            return Outcome(status, "" if status == "SUCCEEDED" else error_line(info.message or ""))
        if time.monotonic() > deadline:
            raise JobError(f"the job's log stream ended but the job is still {status} after {wait_s:.0f} s")
        time.sleep(0.5)


def error_line(message: str) -> str:
    """One line saying why a job failed, from the Jobs API's message: for a failed entrypoint, Ray's first
    line ("Job entrypoint command failed with exit code 1") and the last line of its logs (the exception).

    >>> error_line("Job entrypoint command failed with exit code 1, last available logs "
    ...            "(truncated to 20,000 chars):\\nTraceback ...\\n  ...\\nValueError: no GPU here\\n")
    'Job entrypoint command failed with exit code 1: ValueError: no GPU here'
    """
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if not lines:
        return "(the Jobs API gave no message)"
    head = LOG_TAIL_MARK.sub("", lines[0])
    if head != lines[0] and len(lines) > 1:
        return f"{head}: {lines[-1]}"[:500]
    return head[:500]


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]


def _refused(error: BaseException) -> str:
    return (
        f"the dashboard refused the cluster's Ray token ({_first_line(error)}). The local copy is not the "
        "token the cluster runs: `rayrig deploy INVENTORY` says which differs"
    )
