"""Ray's temp folder on the host: bind-mounted at /tmp/ray, its logs rotated, its old sessions pruned."""

from __future__ import annotations

import subprocess

import pytest

from deploy.contract import settings
from deploy.contract.schema import validate_host
from deploy.ray import ray_node, ray_temp
from tests.unit.test_ray_node import build, exec_start_pre, ray_settings

SESSIONS = [f"session_2026-12-0{d}_10-00-00_123456_{d}" for d in range(1, 7)]


def test_the_container_mounts_the_host_folder_at_tmp_ray_and_rotates_its_logs():
    args = build(ray_settings(ray_temp_dir="/data/ray"))
    assert "--mount=type=bind,src=/data/ray/tmp,dst=/tmp/ray" in args
    assert "--env=RAY_ROTATION_MAX_BYTES=104857600" in args
    assert "--env=RAY_ROTATION_BACKUP_COUNT=3" in args
    assert args.index("--mount=type=bind,src=/data/ray/tmp,dst=/tmp/ray") < args.index(settings.defaults()["ray_image"])


def test_the_default_folder_is_rayrigs_own():
    assert settings.defaults()["ray_temp_dir"] == "/var/lib/rayrig/ray"
    assert "--mount=type=bind,src=/var/lib/rayrig/ray/tmp,dst=/tmp/ray" in build()


@pytest.mark.parametrize("where", ["ray_env", "ray_env_secret"])
def test_log_rotation_the_data_sets_wins(where):
    args = build(ray_settings(**{where: {"RAY_ROTATION_MAX_BYTES": "1048576"}}))
    assert "--env=RAY_ROTATION_MAX_BYTES=104857600" not in args
    assert "--env=RAY_ROTATION_BACKUP_COUNT=3" in args
    if where == "ray_env":
        assert "--env=RAY_ROTATION_MAX_BYTES=1048576" in args


def test_the_folder_is_made_the_container_users_before_the_container_is_created():
    command = ray_temp.own_command(ray_settings(ray_temp_dir="/data/ray", ray_image="rayproject/ray:2.60.0"))
    assert command == (
        "mkdir -p /data/ray/tmp && chown -R "
        '"$(docker run --rm --network=none --entrypoint id rayproject/ray:2.60.0 -u)" '
        "/data/ray/tmp && chmod 700 /data/ray"
    )


def prune(folder, cwd=None) -> subprocess.CompletedProcess:
    """Run the unit's session pruning (its last ExecStartPre) on ``folder``, in ``cwd``."""
    unit = ray_node.unit_text("ray-node", temp_dir=str(folder))
    *_, command = exec_start_pre(unit)
    assert command[-2:] == ["prune-ray-sessions", str(folder)]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, cwd=cwd)


def test_each_start_keeps_the_newest_sessions_and_nothing_else_goes(tmp_path):
    for name in SESSIONS:
        (tmp_path / name / "logs").mkdir(parents=True)
        (tmp_path / name / "logs" / "raylet.out").write_text("log\n")
    (tmp_path / "session_latest").symlink_to(tmp_path / SESSIONS[-1])
    (tmp_path / "ray_current_cluster").write_text("10.0.0.1:6379\n")
    assert prune(tmp_path).returncode == 0
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == sorted([*SESSIONS[-ray_temp.SESSIONS_KEPT :], "session_latest", "ray_current_cluster"])
    assert prune(tmp_path).returncode == 0  # a second start (a crash loop) keeps the same
    assert sorted(p.name for p in tmp_path.iterdir()) == kept


def test_pruning_an_empty_or_small_folder_changes_nothing(tmp_path):
    assert prune(tmp_path).returncode == 0
    assert list(tmp_path.iterdir()) == []
    (tmp_path / SESSIONS[0]).mkdir()
    assert prune(tmp_path).returncode == 0
    assert [p.name for p in tmp_path.iterdir()] == [SESSIONS[0]]


def test_names_the_container_wrote_are_never_read_as_paths_or_options(tmp_path):
    """The container's user writes the folder; the pruning runs as root on the host."""
    outside = tmp_path / "outside"
    (outside / "cwd").mkdir(parents=True)
    (outside / "keep").write_text("host file\n")
    folder = tmp_path / "ray"
    folder.mkdir()
    for name in SESSIONS[:4]:
        (folder / name).mkdir()
    (folder / "session_2000 ..").mkdir()  # the oldest; split at its space it would name the parent
    (folder / "session_2001").symlink_to(outside)  # a link: removed as a link, its target stays
    (folder / "session_2002\n-rf").mkdir()
    assert prune(folder, cwd=outside / "cwd").returncode == 0
    assert (outside / "keep").read_text() == "host file\n"
    assert sorted(p.name for p in folder.iterdir()) == SESSIONS[1:4]


def test_without_a_temp_folder_the_unit_prunes_nothing():
    assert "prune-ray-sessions" not in ray_node.unit_text("ray-node")


@pytest.mark.parametrize(
    "path",
    ["/", "/ray", "/etc/ray", "/usr/local/ray", "/var/ray", "/var/tmp/ray/x", "/tmp/ray", "/var/lib/docker",
     "/var/lib/docker/ray", "/home/alice", "/mnt/shared", "/mnt/shared/ray", "/mnt", "var/lib/ray",
     "/var/lib/../ray", "/data/ray x", "/data/$(touch P)", "/data/ray\n", "/data/%n"],
)  # fmt: skip
def test_a_temp_folder_that_is_not_rays_own_is_refused_naming_host_key_and_value(path):
    data = {
        "ray_role": "head",
        "ray_temp_dir": path,
        "storage_nfs_mounts": [{"server": "10.0.0.5", "export": "/srv/shared", "path": "/mnt/shared"}],
    }
    [problem] = validate_host("gpu-01", data)
    assert (problem.host, problem.key, problem.value) == ("gpu-01", "ray_temp_dir", path)
    assert str(problem).startswith(f"host gpu-01: ray_temp_dir = {path!r}: expected ")
    assert "/var/lib/rayrig/ray" in problem.expected


@pytest.mark.parametrize("path", ["/var/lib/rayrig/ray", "/data/ray", "/srv/ray", "/home/alice/ray", "/mnt/raytmp"])
def test_a_folder_of_rays_own_is_accepted(path):
    data = {
        "ray_role": "head",
        "ray_temp_dir": path,
        "storage_nfs_mounts": [{"server": "10.0.0.5", "export": "/srv/shared", "path": "/mnt/shared"}],
    }
    assert validate_host("gpu-01", data) == []
