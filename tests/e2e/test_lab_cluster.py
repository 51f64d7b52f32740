"""The whole deploy, end to end, on a 3-host local lab.

Real sshd hosts with systemd, pyinfra over SSH, Docker installed inside each
host, the Ray image pulled from the lab's registry, a real Ray cluster. The
tests run in file order and share one lab; the last one tears it down and
checks that nothing is left (the fixture tears down too when a test fails).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cloud import lab as local  # the module-scoped fixture below is named lab
from cloud import ssh as remote
from deploy import auth, firewall, settings
from deploy.paths import repo_root

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LAB = os.environ.get("RAYRIG_E2E_LAB", "rayrig-e2e")
HOSTS = 3


def deploy(inventory: str | Path, *extra: str) -> subprocess.CompletedProcess:
    """Run the deploy with pyinfra, as a user would, and return its output."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pyinfra", str(inventory), "deploy/cluster.py", "-y", *extra],
        cwd=repo_root(),
        env={**os.environ, "RAYRIG_LAB": LAB},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    print(f"deploy of {inventory} took {time.monotonic() - started:.1f} s")
    if result.returncode != 0:
        print(result.stdout[-6000:], result.stderr[-4000:])
    return result


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def changed_operations(output: str) -> dict[str, int]:
    """pyinfra's own report: per host, how many operations changed something.

    pyinfra prints ``[host] Success`` for an operation that ran commands and
    ``[host] No changes`` for one that did not; its results table ends with a
    "Grand total" row whose Success column must agree.
    """
    changed: dict[str, int] = {}
    total_success = None
    for line in ANSI.sub("", output).splitlines():
        match = re.search(r"\[(?P<host>[^\]]+)\]\s+(?P<status>Success|No changes)\b", line)
        if match:
            changed.setdefault(match["host"], 0)
            changed[match["host"]] += match["status"] == "Success"
        if line.strip().startswith("Grand total"):
            total_success = line.split()[3]
    assert total_success is not None, "pyinfra printed no results table"
    assert (total_success == "-") == (sum(changed.values()) == 0), (total_success, changed)
    return changed


class Lab:
    """The lab under test: its state, and commands on its hosts."""

    def __init__(self, state: dict):
        self.state = state
        self.hosts = state["hosts"]
        self.head = next(h for h in self.hosts if h["role"] == "head")
        self.workers = [h for h in self.hosts if h["role"] != "head"]

    def target(self, h: dict) -> remote.SshTarget:
        return remote.SshTarget(
            h["address"], self.state["ssh_user"], Path(self.state["ssh_key"]), Path(self.state["known_hosts"])
        )

    def sh(self, h: dict, command: str, timeout: float = 300) -> str:
        status, output = remote.run(self.target(h), command, timeout=timeout)
        assert status == 0, f"{command!r} on {h['address']} failed ({status}): {output[-3000:]}"
        return output

    def container_id(self, h: dict) -> str:
        return self.sh(h, "sudo docker inspect --format '{{.Id}}' ray-node").strip()

    def ray_python(self, code: str, timeout: float = 300) -> dict:
        """Run Python inside the head's ray-node container; it prints one line ``RESULT <json>``.

        Ray's own warnings share the output stream, so the result line is marked.
        """
        script = textwrap.dedent(code)
        command = "sudo docker exec -i ray-node python -"
        status, output = remote.run_with_input(self.target(self.head), command, script, timeout=timeout)
        assert status == 0, f"python in the head container failed ({status}): {output[-3000:]}"
        results = [line[len("RESULT ") :] for line in output.splitlines() if line.startswith("RESULT ")]
        assert results, f"no RESULT line in: {output[-3000:]}"
        return json.loads(results[-1])


CLUSTER_STATE = """
import json, time, ray
ray.init(address="auto", logging_level="ERROR")
deadline = time.time() + {wait}
while True:
    nodes = [n for n in ray.nodes() if n["Alive"]]
    if len(nodes) >= {expect} or time.time() > deadline:
        break
    time.sleep(2)
print("RESULT", json.dumps({{"nodes": [{{"id": n["NodeID"], "ip": n["NodeManagerAddress"], "resources": n["Resources"]}}
                            for n in nodes],
                  "total": ray.cluster_resources()}}))
"""


def cluster_state(lab: Lab, expect: int = HOSTS, wait: int = 90) -> dict:
    return lab.ray_python(CLUSTER_STATE.format(expect=expect, wait=wait))


def wait_for_total_cpus(lab: Lab, cpus: float, seconds: int = 120) -> dict:
    """The cluster state once its CPU total is ``cpus`` (replaced nodes take a moment to rejoin)."""
    deadline = time.monotonic() + seconds
    while True:
        state = cluster_state(lab)
        if state["total"].get("CPU") == cpus and len(state["nodes"]) == HOSTS:
            return state
        if time.monotonic() > deadline:
            return state
        time.sleep(3)


@pytest.fixture(scope="module")
def lab():
    started = time.monotonic()
    state = local.up(hosts=HOSTS, name=LAB)
    print(f"lab up took {time.monotonic() - started:.1f} s")
    try:
        yield Lab(state)
    finally:
        local.down(LAB)


@pytest.fixture(scope="module")
def first_deploy(lab):
    result = deploy("inventories/lab.py")
    assert result.returncode == 0, "the first deploy failed"
    return result


def test_three_nodes_alive_with_declared_resources(lab, first_deploy):
    state = cluster_state(lab)
    assert sorted(n["ip"] for n in state["nodes"]) == sorted(h["address"] for h in lab.hosts)
    assert state["total"]["CPU"] == sum(h["num_cpus"] for h in lab.hosts)
    assert state["total"].get("GPU", 0) == 0
    for h in lab.hosts:
        node = next(n for n in state["nodes"] if n["ip"] == h["address"])
        for resource, amount in h["resources"].items():
            assert node["resources"].get(resource) == amount, f"{resource} on {h['address']}"
            assert state["total"][resource] == amount


PINNED_TASKS = """
import json, ray
ray.init(address="auto", logging_level="ERROR")

@ray.remote(num_cpus=0)
def where():
    return ray.util.get_node_ip_address()

print("RESULT", json.dumps({{name: ray.get(where.options(resources={{name: 0.01}}).remote(), timeout=120)
                  for name in {names!r}}}))
"""


def test_task_pinned_by_custom_resource_runs_on_its_node(lab, first_deploy):
    names = {next(iter(h["resources"])): h["address"] for h in lab.hosts}
    ran_on = lab.ray_python(PINNED_TASKS.format(names=list(names)))
    assert ran_on == names


def report_paths(output: str) -> tuple[Path, Path]:
    """The JSON report and the plot the checks say they saved."""
    json_path = re.search(r"--> JSON report: (\S+)", output)
    plot_path = re.search(r"--> bus bandwidth plot: (\S+)", output)
    assert json_path and plot_path, output[-3000:]
    return Path(json_path[1]), Path(plot_path[1])


def test_checks_pass_at_the_end_of_the_deploy(lab, first_deploy):
    output = first_deploy.stdout + first_deploy.stderr
    assert "Running the post-deploy checks" in output
    json_path, plot_path = report_paths(output)
    report = json.loads(json_path.read_text())
    assert report["verdict"]["status"] == "PASS", report["verdict"]
    assert "VERDICT: PASS" in output
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(d["ip"] for d in report["devices"]) == sorted(h["address"] for h in lab.hosts)
    assert all(d["matmul"]["tflops"] > 0 for d in report["devices"])
    assert report["allreduce"]["world_size"] == HOSTS
    assert report["allreduce"]["value_check"]["ok"] is True
    assert all(row["busbw_gbps"] > 0 for row in report["allreduce"]["sweep"])
    assert report["sweep_test"]["completed"] == report["sweep_test"]["tasks"]
    assert not report["sweep_test"]["missing_nodes"]
    assert set(report["preflight"]) == {h["address"] for h in lab.hosts}


# --- Security: the firewall, token authentication, the dashboard tunnel -------------------------


def outsider_probe(lab: Lab, targets: list[tuple[str, int]]) -> dict[str, bool]:
    """Which ``address:port`` a container on the lab network, not in the inventory, can connect to."""
    probes = " ".join(
        f"(timeout 3 bash -c 'exec 3<>/dev/tcp/{a}/{p}' 2>/dev/null && echo OPEN {a}:{p} || echo SHUT {a}:{p}) &"
        for a, p in targets
    )
    result = subprocess.run(
        ["docker", "run", "--rm", "--network", lab.state["network"], local.BASE_IMAGE, "bash", "-c", probes + " wait"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    found = dict(reversed(line.split()) for line in result.stdout.splitlines() if line.strip())
    return {target: status == "OPEN" for target, status in found.items()}


def member_can_connect(lab: Lab, member: dict, address: str, port: int) -> bool:
    command = f"timeout 3 bash -c 'exec 3<>/dev/tcp/{address}/{port}' && echo OPEN || echo SHUT"
    return lab.sh(member, command).strip().endswith("OPEN")


def ray_ports() -> dict[str, int]:
    return settings.defaults()["ray_ports"]


def test_the_firewall_admits_only_the_clusters_members(lab, first_deploy):
    ports = ray_ports()
    head, worker = lab.head["address"], lab.workers[0]["address"]
    closed = [
        (head, ports[n]) for n in ("gcs", "client_server", "dashboard", "dashboard_agent_grpc", "dashboard_agent_http")
    ]
    closed += [(worker, ports[n]) for n in ("node_manager", "object_manager")]
    seen = outsider_probe(lab, [*closed, (head, 22)])
    assert {t: seen[f"{t[0]}:{t[1]}"] for t in closed} == {t: False for t in closed}
    assert seen[f"{head}:22"], "SSH is open to anyone while firewall_admin_cidrs is empty"
    # The same ports answer a member: the firewall, not an idle port, keeps the outsider out.
    assert member_can_connect(lab, lab.workers[1], head, ports["gcs"])
    assert member_can_connect(lab, lab.workers[1], head, ports["client_server"])
    assert member_can_connect(lab, lab.head, worker, ports["node_manager"])
    assert member_can_connect(lab, lab.head, worker, ports["object_manager"])
    ruleset = lab.sh(lab.head, "sudo nft list table inet rayrig")
    assert "policy drop" in ruleset


RAY_STATUS = "sudo docker run --rm --network=host {env} {image} timeout 60 ray status --address {head}:{port}"


def test_ray_refuses_a_client_without_the_token_and_admits_one_with_it(lab, first_deploy):
    worker = lab.workers[0]
    command = RAY_STATUS.format(
        image=lab.state["image"], head=lab.head["address"], port=ray_ports()["gcs"], env="{env}"
    )
    for env in ("", "-e RAY_AUTH_MODE=token -e RAY_AUTH_TOKEN=not-the-cluster-token"):
        status, output = remote.run(lab.target(worker), command.format(env=env), timeout=120)
        assert status != 0 and "InvalidAuthToken" in output, output[-2000:]
    token_mount = f"--mount type=bind,src={auth.NODE_TOKEN_PATH},dst=/token,readonly"
    with_token = f"-e RAY_AUTH_MODE=token -e RAY_AUTH_TOKEN_PATH=/token {token_mount}"
    output = lab.sh(worker, command.format(env=with_token), timeout=120)
    assert output.count("node_") >= HOSTS, output[-2000:]


def cluster_token() -> str:
    return auth.read_token(auth.token_path(settings.merge({"ray_cluster_name": LAB})))


def test_the_token_is_0600_and_appears_in_no_output_inspect_process_list_or_log(lab, first_deploy):
    token = cluster_token()
    local_copy = auth.token_path(settings.merge({"ray_cluster_name": LAB}))
    assert oct(local_copy.stat().st_mode & 0o777) == "0o600"
    assert token not in first_deploy.stdout + first_deploy.stderr
    for h in lab.hosts:
        assert lab.sh(h, f"sudo stat -c %a {auth.NODE_TOKEN_PATH}").strip() == "600"
        seen = lab.sh(
            h,
            "{ sudo docker inspect ray-node; ps -eo args; sudo docker logs ray-node 2>&1; "
            "sudo journalctl --no-pager -u ray-node; "
            "sudo docker exec ray-node find /tmp/ray/session_latest/logs -type f -exec cat {} +; "
            "} 2>&1",
            timeout=120,
        )
        assert len(seen) > 10_000, "too little was looked at"
        assert token not in seen, f"the token leaked on {h['address']}"


def test_rayrig_dashboard_tunnels_to_the_heads_dashboard(lab, first_deploy):
    import urllib.error
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "rayrig", "dashboard", "inventories/lab.py", "--local-port", str(port)],
        cwd=repo_root(),
        env={**os.environ, "RAYRIG_LAB": LAB},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        first = process.stdout.readline()
        assert first.strip() == f'Dashboard of cluster "{LAB}": http://127.0.0.1:{port}', first
        url = f"http://127.0.0.1:{port}/api/version"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=30)
        assert refused.value.code == 401
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {cluster_token()}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert json.loads(answer.read())["ray_version"] == lab.state["ray_version"]
    finally:
        process.terminate()
        rest = process.communicate(timeout=30)[0]
    assert cluster_token() not in first + rest


def test_a_slow_node_is_named_by_the_checks(lab, first_deploy):
    slow = lab.workers[0]
    # A tenth of a CPU for the worker's Ray container: its matmul rate drops far below its peers'.
    lab.sh(slow, "sudo docker update --cpus 0.1 ray-node")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "rayrig", "check", "inventories/lab.py"],
            cwd=repo_root(),
            env={**os.environ, "RAYRIG_LAB": LAB},
            capture_output=True,
            text=True,
            timeout=1200,
        )
    finally:
        # `--cpus 0` leaves the quota in place: give back every CPU of the machine instead.
        lab.sh(slow, 'sudo docker update --cpus "$(nproc)" ray-node')
        nano = lab.sh(slow, "sudo docker inspect --format '{{.HostConfig.NanoCpus}}' ray-node").strip()
        assert int(nano) == int(lab.sh(slow, "nproc")) * 10**9, nano
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    report = json.loads(report_paths(output)[0].read_text())
    assert report["verdict"]["status"] == "FAIL"
    assert slow["name"] in report["verdict"]["slow_hosts"]
    assert [h for h in lab.hosts if h["name"] in report["verdict"]["slow_hosts"]] == [slow]
    assert re.search(rf"SLOW HOSTS: {re.escape(slow['name'])}\b", output)


def test_second_deploy_changes_nothing(lab, first_deploy):
    before = {h["address"]: lab.container_id(h) for h in lab.hosts}
    result = deploy("inventories/lab.py")
    assert result.returncode == 0
    changes = changed_operations(result.stdout + result.stderr)
    assert set(changes) == {h["address"] for h in lab.hosts}, result.stdout[-3000:]
    assert all(n == 0 for n in changes.values()), changes
    assert {h["address"]: lab.container_id(h) for h in lab.hosts} == before


# --- A value Ray refuses: the node is restored, not lost -------------------------------------------


def inventory_with(path: Path, address: str, changes: dict) -> Path:
    """The lab's inventory with ``changes`` in one host's data, written to ``path``."""
    path.write_text(
        textwrap.dedent(
            f"""
            import runpy
            lab = runpy.run_path({str(repo_root() / "inventories" / "lab.py")!r})
            changes = {changes!r}
            heads = [(name, {{**data, **changes}} if name == {address!r} else data) for name, data in lab["heads"]]
            workers = [(name, {{**data, **changes}} if name == {address!r} else data) for name, data in lab["workers"]]
            """
        )
    )
    return path


def refused_by_ray(lab: Lab, h: dict, tmp_path: Path) -> str:
    """Deploy with an object store four times the size of ``h``'s memory (the schema accepts any
    size of at least 75 MiB; ``ray start`` refuses it with a ValueError) and return the output."""
    mem_kb = int(lab.sh(h, "awk '/^MemTotal:/ {print $2}' /proc/meminfo").strip())
    changes = {"ray_object_store_bytes": 4 * mem_kb * 1024, "ray_replace_timeout_s": 60}
    result = deploy(inventory_with(tmp_path / "refused.py", h["address"], changes), "--data", "checks_enabled=False")
    output = ANSI.sub("", result.stdout + result.stderr)
    assert result.returncode != 0, output[-3000:]
    return output


def assert_restored(lab: Lab, h: dict, output: str, before: dict[str, str]) -> None:
    """The deploy named ``h`` and Ray's error, and ``h`` runs its previous container again."""
    failure = re.search(
        rf"{re.escape(h['address'])}: the new ray-node container did not join the cluster within 60 s; "
        r"the previous container is running again and has rejoined\. Ray said: (?P<said>.*)",
        output,
    )
    assert failure, output[-3000:]
    assert "Error" in failure["said"] and "object store" in failure["said"], failure["said"]
    assert {x["address"]: lab.container_id(x) for x in lab.hosts} == before  # the same containers, none lost
    assert lab.sh(h, "sudo docker inspect --format '{{.State.Running}}' ray-node").strip() == "true"
    assert lab.sh(h, "sudo docker ps --all --quiet --filter name=^ray-node-previous$").strip() == ""


def redeploy_changes_no_container(lab: Lab, before: dict[str, str]) -> None:
    """The lab's own inventory again: the restored containers already have its configuration."""
    result = deploy("inventories/lab.py", "--data", "checks_enabled=False")
    assert result.returncode == 0
    assert {h["address"]: lab.container_id(h) for h in lab.hosts} == before


def test_a_value_ray_refuses_on_a_worker_fails_naming_it_and_its_previous_container_rejoins(
    lab, first_deploy, tmp_path
):
    worker = lab.workers[1]
    before = {h["address"]: lab.container_id(h) for h in lab.hosts}
    try:
        output = refused_by_ray(lab, worker, tmp_path)
        assert_restored(lab, worker, output, before)
        state = cluster_state(lab)
        assert sorted(n["ip"] for n in state["nodes"]) == sorted(h["address"] for h in lab.hosts)
    finally:
        redeploy_changes_no_container(lab, before)


def test_a_value_ray_refuses_on_the_head_fails_naming_it_and_every_node_is_back(lab, first_deploy, tmp_path):
    before = {h["address"]: lab.container_id(h) for h in lab.hosts}
    try:
        output = refused_by_ray(lab, lab.head, tmp_path)
        assert_restored(lab, lab.head, output, before)
        # The workers lost the head meanwhile: Ray ends their raylets, their units start them
        # again and they join the restored head.
        state = cluster_state(lab, wait=240)
        assert sorted(n["ip"] for n in state["nodes"]) == sorted(h["address"] for h in lab.hosts)
    finally:
        redeploy_changes_no_container(lab, before)


def test_changing_one_workers_cpus_replaces_only_that_worker(lab, first_deploy, tmp_path):
    worker = lab.workers[0]
    before = {h["address"]: lab.container_id(h) for h in lab.hosts}
    # An inventory kept outside inventories/: the defaults must still apply.
    inventory = tmp_path / "bigger.py"
    inventory.write_text(
        textwrap.dedent(
            f"""
            import runpy
            lab = runpy.run_path({str(repo_root() / "inventories" / "lab.py")!r})
            heads = lab["heads"]
            workers = [(name, {{**data, "ray_num_cpus": data["ray_num_cpus"] + 3}} if name == {worker["address"]!r}
                        else data) for name, data in lab["workers"]]
            """
        )
    )
    result = deploy(inventory)
    assert result.returncode == 0
    after = {h["address"]: lab.container_id(h) for h in lab.hosts}
    assert after[worker["address"]] != before[worker["address"]]
    assert {a: i for a, i in after.items() if a != worker["address"]} == {
        a: i for a, i in before.items() if a != worker["address"]
    }
    expected = sum(h["num_cpus"] for h in lab.hosts) + 3
    assert wait_for_total_cpus(lab, expected)["total"]["CPU"] == expected


def test_killed_worker_container_comes_back_and_rejoins(lab, first_deploy):
    worker = lab.workers[-1]
    old = lab.container_id(worker)
    old_nodes = {n["id"] for n in cluster_state(lab)["nodes"]}
    lab.sh(worker, "sudo docker kill ray-node")
    killed_at = time.monotonic()
    deadline = killed_at + 60
    rejoined = False
    while time.monotonic() < deadline and not rejoined:
        time.sleep(2)
        state = cluster_state(lab, wait=0)
        # A new Ray node (a new id) alive at the worker's address: the restarted raylet joined.
        rejoined = any(n["ip"] == worker["address"] and n["id"] not in old_nodes for n in state["nodes"])
    print(f"worker rejoined {time.monotonic() - killed_at:.1f} s after docker kill")
    assert rejoined, "the killed worker did not come back within 60 s"
    assert lab.container_id(worker) == old  # the same container, started again


# --- Shared storage through S3, with SSH closed to all but the admins ------------------------------

BUCKET = "rayrig-e2e"
S3_SECRET = "e2e-Secret-Key-do-not-print"


@pytest.fixture(scope="module")
def s3(lab):
    """moto's S3 server on the lab network's gateway (this machine), with one bucket."""
    import boto3
    from moto.server import ThreadedMotoServer

    gateway = lab.state["gateway"]
    with socket.socket() as probe:
        probe.bind((gateway, 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address=gateway, port=port, verbose=False)
    server.start()
    url = f"http://{gateway}:{port}"
    client = boto3.client(
        "s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="e2e", aws_secret_access_key=S3_SECRET
    )
    client.create_bucket(Bucket=BUCKET)
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def secured(lab, s3, tmp_path_factory):
    """An inventory of the lab with SSH for admins only and the bucket mounted at /mnt/datasets."""
    extra = {
        "firewall_admin_cidrs": ["192.0.2.0/24"],  # nobody here: only the deploy's own address keeps SSH
        "storage_s3_mounts": [
            {"bucket": BUCKET, "path": "/mnt/datasets", "endpoint_url": s3, "path_style": True, "region": "us-east-1"}
        ],
        "storage_s3_credentials": {"access_key_id": "e2e", "secret_access_key": S3_SECRET},
    }
    inventory = tmp_path_factory.mktemp("secured") / "secured.py"
    inventory.write_text(
        textwrap.dedent(
            f"""
            import runpy
            lab = runpy.run_path({str(repo_root() / "inventories" / "lab.py")!r})
            extra = {extra!r}
            heads = [(name, {{**data, **extra}}) for name, data in lab["heads"]]
            workers = [(name, {{**data, **extra}}) for name, data in lab["workers"]]
            """
        )
    )
    result = deploy(inventory)
    assert result.returncode == 0, "the deploy with admin CIDRs and the S3 mount failed"
    return inventory, result


def test_with_admin_cidrs_ssh_is_closed_to_others_and_the_deploy_kept_its_session(lab, secured):
    head = lab.head["address"]
    seen = outsider_probe(lab, [(head, 22), (head, ray_ports()["gcs"])])
    assert seen == {f"{head}:22": False, f"{head}:{ray_ports()['gcs']}": False}
    assert lab.sh(lab.head, "echo still-in").strip() == "still-in"  # from the deploy's address


READ_IN_A_TASK = """
import json, ray
ray.init(address="auto", logging_level="ERROR")

@ray.remote(num_cpus=0)
def read(path):
    with open(path) as f:
        return ray.util.get_node_ip_address(), f.read()

print("RESULT", json.dumps(ray.get(read.options(resources={{"node:{ip}": 0.01}}).remote({path!r}), timeout=120)))
"""


def test_a_file_written_on_one_worker_is_read_on_the_other_and_in_a_ray_task_on_the_head(lab, secured):
    writer, reader = lab.workers[0], lab.workers[1]
    name = f"/mnt/datasets/e2e-{os.getpid()}-{int(time.time())}.txt"
    content = f"written on {writer['address']}"
    lab.sh(writer, f"echo -n {content!r} | sudo tee {name} >/dev/null")
    deadline = time.monotonic() + 60
    while True:
        status, output = remote.run(lab.target(reader), f"sudo cat {name}")
        if status == 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert (status, output) == (0, content)
    node, text = lab.ray_python(READ_IN_A_TASK.format(ip=lab.head["address"], path=name))
    assert (node, text) == (lab.head["address"], content)
    lab.sh(writer, f"sudo rm -f {name}")


def test_the_s3_credentials_are_0600_and_printed_nowhere(lab, secured):
    _inventory, result = secured
    output = result.stdout + result.stderr
    assert S3_SECRET not in output
    for h in lab.hosts:
        modes = lab.sh(h, "sudo find /etc/rayrig/s3 -type f -printf '%m\\n'").split()
        assert modes and set(modes) == {"600"}, modes
        assert S3_SECRET not in lab.sh(h, "{ ps -eo args; sudo docker inspect ray-node; mount; } 2>&1")


def test_the_checks_make_a_round_trip_through_the_mount(lab, secured):
    _inventory, result = secured
    output = result.stdout + result.stderr
    report = json.loads(report_paths(output)[0].read_text())
    assert report["verdict"]["status"] == "PASS", report["verdict"]
    [mount] = report["storage"]["mounts"]
    assert mount["path"] == "/mnt/datasets" and mount["ok"], mount
    assert sorted(mount["nodes_with_mount"]) == sorted(h["address"] for h in lab.hosts)


def test_a_rerun_of_the_secured_inventory_changes_nothing(lab, secured):
    inventory, _result = secured
    before = {h["address"]: lab.container_id(h) for h in lab.hosts}
    result = deploy(inventory, "--data", "checks_enabled=False")
    assert result.returncode == 0
    changes = changed_operations(result.stdout + result.stderr)
    assert all(n == 0 for n in changes.values()), changes
    assert {h["address"]: lab.container_id(h) for h in lab.hosts} == before


# --- Boot order: the firewall, the mounts and Ray come back by themselves ---------------------------


def rayrig_table_digest(lab: Lab, h: dict) -> tuple[str | None, str]:
    """(the digest the loaded table carries, the digest of the ruleset file) on a host."""
    status, listing = remote.run(lab.target(h), f"sudo nft list table {firewall.TABLE}")
    loaded = firewall.RayrigTable().process(listing.splitlines()) if status == 0 else None
    return (loaded or {}).get("digest"), firewall.ruleset_digest(lab.sh(h, f"sudo cat {firewall.RULESET_PATH}"))


def test_restarting_nftables_leaves_rayrig_table_loaded(lab, secured):
    worker = lab.workers[0]
    loaded, wanted = rayrig_table_digest(lab, worker)
    assert loaded == wanted
    # Debian's nftables.service flushes the whole ruleset (/etc/nftables.conf begins with "flush ruleset").
    lab.sh(worker, "sudo systemctl restart nftables.service")
    assert rayrig_table_digest(lab, worker) == (wanted, wanted)
    lab.sh(worker, "sudo systemctl reload nftables.service")
    assert rayrig_table_digest(lab, worker) == (wanted, wanted)
    # nftables.service stays started and Docker's rules flushed until the next test reboots this host.


def test_a_rebooted_host_comes_back_with_its_firewall_mount_and_ray_node(lab, secured):
    worker = lab.workers[0]
    old_container = lab.container_id(worker)
    old_nodes = {n["id"] for n in cluster_state(lab)["nodes"]}
    # A reboot: the host container's systemd stops everything, then boots again; no deploy runs.
    subprocess.run(["docker", "restart", "--time", "60", worker["container"]], check=True, timeout=180)
    rebooted_at = time.monotonic()
    deadline = rebooted_at + 180
    while not remote.ssh_answers(worker["address"], timeout=2.0):
        assert time.monotonic() < deadline, "sshd did not come back within 180 s"
        time.sleep(2)
    rejoined = False
    while time.monotonic() < deadline and not rejoined:
        time.sleep(3)
        state = cluster_state(lab, wait=0)
        rejoined = any(n["ip"] == worker["address"] and n["id"] not in old_nodes for n in state["nodes"])
    print(f"worker rejoined {time.monotonic() - rebooted_at:.1f} s after its reboot")
    assert rejoined, "the rebooted worker's Ray node did not join within 180 s"
    assert lab.container_id(worker) == old_container  # the same container, started by its unit
    loaded, wanted = rayrig_table_digest(lab, worker)
    assert loaded == wanted, "rayrig's table is not loaded after the reboot"
    assert lab.sh(worker, "mountpoint /mnt/datasets").strip() == "/mnt/datasets is a mountpoint"
    assert outsider_probe(lab, [(worker["address"], ray_ports()["node_manager"])]) == {
        f"{worker['address']}:{ray_ports()['node_manager']}": False
    }


def test_lab_down_leaves_nothing(lab):
    local.down(LAB)
    for kind in ("container ls -a", "network ls", "volume ls"):
        listed = subprocess.run(
            ["docker", *kind.split(), "--quiet", "--filter", f"label=rayrig.lab={LAB}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert listed == "", f"lab down left {kind.split()[0]}s: {listed}"
    assert local.load_state(LAB) is None
