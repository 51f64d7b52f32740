"""JupyterLab in the head's ray-node container, on this machine through SSH (``rayrig notebook INVENTORY``).

    $ rayrig notebook inventories/prod.py
    JupyterLab on cluster "cluster": http://127.0.0.1:41023/lab
    ...

A kernel there runs beside the Ray head, with ray-node's environment (``RAY_AUTH_MODE``,
``RAY_AUTH_TOKEN_PATH``), so ``import ray; ray.init()`` joins the cluster with no setup.

How a session runs (:func:`probe`, then :func:`session`):

1. :func:`probe` asks the head over one ssh (the inventory's settings, ``sudo -n`` unless the ssh
   user is root; :func:`rayrig.operate.run`): is ray-node running, which image, can its ``python``
   ``import jupyterlab``, is the port free on the head's loopback, does the notebook folder exist.
2. The tunnel: ``rayrig dashboard``'s (:func:`rayrig.dashboard.open_tunnel`), to the head's
   127.0.0.1:``remote_port`` instead of the dashboard (ray-node runs with ``--network=host``, so the
   server's loopback is the head's).
3. :class:`Server`: one long-lived ``ssh HEAD sudo -n docker exec -i ray-node python -c SERVER_SCRIPT``.
   The session's token (``secrets.token_urlsafe(32)``) is the first line of that ssh's standard
   input: never on a command line, here or there. The supervisor gives it to JupyterLab alone as
   ``JUPYTER_TOKEN``, starts it on 127.0.0.1 in the background (its log in the container's
   ``/tmp/rayrig-notebook-PORT.log``), and waits for the end of its standard input: closing it
   here, or the ssh dying for any reason, stops the server.
4. :func:`wait_until_up` asks ``GET /api/status`` through the tunnel, with the token, until it
   answers 200.
5. :func:`login_files`: the token and a page that logs the browser in (as Jupyter's own
   ``jpserver-*-open.html``) in the cluster's state folder, each 0600 from its creation, removed
   when the session ends.
"""

from __future__ import annotations

import contextlib
import html
import http.client
import os
import secrets
import shlex
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from deploy.contract.paths import state_dir
from rayrig import dashboard, operate
from rayrig.errors import RayrigError
from rayrig.inventory import Host, Inventory, ssh_argv, unreachable

#: The port JupyterLab listens on, on the head's loopback, unless ``--remote-port`` says otherwise.
DEFAULT_REMOTE_PORT = 8888
#: How long the head may take to answer the probe, and JupyterLab to answer once started.
PROBE_TIMEOUT_S = 60
START_WAIT_S = 60
#: How long the server's ssh may take to stop JupyterLab once its standard input is closed.
STOP_WAIT_S = 15
#: How many lines of JupyterLab's log a failure shows.
LOG_LINES = 20
#: What to do about an image without JupyterLab.
ADD_JUPYTERLAB = (
    "build one with it, `rayrig image build --requirements examples/images/dev/requirements.txt "
    "--tag REGISTRY/dev:1 --push`, then deploy with ray_image set to that tag"
)

#: Asks the head, in one ssh; $1 the container, $2 "sudo" or "", $3 IN_CONTAINER, then its arguments.
#: Prints ``CONTAINER state image`` (``ERROR line`` when Docker could not be asked, ``CONTAINER absent``),
#: then for a running container what IN_CONTAINER prints.
PROBE_SCRIPT = r"""
c=$1 root=$2 inner=$3
shift 3
as_root() { if [ -n "$root" ]; then sudo -n "$@"; else "$@"; fi; }
if ! out=$(as_root docker inspect --format '{{.State.Status}} {{.Config.Image}}' "$c" 2>&1); then
  case $out in
    *"No such"*) echo "CONTAINER absent" ;;
    *) printf 'ERROR %s\n' "$(printf '%s\n' "$out" | tail -n 1)" ;;
  esac
  exit 0
fi
echo "CONTAINER $out"
case $out in running\ *) as_root docker exec "$c" sh -c "$inner" _ "$@" ;; esac
"""

#: Inside ray-node; $1 the port, $2 the notebook folder ("": $RAYRIG_SHARED_DIR, else the home).
#: Prints ``ROOT_DIR dir``, ``SHARED_DIR value``, ``FOLDER yes|no``, ``JUPYTERLAB yes|no``, ``PORT free|taken``
#: (bound as JupyterLab binds it: SO_REUSEADDR, so only a listener there counts).
IN_CONTAINER = r"""
dir=${2:-${RAYRIG_SHARED_DIR:-$HOME}}
echo "ROOT_DIR $dir"
echo "SHARED_DIR ${RAYRIG_SHARED_DIR:-}"
if [ -n "$dir" ] && [ -d "$dir" ]; then echo "FOLDER yes"; else echo "FOLDER no"; fi
if python -c 'import jupyterlab' >/dev/null 2>&1; then echo "JUPYTERLAB yes"; else echo "JUPYTERLAB no"; fi
bind='import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))'
if python -c "$bind" "$1" >/dev/null 2>&1; then echo "PORT free"; else echo "PORT taken"; fi
"""

#: The server's supervisor, inside ray-node (``docker exec -i ... python -c``, the image's Python); its arguments:
#: the port, the notebook folder, the log file, how many of its lines a failure shows. The first line of
#: standard input is the token, given to JupyterLab alone (``JUPYTER_TOKEN`` in its environment); the end of
#: standard input stops the server (TERM, then KILL after 10 s), reaped as soon as it exits. A server that
#: ends on its own ends the supervisor with status 1 and its log's last lines.
SERVER_SCRIPT = r"""
import os, subprocess, sys, threading
port, root, log, lines = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
token = sys.stdin.readline().rstrip("\n")
if not token:
    sys.exit("rayrig notebook: no token on standard input")
if os.path.lexists(log):
    os.unlink(log)
out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
server = subprocess.Popen(
    [sys.executable, "-m", "jupyter", "lab", "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
     "--no-browser", "--allow-root", "--ServerApp.allow_remote_access=False", f"--ServerApp.root_dir={root}"],
    stdin=subprocess.DEVNULL, stdout=out, stderr=out, env={**os.environ, "JUPYTER_TOKEN": token},
)
token = None
os.close(out)
ended = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), ended.set()), daemon=True).start()
while not ended.is_set() and server.poll() is None:
    ended.wait(0.2)
if server.poll() is None:
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    sys.exit(0)
code = server.returncode
how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
print(f"JupyterLab {how}; the last lines of its log {log}:", file=sys.stderr)
with open(log, errors="replace") as said:
    sys.stderr.write("".join(said.readlines()[-lines:]))
sys.exit(1)
"""

#: The page that logs the browser in (Jupyter's own browser-open.html, in short).
LOGIN_PAGE = """<!DOCTYPE html>
<html>
<head>
<meta charset="UTF-8">
<meta http-equiv="refresh" content="0;url={url}">
<title>Opening JupyterLab</title>
</head>
<body>
<p>This page opens JupyterLab on cluster "{cluster}". If it does not, <a href="{url}">open it here</a>.</p>
</body>
</html>
"""


class NotebookError(RayrigError):
    """The notebook cannot start, or stopped on its own; the message says why (exit status 1)."""


@dataclass(frozen=True)
class Probe:
    """What the head said: its ray-node's image, the notebook folder there, and ray-node's ``RAYRIG_SHARED_DIR``
    (empty without shared storage)."""

    image: str
    root_dir: str
    shared_dir: str


def log_file(port: int) -> str:
    """JupyterLab's log in the container (it holds no token: Jupyter writes a given one as ``...``)."""
    return f"/tmp/rayrig-notebook-{port}.log"


def probe_command(head: Host, port: int, root_dir: str | None) -> str:
    """The command line of :func:`probe` (:data:`PROBE_SCRIPT`, :data:`IN_CONTAINER`), every word quoted."""
    root = "sudo" if head.as_root else ""
    return shlex.join(["sh", "-c", PROBE_SCRIPT, "_", head.container, root, IN_CONTAINER, str(port), root_dir or ""])


def probe(inventory: Inventory, port: int, root_dir: str | None) -> Probe:
    """Whether the head can run the notebook; :class:`NotebookError` saying what is missing, and what to do."""
    head = inventory.head
    answer = operate.run(head, probe_command(head, port, root_dir), timeout=PROBE_TIMEOUT_S)
    if not answer.reached:
        raise NotebookError(f"head {head.name}: {unreachable(head, inventory.path, answer.last_words)}")
    said = {key: value for key, _, value in (line.partition(" ") for line in answer.stdout.splitlines())}
    where = f"on head {head.name}"
    if "ERROR" in said or "CONTAINER" not in said:
        detail = said.get("ERROR") or answer.last_words or "(it said nothing)"
        raise NotebookError(f"cannot ask Docker {where} about {head.container}: {detail}")
    state, _, image = said["CONTAINER"].partition(" ")
    if state == "absent":
        raise NotebookError(f"no {head.container} container {where}", f"deploy first: rayrig deploy {inventory.path}")
    if state != "running":
        raise NotebookError(f"the {head.container} container {where} is {state}, not running",
                            f"`rayrig status {inventory.path}` says more")  # fmt: skip
    if said.get("JUPYTERLAB") != "yes":
        raise NotebookError(f"the head's image {image} has no JupyterLab ({head.container} {where})", ADD_JUPYTERLAB)
    if said.get("PORT") != "free":
        raise NotebookError(f"port {port} is already in use on the head's loopback ({head.name})",
                            "choose another with --remote-port")  # fmt: skip
    if said.get("FOLDER") != "yes":
        raise NotebookError(f"no folder {said.get('ROOT_DIR') or '(none: no $HOME)'} in {head.container} {where}",
                            "choose one with --root-dir")  # fmt: skip
    return Probe(image=image, root_dir=said["ROOT_DIR"], shared_dir=said.get("SHARED_DIR", ""))


def server_command(head: Host, port: int, root_dir: str) -> str:
    """The long-lived remote command line (:data:`SERVER_SCRIPT`); it holds no secret."""
    script = ["python", "-c", SERVER_SCRIPT, str(port), root_dir, log_file(port), str(LOG_LINES)]
    return shlex.join([*head.as_root, "docker", "exec", "-i", head.container, *script])


class Server:
    """The ssh that runs JupyterLab on the head; what it and the server say goes to a temporary file."""

    def __init__(self, head: Host, port: int, process: subprocess.Popen, messages: IO[bytes]):
        self.head, self.port, self.process, self._messages = head, port, process, messages

    def said(self) -> list[str]:
        """The lines ssh, the script and (once it ended) JupyterLab's log said so far."""
        fd = self._messages.fileno()
        text = os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")
        return [line.rstrip() for line in text.splitlines() if line.strip()]

    def failure(self) -> NotebookError | None:
        """Why the server is gone, with its last words; None while it runs."""
        if self.process.poll() is None:
            return None
        said = self.said()[-(LOG_LINES + 1) :]
        return NotebookError(
            f"JupyterLab in {self.head.container} on head {self.head.name} stopped "
            f"(ssh exited with status {self.process.returncode})" + (": its last words below" if said else ""),
            details=said,
        )

    def close(self) -> None:
        """Stop the server: the end of its ssh's standard input, then a TERM if ssh is still there."""
        try:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=STOP_WAIT_S)
        finally:  # also after a second Ctrl-C: no ssh stays behind
            dashboard.stop(self.process, wait_s=5)
            self._messages.close()


@contextlib.contextmanager
def running_server(head: Host, port: int, root_dir: str, token: str) -> Iterator[Server]:
    """Start JupyterLab on the head with ``token`` (sent on ssh's standard input); stop it on leaving."""
    argv = ssh_argv(head, server_command(head, port, root_dir), batch=True)
    messages = tempfile.TemporaryFile()  # noqa: SIM115 (the Server closes it)
    # A session of its own: a Ctrl-C in the terminal reaches rayrig alone, which stops the server in order.
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=messages, stderr=messages, start_new_session=True)
    server = Server(head, port, process, messages)
    try:
        with contextlib.suppress(BrokenPipeError):  # an ssh that already failed: its failure says why
            process.stdin.write(f"{token}\n".encode())
            process.stdin.flush()
        yield server
    finally:
        server.close()


def api_status(port: int, token: str) -> int | None:
    """The HTTP status of ``GET /api/status`` at 127.0.0.1:``port`` with the token; None without an answer."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/api/status", headers={"Authorization": f"token {token}"})
        return connection.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def tunnel_closed(tunnel: dashboard.Tunnel) -> NotebookError | None:
    """Why the tunnel is gone (ssh's words); None while it runs."""
    failure = tunnel.failure()
    return NotebookError(f"the tunnel closed: {failure}") if failure else None


def wait_until_up(server: Server, tunnel: dashboard.Tunnel, token: str, wait_s: float = START_WAIT_S) -> None:
    """Return once JupyterLab answers 200 through the tunnel; raise if the server or the tunnel ends first."""
    deadline = time.monotonic() + wait_s
    answer = None
    while time.monotonic() < deadline:
        if failure := server.failure() or tunnel_closed(tunnel):
            raise failure
        answer = api_status(tunnel.local_port, token)
        if answer == 200:
            return
        time.sleep(0.5)
    last = f" (its last answer: HTTP {answer})" if answer else ""
    raise NotebookError(
        f"JupyterLab on head {server.head.name} did not answer within {wait_s:.0f} s{last}",
        f"its log is {log_file(server.port)} in {server.head.container}",
    )


@dataclass(frozen=True)
class LoginFiles:
    """This session's token and the page that logs a browser in, each 0600."""

    token: Path
    page: Path


def _write_private(path: Path, text: str) -> tuple[int, int]:
    """Write ``path`` whole, 0600 from its creation on; its (device, inode), to remove it only if still ours."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(temp, path)  # a file of an earlier session is replaced, never rewritten in place
    finally:
        temp.unlink(missing_ok=True)
    written = path.stat()
    return written.st_dev, written.st_ino


def _remove_if_ours(path: Path, ours: tuple[int, int]) -> None:
    with contextlib.suppress(FileNotFoundError):
        found = path.stat()
        if (found.st_dev, found.st_ino) == ours:  # another session of the cluster may have replaced it
            path.unlink()


@contextlib.contextmanager
def login_files(cluster: str, url: str, token: str) -> Iterator[LoginFiles]:
    """``notebook_token`` and ``notebook.html`` in the cluster's state folder (0700), removed on leaving."""
    folder = state_dir() / "clusters" / cluster
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    files = LoginFiles(token=folder / "notebook_token", page=folder / "notebook.html")
    login = html.escape(f"{url}?token={token}", quote=True)
    written = {}
    try:
        written[files.token] = _write_private(files.token, token + "\n")
        written[files.page] = _write_private(files.page, LOGIN_PAGE.format(url=login, cluster=html.escape(cluster)))
        yield files
    finally:
        for path, ours in written.items():
            _remove_if_ours(path, ours)


@dataclass(frozen=True)
class Session:
    """A running notebook: where to open it, the files to log in with, its folder, the server and tunnel."""

    url: str
    files: LoginFiles
    found: Probe
    server: Server
    tunnel: dashboard.Tunnel
    plan: dashboard.TunnelPlan

    def wait(self) -> NotebookError:
        """Block until the server or the tunnel ends on its own; why it did."""
        while True:
            if failure := self.server.failure() or tunnel_closed(self.tunnel):
                return failure
            time.sleep(0.5)


@contextlib.contextmanager
def session(inventory: Inventory, found: Probe, local_port: int, remote_port: int) -> Iterator[Session]:
    """JupyterLab on the inventory's head (``found`` by :func:`probe`), reached at 127.0.0.1:``local_port``
    here; everything it started (the server, both ssh, the login files) is stopped or removed on leaving,
    however it is left."""
    head = inventory.head
    token = secrets.token_urlsafe(32)
    plan = replace(dashboard.tunnel_plan(inventory, monitoring=False), remote_host="127.0.0.1", remote_port=remote_port)
    try:
        tunnel = dashboard.open_tunnel(plan, local_port)
    except dashboard.DashboardError as error:
        raise NotebookError(f"cannot open the tunnel to the notebook: {error}") from None
    with tunnel, running_server(head, remote_port, found.root_dir, token) as server:
        wait_until_up(server, tunnel, token)
        url = f"{tunnel.url}/lab"
        with login_files(plan.cluster, url, token) as files:
            yield Session(url=url, files=files, found=found, server=server, tunnel=tunnel, plan=plan)


def banner(running: Session, root_dir: str | None) -> str:
    """What the user reads once the notebook answers (never the token itself)."""
    found, head = running.found, running.server.head
    if root_dir:
        source = "--root-dir"
    elif found.shared_dir:
        source = "$RAYRIG_SHARED_DIR, on shared storage"
    else:
        source = "the container's home: no shared storage"
    return "\n".join([
        f'JupyterLab on cluster "{running.plan.cluster}": {running.url}',
        f"It runs in {head.container} on {running.plan.destination}, in {found.root_dir} ({source}).",
        f"It asks for this session's token: it is in {running.files.token} (readable by you alone).",
        f"To log in directly, open {running.files.page} in your browser (readable by you alone too).",
        "A kernel there is connected to the cluster: `import ray; ray.init()` works with no setup.",
        "Ctrl-C stops the server and the tunnel.",
    ])  # fmt: skip
