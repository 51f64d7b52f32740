"""Plans of Ray TLS (ray_tls): each node's CA certificate, certificate and key in a 0700 folder
(the key 0600, uploaded as a secret), mounted read-only into ray-node with Ray's TLS variables and
a digest label; a converged cluster plans nothing; TLS off removes the folder. No key text ever
appears in a planned command or an operation's name."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives import serialization

from deploy.contract import settings
from deploy.ray import ray_node, tls_ca, tls_node
from tests.plan.fakes.fakehosts import (
    CPU_WORKER,
    GPU_WORKER,
    HEAD,
    OSES,
    UPLOAD_DIR,
    _sha1_matcher,
    _stat_line,
    _stat_matcher,
    local_digest_key,
    reference_cluster,
    secret_file_answer,
    with_data,
)
from tests.plan.harness import HostRun, run_deploy

NODES = (HEAD, GPU_WORKER, CPU_WORKER)
ADDRESSES = {HEAD: "10.0.0.1", GPU_WORKER: "10.0.0.2", CPU_WORKER: "10.0.0.3"}
TLS_ON = {"ray_tls": "on"}
KEY_MARK = "PRIVATE KEY"
#: pyinfra's FileContents command for the head's CA certificate.
HEAD_CA_READ = f"test -e {tls_ca.NODE_CA_CERT} && cat {tls_ca.NODE_CA_CERT}"


def fresh_tls(tmp_path) -> dict[str, str]:
    """TLS on, with a CA of this test's own (beside its own token): every certificate is issued anew."""
    return {**TLS_ON, "ray_auth_token_file": str(tmp_path / "ray_auth_token")}


def certificate(hosts, name: str) -> tls_ca.NodeCertificate:
    """The host's certificate as the operator's machine holds it (the deploy issued it; asking again reuses it)."""
    data = dict(hosts)[name]
    s = settings.merge({k: v for k, v in data.items() if k != "fake_responses"})
    # @fake/... names are no addresses: the certificate names the node address (and loopback) only
    return tls_ca.ensure_node_certificate(s, name, tls_ca.node_sans(s, name, [ADDRESSES[name]]))


def with_tls_files(hosts, hash_from: dict[str, str] | None = None):
    """``hosts`` whose nodes already hold their TLS files (0700 folder; 0644, 0644, 0600) and, with
    ``hash_from`` (host name -> the hash label a deploy created ray-node with), run that ray-node."""
    changed = []
    for name, data in hosts:
        cert = certificate(hosts, name)
        files = {
            tls_ca.NODE_CA_CERT: (cert.ca_pem, 644),
            tls_ca.NODE_CERT: (cert.cert_pem, 644),
            tls_ca.NODE_KEY: (cert.key_pem, 600),
        }
        facts = {_stat_matcher(tls_ca.NODE_TLS_DIR): [_stat_line(tls_ca.NODE_TLS_DIR, 700, "directory")]}
        facts[HEAD_CA_READ] = cert.ca_pem.decode().splitlines()  # what the deploy reads of the head's CA
        key = local_digest_key(settings.merge({k: v for k, v in data.items() if k != "fake_responses"}))
        for path, (content, mode) in files.items():
            facts[_stat_matcher(path)] = [_stat_line(path, mode)]
            facts[_sha1_matcher(path)] = [f"{hashlib.sha1(content).hexdigest()}  {path}"]
            facts.update(secret_file_answer(path, content, mode, key))  # what the key's upload reads
        responses = {**facts, **data["fake_responses"]}
        if hash_from:
            container = json.loads(responses["docker container inspect"][0])
            container["Config"]["Labels"][ray_node.HASH_LABEL] = hash_from[name]
            responses["docker container inspect"] = [json.dumps(container)]
        changed.append((name, {**data, "fake_responses": responses}))
    return changed


def hash_label(host: HostRun) -> str:
    (label,) = [a for a in host.docker_create() if a.startswith(f"--label={ray_node.HASH_LABEL}=")]
    return label.split("=", 2)[2]


def converged_with_tls(os_name: str):
    """The reference cluster, converged with TLS on: its files in place, ray-node created with them."""
    hosts = with_tls_files(reference_cluster(os_name, "converged", data=TLS_ON))
    first = run_deploy(hosts)  # ray-node still runs without TLS: replaced
    return with_tls_files(hosts, {name: hash_label(first[name]) for name in NODES})


def assert_no_key_text(host: HostRun, *keys: bytes) -> None:
    names = [op.name for op in host.ops]
    for text in host.commands + host.raw_commands + names + host.sent:
        assert KEY_MARK not in text, f"{host.name}: key text in {text[:80]!r}"
        for key in keys:
            assert key.decode().strip() not in text


@pytest.mark.parametrize("os_name", OSES)
def test_tls_on_puts_the_certificates_in_a_private_folder_and_gives_them_to_ray_node(os_name, tmp_path):
    hosts = reference_cluster(os_name, data={**fresh_tls(tmp_path), "_sudo": True})
    run = run_deploy(hosts)
    for name in NODES:
        host, cert = run[name], certificate(hosts, name)
        folder = host.op("Create the folder of the node's TLS certificate")
        assert folder.commands[-1] == f"chmod 700 {tls_ca.NODE_TLS_DIR}"
        ca = host.op("Store the cluster's CA certificate")
        assert ca.uploads == {tls_ca.NODE_CA_CERT: cert.ca_pem.decode()}
        assert f"chmod 644 {tls_ca.NODE_CA_CERT}" in ca.commands
        node = host.op(r"Store the node's TLS certificate \(new: ")
        assert node.uploads == {tls_ca.NODE_CERT: cert.cert_pem.decode()}
        assert f"chmod 644 {tls_ca.NODE_CERT}" in node.commands
        key = host.op(r"Store the node's TLS key \(new: ")
        assert key.uploads == {tls_ca.NODE_KEY: cert.key_pem.decode()}
        assert f"chmod 600 {tls_ca.NODE_KEY}" in key.commands
        assert key.temp_paths[tls_ca.NODE_KEY].startswith(f"{UPLOAD_DIR}/")  # never through /tmp
        create = host.docker_create()
        for variable, value in {
            "RAY_USE_TLS": "1",
            "RAY_TLS_SERVER_CERT": tls_ca.NODE_CERT,
            "RAY_TLS_SERVER_KEY": tls_ca.NODE_KEY,
            "RAY_TLS_CA_CERT": tls_ca.NODE_CA_CERT,
        }.items():
            assert f"--env={variable}={value}" in create
        assert f"--mount=type=bind,src={tls_ca.NODE_TLS_DIR},dst={tls_ca.NODE_TLS_DIR},readonly" in create
        assert f"--label={tls_ca.TLS_LABEL}={tls_ca.tls_digest(cert.ca_pem, cert.cert_pem)}" in create
        assert not host.has_op("Remove the node's TLS folder")
        assert_no_key_text(host, cert.key_pem)


def test_the_files_are_given_to_the_containers_user_before_ray_node_starts(tmp_path):
    run = run_deploy(reference_cluster("ubuntu22", data=fresh_tls(tmp_path)))
    image = settings.merge({})["ray_image"]
    own = f'chown "$(docker run --rm --network=none --entrypoint id {image} -u)" {tls_ca.NODE_TLS_DIR} '
    own += f"{tls_ca.NODE_CA_CERT} {tls_ca.NODE_CERT} {tls_ca.NODE_KEY}"
    for name in NODES:
        commands = run[name].op(r"Start the Ray (head|worker) container").commands
        (replace,) = [i for i, c in enumerate(commands) if "replace-ray-node" in c]
        assert own in commands[:replace]


def test_every_node_has_a_certificate_of_its_own_signed_by_the_one_ca(tmp_path):
    hosts = reference_cluster("rocky9", data=fresh_tls(tmp_path))
    run = run_deploy(hosts)
    certs = {name: certificate(hosts, name) for name in NODES}
    assert len({c.ca_pem for c in certs.values()}) == 1
    assert len({c.cert_pem for c in certs.values()}) == len({c.key_pem for c in certs.values()}) == 3
    labels = {a for name in NODES for a in run[name].docker_create() if a.startswith(f"--label={tls_ca.TLS_LABEL}=")}
    assert len(labels) == 3


@pytest.mark.parametrize("os_name", OSES)
def test_a_converged_cluster_with_tls_plans_nothing(os_name):
    assert run_deploy(converged_with_tls(os_name)).changed_hosts == {}


def test_a_certificate_that_changed_replaces_only_that_nodes_container():
    hosts = converged_with_tls("debian12")
    moved = with_data(hosts, CPU_WORKER, ssh_hostname="cpu-worker.lab.example")  # a name to add to its SANs
    run = run_deploy(moved)
    assert set(run.changed_hosts) == {CPU_WORKER}
    host = run[CPU_WORKER]
    assert host.has_op(r"Store the node's TLS certificate \(new: ")
    assert host.has_op(r"Start the Ray worker container")
    assert not host.op("Store the cluster's CA certificate").changed  # the same CA
    assert_no_key_text(host)


@pytest.mark.parametrize("os_name", OSES)
def test_tls_off_removes_the_folder_once_ray_node_runs_without_it(os_name):
    hosts = converged_with_tls(os_name)
    off = [(name, {**data, "ray_tls": "off"}) for name, data in hosts]
    run = run_deploy(off)
    for name in NODES:
        host = run[name]
        remove = host.op("Remove the node's TLS folder")
        assert remove.commands == [f"rm -rf {tls_ca.NODE_TLS_DIR}"]
        start = next(op for op in host.ops if op.commands and "replace-ray-node" in op.commands[-1])
        assert start.step < remove.step  # a previous container brought back still finds its folder
        create = host.docker_create()
        assert not [a for a in create if "TLS" in a or tls_ca.NODE_TLS_DIR in a]
        assert not host.has_op(r"Store the node's TLS")


def test_tls_off_on_a_cluster_that_never_had_it_plans_nothing():
    run = run_deploy(reference_cluster("al2023", "converged"))
    assert run.changed_hosts == {}
    assert not run[HEAD].op("Remove the node's TLS folder").changed


def test_tls_on_without_token_authentication():
    run = run_deploy(reference_cluster("ubuntu24", data={**TLS_ON, "ray_auth": "none", "ray_auth_allow_none": True}))
    create = run[HEAD].docker_create()
    assert "--env=RAY_USE_TLS=1" in create
    assert "--env=RAY_AUTH_MODE=disabled" in create


def test_the_certificate_names_every_address_of_the_node():
    host = SimpleNamespace(
        name="10.9.9.9", data=SimpleNamespace(dict=lambda: {"ray_node_ip": "10.0.0.1", "ssh_hostname": "head.lab"})
    )
    assert tls_node.san_addresses(host) == ["10.0.0.1", "head.lab", "10.9.9.9"]
    host.name = "@ssh/head"  # a connector's name is no address
    host.data = SimpleNamespace(dict=lambda: {"ray_node_ip": "fe80::1%eth0"})
    assert tls_node.san_addresses(host) == ["fe80::1"]


def test_an_unusable_ca_stops_the_deploy_naming_the_host_and_the_file(tmp_path):
    data = fresh_tls(tmp_path)
    ca = tls_ca.tls_dir(settings.merge(data)) / "ca.crt"
    ca.parent.mkdir(parents=True)
    ca.write_text("not a certificate\n")
    (ca.parent / "ca.key").write_text("not a key\n")
    with pytest.raises(tls_node.NodeCertificateError, match=rf"^host @fake/\S+: no TLS certificate .*{ca}: not a PEM"):
        run_deploy(reference_cluster("ubuntu22", data=data))


def with_head_ca(hosts, ca_pem: bytes):
    """``hosts`` whose head holds ``ca_pem`` as its CA certificate (a cluster running TLS)."""
    changed = []
    for name, data in hosts:
        if name == HEAD:
            data = {**data, "fake_responses": {HEAD_CA_READ: ca_pem.decode().splitlines(), **data["fake_responses"]}}
        changed.append((name, data))
    return changed


def test_a_head_running_another_ca_stops_the_deploy_before_any_change(tmp_path):
    other = settings.merge({"ray_cluster_name": "other", "ray_auth_token_file": str(tmp_path / "other" / "token")})
    theirs = tls_ca.ensure_ca(other).public_bytes(serialization.Encoding.PEM)
    data = fresh_tls(tmp_path)
    tls_ca.ensure_ca(settings.merge(data))  # this machine has a CA of its own
    with pytest.raises(tls_node.NodeCertificateError, match=r"^host @fake/head: the local CA .* is not the cluster's"):
        run_deploy(with_head_ca(reference_cluster("ubuntu22", "converged", data=data), theirs))


def test_a_machine_without_the_clusters_ca_is_stopped_before_it_makes_one(tmp_path):
    other = settings.merge({"ray_cluster_name": "other", "ray_auth_token_file": str(tmp_path / "other" / "token")})
    theirs = tls_ca.ensure_ca(other).public_bytes(serialization.Encoding.PEM)
    data = fresh_tls(tmp_path)
    with pytest.raises(tls_node.NodeCertificateError, match=r"there is no local CA .* Copy"):
        run_deploy(with_head_ca(reference_cluster("ubuntu22", "converged", data=data), theirs))
    assert not (tls_ca.tls_dir(settings.merge(data)) / "ca.crt").exists(), "a CA was made all the same"
