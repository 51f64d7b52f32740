"""Ray TLS: one certificate authority per cluster, a certificate per node, mutual TLS on every Ray channel.

With ``ray_tls = "on"`` every Ray process and client speaks gRPC over TLS and presents a certificate
signed by the cluster's CA (``RAY_USE_TLS=1``, :func:`container_env`). This module keeps the files on
the operator's machine; the deploy installs a node's three files (:data:`NODE_CA_CERT`,
:data:`NODE_CERT`, :data:`NODE_KEY`) and mounts them into ray-node.

- The operator's folder, :func:`tls_dir` (0700), beside the cluster's token: ``ca.crt`` and
  ``ca.key`` (0600; the CA key never leaves this machine), ``nodes/<host>.crt|.key`` and
  ``clients/<NAME>.crt|.key``. Every file appears whole or not at all (temp file, then ``os.replace``).
- Keys are EC P-256 (ECDSA): as strong as RSA 3072, a fraction of its size, and much cheaper to sign
  with, which matters because every Ray channel (GCS, raylets, object transfers, core workers) does a
  handshake of its own; every gRPC and OpenSSL build Ray links speaks it. Private keys are PKCS#8 PEM.
- The CA (``ray_tls_ca_validity_days``) may sign end-entity certificates only (path length 0). Node and
  client certificates (``ray_tls_validity_days``) serve both as server and as client, as Ray needs:
  a node presents its own certificate when it calls another one, and a driver is called back by the
  GCS and the raylets with the one certificate Ray lets it present (with ``clientAuth`` alone those
  handshakes fail: docs/explanation/threat-model.md). A client certificate names only the loopback,
  which Ray checks against the address it dials, so it cannot pass for a node.
- A deploy reuses a node's certificate until it is missing, signed by another CA, names other addresses
  (:func:`node_sans`) or expires within ``ray_tls_renew_days`` (:func:`ensure_node_certificate`).
- ``rayrig tls rotate`` replaces the CA and every certificate (:func:`begin_rotation`): the next deploy,
  run with :data:`ROTATION_ENV`, issues them, and the nodes' containers are replaced like for a new token.

No key material is ever printed: :class:`NodeCertificate`'s repr leaves the key out and errors name files.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import os
import re
import secrets
import shutil
import threading
import urllib.parse
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from deploy.ray import auth

NODE_TLS_DIR = "/etc/rayrig/ray/tls"
NODE_CA_CERT = f"{NODE_TLS_DIR}/ca.crt"
NODE_CERT = f"{NODE_TLS_DIR}/node.crt"
NODE_KEY = f"{NODE_TLS_DIR}/node.key"
#: The ray-node container's label that holds the :func:`tls_digest` of the CA and node certificates it runs with.
TLS_LABEL = "rayrig.tls-digest"
#: Set to 1 by ``rayrig tls rotate``: the local CA is the cluster's next one, and every node gets a new certificate.
ROTATION_ENV = "RAYRIG_TLS_ROTATION"

#: How far back a new certificate's validity starts, for nodes whose clock is behind the operator's.
CLOCK_SKEW = timedelta(minutes=5)
#: Names every node's certificate carries: Ray's processes reach their own node through them.
LOCAL_SANS = ("127.0.0.1", "localhost")
CLIENT_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DNS_NAME = re.compile(rf"(?=.{{1,253}}\Z){_LABEL}(\.{_LABEL})*\Z")
PREVIOUS = "previous"
_LOCK = threading.RLock()  # pyinfra's greenlets (and threads) of one deploy; the file lock covers other processes


class TLSError(Exception):
    """A CA or certificate file is unusable, or a name is not valid; the message names the file and what to do."""


@dataclass(frozen=True)
class NodeCertificate:
    """What a node installs: the CA's certificate, its own certificate and key (PEM), and whether
    this call issued the certificate (``reason`` says why, for the deploy's operation name)."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes = field(repr=False)
    issued: bool
    reason: str

    def __repr__(self) -> str:
        return f"NodeCertificate(issued={self.issued!r}, reason={self.reason!r}, digest={self.digest!r})"

    @property
    def digest(self) -> str:
        """:func:`tls_digest` of the CA and node certificates (nothing about the key)."""
        return tls_digest(self.ca_pem, self.cert_pem)


@dataclass(frozen=True)
class Rotation:
    """A new CA for a running cluster, on its way to every node.

    ``folder`` is :func:`tls_dir`; ``previous`` holds the CA and certificates the cluster ran before
    (None when there was no CA here); ``resumed`` says a rotation cut short made the CA to finish with.
    """

    folder: Path
    previous: Path | None
    resumed: bool


# --- Where the files are --------------------------------------------------------------------------


def tls_dir(settings: dict[str, Any]) -> Path:
    """The operator's TLS folder of the cluster, beside its token file."""
    return auth.token_path(settings).parent / "tls"


def _file_stem(name: str) -> str:
    """A file name for an inventory host's name (pyinfra's ``@docker/x`` holds a slash).

    >>> _file_stem("@fake/head")
    '@fake%2Fhead'
    """
    return urllib.parse.quote(name, safe="@._-:[]")


def node_files(settings: dict[str, Any], host_name: str) -> tuple[Path, Path]:
    """(certificate, key) of a node in the operator's folder."""
    nodes = tls_dir(settings) / "nodes"
    stem = _file_stem(host_name)
    return nodes / f"{stem}.crt", nodes / f"{stem}.key"


def container_env(settings: dict[str, Any]) -> dict[str, str]:
    """What the ray-node container's environment needs for TLS ({} when ``ray_tls`` is off)."""
    if settings["ray_tls"] != "on":
        return {}
    return {
        "RAY_USE_TLS": "1",
        "RAY_TLS_SERVER_CERT": NODE_CERT,
        "RAY_TLS_SERVER_KEY": NODE_KEY,
        "RAY_TLS_CA_CERT": NODE_CA_CERT,
    }


def rotating() -> bool:
    """Whether this run deploys a new CA on purpose (``rayrig tls rotate``)."""
    return os.environ.get(ROTATION_ENV) == "1"


def tls_digest(ca_pem: bytes, cert_pem: bytes) -> str:
    """A digest of the CA and node certificates a container runs with: it changes with either.

    >>> len(tls_digest(b"ca", b"cert"))
    16
    """
    return hashlib.sha256(b"rayrig-tls\0" + ca_pem + b"\0" + cert_pem).hexdigest()[:16]


def fingerprint(cert_pem: bytes) -> str:
    """The SHA-256 fingerprint of a PEM certificate, 16 hex digits (of the bytes themselves when unreadable)."""
    try:
        data = x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)
    except ValueError:
        data = cert_pem
    return hashlib.sha256(data).hexdigest()[:16]


def check_cluster_ca(settings: dict[str, Any], head_name: str, head_ca_pem: bytes | None) -> None:
    """Stop a deploy that would give a running cluster another CA behind its back (``TLSError``).

    ``head_ca_pem`` is the head's :data:`NODE_CA_CERT` (None when it has none: TLS was off, or this is
    the first deploy). The CA's key never leaves the machine that made it, so a deploy from a machine
    without the cluster's CA (another laptop, a fresh clone) cannot fetch it the way it fetches the token:
    it would make a new CA, replace every node and lock out every client certificate. Only ``rayrig tls
    rotate`` (:func:`rotating`) gives a running cluster a new CA.

        check_cluster_ca(settings, head.name, ca_on_head)  # before ensure_node_certificate, once per run
    """
    if head_ca_pem is None or rotating():
        return
    folder = tls_dir(settings)
    local = folder / "ca.crt"
    what = (
        "Deploying would give the cluster a new CA, replace every node's ray-node and lock out every client "
        "certificate, so nothing was changed on any host."
    )
    rotate = "run `rayrig tls rotate INVENTORY` to give the cluster a new CA on purpose"
    if not local.exists():
        raise TLSError(
            f"host {head_name}: the cluster runs TLS with a CA (fingerprint {fingerprint(head_ca_pem)}, "
            f"{NODE_CA_CERT}) and there is no local CA ({local}); its key never leaves the machine that made it. "
            f"{what} Copy {folder} from the machine that deployed the cluster, or {rotate}."
        )
    mine = fingerprint(local.read_bytes())
    if mine != fingerprint(head_ca_pem):
        raise TLSError(
            f"host {head_name}: the local CA {local} (fingerprint {mine}) is not the cluster's "
            f"({NODE_CA_CERT} on the head has fingerprint {fingerprint(head_ca_pem)}). {what} Put the cluster's "
            f"CA back in {folder}, or {rotate} (a rotation cut short is finished the same way)."
        )


# --- Subject alternative names --------------------------------------------------------------------


def _san_key(entry: str) -> str:
    """An entry as a certificate holds it: an IP address in its canonical form, a name in lower case."""
    try:
        return str(ipaddress.ip_address(entry))
    except ValueError:
        return entry.lower().rstrip(".")


def _clean(entry: str) -> str | None:
    """An address as a SAN entry: brackets and an IPv6 zone dropped; None for what is neither an IP
    address nor a DNS name (pyinfra's ``@local``): nobody connects to it."""
    entry = entry.strip().removeprefix("[").removesuffix("]")
    if "%" in entry and ":" in entry:
        entry = entry.split("%", 1)[0]
    try:
        return str(ipaddress.ip_address(entry))
    except ValueError:
        name = entry.rstrip(".")
        return name if _DNS_NAME.match(name) else None


def node_sans(settings: dict[str, Any], host_name: str, addresses: Iterable[str]) -> list[str]:
    """The SAN entries of a node's certificate: ``addresses`` (its node IP, SSH host name, inventory name,
    the head address the workers use), then 127.0.0.1 and localhost; deduplicated, in that order.

    >>> node_sans({}, "gpu-01", ["10.0.0.5", "gpu-01", "10.0.0.5", "@local"])
    ['10.0.0.5', 'gpu-01', '127.0.0.1', 'localhost']
    """
    sans: dict[str, str] = {}
    for entry in [*addresses, *LOCAL_SANS]:
        cleaned = _clean(str(entry)) if entry else None
        if cleaned:
            sans.setdefault(_san_key(cleaned), cleaned)
    return list(sans.values())


def _general_names(sans: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for entry in sans:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(entry)))
        except ValueError:
            names.append(x509.DNSName(entry))
    return names


def certificate_sans(cert: x509.Certificate) -> set[str]:
    """The SAN entries of ``cert`` (as :func:`_san_key` spells them)."""
    try:
        extension = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    ips = [str(ip) for ip in extension.get_values_for_type(x509.IPAddress)]
    return {_san_key(entry) for entry in [*ips, *extension.get_values_for_type(x509.DNSName)]}


# --- Files ----------------------------------------------------------------------------------------


def _private_dir(path: Path) -> Path:
    """``path`` made (with its parents) and kept 0700."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def write_file(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` whole or not at all: a private temporary file beside it, then ``os.replace``."""
    _private_dir(path.parent)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold the folder's lock: one deploy (of its greenlets, and of the processes) writes at a time."""
    with _LOCK:
        _private_dir(folder)
        fd = os.open(folder / ".lock", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


# --- The CA ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CA:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey = field(repr=False)
    pem: bytes


def _ca_hint(folder: Path) -> str:
    return (
        f"put the cluster's CA back in {folder} (ca.crt and ca.key), or run `rayrig tls rotate INVENTORY` "
        "to give the cluster a new CA and new certificates"
    )


def _load_ca(folder: Path) -> _CA | None:
    """The CA stored in ``folder``; None when there is none; ``TLSError`` when it is unusable."""
    cert_path, key_path = folder / "ca.crt", folder / "ca.key"
    if not cert_path.exists() and not key_path.exists():
        return None
    for path in (cert_path, key_path):
        if not path.exists():
            raise TLSError(f"{path}: missing, while its pair in {folder} is there; {_ca_hint(folder)}")
    if key_path.stat().st_mode & 0o077:
        key_path.chmod(0o600)
    pem = cert_path.read_bytes()
    try:
        cert = x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise TLSError(f"{cert_path}: not a PEM certificate; {_ca_hint(folder)}") from None
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (ValueError, TypeError):
        raise TLSError(f"{key_path}: not an unencrypted PEM private key; {_ca_hint(folder)}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        raise TLSError(f"{key_path}: not the key of the CA certificate {cert_path}; {_ca_hint(folder)}")
    return _CA(cert, key, pem)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _validity(builder: x509.CertificateBuilder, days: int) -> x509.CertificateBuilder:
    now = datetime.now(timezone.utc)
    return builder.not_valid_before(now - CLOCK_SKEW).not_valid_after(now + timedelta(days=days))


def _create_ca(settings: dict[str, Any], folder: Path) -> _CA:
    key = _new_key()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "rayrig"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"rayrig CA {settings['ray_cluster_name']}"[:64]),
        ]
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    cert = _validity(builder, settings["ray_tls_ca_validity_days"]).sign(key, hashes.SHA256())
    pem = _cert_pem(cert)
    write_file(folder / "ca.key", _key_pem(key))  # the key first: a ca.crt alone would be an error
    write_file(folder / "ca.crt", pem, 0o644)
    return _CA(cert, key, pem)


def _key_usage(digital_signature: bool = False, key_cert_sign: bool = False, crl_sign: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,  # EC keys sign (ECDHE); they never encrypt a session key as RSA's do
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def ensure_ca(settings: dict[str, Any]) -> x509.Certificate:
    """The cluster's CA certificate, the CA created (key 0600, folder 0700) when there is none yet."""
    folder = tls_dir(settings)
    with _locked(folder):
        return (_load_ca(folder) or _create_ca(settings, folder)).cert


# --- Node and client certificates -----------------------------------------------------------------


def _issue(
    ca: _CA, common_name: str, sans: list[str], days: int
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A new key and an end-entity certificate for it, signed by ``ca``."""
    key = _new_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64] or "node")]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.SubjectAlternativeName(_general_names(sans)), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    return _validity(builder, days).sign(ca.key, hashes.SHA256()), key


def signed_by(cert: x509.Certificate, ca_cert: x509.Certificate) -> bool:
    """Whether ``cert`` was issued by ``ca_cert`` (its name and its signature)."""
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def renewal_reason(cert: x509.Certificate, ca_cert: x509.Certificate, sans: list[str], renew_days: int) -> str | None:
    """Why a stored node certificate must be reissued, as a short phrase; None when it can be kept."""
    if not signed_by(cert, ca_cert):
        return "signed by another CA"
    have, want = certificate_sans(cert), {_san_key(entry) for entry in sans}
    if have != want:
        changes = [f"address {a} added" for a in sans if _san_key(a) not in have]
        changes += [f"address {a} removed" for a in sorted(have - want)]
        return ", ".join(changes)
    expires = cert.not_valid_after_utc
    if expires - datetime.now(timezone.utc) < timedelta(days=renew_days):
        return f"expires {expires:%Y-%m-%d}, within ray_tls_renew_days = {renew_days}"
    return None


def _stored(cert_path: Path, key_path: Path) -> tuple[x509.Certificate | None, bytes, bytes, str]:
    """The stored certificate, the PEM of its two files, and why they cannot be used ("" when they can)."""
    if not cert_path.exists() or not key_path.exists():
        return None, b"", b"", "no certificate yet"
    cert_pem, key_pem = cert_path.read_bytes(), key_path.read_bytes()
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return None, b"", b"", "the stored certificate or key is unreadable"
    if key.public_key() != cert.public_key():
        return None, b"", b"", "the stored key is not the certificate's"
    return cert, cert_pem, key_pem, ""


_issued: dict[tuple[Path, tuple[str, ...]], NodeCertificate] = {}  # what this process issued, per node and SANs


def ensure_node_certificate(settings: dict[str, Any], host_name: str, sans: list[str]) -> NodeCertificate:
    """The node's CA certificate, certificate and key, reused or issued (the CA created when missing).

    The stored certificate is reissued with a new key when it is missing, signed by another CA, names
    other addresses than ``sans``, or expires within ``ray_tls_renew_days``. Calling it again in the
    same run returns the same answer (``issued`` included).

        node = ensure_node_certificate(settings, "gpu-01", node_sans(settings, "gpu-01", ["10.0.0.5"]))
    """
    folder = tls_dir(settings)
    cert_path, key_path = node_files(settings, host_name)
    with _locked(folder):
        ca = _load_ca(folder) or _create_ca(settings, folder)
        cert, cert_pem, key_pem, reason = _stored(cert_path, key_path)
        if cert is not None:
            reason = renewal_reason(cert, ca.cert, sans, settings["ray_tls_renew_days"]) or ""
        memo_key = (cert_path, tuple(sans))
        if not reason:
            earlier = _issued.get(memo_key)
            if earlier and earlier.cert_pem == cert_pem and earlier.ca_pem == ca.pem:
                return earlier  # issued earlier in this run
            return NodeCertificate(ca.pem, cert_pem, key_pem, issued=False, reason="")
        new_cert, new_key = _issue(ca, host_name, sans, settings["ray_tls_validity_days"])
        node = NodeCertificate(ca.pem, _cert_pem(new_cert), _key_pem(new_key), issued=True, reason=reason)
        write_file(key_path, node.key_pem)
        write_file(cert_path, node.cert_pem, 0o644)
        _issued[memo_key] = node
        return node


def client_files(settings: dict[str, Any], name: str) -> tuple[Path, Path]:
    """(certificate, key) of the client ``name`` in the operator's folder; ``TLSError`` for a bad name."""
    if not CLIENT_NAME.match(name) or name in (".", ".."):
        raise TLSError(
            f"client name {name!r}: expected 1-64 letters, digits, '.', '_' or '-' (it names the files "
            f"{tls_dir(settings) / 'clients'}/NAME.crt and NAME.key)"
        )
    clients = tls_dir(settings) / "clients"
    return clients / f"{name}.crt", clients / f"{name}.key"


def existing_ca(settings: dict[str, Any]) -> Path | None:
    """The CA certificate's path when the operator's folder has a CA, else None (``TLSError`` if unusable)."""
    folder = tls_dir(settings)
    return folder / "ca.crt" if _load_ca(folder) else None


def issue_client_certificate(settings: dict[str, Any], name: str) -> tuple[Path, Path]:
    """A new key and certificate (cert, key paths) for the client ``name``, signed by the cluster's CA.

    Its SANs are 127.0.0.1 and localhost (a driver's own Ray processes reach it there). The CA must
    exist (a deploy made it): ``TLSError`` otherwise, as a client of a CA no node trusts is no use.
    """
    cert_path, key_path = client_files(settings, name)
    folder = tls_dir(settings)
    with _locked(folder):
        ca = _load_ca(folder)
        if ca is None:
            raise TLSError(f'{folder / "ca.crt"}: the cluster has no CA yet; deploy with ray_tls = "on" first')
        cert, key = _issue(ca, name, list(LOCAL_SANS), settings["ray_tls_validity_days"])
        write_file(key_path, _key_pem(key))
        write_file(cert_path, _cert_pem(cert), 0o644)
    return cert_path, key_path


# --- Rotation -------------------------------------------------------------------------------------

#: What a rotation moves aside: the CA, and every certificate it signed.
ROTATED = ("ca.crt", "ca.key", "nodes", "clients")


def begin_rotation(settings: dict[str, Any]) -> Rotation:
    """Make way for the cluster's next CA: the CA and the certificates it signed move to ``previous/`` (0700),
    so that the next deploy creates a new CA and issues every node a new certificate.

    A ``previous/`` left by a rotation cut short is kept: the CA made since, when there is one, is the
    one to finish with (``resumed``), so that nodes already on it need no second restart. An unusable
    CA (its key lost) is moved aside like a good one: a rotation is how the cluster gets a CA again.
    """
    folder = tls_dir(settings)
    previous = folder / PREVIOUS
    with _locked(folder):
        if previous.exists():
            _private_dir(previous)
            made = all((folder / name).exists() for name in ("ca.crt", "ca.key"))
            return Rotation(folder, previous, resumed=made)
        present = [name for name in ROTATED if (folder / name).exists()]
        if not present:
            return Rotation(folder, None, resumed=False)
        staging = _private_dir(folder / f".{PREVIOUS}.{secrets.token_hex(4)}")
        for name in present:
            os.replace(folder / name, staging / name)
        os.replace(staging, previous)  # previous/ appears whole
    return Rotation(folder, previous, resumed=False)


def end_rotation(rotation: Rotation) -> None:
    """Every node runs the new CA: drop the previous one and what it signed."""
    if rotation.previous:
        shutil.rmtree(rotation.previous, ignore_errors=True)


def undo_rotation(rotation: Rotation) -> None:
    """Put the previous CA back (after a dry run): as if the rotation had not begun.

    A resumed rotation is left as it was, still to finish.
    """
    if rotation.resumed:
        return
    with _locked(rotation.folder):
        for name in ROTATED:
            made = rotation.folder / name
            if made.is_dir():
                shutil.rmtree(made)
            else:
                made.unlink(missing_ok=True)
            if rotation.previous and (rotation.previous / name).exists():
                os.replace(rotation.previous / name, made)
        if rotation.previous:
            shutil.rmtree(rotation.previous, ignore_errors=True)
