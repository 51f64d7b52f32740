"""The operator's copy of the cluster's Ray token."""

from __future__ import annotations

import stat

import pytest

from deploy import auth, settings


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
