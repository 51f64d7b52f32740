"""``rayrig token rotate``: what it refuses before touching anything, and what it says after the deploy."""

from __future__ import annotations

import pytest

from deploy.contract import settings
from deploy.ray import auth
from deploy.ray.cluster_token import ROTATION_ENV
from rayrig import run
from rayrig.cli import main

FAKE = "tests/plan/fake_inventory.py"  # a head and two workers, cluster "cluster", token authentication


@pytest.fixture(autouse=True)
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture
def old_token():
    path = auth.ensure_token(settings.merge({}))
    return path, auth.read_token(path)


@pytest.fixture
def deploys(monkeypatch):
    """The deploys the command runs: (inventory, extra, env); each exits with ``deploys.status``."""

    class Deploys(list):
        status = 0

    calls = Deploys()

    def fake_run_pyinfra(inventory, deploy_file="deploy/cluster.py", extra=(), env=None):
        calls.append((inventory, list(extra), env))
        return calls.status

    monkeypatch.setattr(run, "run_pyinfra", fake_run_pyinfra)
    return calls


def test_token_needs_a_subcommand_and_rotate_an_inventory(capsys):
    for argv in (["token"], ["token", "rotate"], ["token", "renew", FAKE]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2, argv
    assert "usage: rayrig token" in capsys.readouterr().err


def test_a_missing_inventory_is_a_usage_error_and_the_token_is_left_alone(capsys, old_token, deploys):
    path, token = old_token
    assert main(["token", "rotate", "no/such/inventory.py"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "rayrig token rotate: no/such/inventory.py: no such inventory file "
        "(expected a pyinfra inventory such as inventories/prod.py); nothing was changed\n"
    )
    assert auth.read_token(path) == token and not auth.backup_path(path).exists()
    assert deploys == []


@pytest.mark.parametrize("partial", [["--limit", "@fake/head"], ["--limit=@fake/head"], ["--exclude", "x"]])
def test_a_rotation_of_part_of_the_inventory_is_refused(capsys, old_token, deploys, partial):
    path, token = old_token
    assert main(["token", "rotate", FAKE, *partial]) == 2
    option = partial[0].split("=")[0]
    assert (
        f"rayrig token rotate: {option}: a rotation must reach every host of the inventory" in capsys.readouterr().err
    )
    assert auth.read_token(path) == token
    assert deploys == []


def test_an_invalid_inventory_or_one_without_token_authentication_is_refused(capsys, tmp_path, deploys):
    two_heads = tmp_path / "two_heads.py"
    two_heads.write_text(
        "from tests.plan.fakes.fakehosts import cluster\nhosts = cluster('ubuntu22', data={'ray_role': 'head'})\n"
    )
    assert main(["token", "rotate", str(two_heads)]) == 2
    assert 'expected exactly one head; the others must be "worker"' in capsys.readouterr().err
    no_auth = tmp_path / "no_auth.py"
    no_auth.write_text(
        "from tests.plan.fakes.fakehosts import cluster\n"
        "hosts = cluster('ubuntu22', data={'ray_auth': 'none', 'ray_auth_allow_none': True})\n"
    )
    assert main(["token", "rotate", str(no_auth)]) == 2
    assert "ray_auth = 'none': the cluster has no token to rotate" in capsys.readouterr().err
    assert deploys == []


def test_a_rotation_deploys_a_new_token_in_rotation_mode_and_then_drops_the_previous(capsys, old_token, deploys):
    path, old = old_token
    assert main(["token", "rotate", FAKE, "-v"]) == 0
    assert deploys == [(FAKE, ["-v"], {ROTATION_ENV: "1"})]
    new = auth.read_token(path)
    assert new != old and len(new) == 64
    assert not auth.backup_path(path).exists()
    out, err = capsys.readouterr()
    assert f"New Ray token for cluster 'cluster' in {path}" in out
    assert f"Every node of cluster 'cluster' runs the new token ({path})" in out
    assert old not in out + err and new not in out + err


def test_a_failed_rotation_says_where_the_cluster_stands_and_a_second_one_finishes_it(capsys, old_token, deploys):
    path, old = old_token
    deploys.status = 1
    assert main(["token", "rotate", FAKE]) == 1
    new = auth.read_token(path)
    backup = auth.backup_path(path)
    err = capsys.readouterr().err
    assert "the deploy failed (pyinfra exit status 1); the rotation is not finished" in err
    assert f"run the new token, in {path}" in err
    assert f"still run the previous one, kept in {backup}" in err
    assert f"run `rayrig token rotate {FAKE}` again: it finishes with the same new token" in err
    assert auth.read_token(backup) == old
    deploys.status = 0
    assert main(["token", "rotate", FAKE]) == 0
    out, err = capsys.readouterr()
    assert "was cut short: finishing it with the token it made" in out
    assert auth.read_token(path) == new and not backup.exists()
    assert old not in out + err and new not in out + err


def test_a_dry_run_puts_the_previous_token_back(capsys, old_token, deploys):
    path, old = old_token
    assert main(["token", "rotate", FAKE, "--dry"]) == 0
    assert deploys[0][1] == ["--dry"]
    assert auth.read_token(path) == old and not auth.backup_path(path).exists()
    assert "Dry run: no node was changed" in capsys.readouterr().out
