"""The shared-storage round trip (checks/shared_shared_storage.py, checks/storage_probe.py): which node
has which mount, the reasons, the report's lines, and the real probe against a real, local,
single-node Ray where temporary directories stand in for the mount points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checks import full, report, shared_storage
from checks.verdict import FAIL, INFO, WARN, Verdict
from deploy.contract.settings import merge

HEAD, WORKER = "10.0.0.1", "10.0.0.2"
ALIASES = {HEAD: "head", WORKER: "gpu-1"}


def levels(reasons) -> list[tuple[str, str]]:
    return [(r.level, r.message) for r in reasons]


def mount_result(path: str = "/mnt/shared", **fields: Any) -> dict[str, Any]:
    result = {
        "path": path,
        "kind": "nfs",
        "writable": True,
        "nodes_with_mount": [HEAD, WORKER],
        "written_on": HEAD,
        "read_on": [WORKER],
        "listed_on": [],
        "seconds": 0.42,
        "errors": [],
        "ok": True,
        "error": None,
    }
    return {**result, **fields}


# --- which node has which mount -------------------------------------------------------------------


def test_storage_mounts_knows_every_node_of_every_mount_and_who_may_write():
    nfs = {"server": "head", "export": "/srv/shared", "path": "/mnt/shared"}
    head = merge({"storage_nfs_mounts": [nfs]})
    worker = merge(
        {
            "storage_nfs_mounts": [
                nfs,
                {"server": "filer", "export": "/ro", "path": "/mnt/ref", "options": "ro,noatime"},
            ],
            "storage_s3_mounts": [
                {"bucket": "datasets", "path": "/mnt/datasets", "read_only": True},
                {"bucket": "scratch", "path": "/mnt/scratch"},
            ],
        }
    )
    mounts = shared_storage.storage_mounts({HEAD: head, WORKER: worker})
    assert mounts == [
        {"path": "/mnt/shared", "kind": "nfs", "nodes": [HEAD, WORKER], "writers": [HEAD, WORKER], "writable": True},
        {"path": "/mnt/ref", "kind": "nfs", "nodes": [WORKER], "writers": [], "writable": False},
        {"path": "/mnt/datasets", "kind": "s3", "nodes": [WORKER], "writers": [], "writable": False},
        {"path": "/mnt/scratch", "kind": "s3", "nodes": [WORKER], "writers": [WORKER], "writable": True},
    ]


def test_storage_mounts_without_shared_storage_is_empty_and_mixed_data_shows():
    assert shared_storage.storage_mounts({HEAD: merge({}), WORKER: merge({})}) == []
    s3 = merge({"storage_s3_mounts": [{"bucket": "b", "path": "/mnt/x", "read_only": True}]})
    nfs = merge({"storage_nfs_mounts": [{"server": "f", "export": "/x", "path": "/mnt/x"}]})
    [mount] = shared_storage.storage_mounts({HEAD: s3, WORKER: nfs})
    assert mount["kind"] == "nfs/s3"
    assert (mount["writers"], mount["writable"]) == ([WORKER], True)  # written where it may be, read everywhere


def test_parse_result_takes_the_last_result_line():
    lines = ["2026 WARNING something from Ray", 'RESULT {"mounts": []}', "RESULT {not json", 'RESULT {"alive": []}']
    assert shared_storage.parse_result(lines) == {"alive": []}
    assert shared_storage.parse_result(["Traceback (most recent call last):"]) is None


# --- reasons --------------------------------------------------------------------------------------


def test_healthy_mounts_give_one_information_line():
    result = {"alive": [HEAD, WORKER], "mounts": [mount_result(), mount_result("/mnt/d", kind="s3", writable=False)]}
    assert levels(shared_storage.storage_reasons(result, ALIASES)) == [
        (INFO, "shared storage works on every node that mounts it: /mnt/shared (nfs), /mnt/d (s3)")
    ]
    assert shared_storage.storage_reasons(None, ALIASES) == []  # no shared storage: nothing said


def test_every_failure_names_the_mount_and_the_host():
    errors = [
        {"node": WORKER, "stage": "probe", "error": "missing in the container"},
        {"node": HEAD, "stage": "write", "error": "cannot write a test file: Permission denied (/mnt/shared/.x)"},
        {"node": WORKER, "stage": "read", "ref": HEAD, "error": "its content differs (3 bytes read, 65536 written)"},
        {"node": WORKER, "stage": "list", "ref": HEAD, "error": "its listing differs (first difference: 'a')"},
        {"node": "10.0.0.9", "stage": "probe", "error": "no answer within 60 s (a hung mount?)"},
    ]
    result = {"alive": [HEAD, WORKER], "mounts": [mount_result(errors=errors, ok=False, error=errors[0]["error"])]}
    reasons = shared_storage.storage_reasons(result, ALIASES)
    assert levels(reasons) == [
        (FAIL, "gpu-1: shared storage /mnt/shared (nfs): missing in the container"),
        (FAIL, "head: shared storage /mnt/shared (nfs): cannot write a test file: Permission denied (/mnt/shared/.x)"),
        (
            FAIL,
            "gpu-1: shared storage /mnt/shared (nfs): the file written on head did not read back: "
            "its content differs (3 bytes read, 65536 written)",
        ),
        (
            FAIL,
            "gpu-1: shared storage /mnt/shared (nfs) lists differently from head: its listing differs "
            "(first difference: 'a')",
        ),  # fmt: skip
        (FAIL, "10.0.0.9: shared storage /mnt/shared (nfs): no answer within 60 s (a hung mount?)"),
    ]
    assert [r.host for r in reasons] == ["gpu-1", "head", "gpu-1", "gpu-1", "10.0.0.9"]


def test_a_dead_node_and_a_leftover_file_only_warn_and_a_script_failure_fails():
    errors = [
        {"node": WORKER, "stage": "skipped", "error": "not an alive Ray node"},
        {"node": HEAD, "stage": "cleanup", "error": "Device or resource busy (/mnt/shared/.rayrig-check-1)"},
    ]
    result = {"alive": [HEAD], "mounts": [mount_result(errors=errors, read_on=[HEAD])]}
    assert levels(shared_storage.storage_reasons(result, ALIASES)) == [
        (WARN, "gpu-1: shared storage /mnt/shared (nfs) not checked: not an alive Ray node"),
        (
            WARN,
            "head: could not delete the test file in /mnt/shared: Device or resource busy "
            "(/mnt/shared/.rayrig-check-1)",
        ),  # fmt: skip
        (INFO, "shared storage works on every node that mounts it: /mnt/shared (nfs)"),
    ]
    only_dead = mount_result(
        errors=errors[:1], read_on=[], written_on=None, ok=False, error="no alive node could check it"
    )
    assert levels(shared_storage.storage_reasons({"alive": [HEAD], "mounts": [only_dead]}, ALIASES)) == [
        (WARN, "gpu-1: shared storage /mnt/shared (nfs) not checked: not an alive Ray node"),
        (FAIL, "shared storage /mnt/shared (nfs) was not checked: no alive node could check it"),
    ]
    failed = shared_storage.storage_reasons({"error": "ConnectionError: could not reach the GCS"}, ALIASES)
    assert levels(failed) == [
        (FAIL, "shared storage: the check did not run in the head container: ConnectionError: could not reach the GCS")
    ]


# --- the report's lines ---------------------------------------------------------------------------


def test_the_report_shows_one_line_per_mount():
    failing = mount_result("/mnt/datasets", kind="s3", writable=False, written_on=None, read_on=[], listed_on=[HEAD],
                           ok=False, error="missing in the container", seconds=0.1)  # fmt: skip
    data = {"storage": {"alive": [HEAD, WORKER], "mounts": [mount_result(), failing], "hosts": ALIASES}}
    lines = report.render_storage(data).splitlines()
    assert lines[0] == "Shared storage"
    assert lines[1].split() == ["mount", "kind", "status", "round", "trip"]
    assert lines[3].split()[:3] == ["/mnt/shared", "nfs", "OK"]
    assert lines[3].endswith("written on head, read on gpu-1 in 0.42 s")
    assert lines[4].split()[:3] == ["/mnt/datasets", "s3", "FAIL"]
    assert lines[4].endswith("read-only, listed on head in 0.10 s; missing in the container")
    text = report.render({"devices": [], **data}, Verdict([]))
    assert "Shared storage" in text and text.index("Shared storage") < text.index("VERDICT")


def test_no_shared_storage_adds_nothing_to_the_report():
    assert report.render_storage({"storage": None}) == ""
    assert "storage" not in report.render({"devices": [], "storage": None}).lower()
    assert report.render_storage({"storage": {"error": "boom"}}) == "shared storage: FAILED: boom"


# --- the real script against a real local Ray -----------------------------------------------------


def run_check(local_ray: dict[str, str], mounts: list[dict[str, Any]], require_mount: bool) -> dict[str, Any]:
    """``python -m checks.storage_probe CONFIG``, as the head container runs it (from the package's folder)."""
    config = shared_storage.probe_config(mounts, require_mount=require_mount, read_wait_s=2, task_timeout_s=30)
    env = {**os.environ, "RAY_ADDRESS": local_ray["address"]}
    command = [sys.executable, "-m", "checks.storage_probe", json.dumps(config)]
    done = subprocess.run(command, cwd=full.PACKAGE_DIR.parent, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    result = shared_storage.parse_result(done.stdout.splitlines())
    assert result is not None and "mounts" in result, done.stdout + done.stderr
    return result


@pytest.mark.slow
def test_round_trip_listing_and_a_missing_mount_on_a_real_ray(local_ray, tmp_path: Path):
    ip, dead = local_ray["ip"], "192.0.2.254"  # a node of the inventory that is not in Ray
    writable, read_only, missing = tmp_path / "shared", tmp_path / "datasets", tmp_path / "absent"
    writable.mkdir()
    read_only.mkdir()
    for i in range(60):
        (read_only / f"part-{i:03d}").write_text("x")
    settings = {
        ip: {
            "storage_nfs_mounts": [{"path": str(writable)}, {"path": str(missing)}],
            "storage_s3_mounts": [{"path": str(read_only), "read_only": True}],
        },
        dead: {"storage_nfs_mounts": [{"path": str(writable)}]},
    }
    result = run_check(local_ray, shared_storage.storage_mounts(settings), require_mount=False)
    assert result["alive"] == [ip]
    shared, absent, datasets = result["mounts"]

    assert (shared["path"], shared["kind"], shared["writable"]) == (str(writable), "nfs", True)
    assert shared["ok"] and shared["error"] is None
    assert shared["nodes_with_mount"] == [ip, dead]
    assert shared["written_on"] == ip and shared["read_on"] == [ip]  # one node: written and read on it
    assert shared["errors"] == [{"node": dead, "stage": "skipped", "error": "not an alive Ray node"}]
    assert 0 <= shared["seconds"] < 10
    assert list(writable.iterdir()) == []  # the test file is gone

    assert (datasets["kind"], datasets["writable"], datasets["ok"]) == ("s3", False, True)
    assert datasets["listed_on"] == [ip] and datasets["written_on"] is None
    assert [p.name for p in read_only.iterdir() if p.name.startswith(".rayrig")] == []

    assert not absent["ok"]
    assert absent["errors"] == [{"node": ip, "stage": "probe", "error": "missing in the container"}]
    reasons = shared_storage.storage_reasons(result, {ip: "node-one"})
    fails = [r for r in reasons if r.level == FAIL]
    assert [(r.host, r.message) for r in fails] == [
        ("node-one", f"node-one: shared storage {missing} (nfs): missing in the container")
    ]
    assert Verdict(reasons).status == FAIL


@pytest.mark.slow
def test_a_plain_directory_is_not_a_mount_point_on_a_real_ray(local_ray, tmp_path: Path):
    ip = local_ray["ip"]
    paths = [str(tmp_path)] + (["/dev/shm"] if os.path.ismount("/dev/shm") else [])
    mounts = shared_storage.storage_mounts({ip: {"storage_nfs_mounts": [{"path": p} for p in paths]}})
    result = run_check(local_ray, mounts, require_mount=True)
    plain = result["mounts"][0]
    assert not plain["ok"] and plain["error"].startswith("a plain directory in the container, not a mount point")
    for mount in result["mounts"][1:]:  # a real mount point (tmpfs) round-trips
        assert mount["ok"], mount
        assert not [name for name in os.listdir(mount["path"]) if name.startswith(shared_storage.TEST_FILE_PREFIX)]
