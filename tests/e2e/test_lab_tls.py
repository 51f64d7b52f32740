"""Ray TLS with the cluster's CA, end to end on the lab.

One deploy turns ``ray_tls = "on"`` on every host: three alive nodes, the checks PASS, a
re-run changes nothing. Clients in a fresh container of the Ray image on a worker (an
address the firewall admits) present the cluster's token: without a certificate, or with one
of another CA, Ray refuses them; with a certificate from ``rayrig tls client-cert`` they list
the nodes. The head's GCS port answers a plain-text HTTP/2 request with no HTTP/2 frame, and
a TLS handshake with the cluster's CA gets the head's certificate. Keys are 0600 on every node
and on this machine and no key text is in the deploys' output, ``docker inspect`` or the unit's
journal. Turning TLS off again converges in one run and leaves ray-node as it was before: the
module starts from the baseline and ends on it (``inventories/lab.py``, TLS off, the default).
"""

from __future__ import annotations

import json
import stat
import textwrap
from pathlib import Path

import pytest

from cloud import ssh as remote
from deploy.contract import settings
from deploy.ray import ray_node, tls_ca
from tests.e2e.labkit import (
    HOSTS,
    LAB,
    LAB_INVENTORY,
    Lab,
    changed_operations,
    deploy,
    inventory_variant,
    ray_ports,
    ray_status,
    rayrig,
    wait_for_alive,
    with_token,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: The lab cluster's settings as this machine sees them (where its token and CA live).
LAB_SETTINGS = settings.merge({"ray_cluster_name": LAB})
#: Where a test client's files lie on the first worker (its CA, certificate and key).
CLIENT_DIR = "$HOME/.e2e-tls-client"
KEY_MARK = "PRIVATE KEY"
#: Ray's TLS variables for a client whose files lie in CLIENT_DIR on the first worker.
CLIENT_TLS = (
    f"--mount type=bind,src={CLIENT_DIR},dst=/tls,readonly -e RAY_USE_TLS=1 -e RAY_TLS_SERVER_CERT=/tls/client.crt "
    "-e RAY_TLS_SERVER_KEY=/tls/client.key -e RAY_TLS_CA_CERT=/tls/ca.crt"
)
#: Speaks to the head's GCS port as a plain-text gRPC client would (HTTP/2's preface and an empty
#: SETTINGS frame) and prints what came back; then, with the client's files, tries a TLS handshake.
PROBE = textwrap.dedent(
    """
    import json, os, socket, ssl, sys
    host, port = sys.argv[1], int(sys.argv[2])
    result = {}
    with socket.create_connection((host, port), timeout=10) as plain:
        plain.sendall(b"PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n" + bytes.fromhex("000000040000000000"))
        got = b""
        try:
            while len(got) < 64:
                chunk = plain.recv(64)
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
    result["plain"] = got.hex()
    # A TLS ClientHello (made by Python's ssl, sent raw): the raw bytes that come back.
    hello_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    hello_context.check_hostname = False
    hello_context.verify_mode = ssl.CERT_NONE
    hello_context.set_alpn_protocols(["h2"])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    try:
        hello_context.wrap_bio(incoming, outgoing).do_handshake()
    except ssl.SSLWantReadError:
        pass
    with socket.create_connection((host, port), timeout=10) as raw:
        raw.sendall(outgoing.read())
        back = b""
        try:
            while len(back) < 16:
                chunk = raw.recv(4096)
                if not chunk:
                    break
                back += chunk
        except OSError:
            pass
    result["hello"] = back[:16].hex()
    if os.path.exists("/tls/ca.crt"):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations("/tls/ca.crt")
        context.load_cert_chain("/tls/client.crt", "/tls/client.key")
        context.set_alpn_protocols(["h2"])
        try:
            with socket.create_connection((host, port), timeout=10) as raw:
                with context.wrap_socket(raw, server_hostname=host) as secure:
                    cert = secure.getpeercert()
                    result["sans"] = [value for _kind, value in cert.get("subjectAltName", ())]
        except (OSError, ssl.SSLError) as error:
            result["handshake_error"] = str(error)
    print("RESULT", json.dumps(result))
    """
)

#: Every deploy's output in this module, searched for key text at the end.
OUTPUTS: list[str] = []


def run_deploy(inventory: str | Path, *extra: str) -> str:
    result = deploy(inventory, *extra)
    output = result.stdout + result.stderr
    OUTPUTS.append(output)
    assert result.returncode == 0, output[-6000:]
    return output


def config_hashes(lab: Lab) -> dict[str, str]:
    """Each host's ray-node configuration hash (its label)."""
    command = f"sudo docker inspect --format '{{{{index .Config.Labels \"{ray_node.HASH_LABEL}\"}}}}' ray-node"
    return {h["address"]: lab.sh(h, command).strip() for h in lab.hosts}


def container_env(lab: Lab, h: dict) -> list[str]:
    return json.loads(lab.sh(h, "sudo docker inspect --format '{{json .Config.Env}}' ray-node"))


@pytest.fixture(scope="module")
def before(lab, baseline):
    """ray-node's configuration before this module changes anything: the baseline's (TLS off)."""
    return config_hashes(lab)


@pytest.fixture(scope="module")
def tls_inventory(tmp_path_factory) -> Path:
    return inventory_variant(tmp_path_factory.mktemp("tls") / "lab_tls.py", {"ray_tls": "on"})


@pytest.fixture(scope="module")
def tls_on(lab, before, tls_inventory) -> str:
    """The deploy that turns TLS on (the checks run: the containers were replaced, so they run in full)."""
    return run_deploy(tls_inventory)


@pytest.fixture(scope="module")
def client_files(tls_on, tls_inventory, tmp_path_factory) -> Path:
    """A client certificate from ``rayrig tls client-cert``, its key and the CA's, in a folder of this machine."""
    out = tmp_path_factory.mktemp("client") / "files"
    result = rayrig("tls", "client-cert", tls_inventory, "e2e-client", "--out", out, timeout=120)
    OUTPUTS.append(result.stdout + result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "export RAY_USE_TLS=1" in result.stdout
    return out


def put_client(lab: Lab, cert: Path, key: Path, ca: Path) -> None:
    """Put a client's certificate, key and CA on the first worker (the key through stdin, 0600)."""
    target = lab.target(lab.workers[0])
    lab.sh(lab.workers[0], f"rm -rf {CLIENT_DIR} && mkdir -m 700 {CLIENT_DIR}")
    for source, name in ((cert, "client.crt"), (key, "client.key"), (ca, "ca.crt")):
        status, said = remote.run_with_input(
            target, f"umask 077 && cat > {CLIENT_DIR}/{name}", source.read_text(), timeout=60
        )
        assert status == 0, said


def tls_ray_status(lab: Lab, with_tls: bool, refused: bool = False) -> tuple[int, str]:
    """``ray status`` from a worker with the cluster's token; a client that should be ``refused`` gets 20 s
    (Ray retries until its own timeout, about 40 s, before it gives up), one that should get in 60 s."""
    env = f"{with_token()} {CLIENT_TLS if with_tls else ''}"
    return ray_status(lab, env, seconds=20 if refused else 60)


def probe_gcs(lab: Lab, with_client: bool) -> dict:
    """What the head's GCS port answers a plain-text HTTP/2 request (and a TLS handshake, ``with_client``)."""
    mount = f"--mount type=bind,src={CLIENT_DIR},dst=/tls,readonly " if with_client else ""
    command = (
        f"sudo docker run -i --rm --network=host {mount}{lab.state['image']} "
        f"python - {lab.head['address']} {ray_ports()['gcs']}"
    )
    status, output = remote.run_with_input(lab.target(lab.workers[0]), command, PROBE, timeout=120)
    assert status == 0, output[-3000:]
    results = [line[len("RESULT ") :] for line in output.splitlines() if line.startswith("RESULT ")]
    assert results, output[-3000:]
    return json.loads(results[-1])


def is_http2_frame(data: bytes) -> bool:
    """Whether ``data`` starts with an HTTP/2 frame a gRPC server sends first (SETTINGS, type 4)."""
    return len(data) >= 9 and data[3] == 0x04


def is_tls_record(data: bytes) -> bool:
    """Whether ``data`` starts with a TLS record: an alert (21) or a handshake (22), version 3.x."""
    return len(data) >= 5 and data[0] in (0x15, 0x16) and data[1] == 0x03


def test_tls_on_three_alive_nodes_and_the_checks_pass(lab, tls_on):
    assert "VERDICT: PASS" in tls_on, tls_on[-3000:]
    wait_for_alive(lab, HOSTS, addresses=[h["address"] for h in lab.hosts])
    for h in lab.hosts:
        env = container_env(lab, h)
        assert "RAY_USE_TLS=1" in env and f"RAY_TLS_SERVER_KEY={tls_ca.NODE_KEY}" in env, (h["address"], env)


def test_a_rerun_with_tls_on_changes_nothing(lab, tls_on, tls_inventory):
    ids = {h["address"]: lab.container_id(h) for h in lab.hosts}
    output = run_deploy(tls_inventory, "--data", "checks_enabled=False")
    assert sum(changed_operations(output).values()) == 0, changed_operations(output)
    assert {h["address"]: lab.container_id(h) for h in lab.hosts} == ids, "a ray-node container was replaced"


def test_a_client_with_the_token_but_no_certificate_is_refused(lab, tls_on):
    lab.sh(lab.workers[0], f"rm -rf {CLIENT_DIR}")
    status, said = tls_ray_status(lab, with_tls=False, refused=True)
    assert status != 0 and said.count("node_") < HOSTS, said[-2000:]


def test_a_client_with_a_certificate_of_another_ca_is_refused(lab, tls_on, tmp_path):
    other = settings.merge({"ray_cluster_name": "another-cluster", "ray_auth_token_file": str(tmp_path / "token")})
    tls_ca.ensure_ca(other)
    cert, key = tls_ca.issue_client_certificate(other, "intruder")
    put_client(lab, cert, key, tls_ca.tls_dir(other) / "ca.crt")
    try:
        status, said = tls_ray_status(lab, with_tls=True, refused=True)
        assert status != 0 and said.count("node_") < HOSTS, said[-2000:]
    finally:
        lab.sh(lab.workers[0], f"rm -rf {CLIENT_DIR}")


def test_a_client_with_a_certificate_from_rayrig_tls_client_cert_lists_the_nodes(lab, client_files):
    put_client(lab, client_files / "e2e-client.crt", client_files / "e2e-client.key", client_files / "ca.crt")
    try:
        status, said = tls_ray_status(lab, with_tls=True)
        assert status == 0 and said.count("node_") >= HOSTS, said[-2000:]
    finally:
        lab.sh(lab.workers[0], f"rm -rf {CLIENT_DIR}")


def test_the_heads_gcs_port_speaks_only_tls(lab, client_files):
    put_client(lab, client_files / "e2e-client.crt", client_files / "e2e-client.key", client_files / "ca.crt")
    try:
        answer = probe_gcs(lab, with_client=True)
    finally:
        lab.sh(lab.workers[0], f"rm -rf {CLIENT_DIR}")
    plain = bytes.fromhex(answer["plain"])
    print(f"the GCS answered plain-text HTTP/2 with: {answer['plain'] or 'nothing (it closed the connection)'}")
    assert not is_http2_frame(plain), f"the GCS answered plain-text HTTP/2: {answer['plain']}"
    assert plain == b"" or is_tls_record(plain), f"not a TLS record: {answer['plain']}"
    hello = bytes.fromhex(answer["hello"])
    assert is_tls_record(hello) and hello[0] == 0x16, f"a ClientHello got no TLS handshake back: {answer['hello']}"
    assert "handshake_error" not in answer, answer
    assert lab.head["address"] in answer["sans"], answer


def test_private_keys_are_0600_on_every_node_and_on_this_machine(lab, client_files):
    for h in lab.hosts:
        modes = lab.sh(
            h, f"sudo stat -c '%a %n' {tls_ca.NODE_TLS_DIR} {tls_ca.NODE_KEY} {tls_ca.NODE_CERT} {tls_ca.NODE_CA_CERT}"
        )
        expected = [
            "700",
            tls_ca.NODE_TLS_DIR,
            "600",
            tls_ca.NODE_KEY,
            "644",
            tls_ca.NODE_CERT,
            "644",
            tls_ca.NODE_CA_CERT,
        ]
        assert modes.split() == expected, (h["address"], modes)
    folder = tls_ca.tls_dir(LAB_SETTINGS)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    keys = sorted(folder.rglob("*.key")) + sorted(client_files.glob("*.key"))
    assert folder / "ca.key" in keys and len(keys) >= 1 + HOSTS + 2, keys  # the CA, each node, the client twice
    assert {str(k): oct(stat.S_IMODE(k.stat().st_mode)) for k in keys} == {str(k): "0o600" for k in keys}


def test_no_key_text_in_the_output_docker_inspect_or_the_journal(lab, tls_on):
    for output in OUTPUTS:
        assert KEY_MARK not in output
    for h in lab.hosts:
        for command in ("sudo docker inspect ray-node", "sudo journalctl -u ray-node --no-pager -n 5000"):
            assert KEY_MARK not in lab.sh(h, command), f"{command} on {h['address']} shows key text"


def test_tls_rotate_gives_every_node_a_new_ca_and_refuses_the_old_clients(lab, tls_inventory, client_files):
    folder = tls_ca.tls_dir(LAB_SETTINGS)
    old_ca = (folder / "ca.crt").read_bytes()
    ids = {h["address"]: lab.container_id(h) for h in lab.hosts}
    result = rayrig("tls", "rotate", tls_inventory, "--data", "checks_enabled=False", timeout=1800)
    OUTPUTS.append(result.stdout + result.stderr)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    new_ca = (folder / "ca.crt").read_bytes()
    assert new_ca != old_ca and not (folder / tls_ca.PREVIOUS).exists()
    for h in lab.hosts:
        assert lab.sh(h, f"sudo cat {tls_ca.NODE_CA_CERT}").encode() == new_ca, h["address"]
        assert lab.container_id(h) != ids[h["address"]], f"ray-node on {h['address']} was not replaced"
    wait_for_alive(lab, HOSTS, addresses=[h["address"] for h in lab.hosts])
    # A client certificate of the previous CA no longer gets in.
    put_client(lab, client_files / "e2e-client.crt", client_files / "e2e-client.key", client_files / "ca.crt")
    try:
        status, said = tls_ray_status(lab, with_tls=True, refused=True)
        assert status != 0 and said.count("node_") < HOSTS, said[-2000:]
    finally:
        lab.sh(lab.workers[0], f"rm -rf {CLIENT_DIR}")


def test_tls_off_converges_in_one_run_and_leaves_ray_node_as_before(lab, before, tls_on):
    run_deploy(LAB_INVENTORY, "--data", "checks_enabled=False")
    output = run_deploy(LAB_INVENTORY, "--data", "checks_enabled=False")
    assert sum(changed_operations(output).values()) == 0, changed_operations(output)
    assert config_hashes(lab) == before
    for h in lab.hosts:
        assert lab.sh(h, f"sudo test -e {tls_ca.NODE_TLS_DIR} && echo THERE || echo GONE").strip() == "GONE"
        assert not [v for v in container_env(lab, h) if v.startswith(("RAY_USE_TLS", "RAY_TLS_"))]
    wait_for_alive(lab, HOSTS, addresses=[h["address"] for h in lab.hosts])
    plain = bytes.fromhex(probe_gcs(lab, with_client=False)["plain"])
    assert is_http2_frame(plain), f"without TLS the probe should get HTTP/2's SETTINGS: {plain.hex()}"
    assert not [o for o in OUTPUTS if KEY_MARK in o]
