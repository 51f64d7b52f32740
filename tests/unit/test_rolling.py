"""Rolling batches, the stop summary, and the GCS store's container arguments and folder layout."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from deploy.contract import schema, settings
from deploy.ray import gcs_store, ray_node
from deploy.run.rolling import Node, batch_size, batch_step_name, summary, worker_batches

OLD, NEW = "ray:1, config aaaa", "ray:2, config bbbb"


def worker(name: str, running: str | None = OLD, replace: bool = True) -> Node:
    return Node(name, "worker", running, NEW, replace)


@pytest.mark.parametrize(
    "setting,workers,size",
    [("25%", 3, 1), ("25%", 8, 2), ("25%", 10, 2), ("25%", 0, 1), ("1%", 50, 1), ("100%", 7, 7), (1, 9, 1), (3, 2, 3)],
)
def test_the_batch_size_is_the_number_or_the_percentage_of_the_workers_rounded_down_and_at_least_one(
    setting, workers, size
):
    assert batch_size(setting, workers) == size


def test_batches_follow_the_inventory_order_and_skip_hosts_already_current():
    nodes = [
        Node("head", "head", OLD, NEW, True),
        worker("w1"),
        worker("w2", replace=False),
        worker("w3"),
        worker("w4"),
        worker("w5"),
    ]
    assert worker_batches(nodes, 2) == [["w1", "w3"], ["w4", "w5"]]
    assert worker_batches(nodes, 1) == [["w1"], ["w3"], ["w4"], ["w5"]]
    assert worker_batches(nodes[:3], 2) == [["w1"]]
    assert worker_batches([Node("head", "head", OLD, NEW, False), worker("w", replace=False)], 1) == []


def test_new_hosts_lose_nothing_while_they_start_so_they_go_together_in_the_first_batch():
    nodes = [worker("w1"), worker("n1", running=None), worker("w2"), worker("n2", running=None)]
    assert worker_batches(nodes, 1) == [["n1", "n2"], ["w1"], ["w2"]]


def test_a_batch_operation_names_its_place_and_hosts():
    batches = [["w1"], [f"w{i}" for i in range(2, 10)]]
    assert batch_step_name(0, batches) == "Start the Ray worker container, batch 1 of 2: w1"
    assert batch_step_name(1, batches) == "Start the Ray worker container, batch 2 of 2: w2, w3, w4, w5, w6 and 3 more"


def test_the_stop_summary_says_which_host_runs_which_configuration():
    nodes = [
        Node("head", "head", OLD, NEW, True),
        worker("w1"),
        worker("w2"),
        worker("w3"),
        worker("w4", running=NEW, replace=False),
        worker("n1", running=None),
    ]
    text = summary(nodes, done={"head", "w1"}, failed=["w2"], stopped_at="batch 3 of 4")
    assert text.splitlines() == [
        "The rolling replacement of ray-node stopped at batch 3 of 4: w2 failed; no later batch was started.",
        f"  on the new configuration ({NEW}): head, w1, w4",
        f"  failed; its error above says whether its previous container is back ({OLD}): w2",
        f"  not replaced yet ({OLD}): w3",
        "  not replaced yet (no container yet): n1",
    ]


@pytest.mark.parametrize("value", [1, 12, "1%", "25%", "100%"])
def test_ray_rolling_batch_accepts_a_number_or_a_percentage(value):
    assert schema.validate_host("h", {"ray_role": "head", "ray_rolling_batch": value}) == []


@pytest.mark.parametrize("value", [0, -1, "0%", "101%", "25", "25 %", "%", 2.5, True, "25%\n", None])
def test_ray_rolling_batch_refuses_anything_else_naming_what_is_expected(value):
    [problem] = schema.validate_host("h", {"ray_role": "head", "ray_rolling_batch": value})
    assert str(problem) == (
        f"host h: ray_rolling_batch = {value!r}: expected a number of workers of at least 1, "
        'or a percentage of the workers from "1%" to "100%"'
    )


@pytest.mark.parametrize("value", ["var/lib/gcs", "/var/lib/../gcs", "/a b", "/x;y", ""])
def test_ray_gcs_storage_path_must_be_an_absolute_plain_path(value):
    [problem] = schema.validate_host("h", {"ray_role": "head", "ray_gcs_storage_path": value})
    assert problem.key == "ray_gcs_storage_path" and problem.expected == "an absolute folder path"


def test_rolling_and_gcs_fault_tolerance_must_be_the_same_on_every_host():
    hosts = [
        ("head", {"ray_role": "head", "ray_gcs_fault_tolerance": True}, "10.0.0.1"),
        ("w1", {"ray_role": "worker", "ray_rolling_batch": 2}, "10.0.0.2"),
    ]
    keys = {p.key for p in schema.validate_cluster(hosts)}
    assert keys == {"ray_gcs_fault_tolerance", "ray_rolling_batch"}


def create_args(role: str, **data) -> list[str]:
    merged = settings.merge({"ray_role": role, "ray_auth": "none", **data})
    start = ray_node.ray_start_args(merged, role, "10.0.0.1", "10.0.0.1", 0)
    return ray_node.docker_run_args(merged, role, start, 0, "2g", None)


def test_the_gcs_store_is_the_heads_alone_and_workers_wait_longer_for_it():
    head = create_args("head", ray_gcs_fault_tolerance=True)
    assert "--env=RAY_gcs_storage=rocksdb" in head
    assert "--env=RAY_gcs_storage_path=/var/lib/rayrig/gcs" in head
    assert head.index("--mount=type=bind,src=/var/lib/rayrig/gcs/store,dst=/var/lib/rayrig/gcs") < head.index("ray")
    worker_args = create_args("worker", ray_gcs_fault_tolerance=True)
    assert f"--env=RAY_gcs_rpc_server_reconnect_timeout_s={gcs_store.WORKER_RECONNECT_TIMEOUT_S}" in worker_args
    assert not any("gcs_storage" in a for a in worker_args)
    assert not any("RAY_gcs" in a for a in create_args("head") + create_args("worker"))


def test_ray_env_overrides_the_workers_reconnect_timeout():
    args = create_args(
        "worker", ray_gcs_fault_tolerance=True, ray_env={"RAY_gcs_rpc_server_reconnect_timeout_s": "900"}
    )
    assert [a for a in args if "reconnect_timeout" in a] == ["--env=RAY_gcs_rpc_server_reconnect_timeout_s=900"]


# --- The GCS store's folder layout, on a real folder ----------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the layout gives the folder to root (chown)")


def layout(folder: Path) -> subprocess.CompletedProcess:
    command = gcs_store.layout_command({"ray_gcs_storage_path": str(folder)})
    return subprocess.run(command, shell=True, capture_output=True, text=True, timeout=30)


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """relative path -> (owner uid, mode bits) of everything under ``folder``, itself included."""
    paths = [folder, *sorted(folder.rglob("*"))]
    return {str(p.relative_to(folder)): (p.stat().st_uid, p.stat().st_mode & 0o777) for p in paths}


@needs_root
def test_a_store_kept_in_the_folder_itself_moves_whole_into_store_and_the_folder_becomes_roots(tmp_path):
    folder = tmp_path / "gcs"
    folder.mkdir(mode=0o700)
    (folder / "CURRENT").write_text("MANIFEST-000005\n")
    (folder / "000004.sst").write_bytes(b"table")
    for path in (folder, folder / "CURRENT", folder / "000004.sst"):
        os.chown(path, 1000, 1000)
    result = layout(folder)
    assert result.returncode == 0, result.stderr
    assert tree(folder) == {
        ".": (0, 0o700),
        "store": (1000, 0o700),  # the folder that was the store, owner and mode kept
        "store/000004.sst": (1000, 0o644),
        "store/CURRENT": (1000, 0o644),
    }
    assert (folder / "store" / "CURRENT").read_text() == "MANIFEST-000005\n"
    assert not (tmp_path / "gcs.rayrig-layout").exists()
    assert layout(folder).returncode == 0 and tree(folder)["store/CURRENT"] == (1000, 0o644)  # twice: the same


@needs_root
def test_a_move_cut_between_its_two_renames_is_finished_by_the_next_run(tmp_path):
    folder, moving = tmp_path / "gcs", tmp_path / "gcs.rayrig-layout"
    moving.mkdir(mode=0o700)
    (moving / "CURRENT").write_text("MANIFEST-000001\n")
    os.chown(moving, 1000, 1000)
    result = layout(folder)
    assert result.returncode == 0, result.stderr
    assert (folder / "store" / "CURRENT").read_text() == "MANIFEST-000001\n" and not moving.exists()
    assert tree(folder)["."] == (0, 0o700) and tree(folder)["store"] == (1000, 0o700)


@needs_root
def test_a_first_deploy_gets_an_empty_folder_of_roots_and_a_folder_already_laid_out_is_left_as_it_is(tmp_path):
    folder = tmp_path / "new" / "gcs"
    assert layout(folder).returncode == 0
    assert tree(folder) == {".": (0, 0o700)}  # the deploy's next operation creates store/
    (folder / "store").mkdir(mode=0o700)
    (folder / "store" / "CURRENT").write_text("x")
    os.chown(folder / "store", 1000, 1000)
    before = tree(folder)
    assert layout(folder).returncode == 0 and tree(folder) == before
