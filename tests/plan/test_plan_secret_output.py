"""No secret in what ``pyinfra -vvv --debug`` prints: every deploy path, with every secret set, prints
none of the values, nor the sha1, sha256 or md5 of a file that holds one (enough to test guesses of
a weak password offline), nor the digest key that compares those files.

``Run.output`` holds what pyinfra would print at that level: every command and fact command, every
fact's output, every operation's output, pyinfra's debug log and what the deploy prints itself.
The secrets are the Ray token, the registry password, the S3 keys, ``ray_env_secret``'s values,
each node's TLS key and the cluster's digest key; the files are those the deploy writes with them.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import pytest
from pyinfra.operations import files

from deploy.contract import settings
from deploy.host.ray_image import registry_config
from deploy.host.secret_files import DIGEST_KEY_DIR, DIGEST_KEY_NAME, KEY_FOLLOWS, DigestKeyError
from deploy.ray import env_secret, ray_node
from deploy.storage import s3
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, reference_cluster, with_data
from tests.plan.harness import Run, run_deploy
from tests.plan.test_cli_fake import run_pyinfra
from tests.plan.test_plan_tls import certificate, with_tls_files

TOKEN = "Ray-Token-Leak-0123456789abcdef"
REGISTRY = {"registry": "registry.lab.example:5000", "username": "leak-user", "password": "Reg1stry-Pa55-leak"}
S3_KEYS = {"access_key_id": "AKIALEAKTESTKEYID01", "secret_access_key": "S3-Secret/Leak+Key-0123"}
ENV = {"WANDB_API_KEY": "Env-Secret-Leak-0123", "DB_PASSWORD": "hunter2-leak"}
#: Changed values, for a re-run that writes the files again.
CHANGED = {
    "docker_registry_auth": {**REGISTRY, "password": "Reg1stry-Pa55-changed"},
    "storage_s3_credentials": {**S3_KEYS, "secret_access_key": "S3-Secret/Changed+Key-4567"},
    "ray_env_secret": {**ENV, "DB_PASSWORD": "hunter3-changed"},
}
MOUNTS = [
    {"bucket": "datasets", "path": "/mnt/datasets", "endpoint_url": "http://10.0.0.5:9000", "driver": "s3fs"},
    {"bucket": "checkpoints", "path": "/mnt/checkpoints", "endpoint_url": "http://10.0.0.5:9000"},  # Mountpoint
]
#: Every secret at once, with TLS, NFS (the head serves it) and S3 storage, a private registry and monitoring.
SECRETS = {
    "ray_tls": "on",
    "docker_registry_auth": REGISTRY,
    "ray_image": "registry.lab.example:5000/ml/ray:2.60.0",
    "ray_env_secret": ENV,
    "storage_s3_mounts": MOUNTS,
    "storage_s3_credentials": S3_KEYS,
    "storage_mountpoint_sha256": {"x86_64.deb": "d" * 64, "x86_64.rpm": "e" * 64},
    "storage_nfs_server": HEAD,
    "storage_nfs_exports": [{"path": "/srv/shared"}],
    "storage_nfs_mounts": [{"server": "10.0.0.1", "export": "/srv/shared", "path": "/mnt/shared"}],
    "monitoring_enabled": True,
}
NODES = (HEAD, GPU_WORKER, CPU_WORKER)


def with_secrets(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    """``SECRETS`` and ``changes``, the cluster's token, CA and digest key in a folder of this test's."""
    token_file = tmp_path / "cluster" / "ray_auth_token"
    token_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not token_file.exists():
        token_file.write_text(TOKEN + "\n")
    return {**SECRETS, "ray_auth_token_file": str(token_file), **changes}


def converged(tmp_path: Path, os_name: str = "ubuntu22", **changes: Any) -> list[tuple[str, dict]]:
    """The reference cluster, converged with every secret: its files in place, TLS's too."""
    return with_tls_files(reference_cluster(os_name, "converged", data=with_secrets(tmp_path, **changes)))


def secret_values(hosts: list[tuple[str, dict]], data: dict[str, Any]) -> dict[str, str]:
    """What must never be printed: each secret value, and each file the deploy writes with one."""
    token_file = Path(data["ray_auth_token_file"])
    values = {"the Ray token": TOKEN}
    files = {"the token file": TOKEN + "\n"}
    for auth in (REGISTRY, CHANGED["docker_registry_auth"]):
        values[f"registry password {auth['password']}"] = auth["password"]
        values[f"registry login with {auth['password']} (base64)"] = base64.b64encode(
            f"{auth['username']}:{auth['password']}".encode()
        ).decode()
        files[f"the registry login with {auth['password']}"] = registry_config(auth)
    for keys in (S3_KEYS, CHANGED["storage_s3_credentials"]):
        values[f"S3 secret key {keys['secret_access_key']}"] = keys["secret_access_key"]
        for driver in ("s3fs", "mountpoint-s3"):
            files[f"the {driver} credentials with {keys['secret_access_key']}"] = s3.s3_credentials_text(driver, keys)
    for env in (ENV, CHANGED["ray_env_secret"]):
        values.update({f"ray_env_secret {name}={value}": value for name, value in env.items()})
        text = env_secret.env_file_text(env)
        files[f"the secret environment {sorted(env.values())}"] = text
        # the label's unkeyed digest as it was: a guess of the file's content could be tested against it
        values[f"an unkeyed digest of the secret environment {sorted(env.values())}"] = hashlib.sha256(
            b"rayrig-env-secret\0" + text.encode()
        ).hexdigest()[:16]
    for name, host_data in hosts:
        if settings.merge({k: v for k, v in host_data.items() if k != "fake_responses"})["ray_tls"] == "on":
            key = certificate(hosts, name).key_pem.decode()
            files[f"{name}'s TLS key"] = key
            lines = [line for line in key.splitlines() if len(line) > 16 and "PRIVATE KEY" not in line]
            values.update({f"{name}'s TLS key, line {i}": line for i, line in enumerate(lines)})
    digest_key = token_file.with_name(DIGEST_KEY_NAME)
    if digest_key.exists():
        values["the digest key"] = digest_key.read_text().strip()
        files["the digest key's file"] = digest_key.read_text()
    for what, content in files.items():
        for text, trimmed in ((content, ""), (content.strip(), ", trimmed")):
            for algorithm in ("sha1", "sha256", "md5"):
                values[f"the {algorithm} of {what}{trimmed}"] = hashlib.new(algorithm, text.encode()).hexdigest()
    return values


def leaks(run: Run, values: dict[str, str]) -> list[str]:
    """Which of ``values`` the run printed, or sent where ``ps`` shows it, and where."""
    places = {"pyinfra's -vvv --debug output": run.output}
    for name, host in run.hosts.items():
        places[f"{name}'s commands"] = "\n".join(host.raw_commands + host.sent + [op.name for op in host.ops])
    return [f"{what} in {place}" for what, value in values.items() for place, text in places.items() if value in text]


def assert_no_leak(run: Run, hosts: list[tuple[str, dict]], data: dict[str, Any]) -> None:
    assert leaks(run, secret_values(hosts, data)) == []
    # what was searched is what pyinfra prints at that level: commands, facts' output, the debug log
    for printed in (">>> ", "Loaded fact", "[fake] simulating command", "DIGEST="):
        assert printed in run.output


DEPLOY_PATHS = (
    "first deploy, Ubuntu",
    "first deploy, Rocky",
    "re-run",
    "changed secrets",
    "fresh clone",
    "absent host",
    "rolling image change",
    "limited to one worker",
    "EC2-like hosts",
)


def deploy_path(what: str, tmp_path: Path) -> tuple[list[tuple[str, dict]], dict[str, Any], dict[str, Any]]:
    """(hosts, the data every host has, run_deploy's keywords) of one deploy path."""
    data = with_secrets(tmp_path)
    if what == "first deploy, Ubuntu":
        return reference_cluster("ubuntu22", data=data), data, {}
    if what == "first deploy, Rocky":
        return reference_cluster("rocky9", data=data), data, {}
    if what == "re-run":
        return converged(tmp_path), data, {}
    if what == "changed secrets":
        hosts = converged(tmp_path)
        return [(name, {**d, **CHANGED}) for name, d in hosts], data, {}
    if what == "fresh clone":  # no local token nor digest key: both are read from the head
        hosts = converged(tmp_path)
        token_file = Path(data["ray_auth_token_file"])
        (token_file.parent / "kept").mkdir()
        for path in (token_file, token_file.with_name(DIGEST_KEY_NAME)):
            path.rename(token_file.parent / "kept" / path.name)  # kept for the check
        return hosts, data, {}
    if what == "absent host":
        return with_data(converged(tmp_path), CPU_WORKER, ray_state="absent"), data, {}
    if what == "rolling image change":
        hosts = converged(tmp_path)
        new = {"ray_image": "registry.lab.example:5000/ml/ray:2.61.0", "ray_rolling_batch": 1}
        return [(name, {**d, **new}) for name, d in hosts], data, {}
    if what == "limited to one worker":
        return converged(tmp_path), data, {"limit": [GPU_WORKER]}
    if what == "EC2-like hosts":  # EC2's inventory: the cluster's name, EFA, S3 through the instance profile
        mounts = [{"bucket": "datasets", "path": "/mnt/datasets", "region": "us-west-2"}]
        ec2 = with_secrets(tmp_path, ray_cluster_name="leaktest", storage_s3_mounts=mounts, storage_s3_credentials=None)
        hosts = reference_cluster("ubuntu24", data=ec2, host_data={GPU_WORKER: {"ray_efa": True}})
        devices = {"ls -1 /dev/infiniband": ["rdma_cm", "uverbs0"]}
        for name, host_data in hosts:
            if name == GPU_WORKER:
                host_data["fake_responses"] = {**devices, **host_data["fake_responses"]}
        return hosts, ec2, {}
    raise AssertionError(what)


@pytest.mark.parametrize("what", DEPLOY_PATHS)
def test_no_secret_nor_a_checksum_of_one_in_pyinfra_s_most_verbose_output(what, tmp_path):
    hosts, data, keywords = deploy_path(what, tmp_path)
    run = run_deploy(hosts, **keywords)
    kept = Path(data["ray_auth_token_file"]).parent / "kept"
    if kept.exists():  # the fresh clone fetched them: they are the cluster's
        for path in kept.iterdir():
            assert path.read_text() == path.parent.parent.joinpath(path.name).read_text()
    assert_no_leak(run, hosts, data)


# --- The check itself finds what leaks ----------------------------------------------------------


def test_the_check_finds_a_secret_value_on_a_command_line(tmp_path):
    hosts, data, _ = deploy_path("first deploy, Ubuntu", tmp_path)
    plain = [(name, {**d, "ray_env": {"LEAKED": ENV["DB_PASSWORD"]}}) for name, d in hosts]
    found = leaks(run_deploy(plain), secret_values(hosts, data))
    assert "ray_env_secret DB_PASSWORD=hunter2-leak in pyinfra's -vvv --debug output" in found


def test_the_check_finds_the_sha1_that_files_put_reads_of_a_secret_file(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_node, "put_secret_file", files.put)  # pyinfra's Sha1File decides, and -vvv shows it
    hosts, data, _ = deploy_path("re-run", tmp_path)
    found = leaks(run_deploy(hosts), secret_values(hosts, data))
    assert "the sha1 of the token file in pyinfra's -vvv --debug output" in found


def test_a_head_whose_key_cannot_be_read_stops_the_deploy_naming_it_and_makes_no_new_key(tmp_path):
    hosts, data, _ = deploy_path("fresh clone", tmp_path)
    refused = {"success": False, "stderr": [f"cannot look into {DIGEST_KEY_DIR}: not root and no sudo"]}
    for _name, host_data in hosts:  # the head's answer to the read, in place of the converged one
        host_data["fake_responses"] = {**host_data["fake_responses"], KEY_FOLLOWS: refused}
    with pytest.raises(DigestKeyError) as error:
        run_deploy(hosts)
    assert str(error.value) == (
        f"host {HEAD}: could not read the cluster's digest key ({DIGEST_KEY_DIR}/key) through sudo: cannot look "
        f"into {DIGEST_KEY_DIR}: not root and no sudo. Nothing was changed on any host."
    )
    assert not Path(data["ray_auth_token_file"]).with_name(DIGEST_KEY_NAME).exists()


def test_pyinfra_s_own_cli_at_vvv_debug_prints_no_checksum_of_a_converged_secret_file(tmp_path):
    """The same, through ``pyinfra -vvv --debug`` itself (what it prints, not the harness's capture)."""
    inventory = tmp_path / "inventory.py"
    inventory.write_text(
        "from tests.plan.fakes.fakehosts import cluster\n"
        f"hosts = cluster('ubuntu22', 'converged', data={{'docker_registry_auth': {REGISTRY!r}, "
        f"'ray_env_secret': {ENV!r}}})\n"
    )
    code, output = run_pyinfra(
        inventory=str(inventory), extra=["-vvv", "--debug"], env={"RAYRIG_STATE_DIR": str(tmp_path / "state")}
    )
    assert code == 0, output[-3000:]
    files = {"registry login": registry_config(REGISTRY), "secret environment": env_secret.env_file_text(ENV)}
    printed = [
        f"the {algorithm} of the {what}"
        for what, content in files.items()
        for algorithm in ("sha1", "sha256", "md5")
        if hashlib.new(algorithm, content.encode()).hexdigest() in output
    ]
    printed += [value for value in (REGISTRY["password"], *ENV.values()) if value in output]
    assert printed == []
    assert "DIGEST=" in output and "Loaded fact" in output  # facts' output is printed
