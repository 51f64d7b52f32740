"""``rayrig submit``: a job through Ray's Jobs API, over the head's tunnel, with the cluster's token.

The dashboard is a fake that answers as Ray 2.60's does (its auth middleware included: no
``Authorization`` header 401, a wrong token 403), and records every request; Ray's own
``JobSubmissionClient`` talks to it. ``ssh`` is a stand-in that really forwards the tunnel's
port (fixtures/submit/fake_ssh.py), so the whole command runs as a user runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
from aiohttp import web

from deploy.contract import settings
from deploy.ray import auth
from rayrig import dashboard, jobs
from rayrig.cli import main

NEW_SUBMISSION_ID = jobs.submission_id  # before the tests pin it
FAKE_SSH = Path(__file__).parent / "fixtures" / "submit" / "fake_ssh.py"
CLUSTER = "lab"
FAILED_MESSAGE = (
    "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n"
    "Traceback (most recent call last):\n"
    '  File "job.py", line 3, in <module>\n'
    "RuntimeError: no GPU on rayrig-e2e-2\n"
)


class FakeDashboard:
    """Ray's dashboard as far as the Jobs API goes: version, packages, jobs, the log tail (websocket).

    ``job`` says how the next job goes: its log chunks, how it ends and its message; with
    ``hang`` the log stream stays open until the test ends.
    """

    def __init__(self, token: str):
        self.token = token
        self.requests: list[dict] = []
        self.packages: dict[str, bytes] = {}
        self.submitted: list[dict] = []
        self.job = {"logs": ["hello\n", "rayrig-e2e-1\nrayrig-e2e-2\n"], "status": "SUCCEEDED", "message": "ok"}
        self.hang = asyncio.Event()
        app = web.Application(middlewares=[self.auth])
        app.router.add_get("/api/version", self.version)
        app.router.add_route("*", "/api/packages/{protocol}/{name}", self.package)
        app.router.add_post("/api/jobs/", self.submit)
        app.router.add_get("/api/jobs/{id}/logs/tail", self.tail)
        app.router.add_get("/api/jobs/{id}", self.info)
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        self.port = dashboard.free_port()
        self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.hang.set)
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)

    @web.middleware
    async def auth(self, request, handler):  # Ray's http_token_authentication, as the head runs it
        header = request.headers.get("Authorization", "")
        self.requests.append({"method": request.method, "path": request.path, "authorization": header})
        if not header:
            return web.Response(status=401, text="Unauthorized: Missing authentication token")
        if header != f"Bearer {self.token}":
            return web.Response(status=403, text="Forbidden: Invalid authentication token")
        return await handler(request)

    async def version(self, request):
        return web.json_response({"version": "4", "ray_version": "2.60.0", "ray_commit": "x", "session_name": "s"})

    async def package(self, request):
        uri = f"{request.match_info['protocol']}://{request.match_info['name']}"
        if request.method == "PUT":
            self.packages[uri] = await request.read()
            return web.Response(text="ok")
        return web.Response(text="ok") if uri in self.packages else web.Response(status=404, text="not found")

    async def submit(self, request):  # "no_agent": how many submissions to answer as a head without its agent yet
        job = await request.json()
        if any(j["submission_id"] == job["submission_id"] for j in self.submitted):
            text = f"Job with submission_id {job['submission_id']} already exists. Please use a different one."
            return web.Response(status=400, text=text)
        if self.job.get("no_agent", 0) > 0:
            self.job["no_agent"] -= 1
            if self.job.get("lost_answer"):  # the job started, its answer did not arrive
                self.submitted.append(job)
            return web.Response(status=500, text="No available agent to submit job, please try again later.")
        self.submitted.append(job)
        return web.json_response({"submission_id": job["submission_id"], "job_id": "01000000"})

    async def tail(self, request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        for chunk in self.job["logs"]:
            await ws.send_str(chunk)
        if self.job.get("hang"):
            await self.hang.wait()
        await ws.close()
        return ws

    async def info(self, request):
        return web.json_response({
            "type": "SUBMISSION", "submission_id": request.match_info["id"], "entrypoint": "python job.py",
            "status": self.job["status"], "message": self.job["message"],
        })  # fmt: skip


@pytest.fixture(autouse=True)
def known_job_id(monkeypatch):
    numbers = itertools.count(1)
    monkeypatch.setattr(jobs, "submission_id", lambda: f"raysubmit_fake{next(numbers)}")  # 1 for a test's first
    monkeypatch.setattr(jobs, "AGENT_RETRY_S", 0.05)


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path / "state"


@pytest.fixture
def token(state) -> str:
    return auth.read_token(auth.ensure_token(settings.merge({"ray_cluster_name": CLUSTER})))


@pytest.fixture
def server(token):
    fake = FakeDashboard(token)
    yield fake
    fake.close()


@pytest.fixture
def project(tmp_path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "job.py").write_text("print('hello')\n")
    (folder / ".gitignore").write_text("checkpoints/\n")
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "big.pt").write_text("weights")
    return folder


# --- Ray's client against the dashboard: the token, the working_dir upload, the logs --------------------------


def test_every_request_carries_the_clusters_token_as_rays_dashboard_expects_it(server, token, state):
    headers = jobs.auth_headers(auth.token_path(settings.merge({"ray_cluster_name": CLUSTER})))
    client = jobs.connect(f"http://127.0.0.1:{server.port}", headers)
    jobs.submit(client, ["python", "job.py"], {})
    assert server.requests and {r["authorization"] for r in server.requests} == {f"Bearer {token}"}


def test_the_working_dir_is_zipped_without_what_gitignore_names_uploaded_once_and_named_in_the_runtime_env(
    server, token, project
):
    client = jobs.connect(f"http://127.0.0.1:{server.port}", {"Authorization": f"Bearer {token}"})
    job_id = jobs.submit(client, ["python", "job.py", "it's a test"], jobs.runtime_env(project, {"WANDB_MODE": "off"}))
    assert job_id == "raysubmit_fake1"
    (uri, body), = server.packages.items()  # fmt: skip
    assert uri.startswith("gcs://_ray_pkg_") and uri.endswith(".zip")
    assert sorted(zipfile.ZipFile(io.BytesIO(body)).namelist()) == [".gitignore", "job.py"]
    calls = [(r["method"], r["path"]) for r in server.requests if r["path"].startswith("/api/packages")]
    assert calls == [("GET", f"/api/packages/gcs/{uri[6:]}"), ("PUT", f"/api/packages/gcs/{uri[6:]}")]
    job = server.submitted[0]
    assert job["runtime_env"] == {"working_dir": uri, "env_vars": {"WANDB_MODE": "off"}}
    assert job["entrypoint"] == "python job.py 'it'\"'\"'s a test'"
    server.requests.clear()
    jobs.submit(client, ["python", "job.py"], jobs.runtime_env(project, {}))  # the same folder: no second upload
    assert [r["method"] for r in server.requests if r["path"].startswith("/api/packages")] == ["GET"]


@pytest.mark.parametrize("lost_answer", [False, True])
def test_a_head_without_its_job_agent_yet_is_asked_again_with_the_same_id_and_runs_the_job_once(
    server, token, lost_answer
):
    server.job.update(no_agent=2, lost_answer=lost_answer)
    client = jobs.connect(f"http://127.0.0.1:{server.port}", {"Authorization": f"Bearer {token}"})
    assert jobs.submit(client, ["python", "job.py"], {}) == "raysubmit_fake1"
    assert [j["submission_id"] for j in server.submitted] == ["raysubmit_fake1"]
    assert len([r for r in server.requests if r["path"] == "/api/jobs/"]) == (2 if lost_answer else 3)


def test_a_head_whose_job_agent_never_comes_is_an_error_after_the_wait(server, token):
    server.job.update(no_agent=1000)
    client = jobs.connect(f"http://127.0.0.1:{server.port}", {"Authorization": f"Bearer {token}"})
    with pytest.raises(jobs.JobError, match="the job was not submitted: .*No available agent to submit job"):
        jobs.submit(client, ["python", "job.py"], {}, wait_s=0.3)
    assert not server.submitted


def test_job_ids_look_like_the_jobs_apis_own_and_differ():
    ids = {NEW_SUBMISSION_ID() for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"raysubmit_[A-HJ-NP-Za-km-z1-9]{16}", i) for i in ids), ids


def test_the_logs_arrive_in_order_and_the_outcome_carries_the_jobs_error_line(server, token):
    client = jobs.connect(f"http://127.0.0.1:{server.port}", {"Authorization": f"Bearer {token}"})
    seen: list[str] = []
    jobs.follow(client, "raysubmit_fake1", seen.append)
    assert seen == server.job["logs"]
    assert jobs.outcome(client, "raysubmit_fake1") == jobs.Outcome("SUCCEEDED", "")
    server.job.update(status="FAILED", message=FAILED_MESSAGE)
    failed = jobs.outcome(client, "raysubmit_fake1")
    assert failed.exit_status == 1
    assert failed.error == "Job entrypoint command failed with exit code 1: RuntimeError: no GPU on rayrig-e2e-2"
    server.job.update(status="STOPPED", message="Job was intentionally stopped.")
    assert jobs.outcome(client, "raysubmit_fake1") == jobs.Outcome("STOPPED", "Job was intentionally stopped.")


@pytest.mark.parametrize(
    ("message", "line"),
    [
        (FAILED_MESSAGE, "Job entrypoint command failed with exit code 1: RuntimeError: no GPU on rayrig-e2e-2"),
        ("Job entrypoint command failed with exit code 137. No logs available.",
         "Job entrypoint command failed with exit code 137. No logs available."),
        ("runtime_env setup failed: Failed to set up runtime environment.\nTraceback ...\nKeyError: 'pip'\n",
         "runtime_env setup failed: Failed to set up runtime environment."),
        ("", "(the Jobs API gave no message)"),
    ],
)  # fmt: skip
def test_the_error_line_is_rays_first_line_and_for_a_failed_command_the_last_line_of_its_logs(message, line):
    assert jobs.error_line(message) == line


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        # Without a header of ours, Ray's client adds one from this process's Ray token, if any (another test's).
        ({}, ("Missing authentication token", "Invalid authentication token")),
        ({"Authorization": "Bearer not-the-token"}, ("Invalid authentication token",)),
    ],
)
def test_a_missing_or_wrong_token_is_an_error_that_names_no_token(server, token, headers, words):
    with pytest.raises(jobs.JobError, match="the dashboard refused the cluster's Ray token") as refused:
        jobs.connect(f"http://127.0.0.1:{server.port}", headers)
    assert any(w in str(refused.value) for w in words) and token not in str(refused.value)


def test_no_local_token_file_says_where_it_comes_from(state):
    missing = state / "clusters" / CLUSTER / "ray_auth_token"
    with pytest.raises(jobs.JobError, match=r"no local copy of the cluster's Ray token \(.*ray_auth_token\)"):
        jobs.auth_headers(missing)
    assert jobs.auth_headers(None) == {}  # ray_auth = "none"


@pytest.mark.parametrize(
    ("pairs", "env", "expected"),
    [
        (["A=1", "B=x=y", "C="], {}, {"A": "1", "B": "x=y", "C": ""}),
        (["WANDB_API_KEY"], {"WANDB_API_KEY": "s3cret"}, {"WANDB_API_KEY": "s3cret"}),
    ],
)
def test_env_takes_name_value_pairs_or_this_shells_value(pairs, env, expected):
    assert jobs.environment(pairs, env) == expected


@pytest.mark.parametrize(
    ("pairs", "words"),
    [(["1A=2"], "--env '1A': expected NAME=VALUE or NAME"), (["MISSING"], "--env MISSING: MISSING is not set here")],
)
def test_bad_env_values_are_usage_errors(pairs, words):
    with pytest.raises(ValueError, match=words):
        jobs.environment(pairs, {})


# --- The whole command: tunnel, submit, stream, exit status, tunnel closed ------------------------------------


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch) -> Path:
    """``ssh`` on PATH is the forwarding stand-in; returns the file it records its run in."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "ssh").write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE_SSH} "$@"\n')
    (folder / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    record = tmp_path / "ssh.json"
    monkeypatch.setenv("FAKE_SSH_RECORD", str(record))
    return record


@pytest.fixture
def inventory(tmp_path, server) -> Path:
    ports = {**settings.defaults()["ray_ports"], "dashboard": server.port}
    data = {"ray_role": "head", "ssh_user": "ubuntu", "ray_cluster_name": CLUSTER, "ray_ports": ports}
    path = tmp_path / "inventory.py"
    path.write_text(f"heads = [('192.0.2.10', {data!r})]\n")
    return path


def tunnel_closed(record: Path) -> bool:
    pid = json.loads(record.read_text())["pid"]
    return not Path(f"/proc/{pid}").exists()


def test_submit_streams_the_logs_and_exits_0_for_a_job_that_succeeded(server, token, inventory, project, fake_ssh,
                                                                        capsys):  # fmt: skip
    status = main(["submit", str(inventory), "--working-dir", str(project), "--", "python", "job.py", "--epochs", "3"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert out == "hello\nrayrig-e2e-1\nrayrig-e2e-2\n"  # the job's output alone on stdout
    assert 'rayrig submit: job raysubmit_fake1 on cluster "lab" (via ubuntu@192.0.2.10)' in err
    assert err.rstrip().endswith("rayrig submit: job raysubmit_fake1 SUCCEEDED")
    assert server.submitted[0]["entrypoint"] == "python job.py --epochs 3"
    assert server.submitted[0]["runtime_env"]["working_dir"].startswith("gcs://_ray_pkg_")
    ssh = json.loads(fake_ssh.read_text())
    forward = ssh["argv"][ssh["argv"].index("-L") + 1]
    assert ssh["argv"][-2:] == ["--", "192.0.2.10"] and forward.endswith(f":127.0.0.1:{server.port}")
    assert token not in json.dumps(ssh) + out + err  # not on ssh's command line, in its environment, or printed
    assert tunnel_closed(fake_ssh)


def test_submit_exits_1_with_the_jobs_error_line_for_a_job_that_failed(server, token, inventory, fake_ssh, capsys):
    server.job.update(logs=["Traceback ...\n", "RuntimeError: no GPU on rayrig-e2e-2\n"], status="FAILED",
                      message=FAILED_MESSAGE)  # fmt: skip
    assert main(["submit", str(inventory), "--", "python", "job.py"]) == 1
    out, err = capsys.readouterr()
    assert out.endswith("RuntimeError: no GPU on rayrig-e2e-2\n")
    assert err.rstrip().splitlines()[-1] == (
        "rayrig submit: job raysubmit_fake1 FAILED: "
        "Job entrypoint command failed with exit code 1: RuntimeError: no GPU on rayrig-e2e-2"
    )
    assert "Traceback" not in err and token not in out + err
    assert tunnel_closed(fake_ssh)


def test_no_wait_prints_the_job_id_alone_and_how_to_follow_it(server, inventory, fake_ssh, capsys):
    assert main(["submit", str(inventory), "--no-wait", "--", "python", "job.py"]) == 0
    out, err = capsys.readouterr()
    assert out == "raysubmit_fake1\n"
    assert f"`rayrig dashboard {inventory}` in another shell" in err
    assert "`ray job logs -f raysubmit_fake1`" in err and "`ray job stop raysubmit_fake1`" in err
    assert not [r for r in server.requests if r["path"].endswith("/logs/tail")]
    assert tunnel_closed(fake_ssh)


def test_a_kill_while_following_leaves_the_job_running_says_how_to_stop_it_and_closes_the_tunnel(
    server, inventory, fake_ssh, capsys
):
    server.job["hang"] = True
    pid = os.getpid()

    def kill_once_streaming() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(r["path"].endswith("/tail") for r in server.requests):
            time.sleep(0.1)
        time.sleep(0.5)
        os.kill(pid, signal.SIGTERM)

    threading.Thread(target=kill_once_streaming, daemon=True).start()
    before = signal.getsignal(signal.SIGTERM)
    assert main(["submit", str(inventory), "--", "python", "train.py"]) == 130
    out, err = capsys.readouterr()
    assert out == "hello\nrayrig-e2e-1\nrayrig-e2e-2\n"
    assert "stopped following job raysubmit_fake1; it keeps running on the cluster" in err
    assert "`ray job stop raysubmit_fake1`" in err
    assert not [r for r in server.requests if r["path"].endswith("/stop")]  # rayrig submit does not stop it
    assert tunnel_closed(fake_ssh)
    assert signal.getsignal(signal.SIGTERM) is before  # its own handler is gone again


def test_ssh_that_fails_is_exit_1_with_ssh_s_words_before_anything_is_submitted(server, inventory, fake_ssh,
                                                                                 monkeypatch, capsys):  # fmt: skip
    monkeypatch.setenv("FAKE_SSH_FAIL", "ssh: connect to host 192.0.2.10 port 22: Connection timed out")
    assert main(["submit", str(inventory), "--", "python", "job.py"]) == 1
    err = capsys.readouterr().err
    assert "rayrig submit: ssh to ubuntu@192.0.2.10 exited with status 255: ssh: connect to host" in err
    assert not server.requests


def test_a_port_bound_by_someone_else_while_ssh_authenticates_gets_no_byte_of_the_token(
    server, token, inventory, fake_ssh, tmp_path, monkeypatch, capsys
):
    """Another local user binds the tunnel's port after rayrig found it free and before ssh, still
    authenticating, binds it: ssh cannot listen and says so, and nothing reaches the squatter."""
    bound = tmp_path / "squatter-bound"
    monkeypatch.setenv("FAKE_SSH_SLOW_AUTH", str(bound))
    received: list[bytes] = []  # one entry per connection the squatter accepted: what it read
    done = threading.Event()

    def squat() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the port rayrig chose, read off ssh's command line once it runs
            try:
                argv = json.loads(fake_ssh.read_text())["argv"]
                break
            except (OSError, ValueError):
                time.sleep(0.02)
        port = int(argv[argv.index("-L") + 1].split(":")[1])
        with socket.create_server(("127.0.0.1", port)) as squatter:
            squatter.settimeout(0.1)
            bound.touch()
            while not done.is_set():
                try:
                    connection, _ = squatter.accept()
                except TimeoutError:
                    continue
                with connection:
                    connection.settimeout(2)
                    data = b""
                    with contextlib.suppress(OSError):
                        while chunk := connection.recv(65536):
                            data += chunk
                    received.append(data)

    thread = threading.Thread(target=squat, daemon=True)
    thread.start()
    try:
        assert main(["submit", str(inventory), "--", "python", "job.py"]) == 1
    finally:
        done.set()
        thread.join(timeout=30)
    err = capsys.readouterr().err
    assert bound.exists()  # the squatter held the port while ssh tried
    assert "exited with status 255: Could not request local forwarding." in err
    assert received == []  # not a connection, so not a byte of the token either
    assert not server.requests


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["INV"], "no command to run: give it after --"),
        (["INV", "--"], "no command to run"),
        (
            ["INV", "--working-dir", "/no/such/dir", "--", "python", "x.py"],
            "--working-dir /no/such/dir: no such directory",
        ),
        (["INV", "--env", "NOT_SET_HERE_X", "--", "python"], "--env NOT_SET_HERE_X: NOT_SET_HERE_X is not set here"),
        (["no/such/inventory.py", "--", "python", "x.py"], "no/such/inventory.py: no such inventory file"),
        (["INV", "--workdir", "d", "--", "python"], "--workdir: not an option of rayrig submit"),
        (["INV", "--working-dir"], "argument --working-dir: expected one argument"),
    ],
)
def test_bad_usage_exits_2_with_one_line_and_touches_no_cluster(inventory, fake_ssh, server, argv, words, capsys):
    argv = [str(inventory) if a == "INV" else a for a in argv]
    assert main(["submit", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not fake_ssh.exists() and not server.requests


def test_a_tunnel_that_drops_while_following_is_exit_1_naming_the_tunnel_and_the_job(server, inventory, fake_ssh,
                                                                                      capsys):  # fmt: skip
    server.job["hang"] = True

    def kill_ssh_once_streaming() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(r["path"].endswith("/tail") for r in server.requests):
            time.sleep(0.1)
        time.sleep(0.5)
        os.kill(json.loads(fake_ssh.read_text())["pid"], signal.SIGKILL)

    threading.Thread(target=kill_ssh_once_streaming, daemon=True).start()
    assert main(["submit", str(inventory), "--", "python", "train.py"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("rayrig submit: job raysubmit_fake1: lost the job's log stream: "), err
    assert "(the tunnel closed: ssh to ubuntu@192.0.2.10 exited with status -9" in err
    assert "The job may still run; to follow or stop it:" in err and "`ray job stop raysubmit_fake1`" in err
