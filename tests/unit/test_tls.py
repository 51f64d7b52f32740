"""The cluster's CA and the node and client certificates it signs: what Ray and gRPC will check in them,
when a deploy reissues them, rotation, and that no key ever shows in a message."""

from __future__ import annotations

import ipaddress
import stat
from datetime import datetime, timedelta, timezone

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from deploy.ray import tls_ca


@pytest.fixture
def settings(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(tls_ca, "_issued", {})
    return {
        "ray_cluster_name": "sprint",
        "ray_auth_token_file": None,
        "ray_tls": "on",
        "ray_tls_renew_days": 30,
        "ray_tls_validity_days": 397,
        "ray_tls_ca_validity_days": 3650,
    }


def next_run(monkeypatch):
    """A later deploy: a new process, which remembers nothing it issued."""
    monkeypatch.setattr(tls_ca, "_issued", {})


def cert_of(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


SANS = ["10.0.0.5", "gpu-01", "127.0.0.1", "localhost"]


def test_the_folder_is_beside_the_token(settings, tmp_path):
    assert tls_ca.tls_dir(settings) == tmp_path / "state" / "clusters" / "sprint" / "tls"
    settings["ray_auth_token_file"] = str(tmp_path / "keep" / "token")
    assert tls_ca.tls_dir(settings) == tmp_path / "keep" / "tls"


def test_node_sans_keep_every_address_once_then_the_local_ones(settings):
    addresses = ["10.0.0.5", "gpu-01.example.org", "10.0.0.5", "GPU-01.example.org", "10.0.0.1", "localhost"]
    assert tls_ca.node_sans(settings, "gpu-01", addresses) == [
        "10.0.0.5",
        "gpu-01.example.org",
        "10.0.0.1",
        "localhost",
        "127.0.0.1",
    ]


def test_node_sans_leave_out_what_no_one_can_connect_to_and_clean_ipv6(settings):
    sans = tls_ca.node_sans(settings, "@local", ["@local", "@fake/head", "", "[fd00::5]", "fe80::1%eth0", "gpu-01."])
    assert sans == ["fd00::5", "fe80::1", "gpu-01", "127.0.0.1", "localhost"]


def test_ips_become_ip_sans_and_names_dns_sans(settings):
    node = tls_ca.ensure_node_certificate(
        settings, "gpu-01", ["10.0.0.5", "fd00::5", "gpu-01", "127.0.0.1", "localhost"]
    )
    san = cert_of(node.cert_pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.0.0.5"),
        ipaddress.ip_address("fd00::5"),
        ipaddress.ip_address("127.0.0.1"),
    ]
    assert san.get_values_for_type(x509.DNSName) == ["gpu-01", "localhost"]


def test_the_ca_may_sign_end_entity_certificates_only(settings):
    tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    ca = cert_of((tls_ca.tls_dir(settings) / "ca.crt").read_bytes())
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    assert not usage.value.digital_signature and not usage.value.key_encipherment
    ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert ski == x509.SubjectKeyIdentifier.from_public_key(ca.public_key())
    ca.verify_directly_issued_by(ca)  # self-signed
    assert "sprint" in ca.subject.rfc4514_string()
    lifetime = ca.not_valid_after_utc - datetime.now(timezone.utc)
    assert timedelta(days=3649) < lifetime <= timedelta(days=3650)


def test_a_node_certificate_serves_as_server_and_client_and_the_ca_verifies_it(settings):
    node = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    cert, ca = cert_of(node.cert_pem), cert_of(node.ca_pem)
    cert.verify_directly_issued_by(ca)
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and not constraints.value.ca
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature
    assert not usage.value.key_cert_sign and not usage.value.key_encipherment  # an EC key signs, never encrypts
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ca_ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ca_ski.digest
    key = serialization.load_pem_private_key(node.key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    assert key.public_key() == cert.public_key()


def test_validity_starts_a_few_minutes_back_and_lasts_ray_tls_validity_days(settings):
    settings["ray_tls_validity_days"] = 90
    cert = cert_of(tls_ca.ensure_node_certificate(settings, "gpu-01", SANS).cert_pem)
    now = datetime.now(timezone.utc)
    assert now - timedelta(minutes=6) < cert.not_valid_before_utc < now - timedelta(minutes=4)
    assert now + timedelta(days=89) < cert.not_valid_after_utc <= now + timedelta(days=90)


def test_another_ca_does_not_verify_a_node_certificate(settings, tmp_path, monkeypatch):
    node = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    monkeypatch.setenv("RAYRIG_STATE_DIR", str(tmp_path / "other"))
    other = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    assert not tls_ca.signed_by(cert_of(node.cert_pem), cert_of(other.ca_pem))
    with pytest.raises(Exception):  # noqa: B017 -- cryptography raises ValueError or InvalidSignature
        cert_of(node.cert_pem).verify_directly_issued_by(cert_of(other.ca_pem))


def test_keys_are_0600_folders_0700_and_no_temporary_file_is_left(settings):
    tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    folder = tls_ca.tls_dir(settings)
    cert, key = tls_ca.node_files(settings, "gpu-01")
    assert mode(folder) == 0o700 and mode(folder / "nodes") == 0o700
    assert mode(folder / "ca.key") == 0o600 and mode(key) == 0o600
    assert mode(folder / "ca.crt") == 0o644 and mode(cert) == 0o644
    names = sorted(p.name for p in folder.rglob("*"))
    assert names == [".lock", "ca.crt", "ca.key", "gpu-01.crt", "gpu-01.key", "nodes"]  # the lock of concurrent deploys


def test_a_ca_key_others_can_read_is_made_0600(settings):
    tls_ca.ensure_ca(settings)
    key = tls_ca.tls_dir(settings) / "ca.key"
    key.chmod(0o644)
    tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    assert mode(key) == 0o600


def test_a_host_name_with_a_slash_gets_a_file_of_its_own(settings):
    tls_ca.ensure_node_certificate(settings, "@fake/head", ["127.0.0.1", "localhost"])
    assert tls_ca.node_files(settings, "@fake/head")[0].name == "@fake%2Fhead.crt"
    assert (tls_ca.tls_dir(settings) / "nodes" / "@fake%2Fhead.key").exists()


def test_the_same_run_gets_the_same_answer_and_a_later_run_reuses_the_certificate(settings, monkeypatch):
    first = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    assert first.issued and first.reason == "no certificate yet"
    assert tls_ca.ensure_node_certificate(settings, "gpu-01", SANS) == first  # the deploy asks again for the same host
    next_run(monkeypatch)
    later = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    assert not later.issued and later.reason == ""
    assert (later.ca_pem, later.cert_pem, later.key_pem) == (first.ca_pem, first.cert_pem, first.key_pem)
    assert later.digest == first.digest


def test_a_certificate_expiring_within_the_renew_window_is_reissued(settings, monkeypatch):
    settings["ray_tls_validity_days"] = 20  # 20 days left < ray_tls_renew_days = 30
    old = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    expires = cert_of(old.cert_pem).not_valid_after_utc
    next_run(monkeypatch)
    settings["ray_tls_validity_days"] = 397
    new = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    assert new.issued and new.reason == f"expires {expires:%Y-%m-%d}, within ray_tls_renew_days = 30"
    assert new.key_pem != old.key_pem and new.ca_pem == old.ca_pem
    assert cert_of(new.cert_pem).not_valid_after_utc > datetime.now(timezone.utc) + timedelta(days=396)


def test_a_certificate_expiring_after_the_renew_window_is_kept(settings, monkeypatch):
    settings["ray_tls_validity_days"] = 31
    old = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    next_run(monkeypatch)
    assert tls_ca.ensure_node_certificate(settings, "gpu-01", SANS).cert_pem == old.cert_pem
    settings["ray_tls_renew_days"] = 31  # now it is within the window
    next_run(monkeypatch)
    assert tls_ca.ensure_node_certificate(settings, "gpu-01", SANS).issued


def test_a_changed_address_gets_a_new_certificate_that_names_it(settings, monkeypatch):
    tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    next_run(monkeypatch)
    moved = ["10.0.0.6", "gpu-01", "127.0.0.1", "localhost"]
    node = tls_ca.ensure_node_certificate(settings, "gpu-01", moved)
    assert node.issued and node.reason == "address 10.0.0.6 added, address 10.0.0.5 removed"
    assert tls_ca.certificate_sans(cert_of(node.cert_pem)) == set(moved)
    next_run(monkeypatch)
    assert not tls_ca.ensure_node_certificate(settings, "gpu-01", list(reversed(moved))).issued  # order does not matter


def test_a_certificate_of_another_ca_is_reissued(settings, monkeypatch):
    old = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    for name in ("ca.crt", "ca.key"):
        (tls_ca.tls_dir(settings) / name).unlink()
    next_run(monkeypatch)
    new = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    assert new.issued and new.reason == "signed by another CA"
    assert new.ca_pem != old.ca_pem
    cert_of(new.cert_pem).verify_directly_issued_by(cert_of(new.ca_pem))


@pytest.mark.parametrize("damage", ["cert", "key", "other key"])
def test_an_unusable_node_certificate_is_reissued(settings, monkeypatch, damage):
    tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    tls_ca.ensure_node_certificate(settings, "gpu-02", SANS)
    cert, key = tls_ca.node_files(settings, "gpu-01")
    if damage == "cert":
        cert.write_text("garbage")
    elif damage == "key":
        key.unlink()
    else:
        key.write_bytes(tls_ca.node_files(settings, "gpu-02")[1].read_bytes())
    next_run(monkeypatch)
    node = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    expected = {
        "cert": "the stored certificate or key is unreadable",
        "key": "no certificate yet",
        "other key": "the stored key is not the certificate's",
    }
    assert node.issued and node.reason == expected[damage]


@pytest.mark.parametrize("damage", ["no key", "no cert", "bad cert", "bad key", "other key"])
def test_an_unusable_ca_is_an_error_naming_the_file_and_what_to_do(settings, tmp_path, damage):
    tls_ca.ensure_ca(settings)
    folder = tls_ca.tls_dir(settings)
    if damage == "no key":
        (folder / "ca.key").unlink()
    elif damage == "no cert":
        (folder / "ca.crt").unlink()
    elif damage == "bad cert":
        (folder / "ca.crt").write_text("garbage")
    elif damage == "bad key":
        (folder / "ca.key").write_text("garbage")
    else:
        other = tmp_path / "other"
        tls_ca.ensure_ca({**settings, "ray_auth_token_file": str(other / "token")})
        (folder / "ca.key").write_bytes((other / "tls" / "ca.key").read_bytes())
    with pytest.raises(tls_ca.TLSError) as raised:
        tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    message = str(raised.value)
    file = "ca.crt" if damage in ("no cert", "bad cert") else "ca.key"
    assert message.startswith(str(folder / file))
    assert "`rayrig tls rotate INVENTORY`" in message and f"put the cluster's CA back in {folder}" in message
    assert "PRIVATE KEY" not in message
    assert not (folder / "nodes").exists()  # nothing was issued


def test_no_key_material_in_the_repr_of_a_node_certificate(settings):
    node = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    assert b"PRIVATE KEY" in node.key_pem
    for text in (repr(node), str(node), f"{node}", repr([node])):
        assert "PRIVATE KEY" not in text and node.key_pem.decode().splitlines()[1] not in text
        assert "issued=True" in text and node.digest in text


def test_the_digest_changes_with_either_certificate():
    digest = tls_ca.tls_digest(b"ca", b"cert")
    assert len(digest) == 16 and int(digest, 16) >= 0
    assert len({digest, tls_ca.tls_digest(b"ca2", b"cert"), tls_ca.tls_digest(b"ca", b"cert2")}) == 3
    assert tls_ca.tls_digest(b"ca", b"cert") == digest


def test_container_env_names_the_node_files_only_when_on(settings):
    assert tls_ca.container_env({**settings, "ray_tls": "off"}) == {}
    assert tls_ca.container_env(settings) == {
        "RAY_USE_TLS": "1",
        "RAY_TLS_SERVER_CERT": "/etc/rayrig/ray/tls/node.crt",
        "RAY_TLS_SERVER_KEY": "/etc/rayrig/ray/tls/node.key",
        "RAY_TLS_CA_CERT": "/etc/rayrig/ray/tls/ca.crt",
    }


def test_a_client_certificate_is_signed_by_the_cluster_ca(settings):
    node = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    cert_path, key_path = tls_ca.issue_client_certificate(settings, "alice-laptop")
    assert (cert_path, key_path) == tls_ca.client_files(settings, "alice-laptop")
    assert cert_path.parent == tls_ca.tls_dir(settings) / "clients"
    assert mode(key_path) == 0o600 and mode(cert_path.parent) == 0o700
    cert = cert_of(cert_path.read_bytes())
    cert.verify_directly_issued_by(cert_of(node.ca_pem))
    assert "CN=alice-laptop" in cert.subject.rfc4514_string()
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    # both: a driver serves gRPC too (the GCS and raylets call into it); its names keep it to the loopback
    assert ExtendedKeyUsageOID.CLIENT_AUTH in eku and ExtendedKeyUsageOID.SERVER_AUTH in eku
    assert tls_ca.certificate_sans(cert) == {"127.0.0.1", "localhost"}
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    assert key.public_key() == cert.public_key()


@pytest.mark.parametrize("name", ["", "a/b", "..", "x" * 65, "a b", "-"[:0] + "é"])
def test_a_bad_client_name_is_refused_naming_it(settings, name):
    tls_ca.ensure_ca(settings)
    with pytest.raises(tls_ca.TLSError) as raised:
        tls_ca.issue_client_certificate(settings, name)
    assert f"client name {name!r}: expected 1-64 letters, digits, '.', '_' or '-'" in str(raised.value)
    assert not (tls_ca.tls_dir(settings) / "clients").exists()


def test_a_client_certificate_needs_the_cluster_ca(settings):
    with pytest.raises(tls_ca.TLSError) as raised:
        tls_ca.issue_client_certificate(settings, "alice")
    ca = tls_ca.tls_dir(settings) / "ca.crt"
    assert str(raised.value) == f'{ca}: the cluster has no CA yet; deploy with ray_tls = "on" first'
    assert not ca.exists()


def test_a_rotation_makes_way_for_a_new_ca_and_keeps_the_previous_until_it_ends(settings, monkeypatch):
    old = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    tls_ca.issue_client_certificate(settings, "alice")
    folder = tls_ca.tls_dir(settings)
    rotation = tls_ca.begin_rotation(settings)
    assert rotation == tls_ca.Rotation(folder, folder / "previous", resumed=False)
    assert mode(folder / "previous") == 0o700
    assert (folder / "previous" / "ca.crt").read_bytes() == old.ca_pem
    assert (folder / "previous" / "nodes" / "gpu-01.key").read_bytes() == old.key_pem
    assert (folder / "previous" / "clients" / "alice.key").exists()
    assert not (folder / "ca.crt").exists() and not (folder / "nodes").exists() and not (folder / "clients").exists()

    monkeypatch.setenv(tls_ca.ROTATION_ENV, "1")  # the deploy that rayrig tls rotate runs
    assert tls_ca.rotating()
    new = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    assert new.issued and new.ca_pem != old.ca_pem and new.digest != old.digest
    assert (folder / "previous" / "ca.key").exists()  # until the rotation ends
    tls_ca.end_rotation(rotation)
    assert not (folder / "previous").exists()
    assert (folder / "ca.crt").read_bytes() == new.ca_pem


def test_a_rotation_cut_short_resumes_with_the_ca_it_made(settings, monkeypatch):
    old = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    tls_ca.begin_rotation(settings)
    new = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)  # the deploy failed after this
    again = tls_ca.begin_rotation(settings)
    assert again.resumed and again.previous == tls_ca.tls_dir(settings) / "previous"
    next_run(monkeypatch)
    finish = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    assert not finish.issued and finish.ca_pem == new.ca_pem  # nodes already on it are not restarted
    assert (again.previous / "ca.crt").read_bytes() == old.ca_pem


def test_a_rotation_that_failed_before_a_new_ca_was_made_keeps_the_previous_one(settings):
    old = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    tls_ca.begin_rotation(settings)
    again = tls_ca.begin_rotation(settings)  # the first deploy made nothing
    assert not again.resumed and (again.previous / "ca.crt").read_bytes() == old.ca_pem


def test_undoing_a_rotation_after_a_dry_run_puts_the_previous_ca_back(settings, monkeypatch):
    old = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    rotation = tls_ca.begin_rotation(settings)
    tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)  # a dry run plans with a new CA
    tls_ca.undo_rotation(rotation)
    folder = tls_ca.tls_dir(settings)
    assert (folder / "ca.crt").read_bytes() == old.ca_pem and not (folder / "previous").exists()
    next_run(monkeypatch)
    assert tls_ca.ensure_node_certificate(settings, "gpu-01", SANS).key_pem == old.key_pem


def test_a_rotation_without_a_ca_here_moves_nothing(settings):
    rotation = tls_ca.begin_rotation(settings)
    assert rotation.previous is None and not rotation.resumed
    tls_ca.end_rotation(rotation)
    tls_ca.undo_rotation(rotation)
    assert not (tls_ca.tls_dir(settings) / "ca.crt").exists()


def test_a_rotation_gives_a_cluster_whose_ca_key_is_lost_a_new_ca(settings, monkeypatch):
    old = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    folder = tls_ca.tls_dir(settings)
    (folder / "ca.key").unlink()
    with pytest.raises(tls_ca.TLSError, match="ca.key: missing"):
        tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    rotation = tls_ca.begin_rotation(settings)
    assert (rotation.previous / "ca.crt").read_bytes() == old.ca_pem
    next_run(monkeypatch)
    new = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    assert new.issued and new.ca_pem != old.ca_pem


def test_a_first_tls_deploy_or_one_with_the_clusters_ca_goes_on(settings, monkeypatch):
    tls_ca.check_cluster_ca(settings, "@fake/head", None)  # the head has no CA yet: TLS was off, or first deploy
    node = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    tls_ca.check_cluster_ca(settings, "@fake/head", node.ca_pem)


def test_a_deploy_without_the_clusters_ca_is_stopped_unless_it_rotates(settings, monkeypatch):
    node = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    folder = tls_ca.tls_dir(settings)
    for name in ("ca.crt", "ca.key"):
        (folder / name).unlink()  # a fresh clone: the cluster's CA is on another machine
    with pytest.raises(tls_ca.TLSError) as raised:
        tls_ca.check_cluster_ca(settings, "@fake/head", node.ca_pem)
    assert str(raised.value) == (
        f"host @fake/head: the cluster runs TLS with a CA (fingerprint {tls_ca.fingerprint(node.ca_pem)}, "
        f"/etc/rayrig/ray/tls/ca.crt) and there is no local CA ({folder / 'ca.crt'}); its key never leaves the "
        "machine that made it. Deploying would give the cluster a new CA, replace every node's ray-node and lock "
        "out every client certificate, so nothing was changed on any host. "
        f"Copy {folder} from the machine that deployed the cluster, "
        "or run `rayrig tls rotate INVENTORY` to give the cluster a new CA on purpose."
    )
    monkeypatch.setenv(tls_ca.ROTATION_ENV, "1")
    tls_ca.check_cluster_ca(settings, "@fake/head", node.ca_pem)


def test_a_deploy_with_another_ca_is_stopped_unless_it_rotates(settings, monkeypatch):
    old = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)
    tls_ca.begin_rotation(settings)
    new = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS)  # a rotation cut short before the head
    with pytest.raises(tls_ca.TLSError) as raised:
        tls_ca.check_cluster_ca(settings, "@fake/head", old.ca_pem)
    message = str(raised.value)
    assert message.startswith(
        f"host @fake/head: the local CA {tls_ca.tls_dir(settings) / 'ca.crt'} "
        f"(fingerprint {tls_ca.fingerprint(new.ca_pem)}) is not the cluster's "
        f"(/etc/rayrig/ray/tls/ca.crt on the head has fingerprint {tls_ca.fingerprint(old.ca_pem)})"
    )
    assert "(a rotation cut short is finished the same way)" in message
    monkeypatch.setenv(tls_ca.ROTATION_ENV, "1")
    tls_ca.check_cluster_ca(settings, "@fake/head", old.ca_pem)


def test_the_fingerprint_is_the_certificates_not_its_text(settings):
    pem = tls_ca.ensure_node_certificate(settings, "gpu-01", SANS).ca_pem
    assert tls_ca.fingerprint(pem) == tls_ca.fingerprint(pem + b"\n") != tls_ca.fingerprint(b"garbage")
    assert len(tls_ca.fingerprint(pem)) == 16
