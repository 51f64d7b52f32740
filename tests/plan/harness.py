"""Run ``deploy/cluster.py`` in-process against ``@fake`` hosts and record what it did.

``run_deploy(hosts)`` goes through the same steps as ``pyinfra INVENTORY
deploy/cluster.py -y``: build the inventory, connect, load the deploy file
once per host, run the operations. The fake connector answers facts from each
host's ``fake_responses``; its ``put_file`` is wrapped to keep every file
uploaded (path -> content). The commands of each operation come from its
``OperationMeta`` once it ran (``_commands``: pyinfra has no public accessor),
masked the way pyinfra prints them.

``Run.output`` is what ``pyinfra -vvv --debug`` would print: every command and fact command sent,
every fact's output, every operation's output and pyinfra's debug log (the fake connector's
``echo`` and pyinfra's logger, captured while the run lasts), with what the deploy prints itself.

Every run has a State of its own; what the deploy keeps for a run (facts read, the
cluster's addresses) lives in ``deploy.run.memo``, held weakly per State, so runs never
share it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyinfra
from pyinfra.api import Config, FileUploadCommand, Inventory, State, StringCommand
from pyinfra.api import output as pyinfra_output
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage
from pyinfra.connectors.fake import FakeConnector
from pyinfra.context import ctx_config, ctx_inventory, ctx_state
from pyinfra_cli.util import load_deploy_file

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "deploy" / "cluster.py"


@dataclass
class Op:
    """One operation as it ran on one host."""

    name: str
    commands: list[str]
    uploads: dict[str, str | bytes]
    step: int = 0  # position in the run's operation order (pyinfra runs step n on every host before n + 1)
    temp_paths: dict[str, str | None] = field(default_factory=dict)  # upload -> the temp file pyinfra would use
    sudo: bool = False  # whether it runs through sudo (its ``_sudo``)

    @property
    def changed(self) -> bool:
        return bool(self.commands or self.uploads)


@dataclass
class HostRun:
    name: str
    ops: list[Op] = field(default_factory=list)
    raw_commands: list[str] = field(default_factory=list)  # unmasked, as the host would run them
    other_uploads: dict[str, str | bytes] = field(default_factory=dict)  # outside any operation (callbacks)
    sent: list[str] = field(default_factory=list)  # every command the host was sent, facts' included, masked
    downloads: list[str] = field(default_factory=list)  # every file read back from the host (get_file)

    @property
    def changes(self) -> list[Op]:
        return [op for op in self.ops if op.changed]

    @property
    def commands(self) -> list[str]:
        return [c for op in self.ops for c in op.commands]

    @property
    def uploads(self) -> dict[str, str | bytes]:
        return {path: text for op in self.ops for path, text in op.uploads.items()}

    def op(self, pattern: str) -> Op:
        """The one operation whose name matches ``pattern`` (a regular expression)."""
        found = [op for op in self.ops if re.search(pattern, op.name)]
        assert len(found) == 1, f"{self.name}: {len(found)} operations match {pattern!r}: {[o.name for o in self.ops]}"
        return found[0]

    def has_op(self, pattern: str) -> bool:
        return any(re.search(pattern, op.name) for op in self.ops)

    def commands_matching(self, pattern: str) -> list[str]:
        return [c for c in self.commands if re.search(pattern, c)]

    def replacement(self) -> list[str]:
        """The command that replaces the ray-node container, split into words:
        ``bash -c SCRIPT replace-ray-node NAME PREVIOUS HOST WAIT docker create ...``."""
        found = self.commands_matching(r"(?s)^bash -c .* replace-ray-node ")
        assert len(found) == 1, f"{self.name}: {len(found)} ray-node replacements: {found}"
        return shlex.split(found[0])

    def docker_create(self) -> list[str]:
        """The ray-node container's ``docker create`` command line, split into arguments."""
        words = self.replacement()
        return words[words.index("replace-ray-node") + 5 :]  # after NAME PREVIOUS HOST WAIT


@dataclass
class Run:
    hosts: dict[str, HostRun]
    output: str = ""

    def __getitem__(self, name: str) -> HostRun:
        return self.hosts[name]

    @property
    def changed_hosts(self) -> dict[str, list[str]]:
        return {name: [op.name for op in h.changes] for name, h in self.hosts.items() if h.changes}


def record_uploads(connector: FakeConnector) -> list[tuple[str | None, str, str | bytes, str | None]]:
    """Make a fake connector keep what it is asked to upload: (op hash, remote path, content, the
    temp path an upload through sudo would pass through).

    The connector stays a plain ``FakeConnector`` (code that checks for one still sees one);
    only its ``put_file`` is wrapped.
    """
    uploads: list[tuple[str | None, str, str | bytes, str | None]] = []
    put_file = connector.put_file

    def recording_put_file(filename_or_io, remote_filename, remote_temp_filename=None, *args, **kwargs):
        if hasattr(filename_or_io, "read"):
            filename_or_io.seek(0)
            content = filename_or_io.read()
            filename_or_io.seek(0)
        else:
            content = Path(filename_or_io).read_bytes()
        if isinstance(content, bytes):
            with contextlib.suppress(UnicodeDecodeError):  # a binary file stays bytes
                content = content.decode()
        uploads.append((connector.host.executing_op_hash, remote_filename, content, remote_temp_filename))
        return put_file(filename_or_io, remote_filename, remote_temp_filename, *args, **kwargs)

    connector.put_file = recording_put_file  # type: ignore[method-assign]
    return uploads


def record_downloads(connector: FakeConnector) -> list[str]:
    """Make a fake connector keep the remote path of every file it is asked to download."""
    downloads: list[str] = []
    get_file = connector.get_file

    def recording_get_file(remote_filename, *args, **kwargs):
        downloads.append(remote_filename)
        return get_file(remote_filename, *args, **kwargs)

    connector.get_file = recording_get_file  # type: ignore[method-assign]
    return downloads


def run_deploy(
    hosts: list[tuple[str, dict[str, Any]]], deploy_file: Path = CLUSTER, limit: list[str] | None = None
) -> Run:
    """Run ``deploy_file`` against ``hosts`` like ``pyinfra ... -y`` and return what ran;
    ``limit``: the host names of ``--limit`` (the run connects to those only).

    Exceptions raised while the deploy file is loaded (invalid inventory, a
    GPU mismatch) propagate, as the CLI stops on them before any operation.
    """
    with cli_run(hosts) as (state, config, inventory), most_verbose(state) as printed:
        try:
            _run(state, config, inventory, deploy_file, limit)
        finally:
            _printed[state] = printed.getvalue()
    run = _collect(state, inventory)
    run.output = _printed.pop(state)
    if os.environ.get(RECORD):
        record(run, Path(os.environ[RECORD]), deploy_file)
    return run


#: A folder: every ``run_deploy`` appends what it did there, one JSON line per run, so that a change
#: that should not change the plan (a move, a rename) can be checked byte for byte (scripts/plan_diff.py).
RECORD = "RAYRIG_PLAN_RECORD"


def record(run: Run, folder: Path, deploy_file: Path) -> None:
    """Append ``run``'s operations, commands and uploads, under the test that made it, to ``folder``."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]
    hosts = {
        name: {
            "ops": [
                {
                    "name": op.name,
                    "commands": [_comparable(c) for c in op.commands],
                    "uploads": {p: _comparable(c) for p, c in op.uploads.items()},
                }
                for op in h.ops
            ],
            "raw_commands": [_comparable(c) for c in h.raw_commands],
            "other_uploads": {p: _comparable(c) for p, c in h.other_uploads.items()},
        }
        for name, h in run.hosts.items()
    }
    line = {"test": test, "deploy": deploy_file.name, "hosts": hosts}
    folder.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(folder / f"{worker}-{os.getpid()}.jsonl", "a") as out:
        out.write(json.dumps(line, sort_keys=True) + "\n")


#: Keys and certificates are new on every run: the recording keeps their kind only
#: (scripts/plan_diff.py masks the other values that differ from run to run by design).
_PEM = re.compile(r"-----BEGIN ([A-Z ]+)-----.*?-----END \1-----", re.DOTALL)


def _comparable(content: str | bytes) -> str:
    if isinstance(content, bytes):
        return "bytes:" + hashlib.sha256(content).hexdigest()
    return _PEM.sub(lambda m: f"<{m[1]}>", content)


@contextlib.contextmanager
def cli_run(hosts: list[tuple[str, dict[str, Any]]]) -> Iterator[tuple[State, Config, Inventory]]:
    """A fresh pyinfra state, config and inventory of ``hosts``, current while the block runs.

    CLI mode: pyinfra orders operations by where the deploy code calls them (API mode
    would order them by how many each host called), as `pyinfra ... deploy/cluster.py` does.
    """
    state = State(check_for_changes=False)
    state.cwd = str(ROOT)
    config = Config()
    inventory = Inventory((hosts, {}))
    was_cli, pyinfra.is_cli = pyinfra.is_cli, True
    try:
        with ctx_state.use(state), ctx_config.use(config), ctx_inventory.use(inventory):
            yield state, config, inventory
    finally:
        pyinfra.is_cli = was_cli


_printed: dict[State, str] = {}


class _Tee(io.TextIOBase):
    """A text stream that writes to ``stream`` (where tests' capsys still reads it) and to ``copy``."""

    def __init__(self, stream: Any, copy: io.StringIO) -> None:
        self.stream, self.copy = stream, copy

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


class _Forward(logging.Handler):
    """Hands the records at ``level`` and above to the logger's parents, as propagation did before
    the run lowered the logger's level to DEBUG."""

    def emit(self, record: logging.LogRecord) -> None:
        parent = logging.getLogger("pyinfra").parent
        if parent is not None:
            parent.handle(record)


@contextlib.contextmanager
def most_verbose(state: State) -> Iterator[io.StringIO]:
    """Print as ``pyinfra -vvv --debug`` does, into the StringIO the block gets: every command, fact
    command and output (pyinfra's ``echo``), pyinfra's log from DEBUG up, and what goes to stdout
    and stderr (what the deploy prints with ``click.echo``), which still go where they went."""
    for flag in ("print_input", "print_fact_input", "print_output", "print_fact_output", "print_fact_info"):
        setattr(state, flag, True)
    state.print_noop_info = True
    printed = io.StringIO()
    handler = logging.StreamHandler(printed)
    handler.setLevel(logging.DEBUG)
    log = logging.getLogger("pyinfra")
    level, propagate = log.level, log.propagate
    forward = _Forward(log.getEffectiveLevel())  # up the hierarchy only what went there before (caplog's)
    echo = pyinfra_output._echo

    def recording_echo(message: Any = None, **kwargs: Any) -> None:
        printed.write(f"{'' if message is None else message}\n")

    log.addHandler(handler)
    log.addHandler(forward)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    pyinfra_output.set_echo(recording_echo)
    try:
        with (
            contextlib.redirect_stdout(_Tee(sys.stdout, printed)),
            contextlib.redirect_stderr(_Tee(sys.stderr, printed)),
        ):
            yield printed
    finally:
        pyinfra_output.set_echo(echo)
        log.setLevel(level)
        log.propagate = propagate
        log.removeHandler(handler)
        log.removeHandler(forward)


def _run(state: State, config: Config, inventory: Inventory, deploy_file: Path, limit: list[str] | None) -> None:
    state.init(inventory, config, initial_limit=None if limit is None else [inventory.get_host(n) for n in limit])
    for host in inventory:
        assert isinstance(host.connector, FakeConnector), f"{host.name} is not an @fake host"
        host.connector.rayrig_uploads = record_uploads(host.connector)
        host.connector.rayrig_downloads = record_downloads(host.connector)
    state.set_stage(StateStage.Connect)
    connect_all(state)
    state.set_stage(StateStage.Prepare)
    load_deploy_file(state, str(deploy_file))
    state.set_stage(StateStage.Execute)
    run_ops(state)
    state.set_stage(StateStage.Disconnect)
    disconnect_all(state)


def _op_name(names: set[str], global_arguments: Any) -> str:
    """The name this host's operation was given (hosts can share an operation slot under other names)."""
    own = global_arguments.get("name")
    mine = sorted(n for n in names if own and (n == own or n.endswith(f" | {own}")))
    return mine[0] if mine else ", ".join(sorted(names))


def _collect(state: State, inventory: Inventory) -> Run:
    runs: dict[str, HostRun] = {}
    for host in inventory:
        run = HostRun(host.name, sent=list(host.connector.executed_commands))
        run.downloads = list(host.connector.rayrig_downloads)
        by_hash: dict[str, Op] = {}
        for step, op_hash in enumerate(state.get_op_order()):
            op_data = state.ops[host].get(op_hash)
            if op_data is None:
                continue
            meta = op_data.operation_meta
            commands = []
            for command in meta._commands or []:
                if isinstance(command, StringCommand):
                    commands.append(command.get_masked_value())
                    run.raw_commands.append(command.get_raw_value())
                elif not isinstance(command, FileUploadCommand):
                    commands.append(repr(command))
            op = Op(_op_name(state.get_op_meta(op_hash).names, op_data.global_arguments), commands, {}, step)
            op.sudo = bool(op_data.global_arguments.get("_sudo"))
            assert meta.is_complete(), f"{host.name}: operation {op.name} did not run"
            assert meta.did_succeed(), f"{host.name}: operation {op.name} failed"
            by_hash[op_hash] = op
            run.ops.append(op)
        for op_hash, path, content, temp_path in host.connector.rayrig_uploads:
            op = by_hash.get(op_hash)
            if op is None:
                run.other_uploads[path] = content
            else:
                op.uploads[path] = content
                op.temp_paths[path] = temp_path
        runs[host.name] = run
    return Run(runs)
