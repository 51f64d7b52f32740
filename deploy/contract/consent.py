"""The settings that weaken the cluster, and the consent each needs: ``ray_auth = "none"``
(``ray_auth_allow_none``), a registry mirror over plain HTTP (its host:port in
``docker_insecure_registries`` too), NFS export options that give clients root or need no authentication
(``"allow_unsafe": true`` on the export), and the ports of rayrig's own services, which
``firewall_extra_tcp_ports`` may not open to any source at all. ``deploy.contract.schema`` turns what
these find into problems naming the key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from deploy.contract import settings
from deploy.contract.ports import NFS_PORT, RPCBIND_PORT


def auth_problems(merged: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """``ray_auth = "none"`` only with consent (``ray_auth_allow_none``), and never with a dashboard off
    loopback: without a token, Ray's Jobs API runs the code of whoever reaches it. Each problem is
    ``(key, value, what was expected)``."""
    if merged["ray_auth"] != "none":
        return []
    dashboard = merged["ray_dashboard_host"]
    if not settings.is_loopback(dashboard):
        why = (
            f'"token" while ray_dashboard_host = {dashboard!r} is off loopback: without a token, whoever reaches '
            "the dashboard runs code on every node through Ray's Jobs API"
        )
        return [("ray_auth", "none", why)]
    if not merged["ray_auth_allow_none"]:
        why = (
            '"token", or ray_auth_allow_none = True to run Ray without authentication (whoever reaches a Ray '
            "port runs code on every node)"
        )
        return [("ray_auth", "none", why)]
    return []


#: Export options that hand clients more than their own files.
UNSAFE_EXPORT_OPTIONS = ("no_root_squash", "insecure")


def unsafe_export_options(options: str) -> list[str]:
    """The options of an export that let clients act as root, from any port, or unauthenticated: those of
    ``UNSAFE_EXPORT_OPTIONS``, an anonymous uid or gid of 0 (squashed users become root) and ``sec=none``.

    >>> unsafe_export_options("rw,sync,anonuid=0,anongid=1000,sec=sys:none")
    ['anonuid=0', 'sec=sys:none']
    """
    unsafe = []
    for option in (o.strip() for o in options.split(",")):
        key, _, value = option.partition("=")
        if (
            option in UNSAFE_EXPORT_OPTIONS
            or (key in ("anonuid", "anongid") and value.strip() == "0")
            or (key == "sec" and "none" in value.split(":"))
        ):
            unsafe.append(option)
    return unsafe


def guarded_ports(merged: Mapping[str, Any]) -> dict[int, str]:
    """Ports of rayrig's own services that ``firewall_extra_tcp_ports`` may not open to any source, by name."""
    guarded = {NFS_PORT: "NFS", RPCBIND_PORT: "rpcbind"}
    if merged["image_mirror"] == "head":
        guarded[merged["image_mirror_port"]] = "image_mirror_port"
    if merged["monitoring_enabled"]:
        guarded[merged["monitoring_prometheus_port"]] = "monitoring_prometheus_port"
        if merged["monitoring_grafana"]:
            guarded[merged["monitoring_grafana_port"]] = "monitoring_grafana_port"
    return guarded


def http_mirror_problems(merged: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """A ``docker_registry_mirrors`` entry over plain HTTP needs its host:port in ``docker_insecure_registries``
    as well, the consent Docker itself asks for plain HTTP: anyone on the path could swap the images."""
    problems = []
    insecure = set(merged["docker_insecure_registries"])
    for index, url in enumerate(merged["docker_registry_mirrors"]):
        parts = urlsplit(url)
        if parts.scheme == "http" and parts.netloc not in insecure:
            why = (
                f"an https URL, or {parts.netloc!r} in docker_insecure_registries as well to pull over plain HTTP "
                "(anyone on the path could swap the images)"
            )
            problems.append((f"docker_registry_mirrors[{index}]", url, why))
    return problems
