"""What the monitoring host's Prometheus and Grafana read: their files and command lines, rendered from
the inventory. Pure functions (no pyinfra operation, no fact); :mod:`deploy.monitoring.server` writes
them and runs the containers.

Files, all under :data:`CONFIG_DIR` (``/etc/rayrig/monitoring``) on the monitoring host:

- ``prometheus.yml`` (:func:`prometheus_yml`): the jobs ``ray``, ``node``, ``gpu`` and
  ``prometheus``; every target carries ``host``, the inventory host's name;
- ``rules.yml`` (:func:`rules_yml`): the alert rules ``NodeDown``, ``RayNodeMissing``,
  ``GpuXidError``, ``GpuTooHot`` and ``DiskAlmostFull`` (thresholds in the file's header);
- ``targets/ray.json``, ``targets/node.json``, ``targets/gpu.json`` (:func:`targets_json`):
  Prometheus's ``file_sd`` lists, which it reads again when they change (no reload);
- ``grafana/provisioning/datasources/rayrig.yml``, ``grafana/provisioning/dashboards/rayrig.yml``
  and ``grafana/dashboards/rayrig-gpu.json`` (Grafana's provisioning, with Grafana on).

Ray's own service-discovery file: the head's dashboard writes every alive node's metrics address,
and its own and the autoscaler's, to ``<session>/prom_metrics_service_discovery.json`` every 5 s and
links it at ``/tmp/ray/prom_metrics_service_discovery.json`` (Ray 2.60,
``ray/_private/metrics_agent.py``, ``PrometheusServiceDiscoveryWriter``), a ``file_sd`` list
labelled ``job: ray``. On the head, Prometheus reads a copy of it, ``RAY_SD_FILE``, which
:mod:`deploy.monitoring.ray_sd` keeps in a folder of its own (Ray's folder is not mounted). Nodes that
died drop out of Ray's file, so the ``ray`` job also reads the inventory's list: a missing node is a
target that is down (``RayNodeMissing``), not a target that is gone. Prometheus scrapes a target
found in both lists once (targets with the same labels and URL are one; its relabelling gives Ray's
the inventory's labels).

    text = prometheus_yml(view, settings, ray_file=True)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.run.templating import render, resource

CONFIG_DIR = "/etc/rayrig/monitoring"
TARGETS_DIR = f"{CONFIG_DIR}/targets"
PROMETHEUS_YML = f"{CONFIG_DIR}/prometheus.yml"
RULES_YML = f"{CONFIG_DIR}/rules.yml"
GRAFANA_DIR = f"{CONFIG_DIR}/grafana"
GRAFANA_PROVISIONING = f"{GRAFANA_DIR}/provisioning"
GRAFANA_DATASOURCE = f"{GRAFANA_PROVISIONING}/datasources/rayrig.yml"
GRAFANA_PROVIDERS = f"{GRAFANA_PROVISIONING}/dashboards/rayrig.yml"
GRAFANA_DASHBOARDS = f"{GRAFANA_DIR}/dashboards"
GPU_DASHBOARD = f"{GRAFANA_DASHBOARDS}/rayrig-gpu.json"
#: Where the data live, on the host and (the same path) in the containers.
PROMETHEUS_DATA = "/var/lib/rayrig/prometheus"
GRAFANA_DATA = "/var/lib/rayrig/grafana"
#: The folder inside ``ray_temp_dir`` where the head's Ray writes its Grafana dashboards.
RAY_DASHBOARDS_SUBFOLDER = "grafana-dashboards"

#: Grafana's data source: the name Ray's dashboards use (RAY_PROMETHEUS_NAME's default), a fixed uid.
DATASOURCE_NAME = "Prometheus"
DATASOURCE_UID = "rayrig-prometheus"
#: The uids the containers run as: the official images' (nobody, and Grafana's own user); the lab's
#: Prometheus image runs as nobody too.
PROMETHEUS_UID = 65534
GRAFANA_UID = 472

#: The copy of Ray's service-discovery file Prometheus reads (:mod:`deploy.monitoring.ray_sd`): a folder of
#: its own, root's, mounted read-only at the same path; Ray's own folder is not mounted.
RAY_SD_DIR = "/var/lib/rayrig/ray-sd"
RAY_SD_FILE = f"{RAY_SD_DIR}/ray.json"
#: Prometheus's ``--web.cors.origin`` (a regex it anchors): no browser sends an empty Origin, so no page matches.
NO_WEB_ORIGIN = "^$"
#: Ray 2.60's defaults for the head's own metrics (DASHBOARD_METRIC_PORT, AUTOSCALER_METRIC_PORT),
#: used when ``ray_ports`` does not name them.
RAY_HEAD_METRICS = {"dashboard_metrics": 44227, "autoscaler_metrics": 44217}
SCRAPE_INTERVAL = "15s"
RULES_TEMPLATE = resource(__package__, "prometheus-rules.yml")
GPU_DASHBOARD_TEMPLATE = resource(__package__, "rayrig-gpu-dashboard.json")


@dataclass(frozen=True)
class Member:
    """One inventory host as the monitoring host sees it: its name (the ``host`` label), the address
    Prometheus scrapes, whether it is the head, and whether it runs a GPU exporter."""

    name: str
    address: str
    head: bool = False
    gpu: bool = False


def host_port(address: str, port: int) -> str:
    """``address:port``, an IPv6 address in brackets (as Ray writes it).

    >>> host_port("10.0.0.1", 9100), host_port("fd00::1", 9100)
    ('10.0.0.1:9100', '[fd00::1]:9100')
    """
    return f"[{address}]:{int(port)}" if ":" in address else f"{address}:{int(port)}"


def ray_ports_of(ray_ports: Mapping[str, int]) -> dict[str, int]:
    """The Ray metrics ports Prometheus scrapes: every node's, and the head's dashboard and autoscaler's.

    >>> ray_ports_of({"metrics_export": 6383})
    {'node': 6383, 'dashboard': 44227, 'autoscaler': 44217}
    """
    return {
        "node": ray_ports["metrics_export"],
        "dashboard": ray_ports.get("dashboard_metrics", RAY_HEAD_METRICS["dashboard_metrics"]),
        "autoscaler": ray_ports.get("autoscaler_metrics", RAY_HEAD_METRICS["autoscaler_metrics"]),
    }


def ray_groups(members: Sequence[Member], ray_ports: Mapping[str, int]) -> list[dict[str, Any]]:
    """The ``ray`` job's inventory list: every host's metrics port, and the head's dashboard and
    autoscaler metrics, each labelled ``host`` and ``ray_component`` (node, dashboard, autoscaler)."""
    ports = ray_ports_of(ray_ports)
    groups = []
    for m in members:
        components = ["node", "dashboard", "autoscaler"] if m.head else ["node"]
        for component in components:
            labels = {"host": m.name, "ray_component": component}
            groups.append({"targets": [host_port(m.address, ports[component])], "labels": labels})
    return groups


def exporter_groups(members: Iterable[Member], port: int) -> list[dict[str, Any]]:
    """A ``file_sd`` list of one exporter per host, each labelled ``host``."""
    return [{"targets": [host_port(m.address, port)], "labels": {"host": m.name}} for m in members]


def targets_json(groups: list[dict[str, Any]]) -> str:
    """A ``file_sd`` file's text (Prometheus's JSON form; ``[]`` when there is no target)."""
    return json.dumps(groups, indent=2, sort_keys=True) + "\n"


def target_files(members: Sequence[Member], settings: Mapping[str, Any]) -> dict[str, str]:
    """path -> text of the three target lists, from the monitoring host's ``settings``."""
    ports = settings["monitoring_ports"]
    return {
        f"{TARGETS_DIR}/ray.json": targets_json(ray_groups(members, settings["ray_ports"])),
        f"{TARGETS_DIR}/node.json": targets_json(exporter_groups(members, ports["node_exporter"])),
        f"{TARGETS_DIR}/gpu.json": targets_json(exporter_groups([m for m in members if m.gpu], ports["gpu_exporter"])),
    }


def gpu_hosts_listed(text: str | None) -> set[str]:
    """The host names a ``gpu.json`` lists (none when absent or unreadable).

    >>> sorted(gpu_hosts_listed('[{"targets": ["10.0.0.2:9400"], "labels": {"host": "gpu-1"}}]'))
    ['gpu-1']
    """
    try:
        groups = json.loads(text or "[]")
    except ValueError:
        return set()
    return {g.get("labels", {}).get("host") for g in groups if isinstance(g, dict)} - {None}


def _address_regex(address: str) -> str:
    """An RE2 regular expression (anchored by Prometheus) of ``address:<any port>``."""
    bracketed = f"[{address}]" if ":" in address else address
    return re.escape(bracketed) + ":[0-9]+"


def ray_relabel(members: Sequence[Member], ray_ports: Mapping[str, int]) -> list[dict[str, str]]:
    """Relabelling that gives each target of Ray's file the labels of the inventory's list:
    ``host`` from its address, ``ray_component`` from its port."""
    rules = [{"regex": _address_regex(m.address), "label": "host", "value": m.name} for m in members]
    for component, port in ray_ports_of(ray_ports).items():
        rules.append({"regex": f".+:{int(port)}", "label": "ray_component", "value": component})
    return rules


def prometheus_yml(
    members: Sequence[Member], settings: Mapping[str, Any], *, ray_file: bool, self_host: str = ""
) -> str:
    """``prometheus.yml`` for the monitoring host (``settings`` are its own); ``ray_file``: it is the
    head, and reads Ray's service-discovery file too; ``self_host``: its inventory name."""
    ray_files = [f"{TARGETS_DIR}/ray.json", *([RAY_SD_FILE] if ray_file else [])]
    return render(
        resource(__package__, "prometheus.yml.j2"),
        scrape_interval=SCRAPE_INTERVAL,
        rules_path=RULES_YML,
        ray_files=ray_files,
        ray_relabel=ray_relabel(members, settings["ray_ports"]),
        node_file=f"{TARGETS_DIR}/node.json",
        gpu_file=f"{TARGETS_DIR}/gpu.json",
        self_address=f"127.0.0.1:{int(settings['monitoring_prometheus_port'])}",
        self_host=self_host,
        health_address=health_address(settings),
    )


def health_address(settings: Mapping[str, Any]) -> str | None:
    """Where Prometheus scrapes the health gate (``health_gate``): the monitoring host's loopback; None when off."""
    return f"127.0.0.1:{int(settings['health_metrics_port'])}" if settings.get("health_gate") else None


def rules_yml(health_gate: bool = False) -> str:
    """``rules.yml``: the five alert rules (``prometheus-rules.yml``, thresholds in its header), and with
    ``health_gate`` the health gate's (``NodeQuarantined``)."""
    text = Path(RULES_TEMPLATE).read_text()
    return text + HEALTH_RULES if health_gate else text


#: The health gate's alert rule (health_gate), after the five.
HEALTH_RULES = """      - alert: NodeQuarantined
        expr: rayrig_node_quarantined == 1
        labels:
          severity: warning
        annotations:
          summary: "{{ $labels.host }} is out of the cluster: the health gate quarantined it"
          description: "Quarantined by {{ $labels.by }}; `rayrig health` says why, `rayrig health admit` lets it back."
"""


def grafana_datasource_yml(settings: Mapping[str, Any]) -> str:
    """Grafana's provisioned data source: Prometheus on the same host's loopback."""
    url = f"http://127.0.0.1:{int(settings['monitoring_prometheus_port'])}"
    return render(resource(__package__, "grafana-datasource.yml.j2"), name=DATASOURCE_NAME, uid=DATASOURCE_UID, url=url)


def ray_dashboards_dir(settings: Mapping[str, Any]) -> str:
    """The host folder (and the path in the containers) of Ray's generated Grafana dashboards.

    >>> ray_dashboards_dir({"ray_temp_dir": "/var/lib/rayrig/ray"})
    '/var/lib/rayrig/ray/grafana-dashboards'
    """
    return f"{settings['ray_temp_dir']}/{RAY_DASHBOARDS_SUBFOLDER}"


def grafana_providers_yml(settings: Mapping[str, Any], *, ray_dashboards: bool) -> str:
    """Grafana's dashboard providers: rayrig's own folder, and Ray's (``ray_dashboards``: on the head)."""
    providers = [{"name": "rayrig", "folder": "rayrig", "path": GRAFANA_DASHBOARDS}]
    if ray_dashboards:
        providers.append({"name": "Ray", "folder": "Ray", "path": ray_dashboards_dir(settings)})
    return render(resource(__package__, "grafana-dashboards.yml.j2"), providers=providers)


def gpu_dashboard_json() -> str:
    """rayrig's GPU dashboard (``rayrig-gpu-dashboard.json``): DCGM exporter metrics by host."""
    return Path(GPU_DASHBOARD_TEMPLATE).read_text()


def grafana_files(settings: Mapping[str, Any], *, ray_dashboards: bool) -> dict[str, str]:
    """path -> text of Grafana's provisioning files."""
    return {
        GRAFANA_DATASOURCE: grafana_datasource_yml(settings),
        GRAFANA_PROVIDERS: grafana_providers_yml(settings, ray_dashboards=ray_dashboards),
        GPU_DASHBOARD: gpu_dashboard_json(),
    }


def prometheus_args(settings: Mapping[str, Any]) -> list[str]:
    """Prometheus's command line: its files, its data, the retention, loopback only.

    No ``--web.enable-lifecycle``: anyone on the host could stop Prometheus through it; the
    deploy reloads it with SIGHUP. ``--web.cors.origin`` matches no web origin (Prometheus's default,
    ``.*``, lets any page the operator's browser opens read Prometheus through ``rayrig dashboard``'s
    tunnel); its own UI, Grafana and Ray's dashboard ask it from its own origin or from a server, which
    CORS does not concern. The flags are the same in Debian's Prometheus 2.42 and in 3.x.
    """
    args = [
        f"--config.file={PROMETHEUS_YML}",
        f"--storage.tsdb.path={PROMETHEUS_DATA}",
        f"--storage.tsdb.retention.time={settings['monitoring_retention_time']}",
    ]
    if settings["monitoring_retention_size"]:
        args.append(f"--storage.tsdb.retention.size={settings['monitoring_retention_size']}")
    args.append(f"--web.listen-address=127.0.0.1:{int(settings['monitoring_prometheus_port'])}")
    args.append(f"--web.cors.origin={NO_WEB_ORIGIN}")
    return args


def grafana_env(settings: Mapping[str, Any]) -> dict[str, str]:
    """Grafana's settings (``GF_<SECTION>_<KEY>``): loopback only, provisioning from rayrig's files,
    anyone who reaches it a viewer, no admin user (nothing is edited by hand: dashboards and the data
    source come from files), embeddable (the Ray dashboard's Metrics tab), nothing sent home."""
    return {
        "GF_SERVER_HTTP_ADDR": "127.0.0.1",
        "GF_SERVER_HTTP_PORT": str(int(settings["monitoring_grafana_port"])),
        "GF_PATHS_PROVISIONING": GRAFANA_PROVISIONING,
        "GF_PATHS_DATA": GRAFANA_DATA,
        "GF_SECURITY_ALLOW_EMBEDDING": "true",
        "GF_SECURITY_DISABLE_INITIAL_ADMIN_CREATION": "true",
        "GF_AUTH_ANONYMOUS_ENABLED": "true",
        "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
        "GF_AUTH_DISABLE_LOGIN_FORM": "true",
        "GF_USERS_ALLOW_SIGN_UP": "false",
        "GF_ANALYTICS_REPORTING_ENABLED": "false",
        "GF_ANALYTICS_CHECK_FOR_UPDATES": "false",
        "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH": GPU_DASHBOARD,
    }


def ray_head_env(settings: Mapping[str, Any]) -> dict[str, str]:
    """What the head's ray-node gets when the head is the monitoring host: where its dashboard finds
    Prometheus and Grafana (the head's loopback: ray-node runs on the host's network), the address a
    browser uses for Grafana (``rayrig dashboard``'s tunnel forwards the same port), and the folder
    where Ray writes its Grafana dashboards (shared with the host, read by Grafana)."""
    env = {"RAY_PROMETHEUS_HOST": f"http://127.0.0.1:{int(settings['monitoring_prometheus_port'])}"}
    if settings["monitoring_grafana"]:
        grafana = f"http://127.0.0.1:{int(settings['monitoring_grafana_port'])}"
        env |= {
            "RAY_GRAFANA_HOST": grafana,
            "RAY_GRAFANA_IFRAME_HOST": grafana,
            "RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR": ray_dashboards_dir(settings),
        }
    return env
