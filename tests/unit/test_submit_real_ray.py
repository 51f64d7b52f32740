"""``rayrig.jobs`` against a real Ray 2.60 dashboard with token authentication (no SSH, no lab).

A local Ray of its own, started by a driver process of its own with ``RAY_AUTH_MODE=token``
as the cluster's nodes run, so Ray's own auth middleware judges the header, Ray's own
package store takes the working directory, and Ray's own job supervisor runs the job (a
script that does not connect to Ray itself: tasks on the nodes are the lab's to show). The
driver is told to stop by closing its standard input: it shuts down only the Ray it started.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.ray import auth
from rayrig import dashboard, jobs

pytestmark = [pytest.mark.slow, pytest.mark.real_ray]

DRIVER = """
import sys
import ray
ray.init("local", num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=int(sys.argv[1]),
         _temp_dir=sys.argv[2], logging_level="ERROR")
print("READY", flush=True)
sys.stdin.read()
ray.shutdown()
"""

JOB = """
import os
import helper
print(helper.greet("the real dashboard"), os.environ["RAYRIG_X"], flush=True)
"""

HELPER = """
def greet(who):
    return f"hello from a module of the working dir, run by {who}"
"""


@pytest.fixture(scope="module")
def real_dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    folder = tmp_path_factory.mktemp("real-ray")
    token_file = folder / "token"
    auth.store_token(token_file, auth.new_token())
    temp_dir = tempfile.mkdtemp(prefix="rr-sub-")  # short: Ray's socket paths must fit in 107 bytes
    port = dashboard.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file)}
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(port), temp_dir],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert driver.stdout.readline().strip() == "READY", "the local Ray did not start"
        yield {"url": f"http://127.0.0.1:{port}", "token_file": token_file}
    finally:
        driver.stdin.close()
        try:
            driver.wait(timeout=120)
        except subprocess.TimeoutExpired:
            driver.kill()  # only the driver this fixture started
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_a_job_with_a_working_dir_succeeds_through_rays_own_auth_and_package_store(real_dashboard, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "job.py").write_text(JOB)
    (project / "helper.py").write_text(HELPER)
    client = jobs.connect(real_dashboard["url"], jobs.auth_headers(real_dashboard["token_file"]))
    job_id = jobs.submit(client, [sys.executable, "job.py"], jobs.runtime_env(project, {"RAYRIG_X": "1"}), wait_s=240)
    seen: list[str] = []
    jobs.follow(client, job_id, seen.append)
    assert jobs.outcome(client, job_id) == jobs.Outcome("SUCCEEDED", ""), "".join(seen)[-3000:]
    assert "hello from a module of the working dir, run by the real dashboard 1" in "".join(seen)


def test_a_job_that_raises_fails_with_its_error_line(real_dashboard, tmp_path):
    client = jobs.connect(real_dashboard["url"], jobs.auth_headers(real_dashboard["token_file"]))
    command = [sys.executable, "-c", "raise ValueError('no such dataset: s3://nowhere')"]
    job_id = jobs.submit(client, command, {}, wait_s=240)
    jobs.follow(client, job_id, lambda chunk: None)
    ended = jobs.outcome(client, job_id)
    assert ended.status == "FAILED"
    assert ended.error == "Job entrypoint command failed with exit code 1: ValueError: no such dataset: s3://nowhere"


@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_rays_dashboard_refuses_a_missing_or_wrong_token(real_dashboard, tmp_path, token):
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    with pytest.raises(jobs.JobError, match="the dashboard refused the cluster's Ray token"):
        jobs.connect(real_dashboard["url"], headers)


def test_the_token_is_in_no_message(real_dashboard):
    token = auth.read_token(Path(real_dashboard["token_file"]))
    client = jobs.connect(real_dashboard["url"], jobs.auth_headers(real_dashboard["token_file"]))
    with pytest.raises(jobs.JobError) as failed:
        jobs.outcome(client, "raysubmit_no_such_job", wait_s=1)
    assert token not in str(failed.value)
