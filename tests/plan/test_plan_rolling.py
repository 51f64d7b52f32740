"""Rolling replacement: the head first, then the workers in batches; a failed batch stops the deploy.

Also the GCS store of ``ray_gcs_fault_tolerance``: the head's environment and folder, the
workers' reconnect timeout.
"""

from __future__ import annotations

import json

import pytest

from deploy.ray.ray_node import HASH_LABEL
from deploy.run.rolling import RollingStopped
from tests.plan.fakes.fakehosts import HEAD, cluster, cluster_data
from tests.plan.harness import CLUSTER, Run, _run, cli_run, run_deploy

WORKERS = ("@fake/worker-1", "@fake/worker-2", "@fake/worker-3")
OLD_IMAGE = "rayproject/ray:2.60.0-py311-gpu"
NEW_IMAGE = "registry.lab.example:5000/rayrig/ray:rolled"


def converged(**data) -> list[tuple[str, dict]]:
    """A converged 1-head/3-worker cluster whose inventory now sets ``data`` on every host."""
    hosts = cluster("ubuntu22", "converged", cluster_data(workers=3))
    return [(name, {**d, **data}) for name, d in hosts]


def step_names(run: Run) -> list[str]:
    """The ray-node start steps of the run, in the order pyinfra runs them."""
    steps = {op.step: op.name for h in run.hosts.values() for op in h.changes if "Start the Ray" in op.name}
    return [steps[step].removeprefix("Ray node | ") for step in sorted(steps)]


def test_a_new_image_with_batches_of_one_replaces_the_head_first_then_one_worker_at_a_time():
    run = run_deploy(converged(ray_image=NEW_IMAGE, ray_rolling_batch=1))
    assert step_names(run) == [
        "Start the Ray head container",
        f"Start the Ray worker container, batch 1 of 3: {WORKERS[0]}",
        f"Start the Ray worker container, batch 2 of 3: {WORKERS[1]}",
        f"Start the Ray worker container, batch 3 of 3: {WORKERS[2]}",
    ]
    head_listening = run[HEAD].op("Wait for the Ray head to listen").step
    for name in WORKERS:
        assert NEW_IMAGE in run[name].docker_create() and OLD_IMAGE not in run[name].docker_create()
        assert run[name].op("Start the Ray worker container").step > head_listening
    # Each batch's operation replaces its own worker only.
    for index, name in enumerate(WORKERS):
        step = run[name].op("Start the Ray worker container").step
        others = [o for o in WORKERS if o != name]
        assert all(not any(op.step == step for op in run[o].changes) for o in others), index


def test_the_default_batch_is_a_quarter_of_the_workers_and_a_number_groups_them_in_inventory_order():
    assert step_names(run_deploy(converged(ray_image=NEW_IMAGE)))[1:] == [  # a quarter of 3, at least 1
        f"Start the Ray worker container, batch {i} of 3: {name}" for i, name in enumerate(WORKERS, 1)
    ]
    assert step_names(run_deploy(converged(ray_image=NEW_IMAGE, ray_rolling_batch=2)))[1:] == [
        f"Start the Ray worker container, batch 1 of 2: {WORKERS[0]}, {WORKERS[1]}",
        f"Start the Ray worker container, batch 2 of 2: {WORKERS[2]}",
    ]


def test_a_converged_rerun_plans_no_replacement_and_hosts_already_current_are_in_no_batch():
    assert run_deploy(converged(ray_rolling_batch=1)).changed_hosts == {}
    hosts = [(n, {**d, "ray_num_cpus": 64} if n in WORKERS[1:] else d) for n, d in converged(ray_rolling_batch=1)]
    assert step_names(run_deploy(hosts)) == [
        f"Start the Ray worker container, batch 1 of 2: {WORKERS[1]}",
        f"Start the Ray worker container, batch 2 of 2: {WORKERS[2]}",
    ]


def test_a_fresh_cluster_starts_all_its_new_workers_in_one_batch_after_the_head():
    run = run_deploy(cluster("ubuntu22", "fresh", cluster_data(workers=3), data={"ray_rolling_batch": 1}))
    assert step_names(run) == [
        "Start the Ray head container",
        f"Start the Ray worker container, batch 1 of 1: {', '.join(WORKERS)}",
    ]


def run_until_stopped(hosts: list[tuple[str, dict]]) -> tuple[RollingStopped, dict[str, list[str]]]:
    """Run the deploy like ``run_deploy``; return the error that stopped it and every host's executed commands."""
    with cli_run(hosts) as (state, config, inventory), pytest.raises(RollingStopped) as stopped:
        _run(state, config, inventory, CLUSTER, None)
    return stopped.value, {h.name: list(h.connector.executed_commands) for h in inventory}


def failing(hosts: list[tuple[str, dict]], name: str) -> list[tuple[str, dict]]:
    """``hosts`` where ``name``'s replacement fails (its previous container comes back)."""
    refusal = {"success": False, "stderr": f"{name}: the new ray-node container did not join the cluster"}
    result = []
    for host_name, data in hosts:
        if host_name == name:
            data = {**data, "fake_responses": {f"ray-node-previous {name} ": refusal, **data["fake_responses"]}}
        result.append((host_name, data))
    return result


def running_hash(data: dict) -> str:
    """The configuration hash on the fake host's running ray-node container."""
    [line] = data["fake_responses"]["docker container inspect"]
    return json.loads(line)["Config"]["Labels"][HASH_LABEL]


def replaced(commands: list[str]) -> bool:
    return any("replace-ray-node" in c for c in commands)


def test_a_failed_batch_stops_the_deploy_before_the_next_batch_and_says_which_host_runs_what():
    hosts = failing(converged(ray_image=NEW_IMAGE, ray_rolling_batch=1), WORKERS[1])
    error, executed = run_until_stopped(hosts)
    assert replaced(executed[HEAD]) and replaced(executed[WORKERS[0]]) and replaced(executed[WORKERS[1]])
    assert not replaced(executed[WORKERS[2]])  # batch 3 never started
    lines = str(error).splitlines()
    assert lines[0] == (
        f"The rolling replacement of ray-node stopped at batch 2 of 3: {WORKERS[1]} failed; no later batch was started."
    )
    new, old = f"{NEW_IMAGE}, config ", f"{OLD_IMAGE}, config "
    hashes = [running_hash(data) for _name, data in hosts[1:]]
    assert lines[1].startswith(f"  on the new configuration ({new}") and lines[1].endswith(f"): {HEAD}")
    assert lines[2].startswith(f"  on the new configuration ({new}") and lines[2].endswith(f"): {WORKERS[0]}")
    assert (
        lines[3]
        == f"  failed; its error above says whether its previous container is back ({old}{hashes[1]}): {WORKERS[1]}"
    )
    assert lines[4] == f"  not replaced yet ({old}{hashes[2]}): {WORKERS[2]}"


def test_a_failed_head_stops_the_deploy_before_any_worker():
    error, executed = run_until_stopped(failing(converged(ray_image=NEW_IMAGE, ray_rolling_batch=1), HEAD))
    assert not any(replaced(executed[name]) for name in WORKERS)
    assert str(error).splitlines()[0].startswith(f"The rolling replacement of ray-node stopped at the head: {HEAD}")


def env(create: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--env=").split("=", 1) for a in create if a.startswith("--env="))


def test_gcs_fault_tolerance_keeps_the_head_state_in_a_rocksdb_folder_and_workers_wait_longer():
    hosts = cluster("ubuntu22", "fresh", cluster_data(workers=1), data={"ray_gcs_fault_tolerance": True})
    run = run_deploy(hosts)
    head = run[HEAD].docker_create()
    assert env(head)["RAY_gcs_storage"] == "rocksdb"
    assert env(head)["RAY_gcs_storage_path"] == "/var/lib/rayrig/gcs"
    assert "--mount=type=bind,src=/var/lib/rayrig/gcs/store,dst=/var/lib/rayrig/gcs" in head
    assert "RAY_gcs_rpc_server_reconnect_timeout_s" not in env(head)
    # the store (the container's user's) sits in a folder of root's, 0700: no other user of the host enters
    parent = run[HEAD].op("Keep the GCS store's parent folder root's own, 0700").commands
    assert any("mkdir -p /var/lib/rayrig/gcs" in c for c in parent) and any("chmod 700" in c for c in parent)
    assert any("chown root:root /var/lib/rayrig/gcs" in c for c in parent), parent
    store = run[HEAD].op("Create the folder of the GCS store").commands
    assert any("mkdir -p /var/lib/rayrig/gcs/store" in c for c in store) and any("chmod 700" in c for c in store)
    assert run[HEAD].commands_matching(r'^chown "\$\(docker run .* -u\)" /var/lib/rayrig/gcs/store$')
    assert not run[HEAD].commands_matching(r'^chown "\$\(docker run .* -u\)" /var/lib/rayrig/gcs$')
    worker = run["@fake/worker-1"].docker_create()
    assert env(worker)["RAY_gcs_rpc_server_reconnect_timeout_s"] == "300"
    assert "RAY_gcs_storage" not in env(worker) and not any("/var/lib/rayrig/gcs" in a for a in worker)
    assert not run["@fake/worker-1"].has_op("GCS store")


def test_a_converged_head_with_its_store_in_place_changes_nothing_about_it():
    run = run_deploy(cluster("ubuntu22", "converged", cluster_data(workers=1), data={"ray_gcs_fault_tolerance": True}))
    assert not run[HEAD].changes, [op.name for op in run[HEAD].changes]


def test_a_store_kept_in_the_folder_itself_moves_into_its_own_folder_before_the_folder_turns_roots():
    hosts = cluster("ubuntu22", "converged", cluster_data(workers=1), data={"ray_gcs_fault_tolerance": True})
    name, data = hosts[0]
    assert name == HEAD
    # the layout before: the folder is the store (the container's user's), no store/ inside
    responses = {k: v for k, v in data["fake_responses"].items() if "/var/lib/rayrig/gcs/store" not in k}
    folder = "test -e /var/lib/rayrig/gcs || test -L /var/lib/rayrig/gcs )"
    responses[folder] = [r[0].replace("user=root", "user=1000") for r in [responses[folder]]]
    hosts[0] = (name, {**data, "fake_responses": responses})
    run = run_deploy(hosts)
    names = [op.name for op in run[HEAD].changes]
    layout = names.index("Ray node | Give the GCS store a folder of its own under a root-only parent "
                         "(ray_gcs_fault_tolerance)")  # fmt: skip
    parent = names.index("Ray node | Keep the GCS store's parent folder root's own, 0700 (ray_gcs_storage_path)")
    store = names.index("Ray node | Create the folder of the GCS store (ray_gcs_fault_tolerance)")
    assert layout < parent < store, names
    [command] = run[HEAD].changes[layout].commands
    assert "mv -T" in command and command.endswith(" _ /var/lib/rayrig/gcs"), command


def test_without_gcs_fault_tolerance_no_store_and_ray_default_reconnect_timeout():
    run = run_deploy(cluster("ubuntu22", "fresh", cluster_data(workers=1)))
    for name in (HEAD, "@fake/worker-1"):
        assert not any(k.startswith("RAY_gcs") for k in env(run[name].docker_create()))
        assert not run[name].has_op("GCS store")


def test_the_store_folder_comes_from_the_data():
    data = {"ray_gcs_fault_tolerance": True, "ray_gcs_storage_path": "/data/ray-gcs"}
    run = run_deploy(cluster("ubuntu22", "fresh", cluster_data(workers=1), data=data))
    assert env(run[HEAD].docker_create())["RAY_gcs_storage_path"] == "/data/ray-gcs"
    assert "--mount=type=bind,src=/data/ray-gcs/store,dst=/data/ray-gcs" in run[HEAD].docker_create()
