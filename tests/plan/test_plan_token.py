"""One token for the cluster's life: a deploy from a machine without the cluster's token fetches it
from the head and changes nothing; a local token that is not the cluster's stops the deploy."""

from __future__ import annotations

import re
import stat

import pytest

from deploy.host.secret_files import DIGEST_KEY_NAME
from deploy.ray import auth
from deploy.ray.cluster_token import NO_TOKEN, READ_COMMAND, TOKEN_FOLLOWS, ClusterTokenError
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, container_json, reference_cluster
from tests.plan.harness import run_deploy

NODES = (HEAD, GPU_WORKER, CPU_WORKER)
TOKEN = "c1a55e5-the-clusters-token-0123456789abcdef"


def converged_with(token_file, token: str = TOKEN):
    """The reference cluster, converged with ``token`` as the one it runs, its local copy at ``token_file``."""
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text(token + "\n")
    return reference_cluster("ubuntu22", "converged", data={"ray_auth_token_file": str(token_file)})


def with_head_responses(hosts, **responses):
    """``hosts`` with some of the head's fact answers replaced (first: the first matcher that matches wins)."""
    changed = []
    for name, data in hosts:
        if name == HEAD:
            rest = {key: value for key, value in data["fake_responses"].items() if key not in responses}
            data = {**data, "fake_responses": {**responses, **rest}}
        changed.append((name, data))
    return changed


def reads(run, name):
    return [command for command in run[name].sent if TOKEN_FOLLOWS in command]


def test_without_a_local_token_the_heads_is_fetched_0600_and_nothing_changes_on_any_node(tmp_path):
    token_file = tmp_path / "fresh-clone" / "ray_auth_token"
    hosts = converged_with(token_file)
    digest_key = token_file.with_name(DIGEST_KEY_NAME)  # the fresh clone has neither: both come from the head
    key = digest_key.read_text()
    token_file.unlink()
    digest_key.unlink()
    token_file.parent.rmdir()
    run = run_deploy(hosts)
    assert run.changed_hosts == {}  # no token upload, no replacement, no secret file written again
    assert auth.read_token(token_file) == TOKEN
    assert digest_key.read_text() == key
    for path in (token_file, digest_key):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    assert sorted(p.name for p in token_file.parent.iterdir()) == [  # no temporary file left
        "ray_auth_token",
        DIGEST_KEY_NAME,
    ]
    assert reads(run, HEAD) == [READ_COMMAND]
    assert reads(run, GPU_WORKER) == reads(run, CPU_WORKER) == []
    for name in NODES:
        host = run[name]
        assert host.downloads == [], "the token is read from the command's output, never through a file"
        for text in host.commands + host.raw_commands + [op.name for op in host.ops]:
            assert TOKEN not in text


def test_the_head_is_read_without_a_copy_of_the_token_on_the_host():
    # pyinfra's get_file through sudo copies the file to a temporary file made readable for the
    # download; the read command only prints it: no redirection into a file, no copy.
    assert auth.NODE_TOKEN_PATH in READ_COMMAND
    assert re.findall(r">[^\s;]*", READ_COMMAND) == [">&2"]
    assert not re.search(r"\b(cp|tee|mktemp|install|dd|mv)\b", READ_COMMAND)


def test_the_first_deploy_generates_the_token_once_the_head_says_it_has_none(tmp_path):
    token_file = tmp_path / "first" / "ray_auth_token"
    run = run_deploy(reference_cluster("ubuntu22", data={"ray_auth_token_file": str(token_file)}))
    token = auth.read_token(token_file)
    assert len(token) == 64
    assert reads(run, HEAD) == [READ_COMMAND]
    for name in NODES:
        assert run[name].op("Store the cluster's Ray token").uploads == {auth.NODE_TOKEN_PATH: token + "\n"}


def test_a_local_token_other_than_the_clusters_stops_the_deploy_with_both_ways_out(tmp_path):
    token_file = tmp_path / "laptop" / "ray_auth_token"
    hosts = converged_with(token_file)
    token_file.write_text("another-laptops-own-token\n")
    with pytest.raises(ClusterTokenError) as stopped:
        run_deploy(hosts)
    message = str(stopped.value)
    assert message.startswith(f"host {HEAD}: the local Ray token {token_file} (digest ")
    assert f"the head's token file {auth.NODE_TOKEN_PATH} has digest {auth.digest(TOKEN)}" in message
    assert f"the head's ray-node container (label {auth.TOKEN_LABEL}) has digest {auth.digest(TOKEN)}" in message
    assert f"delete {token_file} to have the deploy fetch the cluster's token from the head" in message
    assert "run `rayrig token rotate INVENTORY`" in message
    assert "nothing was changed on any host" in message
    assert TOKEN not in message and "another-laptops-own-token" not in message
    assert "rotation cut short" not in message
    assert auth.read_token(token_file) == "another-laptops-own-token"  # the local copy is left as it is


def test_a_head_whose_container_runs_another_token_than_its_file_says_a_rotation_was_cut_short(tmp_path):
    token_file = tmp_path / "clone" / "ray_auth_token"
    hosts = converged_with(token_file)
    token_file.unlink()
    labels = {auth.TOKEN_LABEL: auth.digest("the-previous-token")}
    hosts = with_head_responses(hosts, **{"docker container inspect": [container_json("ray-node", "img", labels)]})
    with pytest.raises(ClusterTokenError) as stopped:
        run_deploy(hosts)
    message = str(stopped.value)
    assert f"has digest {auth.digest('the-previous-token')}" in message
    assert "as a rotation cut short leaves them: `rayrig token rotate INVENTORY` finishes it" in message
    assert auth.read_token(token_file) == TOKEN  # fetched: it is the head's token file


def test_a_head_running_a_token_whose_file_is_gone_is_an_error_without_a_local_copy(tmp_path):
    token_file = tmp_path / "clone" / "ray_auth_token"
    hosts = with_head_responses(converged_with(token_file), **{TOKEN_FOLLOWS: [NO_TOKEN]})
    token_file.unlink()
    with pytest.raises(ClusterTokenError, match=r"whose file /etc/rayrig/ray/auth_token is gone, so it cannot be"):
        run_deploy(hosts)
    assert not token_file.exists(), "no new token may be generated for a cluster that runs one"


def test_a_head_whose_token_cannot_be_read_stops_the_deploy_naming_the_host_and_the_reason(tmp_path):
    token_file = tmp_path / "clone" / "ray_auth_token"
    refused = {"success": False, "stderr": "sudo: a password is required"}
    hosts = with_head_responses(converged_with(token_file), **{TOKEN_FOLLOWS: refused})
    token_file.unlink()
    with pytest.raises(ClusterTokenError) as stopped:
        run_deploy(hosts)
    assert str(stopped.value) == (
        f"host {HEAD}: could not read the cluster's Ray token ({auth.NODE_TOKEN_PATH}) through sudo: "
        "sudo: a password is required. Nothing was changed on any host."
    )
    assert not token_file.exists()


def test_without_token_authentication_the_head_is_not_asked(tmp_path):
    run = run_deploy(reference_cluster("ubuntu22", data={"ray_auth": "none", "ray_auth_allow_none": True}))
    assert all(reads(run, name) == [] for name in NODES)
