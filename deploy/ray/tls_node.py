"""Ray TLS on a node: its certificate, its files on the host, and what ray-node gets of them.

With ``ray_tls = "on"`` every Ray process and client in ray-node speaks mutual TLS
(:mod:`deploy.ray.tls_ca` makes the cluster's CA and the certificates on the operator's machine):

- Each host's certificate names every address it is reached at (:func:`san_addresses`: its
  node address, which is also the one workers use for the head, its SSH hostname and its
  inventory name when that is an address), and is settled once per host and run
  (:func:`node_certificate`): reused, or issued anew when it is missing, signed by another CA,
  names other addresses or expires within ``ray_tls_renew_days``.
- On the host, :data:`deploy.ray.tls_ca.NODE_TLS_DIR` (0700) holds ``ca.crt`` and ``node.crt`` (0644)
  and ``node.key`` (0600, uploaded as a secret: never in a command line, a diff or a log), all
  owned by the user the container runs as. ray-node mounts the folder read-only and names the
  files in Ray's TLS variables.
- ray-node's label :data:`deploy.ray.tls_ca.TLS_LABEL` holds a digest of the CA and node certificates
  (never of the key): a renewed or rotated certificate replaces the container, through the same
  replacement as any other change.

With ``ray_tls = "off"`` the folder is removed once the container runs without it.
"""

from __future__ import annotations

import shlex
from io import StringIO
from typing import Any

from pyinfra.api.exceptions import PyinfraError
from pyinfra.facts.files import FileContents
from pyinfra.operations import files

from deploy.contract.settings import host_data, host_settings, is_hostname, merge, node_address, parse_address
from deploy.host.secret_files import put_secret_file
from deploy.ray import tls_ca
from deploy.run.facts import fact
from deploy.run.memo import run_lock, run_memo


class NodeCertificateError(PyinfraError):
    """The operator's CA or a node's stored certificate is unusable (``deploy.ray.tls_ca.TLSError``, with the host)."""


#: The files in the node's TLS folder: (path, what it is, mode).
NODE_FILES = (
    (tls_ca.NODE_CA_CERT, "the cluster's CA certificate", "644"),
    (tls_ca.NODE_CERT, "the node's TLS certificate", "644"),
    (tls_ca.NODE_KEY, "the node's TLS key", "600"),
)


def san_addresses(current_host: Any) -> list[str]:
    """The addresses a host is reached at, for its certificate: its node address (``ray_node_ip``,
    else the SSH hostname, else the inventory name: the address the other nodes, and the workers
    for the head, connect to), its SSH hostname and its inventory name, each when it is an IP
    address (without an IPv6 zone) or a host name. ``deploy.ray.tls_ca.node_sans`` adds the loopback names."""
    data = host_data(current_host)
    found: list[str] = []
    for candidate in (node_address(current_host), data.get("ssh_hostname"), current_host.name):
        text = str(candidate or "")
        address = parse_address(text)
        value = str(address) if address is not None else text if is_hostname(text) else None
        if value and value not in found:
            found.append(value)
    return found


def node_certificate(current_host: Any) -> tls_ca.NodeCertificate | None:
    """The host's TLS certificate for this run (None with ``ray_tls = "off"``), settled once per host and run."""
    settings = host_settings(current_host)
    if settings["ray_tls"] != "on":
        return None
    memo = run_memo(current_host.state, "tls_certificates")
    if current_host.name not in memo:
        with run_lock(current_host.state, "tls_certificates"):  # one CA, made by the first host that needs it
            if current_host.name not in memo:
                if not memo:  # the first certificate of the run: is the local CA the cluster's?
                    check_cluster_ca(current_host)
                try:
                    sans = tls_ca.node_sans(settings, current_host.name, san_addresses(current_host))
                    memo[current_host.name] = tls_ca.ensure_node_certificate(settings, current_host.name, sans)
                except tls_ca.TLSError as error:
                    raise NodeCertificateError(
                        f"host {current_host.name}: no TLS certificate for its Ray node: {error}. "
                        "Nothing was changed on any host."
                    ) from None
    return memo[current_host.name]


def check_cluster_ca(current_host: Any) -> None:
    """Stop the deploy, before any operation, when the head runs TLS with a CA that is not the local one
    (``deploy.ray.tls_ca.check_cluster_ca``): another machine's deploy would give the cluster a new CA
    behind its back."""
    head = next(h for h in current_host.inventory if merge(host_data(h))["ray_role"] == "head")
    if not head.connected:  # a run limited to other hosts still asks the head
        head.connect(reason="to read the cluster's CA certificate", raise_exceptions=True)
    lines = fact(head, FileContents, tls_ca.NODE_CA_CERT)  # a certificate: public, may be shown with -vvv
    head_ca = ("\n".join(lines) + "\n").encode() if lines else None
    try:
        tls_ca.check_cluster_ca(host_settings(head), head.name, head_ca)
    except tls_ca.TLSError as error:
        raise NodeCertificateError(str(error)) from None


def certificate_digest(certificate: tls_ca.NodeCertificate | None) -> str | None:
    """ray-node's :data:`deploy.ray.tls_ca.TLS_LABEL`: which certificates it runs with, nothing of the key."""
    return tls_ca.tls_digest(certificate.ca_pem, certificate.cert_pem) if certificate else None


def run_args(settings: dict[str, Any], digest: str | None) -> list[str]:
    """ray-node's ``docker create`` arguments for TLS: the label and the read-only folder (none when off)."""
    if settings["ray_tls"] != "on":
        return []
    folder = tls_ca.NODE_TLS_DIR
    return [f"--label={tls_ca.TLS_LABEL}={digest}", f"--mount=type=bind,src={folder},dst={folder},readonly"]


def install_files(certificate: tls_ca.NodeCertificate, uid_command: str) -> str:
    """Put the host's CA certificate, certificate and key in its TLS folder; the command that
    gives them to the container's user (``uid_command`` prints its uid), run before ray-node starts.

        own_files.append(install_files(node_certificate(host), user_command(image)))
    """
    files.directory(name="Create the folder of the node's TLS certificate", path=tls_ca.NODE_TLS_DIR, mode="700")
    new = f" (new: {certificate.reason})" if certificate.issued else ""
    contents = {tls_ca.NODE_CA_CERT: certificate.ca_pem, tls_ca.NODE_CERT: certificate.cert_pem}
    for path, what, mode in NODE_FILES:
        issued = new if path != tls_ca.NODE_CA_CERT else ""  # the CA's own news is in its file's change
        if path == tls_ca.NODE_KEY:  # a secret: never shown by --diff, uploaded through the private folder
            put_secret_file(
                name=f"Store {what}{issued}", src=StringIO(certificate.key_pem.decode()), dest=path, mode=mode
            )
        else:
            files.put(name=f"Store {what}{issued}", src=StringIO(contents[path].decode()), dest=path, mode=mode)
    paths = [tls_ca.NODE_TLS_DIR, *(path for path, _what, _mode in NODE_FILES)]
    return f'chown "$({uid_command})" {shlex.join(paths)}'  # the modes stay: 0700, 0644, 0600


def remove_files() -> None:
    """Remove the host's TLS folder (``ray_tls = "off"``), once ray-node runs without it."""
    files.directory(
        name=f'Remove the node\'s TLS folder {tls_ca.NODE_TLS_DIR} (ray_tls = "off")',
        path=tls_ca.NODE_TLS_DIR,
        present=False,
    )
