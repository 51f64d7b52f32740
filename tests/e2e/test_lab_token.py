"""One token for the cluster's life, end to end on the lab.

A deploy from a fresh clone, on a machine without the local token file, fetches the
head's token and keeps every node; ``rayrig token rotate`` then gives every node a new
token, and Ray refuses the previous one. The cluster is left running on
``inventories/lab.py`` with the new token.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys

import pytest

from cloud import ssh as remote
from deploy.contract import settings
from deploy.contract.paths import repo_root, state_dir
from deploy.ray import auth
from tests.e2e.labkit import (
    HOSTS,
    LAB,
    LAB_INVENTORY,
    changed_operations,
    cluster_token,
    ray_status,
    rayrig,
    wait_for_alive,
    with_token,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: This machine's copy of the lab cluster's token.
LOCAL = auth.token_path(settings.merge({"ray_cluster_name": LAB}))


def node_token(lab, h: dict) -> str:
    return lab.sh(h, f"sudo cat {auth.NODE_TOKEN_PATH}").strip()


def test_a_deploy_from_a_fresh_clone_fetches_the_clusters_token_and_keeps_every_node(lab, baseline, tmp_path):
    token = cluster_token()
    assert node_token(lab, lab.head) == token, "the lab does not run this machine's token to begin with"
    ids = {h["address"]: lab.container_id(h) for h in lab.hosts}
    moved = tmp_path / "moved-token"
    shutil.move(LOCAL, moved)
    try:
        clone = tmp_path / "clone"
        subprocess.run(["git", "clone", "-q", str(repo_root()), str(clone)], check=True, timeout=300)
        result = subprocess.run(
            [sys.executable, "-m", "pyinfra", LAB_INVENTORY, "deploy/cluster.py", "-y"],
            cwd=clone,
            # The clone's own .rayrig/ is empty: the lab (its keys, its hosts) is in this checkout's state dir.
            env={**os.environ, "RAYRIG_LAB": LAB, "RAYRIG_STATE_DIR": str(state_dir())},
            capture_output=True,
            text=True,
            timeout=1800,
        )
        output = result.stdout + result.stderr
        assert token not in output, "the deploy printed the cluster's token"
        assert result.returncode == 0, output[-6000:]
        assert "Fetched the cluster's Ray token from the head" in output, output[-3000:]
        assert LOCAL.exists(), f"the deploy did not bring {LOCAL} back"
        assert auth.read_token(LOCAL) == node_token(lab, lab.head) == token
        assert stat.S_IMODE(LOCAL.stat().st_mode) == 0o600
        assert {h["address"]: lab.container_id(h) for h in lab.hosts} == ids, "a ray-node container was replaced"
        assert sum(changed_operations(output).values()) == 0, changed_operations(output)
    finally:
        if not LOCAL.exists():  # put it back for the next scenarios
            shutil.move(moved, LOCAL)


def test_rayrig_token_rotate_gives_every_node_a_new_token_and_ray_refuses_the_old_one(lab, baseline):
    old = cluster_token()
    result = rayrig("token", "rotate", LAB_INVENTORY, timeout=1800)
    output = result.stdout + result.stderr
    new = cluster_token()
    assert old not in output and new not in output, "the rotation printed a token"
    assert result.returncode == 0, output[-6000:]
    assert new != old
    assert not auth.backup_path(LOCAL).exists(), "the previous token outlived a rotation that succeeded"
    assert stat.S_IMODE(LOCAL.stat().st_mode) == 0o600
    assert {h["address"]: node_token(lab, h) == new for h in lab.hosts} == {h["address"]: True for h in lab.hosts}
    wait_for_alive(lab, HOSTS, addresses=[h["address"] for h in lab.hosts])

    worker = lab.workers[0]
    status, written = remote.run_with_input(
        lab.target(worker), "umask 077 && cat > ~/.previous-ray-token", old + "\n", timeout=60
    )
    assert status == 0, written
    try:
        status, refused = ray_status(lab, with_token("$HOME/.previous-ray-token"))
        assert status != 0 and "InvalidAuthToken" in refused, refused[-2000:]
    finally:
        lab.sh(worker, "rm -f ~/.previous-ray-token")
    status, admitted = ray_status(lab, with_token())
    assert status == 0 and admitted.count("node_") >= HOSTS, admitted[-2000:]
