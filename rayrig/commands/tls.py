"""``rayrig tls``: the cluster's CA (``ray_tls = "on"``): rotate it, and issue certificates to clients.

    rayrig tls rotate inventories/prod.py [more pyinfra arguments]
    rayrig tls client-cert inventories/prod.py alice-laptop [--out DIR]

``rotate`` moves the CA and every certificate it signed to ``tls/previous/`` and runs the deploy with
``RAYRIG_TLS_ROTATION=1``: it creates a new CA, issues every node a new certificate, and each node's
ray-node is replaced like for a new token (the head first; a node that does not rejoin gets its previous
container back and the deploy fails). A node on the previous CA cannot talk to one on the new CA.
``client-cert`` issues a certificate signed by the cluster's CA and prints the environment a driver
outside the cluster sets to use it (file paths only, never a key).
Exit codes: 0 done, 1 the deploy failed (the message says where the cluster stands), 2 bad usage.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from cryptography import x509

from deploy.ray import tls_ca
from rayrig.errors import RayrigError, UsageError
from rayrig.inventory import OperateError, load_inventory
from rayrig.run import deploy_rotation

#: pyinfra arguments that would leave some hosts on the previous CA.
PARTIAL_RUN = ("--limit", "--exclude")


def _tls_settings(inventory: str) -> dict[str, Any]:
    """The head's settings of ``inventory`` (checked as a deploy checks them); ``UsageError`` unless TLS is on."""
    try:
        settings = dict(load_inventory(inventory).head.settings)
    except OperateError as error:
        if error.status != UsageError.status:
            raise
        message, *details = str(error).splitlines()
        raise UsageError(message, "nothing was changed", [line.strip() for line in details]) from None
    if settings["ray_tls"] != "on":
        raise UsageError(
            f"{inventory}: ray_tls = {settings['ray_tls']!r}: the cluster does not use TLS",
            'set ray_tls = "on" and deploy; nothing was changed',
        )
    return settings


def _cmd_rotate(args: argparse.Namespace) -> int:
    partial = [arg.split("=", 1)[0] for arg in args.pyinfra_args if arg.split("=", 1)[0] in PARTIAL_RUN]
    if partial:
        raise UsageError(
            f"{partial[0]}: a rotation must reach every host of the inventory "
            "(a node left on the previous CA could not talk to the others)",
            "nothing was changed",
        )
    settings = _tls_settings(args.inventory)
    try:
        rotation = tls_ca.begin_rotation(settings)
    except tls_ca.TLSError as error:
        raise RayrigError(str(error)) from None
    cluster = settings["ray_cluster_name"]
    print(start_message(cluster, rotation), flush=True)
    return deploy_rotation(
        args.inventory,
        args.pyinfra_args,
        tls_ca.ROTATION_ENV,
        kept="CA",
        undo=lambda: tls_ca.undo_rotation(rotation),
        end=lambda: tls_ca.end_rotation(rotation),
        failure=lambda status: failure_message(args.inventory, rotation, status),
        done=f"==> Every node of cluster {cluster!r} runs a certificate of the new CA ({rotation.folder / 'ca.crt'}); "
        "the previous CA and the certificates it signed are deleted, and the nodes refuse them. Issue new client "
        f"certificates with `rayrig tls client-cert {shlex.quote(args.inventory)} NAME`.",
    )


def start_message(cluster: str, rotation: tls_ca.Rotation) -> str:
    """What the rotation is about to deploy, and where the previous CA is kept."""
    if rotation.resumed:
        return (
            f"==> A rotation of cluster {cluster!r} was cut short: finishing it with the CA it made "
            f"({rotation.folder / 'ca.crt'}); the previous one is still in {rotation.previous}"
        )
    kept = f"; the previous one is kept in {rotation.previous} until every node runs the new one"
    made = f"==> New CA for cluster {cluster!r}: the deploy creates it in {rotation.folder}"
    return made + (kept if rotation.previous else "")


def failure_message(inventory: str, rotation: tls_ca.Rotation, status: int) -> str:
    """Where the cluster stands after a rotation's deploy failed, and how to finish it."""
    previous = f", kept in {rotation.previous}" if rotation.previous else ""
    return (
        f"rayrig tls rotate: the deploy failed (pyinfra exit status {status}); the rotation is not finished.\n"
        "  The nodes whose ray-node was replaced before the failure (the head first) run certificates of the "
        f"new CA, in {rotation.folder}.\n"
        "  The others (every node, if the deploy stopped before any change) still run the previous "
        f"CA's{previous}, and cannot talk to the nodes on the new one.\n"
        f"  Fix the cause above, then run `rayrig tls rotate {shlex.quote(inventory)}` again: it finishes "
        "with the same new CA, so the nodes already on it are not restarted."
    )


def _cmd_client_cert(args: argparse.Namespace) -> int:
    settings = _tls_settings(args.inventory)
    try:
        tls_ca.client_files(settings, args.name)  # the name, checked before anything is written
        ca = tls_ca.existing_ca(settings)
    except tls_ca.TLSError as error:
        raise UsageError(str(error)) from None
    if ca is None:
        raise UsageError(
            f'{tls_ca.tls_dir(settings) / "ca.crt"}: the cluster has no CA yet; deploy with ray_tls = "on" first'
        )
    out = Path(args.out).expanduser().resolve() if args.out else None
    if out and args.name == "ca":
        raise UsageError(f"client name 'ca': its certificate would overwrite the CA's copy {out / 'ca.crt'}",
                         "choose another name")  # fmt: skip
    try:
        cert, key = tls_ca.issue_client_certificate(settings, args.name)
    except tls_ca.TLSError as error:
        raise RayrigError(str(error)) from None
    if out:
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
        for source, target, mode in ((cert, out / cert.name, 0o644), (key, out / key.name, 0o600),
                                     (ca, out / "ca.crt", 0o644)):  # fmt: skip
            tls_ca.write_file(target, source.read_bytes(), mode)
        cert, key, ca = out / cert.name, out / key.name, out / "ca.crt"
    print("\n".join(client_lines(settings, args.name, cert.resolve(), key.resolve(), ca.resolve())))
    return 0


def client_lines(settings: dict[str, Any], name: str, cert: Path, key: Path, ca: Path) -> list[str]:
    """What ``client-cert`` prints: comment lines, then the ``export`` lines (a shell may ``eval`` them all)."""
    expires = x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc
    cluster, client_port = settings["ray_cluster_name"], settings["ray_ports"]["client_server"]
    lines = [
        f"# Client certificate {name!r} of cluster {cluster!r}, valid until {expires:%Y-%m-%d}; "
        f"its key {key} is 0600: keep it so.",
        f"# Set these where the driver runs, then connect with Ray Client (ray://HEAD:{client_port}):",
        "export RAY_USE_TLS=1",
        f"export RAY_TLS_SERVER_CERT={shlex.quote(str(cert))}",
        f"export RAY_TLS_SERVER_KEY={shlex.quote(str(key))}",
        f"export RAY_TLS_CA_CERT={shlex.quote(str(ca))}",
    ]
    if settings.get("ray_auth") == "token":
        lines.insert(2, "# The cluster's Ray token is asked for too: RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH.")
    return lines


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rayrig tls rotate`` and ``rayrig tls client-cert``."""
    area = subparsers.add_parser("tls", help='the cluster\'s CA (ray_tls = "on"): rotation, client certificates')
    sub = area.add_subparsers(dest="tls_command", required=True, metavar="COMMAND")
    rotate = sub.add_parser(
        "rotate", help="give the cluster a new CA: every node gets a new certificate and its ray-node is replaced"
    )
    rotate.add_argument("inventory", help="pyinfra inventory file, e.g. inventories/prod.py")
    rotate.add_argument("pyinfra_args", nargs=argparse.REMAINDER, help="more pyinfra arguments (-v, --dry ...)")
    rotate.set_defaults(func=_cmd_rotate)
    client = sub.add_parser(
        "client-cert", help="issue a client certificate signed by the cluster's CA and print the environment to use it"
    )
    client.add_argument("inventory", help="pyinfra inventory file, e.g. inventories/prod.py")
    client.add_argument("name", help="the client's name (letters, digits, '.', '_', '-'), e.g. alice-laptop")
    client.add_argument("--out", metavar="DIR", help="also copy the certificate, its key and the CA's to DIR")
    client.set_defaults(func=_cmd_client_cert)
