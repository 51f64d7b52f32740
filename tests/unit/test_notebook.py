"""``rayrig notebook``: JupyterLab in the head's ray-node, through the dashboard's tunnel, with a token of its own.

The command runs as a user runs it (``python -m rayrig notebook``), against a head that is this machine:
``ssh`` on PATH runs the remote command here (or forwards the tunnel's port, with ``-N``), ``sudo`` and
``docker exec -i CONTAINER ...`` run what they are given here, and the container's ``python`` finds a
``jupyterlab`` package (or not) and a ``jupyter`` module that serves ``/api/status`` as JupyterLab does:
200 with ``Authorization: token $JUPYTER_TOKEN``, 403 without. So rayrig's own probe, server script,
token on standard input, tunnel and cleanup all run for real.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from deploy.contract.paths import repo_root
from rayrig import dashboard

pytestmark = pytest.mark.slow  # a second or a few each: every test runs the command as a process

IMAGE = "rayproject/ray:2.60.0-py311-gpu"
CLUSTER = "lab"
HEAD = "192.0.2.10"

#: ``ssh``: runs a command here, or forwards a port, recording each run in ``$FAKE_SSH_RECORDS/PID.json``.
FAKE_SSH = Path(__file__).parent / "fixtures" / "submit" / "fake_ssh.py"

FAKE_SUDO = """#!/bin/sh
[ "$1" = -n ] && shift
exec "$@"
"""

#: ``docker inspect`` says ``$FAKE_CONTAINER`` (``absent``: no such container); ``docker exec [-i] C CMD...``
#: runs CMD here with the container's environment: its PATH (where ``python`` is), HOME, RAYRIG_SHARED_DIR.
FAKE_DOCKER = """#!/bin/sh
case $1 in
  inspect)
    if [ "$FAKE_CONTAINER" = absent ]; then echo "Error: No such object: ray-node" >&2; exit 1; fi
    echo "$FAKE_CONTAINER" ;;
  exec)
    shift
    while [ "${1#-}" != "$1" ]; do shift; done
    shift
    export PATH="$FAKE_CONTAINER_BIN:$PATH" HOME="$FAKE_HOME"
    if [ -n "$FAKE_SHARED_DIR" ]; then export RAYRIG_SHARED_DIR="$FAKE_SHARED_DIR"; fi
    exec "$@" ;;
esac
"""

#: ``python -m jupyter lab --port=P --ip=I ... --ServerApp.root_dir=D``, as far as rayrig uses it.
FAKE_JUPYTER = r"""
import http.server, json, os, sys, time
options = dict(arg[2:].split("=", 1) for arg in sys.argv[2:] if "=" in arg)
with open(os.environ["FAKE_JUPYTER_RECORD"], "w") as record:
    json.dump({"argv": sys.argv, "pid": os.getpid(), "options": options}, record)
token = os.environ["JUPYTER_TOKEN"]
if os.environ.get("FAKE_JUPYTER_FAIL"):
    print("[E ServerApp] " + os.environ["FAKE_JUPYTER_FAIL"], flush=True)
    sys.exit(1)
time.sleep(0.5)  # starting: the tunnel answers nothing yet


class Status(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/api/status" and self.headers.get("Authorization") == f"token {token}"
        self.send_response(200 if ok else 403)
        self.end_headers()
        self.wfile.write(b'{"started": "now"}' if ok else b"Forbidden")

    def log_message(self, *args):
        pass


try:
    server = http.server.HTTPServer((options["ip"], int(options["port"])), Status)
except OSError:
    print(f"[C ServerApp] ERROR: the Jupyter server could not be started because port {options['port']} "
          "is not available.", flush=True)
    sys.exit(1)
print(f"[I ServerApp] Jupyter Server is running at: http://127.0.0.1:{options['port']}/lab?token=...", flush=True)
server.serve_forever()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # a zombie is gone


def _gone(pids: list[int], wait_s: float = 15) -> list[int]:
    """The pids still alive after ``wait_s``; each killed then, so that no failing test leaves one behind."""
    deadline = time.monotonic() + wait_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if _alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


class FakeHead:
    """This machine as the head: the stand-ins on PATH, what they record, the environment of a run."""

    def __init__(self, tmp_path: Path):
        self.root = tmp_path
        self.bin, self.container_bin, self.site = tmp_path / "bin", tmp_path / "container-bin", tmp_path / "site"
        self.records, self.state = tmp_path / "ssh", tmp_path / "state"
        self.home, self.shared = tmp_path / "home", tmp_path / "shared"
        for folder in (self.bin, self.container_bin, self.site / "jupyterlab", self.records, self.home, self.shared):
            folder.mkdir(parents=True)
        self._program(self.bin / "ssh", f'#!/bin/sh\nexec {sys.executable} {FAKE_SSH} "$@"\n')
        self._program(self.bin / "sudo", FAKE_SUDO)
        self._program(self.bin / "docker", FAKE_DOCKER)
        python = f'#!/bin/sh\nPYTHONPATH="{self.site}" exec {sys.executable} "$@"\n'  # finds the fake jupyter
        self._program(self.container_bin / "python", python)
        (self.site / "jupyterlab" / "__init__.py").write_text("")
        (self.site / "jupyter.py").write_text(FAKE_JUPYTER)
        self.jupyter = tmp_path / "jupyter.json"
        self.inventory = tmp_path / "inventory.py"
        data = {"ray_role": "head", "ssh_user": "ubuntu", "ray_cluster_name": CLUSTER}
        self.inventory.write_text(f"heads = [({HEAD!r}, {data!r})]\n")
        self.remote_port = dashboard.free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RAYRIG_", "FAKE_"))}
        self.env = {
            **env, "PATH": f"{self.bin}:{os.environ['PATH']}", "RAYRIG_STATE_DIR": str(self.state),
            "FAKE_SSH_RECORDS": str(self.records), "FAKE_CONTAINER": f"running {IMAGE}",
            "FAKE_CONTAINER_BIN": str(self.container_bin), "FAKE_HOME": str(self.home),
            "FAKE_SHARED_DIR": str(self.shared), "FAKE_JUPYTER_RECORD": str(self.jupyter),
        }  # fmt: skip

    @staticmethod
    def _program(path: Path, text: str) -> None:
        path.write_text(text)
        path.chmod(0o755)

    def without_jupyterlab(self) -> None:
        (self.site / "jupyterlab" / "__init__.py").unlink()
        (self.site / "jupyterlab").rmdir()

    def ssh_runs(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted(self.records.glob("*.json"))]

    def tunnel_pid(self) -> int:
        return next(run["pid"] for run in self.ssh_runs() if "-N" in run["argv"])

    def server(self) -> dict | None:
        return json.loads(self.jupyter.read_text()) if self.jupyter.exists() else None

    def leftovers(self) -> list[int]:
        """The pids of every ssh and of the server still running (each then killed)."""
        server = self.server()
        return _gone([run["pid"] for run in self.ssh_runs()] + ([server["pid"]] if server else []))

    def notebook(self, *options: str, local_port: int | None = None) -> Notebook:
        return Notebook(self, ["--remote-port", str(self.remote_port), *options], local_port)


def ctrl_c_delivered() -> None:
    """SIGINT back to its default in the command, as in a terminal: a test run started in the background by a
    shell (CI's may be) has it ignored, which its children inherit, and Python then raises no KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Notebook:
    """``python -m rayrig notebook INVENTORY OPTIONS``, running; its output collected as it comes."""

    def __init__(self, head: FakeHead, options: list[str], local_port: int | None = None):
        self.head = head
        self.local_port = local_port or dashboard.free_port()
        argv = [sys.executable, "-m", "rayrig", "notebook", str(head.inventory), "--local-port", str(self.local_port)]
        self.process = subprocess.Popen([*argv, *options], cwd=repo_root(), env=head.env, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                        preexec_fn=ctrl_c_delivered)  # fmt: skip
        self.out: list[str] = []
        self.err: list[str] = []
        self.readers = [threading.Thread(target=self._read, args=pair, daemon=True)
                        for pair in ((self.process.stdout, self.out), (self.process.stderr, self.err))]  # fmt: skip
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        lines.extend(stream)

    def banner(self, wait_s: float = 60) -> str:
        """Its standard output once it says how to stop it (the notebook answers then)."""
        deadline = time.monotonic() + wait_s
        while not any(line.startswith("Ctrl-C stops") for line in self.out):
            assert self.process.poll() is None and time.monotonic() < deadline, "".join(self.err)
            time.sleep(0.05)
        return "".join(self.out)

    def finish(self, signum: int | None = None) -> tuple[int, str, str]:
        """Its exit status and whole output, after ``signum`` if given."""
        if signum is not None:
            self.process.send_signal(signum)
        try:
            status = self.process.wait(timeout=60)
        finally:
            self.process.kill()
        for reader in self.readers:
            reader.join(timeout=10)
        return status, "".join(self.out), "".join(self.err)


@pytest.fixture
def head(tmp_path) -> FakeHead:
    fake = FakeHead(tmp_path)
    yield fake
    fake.leftovers()  # a failing test leaves no process behind
    Path(f"/tmp/rayrig-notebook-{fake.remote_port}.log").unlink(missing_ok=True)  # the "container's" /tmp is ours


def status_of(port: int, token: str | None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/status")
    if token:
        request.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def login_files(head: FakeHead) -> tuple[Path, Path]:
    folder = head.state / "clusters" / CLUSTER
    return folder / "notebook_token", folder / "notebook.html"


def own_processes(part: str) -> dict[int, bytes]:
    """``/proc/PID/<part>`` of every process this user can read."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (entry / part).read_bytes()
            except OSError:
                continue
    return found


# --- A session: the URL, the token, the files, the end ------------------------------------------------------


def test_the_lab_answers_200_with_the_sessions_token_and_403_without_it(head):
    notebook = head.notebook()
    banner = notebook.banner()
    url = f"http://127.0.0.1:{notebook.local_port}/lab"
    assert banner.startswith(f'JupyterLab on cluster "{CLUSTER}": {url}\n')
    token_file, page = login_files(head)
    assert f"It runs in ray-node on ubuntu@{HEAD}, in {head.shared} ($RAYRIG_SHARED_DIR" in banner
    assert f"this session's token: it is in {token_file} (readable by you alone)" in banner
    assert f"open {page} in your browser" in banner
    assert "`import ray; ray.init()` works with no setup" in banner
    assert "Ctrl-C stops the server and the tunnel" in banner
    token = token_file.read_text().strip()
    assert len(token) >= 43 and token not in banner
    assert status_of(notebook.local_port, token) == 200
    assert status_of(notebook.local_port, None) == 403
    assert status_of(notebook.local_port, "not-" + token) == 403
    assert f'content="0;url={url}?token={token}"' in page.read_text()
    server = head.server()
    assert server["options"]["ServerApp.root_dir"] == str(head.shared)
    assert (server["options"]["ip"], server["options"]["port"]) == ("127.0.0.1", str(head.remote_port))
    assert server["options"]["ServerApp.port_retries"] == "0"
    assert server["options"]["ServerApp.allow_remote_access"] == "False" and "--no-browser" in server["argv"]
    time.sleep(2.5)  # longer than the server script takes to see the end of its input: it runs until Ctrl-C
    assert notebook.process.poll() is None and status_of(notebook.local_port, token) == 200
    status, _, err = notebook.finish(signal.SIGINT)
    assert status == 0, err


def test_the_token_is_on_no_command_line_in_no_output_and_in_the_servers_environment_alone(head):
    notebook = head.notebook()
    notebook.banner()
    token_file, _ = login_files(head)
    token = token_file.read_text().strip().encode()
    assert not [pid for pid, cmdline in own_processes("cmdline").items() if token in cmdline]
    holders = [pid for pid, environ in own_processes("environ").items() if token in environ]
    assert holders == [head.server()["pid"]]  # not the ssh, the script, its reader, nor rayrig's environment
    status, out, err = notebook.finish(signal.SIGTERM)
    assert status == 0, err
    assert token.decode() not in out + err + json.dumps(head.ssh_runs())


def test_the_login_files_and_the_servers_log_are_the_users_alone_and_the_files_gone_after(head):
    notebook = head.notebook()
    notebook.banner()
    for path in login_files(head):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(login_files(head)[0].parent.stat().st_mode) == 0o700
    log = Path(f"/tmp/rayrig-notebook-{head.remote_port}.log")  # JupyterLab's, in the container
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and "Jupyter Server is running" in log.read_text()
    status, _, err = notebook.finish(signal.SIGINT)
    assert status == 0, err
    assert not any(path.exists() for path in login_files(head))
    assert not [p.name for p in login_files(head)[0].parent.iterdir()]  # no temporary file either


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_kill_or_ctrl_c_stops_the_server_and_the_tunnel_and_leaves_no_ssh(head, signum):
    notebook = head.notebook()
    notebook.banner()
    ssh = [run["pid"] for run in head.ssh_runs() if "docker exec -i" in run["argv"][-1]] + [head.tunnel_pid()]
    server = head.server()["pid"]
    assert len(ssh) == 2 and all(_alive(pid) for pid in [*ssh, server])
    status, _, err = notebook.finish(signum)
    assert status == 0, err
    assert "Stopping JupyterLab and the tunnel" in err
    assert not head.leftovers(), "an ssh or the server outlived rayrig notebook"
    assert not dashboard._listening(notebook.local_port) and not dashboard._listening(head.remote_port)
    assert not any(path.exists() for path in login_files(head))


@pytest.mark.parametrize(("options", "folder"), [((), "home"), (("--root-dir", "ROOT"), "root")])
def test_the_folder_is_the_containers_home_without_shared_storage_or_the_one_asked_for(head, options, folder):
    head.env.pop("FAKE_SHARED_DIR")
    chosen = {"home": head.home, "root": head.root}[folder]
    notebook = head.notebook(*[str(head.root) if option == "ROOT" else option for option in options])
    banner = notebook.banner()
    assert head.server()["options"]["ServerApp.root_dir"] == str(chosen)
    source = "--root-dir" if options else "the container's home: no shared storage"
    assert f"in {chosen} ({source})" in banner
    assert notebook.finish(signal.SIGTERM)[0] == 0


# --- What keeps it from starting: one line, exit 1, nothing left behind --------------------------------------


def failed(notebook: Notebook, head: FakeHead) -> str:
    """The error output of a run that must fail at its start: exit 1, no process, no login file left."""
    status, out, err = notebook.finish()
    assert status == 1, err
    assert out == "" and "Traceback" not in err
    assert not head.leftovers(), "an ssh or the server outlived rayrig notebook"
    assert not any(path.exists() for path in login_files(head))
    return err


def test_an_image_without_jupyterlab_is_one_line_naming_it_and_how_to_add_it(head):
    head.without_jupyterlab()
    err = failed(head.notebook(), head)
    assert err.splitlines() == [
        f"rayrig notebook: the head's image {IMAGE} has no JupyterLab (ray-node on head {HEAD}); build one with it, "
        "`rayrig image build --requirements examples/images/dev/requirements.txt --tag REGISTRY/dev:1 --push`, "
        "then deploy with ray_image set to that tag"
    ]
    assert head.server() is None and len(head.ssh_runs()) == 1  # the probe alone


def test_a_remote_port_in_use_on_the_head_is_one_line_naming_it_and_the_option(head):
    with socket.create_server(("127.0.0.1", head.remote_port)):
        err = failed(head.notebook(), head)
    assert err.splitlines() == [
        f"rayrig notebook: port {head.remote_port} is already in use on the head's loopback ({HEAD}); "
        "choose another with --remote-port"
    ]
    assert head.server() is None


@pytest.mark.parametrize(("container", "words"), [
    ("absent", f"no ray-node container on head {HEAD}; deploy first: rayrig deploy"),
    (f"exited {IMAGE}", f"the ray-node container on head {HEAD} is exited, not running; `rayrig status"),
])  # fmt: skip
def test_a_head_without_a_running_ray_node_is_one_line_saying_so(head, container, words):
    head.env["FAKE_CONTAINER"] = container
    err = failed(head.notebook(), head)
    assert len(err.splitlines()) == 1 and words in err


def test_a_folder_the_container_lacks_is_one_line_naming_it(head):
    err = failed(head.notebook("--root-dir", "/no/such/folder"), head)
    assert err.splitlines() == [
        f"rayrig notebook: no folder /no/such/folder in ray-node on head {HEAD}; choose one with --root-dir"
    ]


def test_a_server_that_does_not_start_is_reported_with_the_last_lines_of_its_log(head):
    head.env["FAKE_JUPYTER_FAIL"] = "Extension jupyterlab failed to load: no module named 'jupyter_lsp'"
    err = failed(head.notebook(), head)
    lines = err.splitlines()
    assert lines[0].startswith("==> Starting JupyterLab in ray-node on the head")
    assert lines[1] == (
        f"rayrig notebook: JupyterLab in ray-node on head {HEAD} stopped (ssh exited with status 1): "
        "its last words below"
    )
    log = f"/tmp/rayrig-notebook-{head.remote_port}.log"
    assert f"  JupyterLab exited with status 1; the last lines of its log {log}:" in lines
    assert "  [E ServerApp] Extension jupyterlab failed to load: no module named 'jupyter_lsp'" in lines


def test_a_local_port_in_use_is_an_error_naming_the_option_and_starts_no_server(head):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        err = failed(head.notebook(local_port=port), head)
    assert f"127.0.0.1:{port} is already in use here: choose another with --local-port" in err
    assert head.server() is None


# --- Once it runs: the server or the tunnel ending on its own is exit 1, with the reason ----------------------


def test_a_server_that_ends_on_its_own_ends_the_session_with_its_log(head):
    notebook = head.notebook()
    notebook.banner()
    os.kill(head.server()["pid"], signal.SIGKILL)
    status, _, err = notebook.finish()
    assert status == 1, err
    assert f"rayrig notebook: JupyterLab in ray-node on head {HEAD} stopped (ssh exited with status 1)" in err
    assert "  JupyterLab was killed by signal 9; the last lines of its log" in err
    assert not head.leftovers() and not any(path.exists() for path in login_files(head))


def test_a_tunnel_that_closes_ends_the_session_and_stops_the_server(head):
    notebook = head.notebook()
    notebook.banner()
    os.kill(head.tunnel_pid(), signal.SIGKILL)
    status, _, err = notebook.finish()
    assert status == 1, err
    assert re.search(rf"rayrig notebook: the tunnel closed: ssh to ubuntu@{HEAD} exited with status -9", err), err
    assert not head.leftovers(), "the server or its ssh outlived the tunnel"
    assert not any(path.exists() for path in login_files(head))
