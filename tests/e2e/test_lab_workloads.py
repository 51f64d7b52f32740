"""The work the cluster is for, end to end on the lab: the examples of ``examples/``, each through
``rayrig submit`` with its folder as the working directory, and ``rayrig notebook``.

The cluster runs the image family's development image (``examples/images/dev``, built with
``rayrig image build --requirements``: JupyterLab, Serve, Train, Tune on the lab's Ray image), with the
lab's S3 mount (moto's server) as its shared storage at ``/mnt/shared``, which the deploy gives every
job as ``RAYRIG_SHARED_DIR``. The head declares no CPUs, as a production head often does, so the work
runs on the two workers: the training worker the scenario kills is never the head.

The scenarios run in file order: the notebook first, since it counts the cluster's nodes, and the
training last, since it kills a worker's ray-node (whose unit starts it again).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from cloud import lab as local
from cloud.lab.registry import push_to_lab
from cloud.lab.state import lab_image_tag
from images.build import docker_image_inspect
from tests.e2e.labkit import (
    BUCKET,
    DEV_IMAGE,
    HOSTS,
    LAB,
    S3_SECRET,
    Lab,
    build_dev_image,
    deploy,
    inventory_variant,
    outsider_probe,
    rayrig,
    rayrig_background,
    wait_for_alive,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SHARED = "/mnt/shared"
SERVE_PORT = 8000


@pytest.fixture(scope="module")
def cluster(lab: Lab, s3, tmp_path_factory) -> Path:
    """The lab on the development image with the S3 mount as its shared storage, the head with no CPUs;
    the inventory's path. It is deployed from whatever the lab holds (not from the baseline first: this
    deploy changes every node anyway); the next module's baseline deploys the lab back."""
    if len(local.load_state(LAB)["hosts"]) != HOSTS:  # a module that grew the lab and failed to shrink it
        local.up(hosts=HOSTS, name=LAB)
    image = build_dev_image()  # built while the lab came up (tests.e2e.labkit up): up to date here
    pulled = push_to_lab(lab.state, image, "dev-1", print)
    mount = {"bucket": BUCKET, "path": SHARED, "endpoint_url": s3, "path_style": True, "region": "us-east-1"}
    changes = {
        "storage_s3_mounts": [mount],
        "storage_s3_credentials": {"access_key_id": "e2e", "secret_access_key": S3_SECRET},
        "ray_image": pulled,
    }
    folder = tmp_path_factory.mktemp("workloads")
    every = inventory_variant(folder / "every.py", changes)
    inventory = folder / "workloads.py"  # the same, the head declaring no CPUs
    inventory.write_text(every.read_text() + "heads = [(n, {**d, 'ray_num_cpus': 0}) for n, d in heads]\n")
    result = deploy(inventory, "--data", "checks_enabled=False")
    assert result.returncode == 0, "the deploy of the development image with the shared mount failed"
    wait_for_alive(lab, HOSTS, addresses=[h["address"] for h in lab.hosts])
    return inventory


def submit(inventory: Path, example: str, *args: str, timeout: float = 600) -> str:
    """``rayrig submit INVENTORY --working-dir examples/EXAMPLE -- python ARGS``: its whole output (rc 0)."""
    started = time.monotonic()
    result = rayrig("submit", inventory, "--working-dir", f"examples/{example}", "--", "python", *args, timeout=timeout)
    print(f"{example}: {time.monotonic() - started:.1f} s")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    return output


def test_the_development_image_is_the_labs_ray_image_and_one_layer_of_its_own(cluster):
    ray_layers = docker_image_inspect(lab_image_tag())["RootFS"]["Layers"]
    dev_layers = docker_image_inspect(DEV_IMAGE)["RootFS"]["Layers"]
    assert dev_layers[:-1] == ray_layers and len(dev_layers) == len(ray_layers) + 1


# --- rayrig notebook ---------------------------------------------------------------------------------


def jupyter(url: str, path: str, token: str | None, method: str = "GET", body: dict | None = None):
    """A request to JupyterLab's REST API through the tunnel: (status, JSON answer or None)."""
    headers = {"Authorization": f"token {token}"} if token else {}
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, None


def run_in_kernel(url: str, token: str, kernel: str, code: str, timeout: float = 180) -> str:
    """Run ``code`` in a kernel over Jupyter's messaging protocol (its websocket); what it printed."""
    import asyncio  # noqa: PLC0415

    import aiohttp  # noqa: PLC0415 (Ray's own dependency: a websocket client)

    async def run() -> str:
        msg_id = uuid.uuid4().hex
        request = {
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "session": uuid.uuid4().hex,
                       "username": "e2e", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True},
        }  # fmt: skip
        printed, ws_url = [], url.replace("http://", "ws://") + f"/api/kernels/{kernel}/channels"
        async with aiohttp.ClientSession() as session, session.ws_connect(
            ws_url, headers={"Authorization": f"token {token}"}, timeout=aiohttp.ClientWSTimeout(ws_close=10)
        ) as ws:  # fmt: skip
            await ws.send_json(request)
            async for message in ws:
                reply = json.loads(message.data)
                if reply.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = reply["msg_type"], reply["content"]
                if kind == "stream":
                    printed.append(content["text"])
                elif kind == "error":
                    printed.append("\n".join(content["traceback"]))
                elif kind == "execute_reply":
                    return "".join(printed)
        return "".join(printed)

    return asyncio.run(asyncio.wait_for(run(), timeout))


def test_a_notebook_on_the_head_reaches_the_cluster_with_its_token_and_leaves_nothing(lab, cluster):
    process = rayrig_background("notebook", cluster)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 180
        url = token_file = None
        while not (url and token_file) and time.monotonic() < deadline and process.poll() is None:
            line = process.stdout.readline()
            lines.append(line)
            if found := re.search(r"(http://127\.0\.0\.1:\d+)/lab\b", line):
                url = found[1]
            if found := re.search(r"token: it is in (\S+) ", line):
                token_file = Path(found[1])
        assert url and token_file, "".join(lines)
        token = token_file.read_text().strip()
        assert token and token not in "".join(lines), "the token is never printed"
        assert token_file.stat().st_mode & 0o777 == 0o600

        status, answer = jupyter(url, "/api/status", token)
        assert status == 200 and "started" in answer, answer
        assert jupyter(url, "/api/status", None)[0] == 403
        assert jupyter(url, "/api/status", "not-" + token)[0] == 403

        status, kernel = jupyter(url, "/api/kernels", token, "POST", {"name": "python3"})
        assert status == 201, kernel
        # ray.nodes() lists the nodes that left too (the containers the deploy just replaced): the alive ones
        code = "import ray; ray.init(); print(len([n for n in ray.nodes() if n['Alive']]))"
        printed = run_in_kernel(url, token, kernel["id"], code)
        assert printed.strip().splitlines()[-1] == str(HOSTS), printed
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    lines.append(rest)
    assert process.returncode == 0, "".join(lines)[-3000:]
    left = subprocess.run(["pgrep", "-af", f"ssh .*{lab.head['address']}"], capture_output=True, text=True).stdout
    assert "-L" not in left and "jupyter" not in left, left
    assert "jupyter" not in lab.sh(lab.head, "sudo docker top ray-node"), "the server is left"
    assert not token_file.exists()


# --- The examples --------------------------------------------------------------------------------------


def test_a_sweep_of_12_trials_with_one_crash_ends_with_12_results_on_the_shared_mount(lab, cluster):
    output = submit(cluster, "sweep", "sweep.py", "--name", "e2e-sweep", "--crash-trial", "5")
    assert "12 trials, 12 with results, 0 failed" in output, output[-4000:]
    best = re.search(r"best configuration: lr=(\S+) batch_size=(\d+) epochs=(\d+)", output)
    assert best, output[-4000:]
    assert f"results: {SHARED}/sweep/e2e-sweep/results.json" in output
    other = lab.workers[-1]  # another node than the driver's (the head's)
    rows = json.loads(lab.sh(other, f"cat {SHARED}/sweep/e2e-sweep/results.json"))
    assert sorted(r["index"] for r in rows) == list(range(12)) and all(r["mse"] is not None for r in rows)
    assert lab.sh(other, f"cat {SHARED}/sweep/e2e-sweep/crashed-5").strip(), "trial 5 crashed once, on purpose"
    chosen = min(rows, key=lambda r: r["mse"])
    assert (str(chosen["lr"]), str(chosen["batch_size"]), str(chosen["epochs"])) == best.groups()


def test_every_worker_reads_its_share_of_the_same_files_from_the_mount(lab, cluster):
    output = submit(cluster, "data", "data.py", "--workers", "2", "--name", "e2e-data")
    shares = re.findall(rf"worker (\d) on node (\S+) read (\d+) rows from {SHARED}/data/e2e-data", output)
    assert len(shares) == 2 and all(int(rows) > 0 for _, _, rows in shares), output[-4000:]
    assert "read 200000 of 200000 rows" in output and "every row once" in output
    assert {node for _, node, _ in shares} == {h["address"] for h in lab.workers}  # the head declares no CPUs


def test_a_served_model_answers_members_and_no_one_else(lab, cluster):
    output = submit(cluster, "serve", "serve_model.py", "--replicas", "2")
    assert "serving 2 replicas" in output, output[-4000:]
    try:
        body = json.dumps({"x": [0.1] * 8})
        member = lab.workers[0]
        for h in lab.hosts:  # Serve's proxy on every node: Serve starts those of the other nodes soon after
            url = f"http://{h['address']}:{SERVE_PORT}/predict"
            ask = f"curl -sf -m 10 -X POST {url} -d '{body}'"
            command = f"for i in $(seq 60); do {ask} && exit 0; sleep 2; done; exit 7"
            answer = json.loads(lab.sh(member, command))
            assert len(answer["y"]) == 1 and answer["replica_node"], answer
        shut = outsider_probe(lab, [(h["address"], SERVE_PORT) for h in lab.hosts])
        assert not any(shut.values()), f"a non-member reached Serve: {shut}"
    finally:
        submit(cluster, "serve", "serve_model.py", "--shutdown")


def test_training_survives_losing_the_worker_of_rank_1_and_resumes_from_its_checkpoint(lab, cluster):
    name = "e2e-train"
    process = rayrig_background(
        "submit", cluster, "--working-dir", "examples/train", "--",
        "python", "train.py", "--name", name, "--workers", "2", "--epochs", "6", "--epoch-seconds", "2",
    )  # fmt: skip
    by_address = {h["address"]: h for h in lab.hosts}
    lines, rank1, killed = [], None, None
    try:
        for line in process.stdout:
            lines.append(line)
            if found := re.search(r"rank 1 of 2 on node (\S+)", line):
                rank1 = rank1 or found[1]
            if killed is None and rank1 and re.search(r"epoch \d+: loss \S+, checkpoint saved", line):
                assert rank1 != lab.head["address"], "the head declares no CPUs"
                lab.sh(by_address[rank1], "sudo docker kill ray-node")
                killed = time.monotonic()
        process.wait(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    output = "".join(lines)
    assert killed, output[-6000:]
    assert process.returncode == 0, output[-6000:]
    assert re.search(rf"resumed from the checkpoint of epoch \d+ \({SHARED}/train/{name}/checkpoint_", output), output
    final = re.search(r"final checkpoint: (\S+)", output)
    assert final and final[1].startswith(f"{SHARED}/train/{name}/"), output[-3000:]
    lab.sh(lab.workers[0], f"test -s {final[1]}/state.pt")  # on the mount, from a node
    wait_for_alive(lab, HOSTS, addresses=[h["address"] for h in lab.hosts])  # the killed node is back
