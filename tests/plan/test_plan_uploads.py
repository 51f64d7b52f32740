"""Plans of uploads through sudo: every file, and above all every secret, passes through the SSH
user's own 0700 directory, never through /tmp (where pyinfra would put it by default)."""

from __future__ import annotations

import pytest

from deploy.host.secret_files import UPLOAD_DIR_NAME
from deploy.ray import auth
from deploy.storage.s3 import CREDENTIALS_DIR
from tests.plan.fakes.fake_repo_keys import key_fetch
from tests.plan.fakes.fakehosts import HEAD, OSES, UPLOAD_DIR, reference_cluster
from tests.plan.harness import run_deploy

AUTH = {"registry": "registry.lab.example:5000", "username": "ray", "password": "hunter2-Secret"}
CREDENTIALS = {"access_key_id": "AKIAEXAMPLE", "secret_access_key": "s3-Secret/Key"}
SECRETS = {
    "_sudo": True,
    "docker_registry_auth": AUTH,
    "ray_image": "registry.lab.example:5000/ml/ray:2.60.0",
    "storage_s3_mounts": [{"bucket": "datasets", "path": "/mnt/datasets", "endpoint_url": "http://10.0.0.5:9000"}],
    "storage_s3_credentials": CREDENTIALS,
}
SECRET_FILES = ("/etc/rayrig/docker/config.json", auth.NODE_TOKEN_PATH, f"{CREDENTIALS_DIR}/passwd-datasets")


@pytest.mark.parametrize("os_name", ["ubuntu22", "rocky9"])
def test_every_upload_through_sudo_passes_through_the_private_directory(os_name):
    run = run_deploy(reference_cluster(os_name, data=SECRETS))
    for name, host in run.hosts.items():
        made = host.op("Create the private upload directory")
        assert made.commands == [f"mkdir -p {UPLOAD_DIR}", f"chmod 700 {UPLOAD_DIR}"]
        temp_paths = {path: temp for op in host.ops for path, temp in op.temp_paths.items()}
        assert set(SECRET_FILES) <= set(temp_paths), name
        for path, temp in temp_paths.items():
            assert temp is not None and temp.startswith(f"{UPLOAD_DIR}/pyinfra-"), (name, path, temp)
        first_upload = min(op.step for op in host.ops if op.uploads)
        assert made.step < first_upload  # the directory is there before anything goes through it


def test_the_private_directory_is_made_by_the_ssh_user_and_the_secrets_through_sudo():
    run = run_deploy(reference_cluster("debian12", data=SECRETS))
    host = run[HEAD]
    # pyinfra's SFTP runs as the SSH user: it could not write into a directory of root's.
    assert not host.op("Create the private upload directory").sudo
    assert host.op("Store the cluster's Ray token").sudo
    assert UPLOAD_DIR.endswith("/" + UPLOAD_DIR_NAME)


@pytest.mark.parametrize("os_name", OSES)
def test_a_converged_host_with_sudo_plans_nothing_for_its_upload_directory(os_name):
    run = run_deploy(reference_cluster(os_name, "converged", data={"_sudo": True}))
    assert run.changed_hosts == {}
    assert run[HEAD].has_op("Create the private upload directory")


def test_a_host_reached_as_root_gets_the_directory_too_and_no_command_names_a_temp_file_in_tmp():
    run = run_deploy(reference_cluster("debian12", data={"docker_source": "docker"}))
    for host in run.hosts.values():
        assert host.has_op("Create the private upload directory")
        assert not host.commands_matching(r"/tmp/pyinfra-")
        # Repository keys are fetched by fetch-key.sh into a folder of its own (mktemp -d: 0700, root's).
        fetch = key_fetch(host.op("Download Docker's repository key").commands)
        assert fetch.url == "https://download.docker.com/linux/debian/gpg"
