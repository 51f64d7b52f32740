"""Bring-up, end to end, on a 3-host local lab (see conftest.py for the lab they share).

The first deploy of a fresh lab (its output: the checks, the phase timings, the image mirror; the
module runs first in either order), the cluster it makes, the firewall, token authentication, the
dashboard tunnel, a refused value, a killed worker, shared storage through S3 and a rebooted host.
The tests run in file order from the baseline; the module ends on the "secured" inventory (admin
CIDRs, the S3 mount), which the next module's baseline undoes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from cloud import ssh as remote
from deploy.contract import settings
from deploy.firewall import nftables
from deploy.host import image_mirror
from deploy.ray import auth, ray_temp
from rayrig.dashboard import free_port
from tests.e2e.labkit import (
    ANSI,
    BUCKET,
    HOSTS,
    LAB,
    LAB_INVENTORY,
    S3_SECRET,
    Lab,
    changed_operations,
    cluster_state,
    cluster_token,
    deploy,
    inventory_variant,
    member_can_connect,
    outsider_probe,
    ray_ports,
    ray_status,
    rayrig_background,
    report_paths,
    wait_for_alive,
    with_token,
)

# first_deploy is session-scoped: it runs before the module's baseline, on the fresh lab (conftest.py)
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.usefixtures("first_deploy")]


def test_three_nodes_alive_with_declared_resources(lab, baseline):
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


def test_task_pinned_by_custom_resource_runs_on_its_node(lab, baseline):
    names = {next(iter(h["resources"])): h["address"] for h in lab.hosts}
    ran_on = lab.ray_python(PINNED_TASKS.format(names=list(names)))
    assert ran_on == names


def test_checks_pass_at_the_end_of_the_deploy(lab, baseline, first_deploy):
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


def test_the_deploy_ends_with_each_phases_wall_time_also_in_the_checks_report(lab, baseline, first_deploy):
    output = ANSI.sub("", first_deploy.stdout + first_deploy.stderr)
    _before, header, table = output.partition("--> Phase timings (wall seconds; slowest host)\n")
    assert header, output[-3000:]
    seconds = {}
    for line in table.splitlines()[2:]:  # below the column names and their rule
        match = re.match(r"^([A-Za-z][\w ]*?)\s+(\d+\.\d)\b", line)
        if not match:
            break
        seconds[match[1]] = float(match[2])
    phases = ["base packages", "Docker", "image pull", "firewall", "Ray start", "checks"]
    assert set(phases) <= set(seconds), table[:2000]
    assert all(seconds[phase] <= seconds["total"] for phase in phases)
    json_path, _plot = report_paths(output)
    rows = {row["phase"]: row for row in json.loads(json_path.read_text())["phases"]}
    assert set(phases) <= set(rows), rows
    assert rows["checks"]["seconds"] > 0 and rows["checks"]["slowest_host"] is None
    assert rows["Docker"]["slowest_host"] in {h["address"] for h in lab.hosts}  # the lab names hosts by address


# --- Security: the firewall, token authentication, the dashboard tunnel -------------------------


def test_the_head_mirror_took_each_layer_from_upstream_once_and_every_node_runs_one_image(lab, baseline, first_deploy):
    """image_mirror = "head" (the first deploy's): the lab's registry is the upstream; its own access
    log while the deploy ran shows each blob of the image served once, not once per host."""
    log = subprocess.run(
        ["docker", "logs", "--since", first_deploy.started, "--until", first_deploy.ended,
         lab.state["registry_container"]],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    served: dict[str, int] = {}
    for digest in re.findall(r'"GET /v2/[^ "]+/blobs/(sha256:[0-9a-f]{64}) HTTP', log.stdout + log.stderr):
        served[digest] = served.get(digest, 0) + 1
    assert len(served) >= 2, f"the upstream served no image blobs in the deploy: {log.stderr[-2000:]}"
    assert set(served.values()) == {1}, f"blobs served more than once by the upstream: {served}"
    images = {h["address"]: lab.sh(h, "sudo docker inspect --format '{{.Image}}' ray-node").strip() for h in lab.hosts}
    assert len(set(images.values())) == 1, images
    assert "image pull" in first_deploy.stderr + first_deploy.stdout


def test_no_member_can_write_into_the_mirror_and_every_node_runs_the_digest_the_head_copied(
    lab, baseline, first_deploy
):
    """A worker tried to write into the head's mirror all through the first deploy (conftest.py): every
    manifest PUT under the run's tag and every blob upload was refused, and every node runs the image
    whose manifest the head copied from upstream (its image ID is that manifest's config digest)."""
    tries = first_deploy.mirror_write_tries
    writes = [t for t in tries if t["op"] in ("PUT", "POST")]
    assert any(t["op"] == "PUT" and t["tag"].startswith("rayrig-") for t in writes), tries[-20:]
    accepted = [t for t in writes if t["outcome"] in (200, 201, 202, 204)]
    assert not accepted, f"the mirror took a member's write: {accepted[:5]}"
    assert any(t["outcome"] == 405 for t in writes), writes[:20]  # the registry's own refusal, not a closed port
    path, tag = lab.state["image"].split("/", 1)[1].rsplit(":", 1)
    request = urllib.request.Request(
        f"http://{lab.state['registry_local']}/v2/{path}/manifests/{tag}",
        headers={
            "Accept": "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
        },
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        upstream_config = json.loads(answer.read())["config"]["digest"]
    # ray_image pinned by upstream's digest: each node ran it, by the name of that digest (Docker tags no digest)
    local = image_mirror.local_name(first_deploy.pinned)
    assert first_deploy.ran == {h["address"]: (local, upstream_config) for h in lab.hosts}, first_deploy.ran
    for h in lab.hosts:
        assert lab.sh(h, "sudo docker inspect --format '{{.Image}}' ray-node").strip() == upstream_config, h["address"]
    # The mirror answers on the head's cluster address only; its copy side is not up between copies.
    port = settings.defaults()["image_mirror_port"]
    listening = lab.sh(lab.head, f"sudo ss -ltnH 'sport = :{port}'").split()
    assert f"{lab.head['address']}:{port}" in listening, listening
    assert not {f"0.0.0.0:{port}", f"*:{port}", f"[::]:{port}", f"127.0.0.1:{port}"} & set(listening), listening


def test_the_firewall_admits_only_the_clusters_members(lab, baseline):
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


def closed_within(lab: Lab, targets: list[tuple[str, int]], seconds: float) -> float:
    """Seconds until a non-member reaches none of ``targets``; the test fails after ``seconds``."""
    started = time.monotonic()
    while True:
        seen = outsider_probe(lab, targets)
        if not any(seen.values()):
            return time.monotonic() - started
        assert time.monotonic() - started < seconds, f"still open after {seconds} s: {seen}"
        time.sleep(0.5)


SAVED_RULESET = "/tmp/rayrig-e2e-ruleset.nft"


def test_a_worker_without_its_firewall_table_closes_its_ports_and_rejoins_once_it_is_back(lab, baseline):
    """Fail closed (the firewall guard): on a worker whose distribution firewall runs, as a Debian firewall
    host's does, losing rayrig's table three ways stops Ray and the node exporter within 10 s; the table
    back, the node is alive again within 60 s, with no deploy. A plain restart of nftables leaves Ray up."""
    worker = lab.workers[1]
    address = worker["address"]
    ports = ray_ports()
    names = ("node_manager", "object_manager", "runtime_env_agent", "metrics_export", "dashboard_agent_grpc",
             "dashboard_agent_http")  # fmt: skip
    targets = [(address, ports[n]) for n in names] + [
        (address, settings.defaults()["monitoring_ports"]["node_exporter"])
    ]
    assert not any(outsider_probe(lab, targets).values())  # the firewall, at first
    # The lab's hosts are containers: their DNS (Docker's, at 127.0.0.11) and their own Docker's NAT live in
    # the same ruleset that nftables.service flushes. Kept here, put back at the end in one transaction.
    lab.sh(worker, f"{{ echo 'flush ruleset'; sudo nft list ruleset; }} > {SAVED_RULESET}")
    lab.sh(worker, "sudo systemctl start nftables")  # /etc/nftables.conf flushes everything; rayrig's drop-in reloads
    started_at = lab.sh(worker, "sudo docker inspect --format '{{.State.StartedAt}}' ray-node").strip()
    lab.sh(worker, "sudo systemctl restart nftables && sleep 5")
    assert lab.sh(worker, "sudo docker inspect --format '{{.State.StartedAt}}' ray-node").strip() == started_at
    try:
        for lose, restore in (
            ("sudo systemctl stop nftables", "sudo systemctl start nftables"),
            ("sudo nft flush ruleset", "sudo systemctl reload nftables"),
            ("sudo systemctl stop rayrig-firewall", "sudo systemctl start rayrig-firewall"),
        ):
            lab.sh(worker, lose)
            print(f"{lose}: closed in {closed_within(lab, targets, 10):.1f} s")
            back = time.monotonic()
            lab.sh(worker, restore)
            wait_for_alive(lab, HOSTS, 60, addresses=[h["address"] for h in lab.hosts])
            print(f"{restore}: alive again in {time.monotonic() - back:.1f} s")
            assert lab.sh(worker, "sudo nft list table inet rayrig | grep -c 'policy drop'").strip() == "1"
    finally:  # the ruleset as it was, rayrig's table in it all along: the guard sees no gap
        lab.sh(worker, f"sudo systemctl start rayrig-firewall; sudo nft -f {SAVED_RULESET}")
        wait_for_alive(lab, HOSTS, 120, addresses=[h["address"] for h in lab.hosts])
        name = lab.state["registry_container"]  # a name only Docker's DNS in the lab knows
        assert lab.sh(worker, f"getent hosts {name} >/dev/null && echo resolved || echo not").strip() == "resolved"


def test_ray_refuses_a_client_without_the_token_and_admits_one_with_it(lab, baseline):
    for env in ("", "-e RAY_AUTH_MODE=token -e RAY_AUTH_TOKEN=not-the-cluster-token"):
        status, output = ray_status(lab, env)
        assert status != 0 and "InvalidAuthToken" in output, output[-2000:]
    status, output = ray_status(lab, with_token())
    assert status == 0 and output.count("node_") >= HOSTS, output[-2000:]


def test_the_token_is_0600_and_appears_in_no_output_inspect_process_list_or_log(lab, baseline, first_deploy):
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
            # every session the host keeps of /tmp/ray (ray_temp_dir, bind-mounted there)
            "sudo find /var/lib/rayrig/ray -path '*/logs/*' -type f -exec cat {} +; "
            "} 2>&1",
            timeout=120,
        )
        assert len(seen) > 10_000, "too little was looked at"
        assert token not in seen, f"the token leaked on {h['address']}"
        sessions = lab.sh(h, "sudo find /var/lib/rayrig/ray/tmp -maxdepth 1 -name 'session_2*' -type d").split()
        kept = ray_temp.SESSIONS_KEPT + 1  # pruned before each start, then the new one
        assert 1 <= len(sessions) <= kept, f"{h['address']}: Ray's sessions on the host: {sessions}"


def test_rayrig_dashboard_tunnels_to_the_heads_dashboard(lab, baseline):
    import urllib.error
    import urllib.request

    port = free_port()
    # Prometheus not on 9090 here: this machine may run a Prometheus of its own.
    process = rayrig_background(
        "dashboard", LAB_INVENTORY, "--local-port", str(port), "--local-prometheus-port", str(free_port())
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


# --- A value Ray refuses: the node is restored, not lost -------------------------------------------


#: How long the deploy gives a node Ray refuses (ray start fails within seconds; the default 120 s is for real hosts).
REFUSED_WITHIN_S = 30


def refused_by_ray(lab: Lab, h: dict, tmp_path: Path) -> str:
    """Deploy with an object store four times the size of ``h``'s memory (the schema accepts any
    size of at least 75 MiB; ``ray start`` refuses it with a ValueError) and return the output."""
    mem_kb = int(lab.sh(h, "awk '/^MemTotal:/ {print $2}' /proc/meminfo").strip())
    changes = {"ray_object_store_bytes": 4 * mem_kb * 1024, "ray_replace_timeout_s": REFUSED_WITHIN_S}
    result = deploy(
        inventory_variant(tmp_path / "refused.py", changes, only=h["address"]), "--data", "checks_enabled=False"
    )
    output = ANSI.sub("", result.stdout + result.stderr)
    assert result.returncode != 0, output[-3000:]
    return output


def assert_restored(lab: Lab, h: dict, output: str, before: dict[str, str]) -> None:
    """The deploy named ``h`` and Ray's error, and ``h`` runs its previous container again."""
    failure = re.search(
        rf"{re.escape(h['address'])}: the new ray-node container did not join the cluster within {REFUSED_WITHIN_S} s; "
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
    result = deploy(LAB_INVENTORY, "--data", "checks_enabled=False")
    assert result.returncode == 0
    assert {h["address"]: lab.container_id(h) for h in lab.hosts} == before


def test_a_value_ray_refuses_on_a_worker_fails_naming_it_and_its_previous_container_rejoins(lab, baseline, tmp_path):
    worker = lab.workers[1]
    before = {h["address"]: lab.container_id(h) for h in lab.hosts}
    try:
        output = refused_by_ray(lab, worker, tmp_path)
        assert_restored(lab, worker, output, before)
        wait_for_alive(lab, HOSTS, addresses=[h["address"] for h in lab.hosts], seconds=90)
    finally:
        redeploy_changes_no_container(lab, before)


def test_a_value_ray_refuses_on_the_head_fails_naming_it_and_every_node_is_back(lab, baseline, tmp_path):
    before = {h["address"]: lab.container_id(h) for h in lab.hosts}
    try:
        output = refused_by_ray(lab, lab.head, tmp_path)
        assert_restored(lab, lab.head, output, before)
        # The workers lost the head meanwhile: Ray ends their raylets, their units start them
        # again and they join the restored head.
        wait_for_alive(lab, HOSTS, addresses=[h["address"] for h in lab.hosts], seconds=240)
    finally:
        redeploy_changes_no_container(lab, before)


def test_changing_one_workers_cpus_replaces_only_that_worker(lab, baseline, tmp_path):
    worker = lab.workers[0]
    before = {h["address"]: lab.container_id(h) for h in lab.hosts}
    # An inventory kept outside inventories/: the defaults must still apply.
    inventory = inventory_variant(
        tmp_path / "bigger.py", {"ray_num_cpus": worker["num_cpus"] + 3}, only=worker["address"]
    )
    result = deploy(inventory, "--data", "checks_enabled=False")  # the checks of a replaced node: test_lab_tls
    assert result.returncode == 0
    after = {h["address"]: lab.container_id(h) for h in lab.hosts}
    assert after[worker["address"]] != before[worker["address"]]
    assert {a: i for a, i in after.items() if a != worker["address"]} == {
        a: i for a, i in before.items() if a != worker["address"]
    }
    expected = sum(h["num_cpus"] for h in lab.hosts) + 3
    wait_for_alive(lab, HOSTS, cpus=expected, seconds=120)


def test_killed_worker_container_comes_back_and_rejoins(lab, baseline):
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


@pytest.fixture(scope="module")
def secured(lab, baseline, s3, tmp_path_factory):
    """An inventory of the lab with SSH for admins only and the bucket mounted at /mnt/datasets."""
    extra = {
        "firewall_admin_cidrs": ["192.0.2.0/24"],  # nobody here: only the deploy's own address keeps SSH
        "storage_s3_mounts": [
            {"bucket": BUCKET, "path": "/mnt/datasets", "endpoint_url": s3, "path_style": True, "region": "us-east-1"}
        ],
        "storage_s3_credentials": {"access_key_id": "e2e", "secret_access_key": S3_SECRET},
    }
    inventory = inventory_variant(tmp_path_factory.mktemp("secured") / "secured.py", extra)
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
    status, listing = remote.run(lab.target(h), f"sudo nft list table {nftables.TABLE}")
    loaded = nftables.RayrigTable().process(listing.splitlines()) if status == 0 else None
    return (loaded or {}).get("digest"), nftables.ruleset_digest(lab.sh(h, f"sudo cat {nftables.RULESET_PATH}"))


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
