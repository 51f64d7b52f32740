"""The operator's copy of the cluster's Ray token."""

from __future__ import annotations

import stat

import pytest

from deploy.contract import settings
from deploy.ray import auth


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path))
    return tmp_path


def test_the_token_is_generated_once_0600_in_a_0700_folder_named_by_the_cluster(state):
    s = settings.merge({"ray_cluster_name": "lab-a"})
    path = auth.ensure_token(s)
    assert path == state / "clusters" / "lab-a" / "ray_auth_token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    token = auth.read_token(path)
    assert len(token) == 64 and int(token, 16) >= 0
    assert auth.read_token(auth.ensure_token(s)) == token
    assert auth.read_token(auth.ensure_token(settings.merge({"ray_cluster_name": "lab-b"}))) != token


def test_a_token_file_others_can_read_is_made_0600(state):
    path = auth.ensure_token(settings.merge({}))
    path.chmod(0o644)
    auth.ensure_token(settings.merge({}))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_empty_token_file_is_an_error_that_says_what_to_do(state):
    path = state / "t"
    path.write_text("\n")
    with pytest.raises(auth.TokenError, match="delete it to have a new token generated"):
        auth.ensure_token(settings.merge({"ray_auth_token_file": str(path)}))


def test_the_digest_changes_with_the_token_and_does_not_contain_it(state):
    path = state / "t"
    path.write_text("abc\n")
    first = auth.token_digest(path)
    assert "abc" not in first
    path.write_text("abd\n")
    assert auth.token_digest(path) != first


def test_container_env():
    assert auth.container_env(settings.merge({})) == {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": auth.NODE_TOKEN_PATH,
    }
    assert auth.container_env(settings.merge({"ray_auth": "none"})) == {"RAY_AUTH_MODE": "disabled"}


def test_a_stored_token_is_0600_in_a_0700_folder_and_never_overwrites_one_there(state):
    path = state / "clone" / "clusters" / "c" / "ray_auth_token"
    assert auth.store_token(path, "the-clusters-token\n")
    assert auth.read_token(path) == "the-clusters-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not auth.store_token(path, "another-token")
    assert auth.read_token(path) == "the-clusters-token"
    assert [p.name for p in path.parent.iterdir()] == ["ray_auth_token"]  # no temporary file left


def test_a_rotation_keeps_the_previous_token_0600_until_it_ends(state):
    s = settings.merge({"ray_cluster_name": "c"})
    old = auth.read_token(auth.ensure_token(s))
    rotation = auth.begin_rotation(s)
    assert rotation == auth.Rotation(auth.token_path(s), auth.backup_path(auth.token_path(s)), resumed=False)
    assert rotation.backup.name == "ray_auth_token.previous"
    assert auth.read_token(rotation.backup) == old
    assert stat.S_IMODE(rotation.backup.stat().st_mode) == 0o600
    new = auth.read_token(rotation.token)
    assert len(new) == 64 and new != old
    assert stat.S_IMODE(rotation.token.stat().st_mode) == 0o600
    auth.end_rotation(rotation)
    assert not rotation.backup.exists()
    assert auth.read_token(rotation.token) == new


def test_a_rotation_cut_short_is_finished_with_the_token_it_made(state):
    s = settings.merge({})
    old = auth.read_token(auth.ensure_token(s))
    first = auth.begin_rotation(s)
    new = auth.read_token(first.token)
    again = auth.begin_rotation(s)  # the deploy of the first one failed
    assert again.resumed
    assert auth.read_token(again.token) == new
    assert auth.read_token(again.backup) == old


def test_a_rotation_whose_new_token_is_gone_makes_another_and_keeps_the_first_backup(state):
    s = settings.merge({})
    old = auth.read_token(auth.ensure_token(s))
    first = auth.begin_rotation(s)
    first.token.unlink()
    again = auth.begin_rotation(s)
    assert not again.resumed
    assert auth.read_token(again.backup) == old
    assert len(auth.read_token(again.token)) == 64


def test_a_rotation_without_a_local_token_has_no_backup(state):
    rotation = auth.begin_rotation(settings.merge({}))
    assert rotation.backup is None
    assert len(auth.read_token(rotation.token)) == 64


def test_undoing_a_rotation_puts_the_previous_token_back_and_leaves_a_resumed_one(state):
    s = settings.merge({})
    old = auth.read_token(auth.ensure_token(s))
    rotation = auth.begin_rotation(s)
    auth.undo_rotation(rotation)
    assert auth.read_token(rotation.token) == old
    assert not rotation.backup.exists()
    first = auth.begin_rotation(s)
    new = auth.read_token(first.token)
    resumed = auth.begin_rotation(s)
    auth.undo_rotation(resumed)
    assert auth.read_token(resumed.token) == new and auth.read_token(resumed.backup) == old
