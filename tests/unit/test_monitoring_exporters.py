"""The monitoring exporters' data keys, ports and pure helpers: what the inventory check refuses,
the head's metrics ports, the members' single port list, and the exporters' command lines and units."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from checks import monitoring as checks_monitoring
from deploy.contract import settings
from deploy.contract.ports import member_ports, ray_metrics_env
from deploy.contract.schema import validate_cluster, validate_host
from deploy.monitoring import exporters as mon
from deploy.ray import ray_node
from deploy.run.templating import resource

HEAD = ("head", {"ray_role": "head"}, "10.0.0.1")
WORKER = ("worker", {}, "10.0.0.2")


def expected(problems, key):
    found = [p for p in problems if p.key == key]
    assert len(found) == 1, problems
    return found[0]


def test_the_defaults_are_valid_and_every_key_is_known():
    assert validate_host("h", {}) == []
    defaults = settings.defaults()
    assert defaults["monitoring_enabled"] is True and defaults["monitoring_host"] is None
    assert defaults["monitoring_ports"] == {"node_exporter": 9100, "gpu_exporter": 9400}
    assert defaults["monitoring_gpu_exporter"] == "dcgm"
    assert defaults["monitoring_node_exporter_image"].startswith("quay.io/prometheus/node-exporter:v")
    assert defaults["monitoring_gpu_exporter_image"].startswith("nvcr.io/nvidia/k8s/dcgm-exporter:")
    assert (defaults["ray_ports"]["dashboard_metrics"], defaults["ray_ports"]["autoscaler_metrics"]) == (44227, 44217)


def test_a_typo_in_a_monitoring_key_is_named_with_the_key_meant():
    p = expected(validate_host("gpu-01", {"monitoring_enable": False}), "monitoring_enable")
    assert "did you mean 'monitoring_enabled'?" in p.expected


@pytest.mark.parametrize(
    ("data", "key", "words"),
    [
        ({"monitoring_ports": {"node_exporter": 0}}, "monitoring_ports['node_exporter']", "a port number 1-65535"),
        ({"monitoring_ports": {"node_exporter": 70000}}, "monitoring_ports['node_exporter']", "1-65535"),
        ({"monitoring_ports": {"node": 9100}}, "monitoring_ports", "node_exporter and gpu_exporter"),
        ({"monitoring_gpu_exporter": "nvml"}, "monitoring_gpu_exporter", '"dcgm" or "none"'),
        ({"monitoring_gpu_exporter_image": "--privileged"}, "monitoring_gpu_exporter_image", "an image reference"),
        ({"monitoring_node_exporter_image": "a b"}, "monitoring_node_exporter_image", "an image reference"),
        ({"monitoring_enabled": "yes"}, "monitoring_enabled", "true or false"),
        ({"monitoring_host": "-oProxyCommand=x"}, "monitoring_host", "the name or address"),
        ({"ray_ports": {"dashboard_metrics": 0}}, "ray_ports['dashboard_metrics']", "a port number 1-65535"),
    ],
)
def test_bad_monitoring_values_are_refused_naming_key_and_expectation(data, key, words):
    p = expected(validate_host("gpu-01", data), key)
    assert words in p.expected and p.host == "gpu-01"


@pytest.mark.parametrize(
    ("data", "key", "words"),
    [
        ({"monitoring_ports": {"node_exporter": 6379}}, "monitoring_ports['node_exporter']", "ray_ports['gcs']"),
        ({"monitoring_ports": {"gpu_exporter": 44227}}, "monitoring_ports['gpu_exporter']", "dashboard_metrics"),
        ({"monitoring_ports": {"gpu_exporter": 9100}}, "monitoring_ports['gpu_exporter']", "node_exporter"),
        ({"monitoring_ports": {"node_exporter": 10500}}, "monitoring_ports['node_exporter']", "worker range"),
        ({"image_mirror": "head", "monitoring_ports": {"node_exporter": 5000}}, "monitoring_ports['node_exporter']",
         "image_mirror_port"),
        ({"ray_ports": {"metrics_export": 9100}}, "monitoring_ports['node_exporter']", "ray_ports['metrics_export']"),
        ({"ray_ports": {"autoscaler_metrics": 6379}}, "ray_ports['autoscaler_metrics']", "'gcs'"),
        ({"firewall_extra_tcp_ports": ["9000-9200"]}, "firewall_extra_tcp_ports[0]", "an exporter answers anyone"),
        ({"ray_env": {"AUTOSCALER_METRIC_PORT": "1"}}, "ray_env['AUTOSCALER_METRIC_PORT']",
         "set ray_ports['autoscaler_metrics']"),
    ],
)  # fmt: skip
def test_exporter_ports_stay_apart_from_every_other_port_of_the_members_list(data, key, words):
    p = expected(validate_host("gpu-01", data), key)
    assert words in p.expected


def test_extra_ports_may_cover_an_exporter_port_no_exporter_uses():
    assert validate_host("h", {"firewall_extra_tcp_ports": [9400], "monitoring_gpu_exporter": "none"}) == []
    assert validate_host("h", {"firewall_extra_tcp_ports": [9100], "monitoring_enabled": False}) == []


def test_monitoring_host_names_a_present_host_of_the_inventory():
    hosts = [(n, {**d, "monitoring_host": "worker"}, a) for n, d, a in (HEAD, WORKER)]
    assert validate_cluster(hosts) == []
    by_address = [(n, {**d, "monitoring_host": "10.0.0.2"}, a) for n, d, a in (HEAD, WORKER)]
    assert validate_cluster(by_address) == []
    unknown = [(n, {**d, "monitoring_host": "grafana-01"}, a) for n, d, a in (HEAD, WORKER)]
    p = expected(validate_cluster(unknown), "monitoring_host")
    assert (p.value, p.expected) == ("grafana-01", "the name or address of a present host of this inventory")
    leaving = [(n, {**d, "monitoring_host": "worker"}, a) for n, d, a in (HEAD, WORKER)]
    leaving[1][1]["ray_state"] = "absent"  # a host on its way out is no longer a present one
    assert "present host" in expected(validate_cluster(leaving), "monitoring_host").expected


@pytest.mark.parametrize(
    "key", ["monitoring_enabled", "monitoring_ports", "monitoring_host", "monitoring_gpu_exporter"]
)
def test_the_monitoring_choices_are_the_same_on_every_host(key):
    value = {"monitoring_enabled": False, "monitoring_ports": {"node_exporter": 9101}, "monitoring_host": "head",
             "monitoring_gpu_exporter": "none"}[key]  # fmt: skip
    p = expected(validate_cluster([HEAD, ("worker", {key: value}, "10.0.0.2")]), key)
    assert p.expected == "the same value on every host of the cluster"


# --- Ray's head metrics ports ----------------------------------------------------------------------


def test_the_heads_container_pins_rays_dashboard_and_autoscaler_metrics_ports():
    s = settings.merge({"ray_role": "head", "ray_ports": {"dashboard_metrics": 45000}})
    args = ray_node.docker_run_args(s, "head", ["ray", "start"], 0, "2g", None)
    assert "--env=DASHBOARD_METRIC_PORT=45000" in args and "--env=AUTOSCALER_METRIC_PORT=44217" in args
    worker = ray_node.docker_run_args(settings.merge({}), "worker", ["ray", "start"], 0, "2g", None)
    assert not [a for a in worker if "METRIC_PORT" in a]
    assert ray_metrics_env({"dashboard_metrics": 1, "autoscaler_metrics": 2}, "worker") == {}


def test_the_members_port_list_holds_ray_and_the_exporters_in_use():
    ports = member_ports(settings.defaults())
    assert {ports[k] for k in ("metrics_export", "dashboard_metrics", "autoscaler_metrics")} == {6383, 44227, 44217}
    assert (ports["node_exporter"], ports["gpu_exporter"]) == (9100, 9400)
    assert "gpu_exporter" not in member_ports(settings.merge({"monitoring_gpu_exporter": "none"}))
    off = member_ports(settings.merge({"monitoring_enabled": False}))
    assert "node_exporter" not in off and off["dashboard_metrics"] == 44227


# --- Command lines and units -----------------------------------------------------------------------


def test_the_node_exporter_container_reads_the_hosts_root_and_listens_on_the_node_address():
    args = mon.node_container_args("quay.io/prometheus/node-exporter:v1.9.1", "10.0.0.2:9100")
    assert args[:3] == ["run", "--rm", "--name=rayrig-node-exporter"]
    assert {"--net=host", "--pid=host", "--volume=/:/host:ro,rslave", "--pull=never"} <= set(args)
    assert args[-2:] == ["--path.rootfs=/host", "--web.listen-address=10.0.0.2:9100"]


def test_the_dcgm_exporter_gets_every_gpu_but_no_extra_capability():
    args = mon.gpu_container_args("nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04", "[fd00::2]:9400")
    assert "--gpus=all" in args and "--env=DCGM_EXPORTER_LISTEN=[fd00::2]:9400" in args
    assert not [a for a in args if "cap-add" in a or "privileged" in a]
    assert mon.listen_address("fd00::2", 9400) == "[fd00::2]:9400"


def test_the_container_unit_restarts_always_and_waits_for_the_firewall_only_when_rayrig_has_one():
    args = mon.gpu_container_args("img:1", "10.0.0.2:9400")
    text = mon.unit_text(mon.GPU_UNIT, "NVIDIA DCGM exporter", args)
    assert "ExecStart=/usr/bin/env docker run --rm --name=rayrig-gpu-exporter " in text
    assert "Restart=always" in text and "After=rayrig-firewall.service" in text
    assert "ExecStartPre=-/usr/bin/env docker rm --force rayrig-gpu-exporter" in text
    assert "rayrig-firewall" not in mon.unit_text(mon.GPU_UNIT, "x", args, firewall_unit=None)


def test_the_packages_drop_in_replaces_its_flags():
    text = mon.drop_in_text(mon.DEBIAN_PACKAGE, "10.0.0.2:9100")
    assert "ExecStart=\nExecStart=/usr/bin/prometheus-node-exporter --web.listen-address=10.0.0.2:9100\n" in text
    assert mon.EPEL_PACKAGE.drop_in == "/etc/systemd/system/node_exporter.service.d/rayrig.conf"


def test_the_unit_command_fact_reads_the_live_argv():
    fact = mon.UnitCommand()
    assert fact.process([]) is None
    assert fact.process(["RAYRIG_RUNNING", "RAYRIG_ARG=docker", "RAYRIG_ARG=run"]) == ["docker", "run"]


def test_forgetting_images_removes_them_and_their_lines_only():
    command = mon.forget_images_command(["b:1", "a:1"])
    assert command.startswith("docker image rm -- a:1 >/dev/null 2>&1 || true; docker image rm -- b:1")
    assert "grep -vxF -e a:1 -e b:1 /var/lib/rayrig/exporters/images" in command


def test_the_scrape_targets_are_the_exporters_a_host_runs_on_its_node_address():
    s = settings.merge({})
    assert mon.exporter_targets("10.0.0.2", s, 8) == {"node": "10.0.0.2:9100", "gpu": "10.0.0.2:9400"}
    assert mon.exporter_targets("fd00::3", s, 0) == {"node": "[fd00::3]:9100"}
    assert mon.exporter_targets("10.0.0.2", settings.merge({"monitoring_gpu_exporter": "none"}), 8) == {
        "node": "10.0.0.2:9100"
    }
    assert mon.exporter_targets("10.0.0.2", settings.merge({"monitoring_enabled": False}), 8) == {}


def test_an_extra_port_range_over_both_exporters_is_one_problem_naming_both():
    [p] = validate_host("gpu-01", {"firewall_extra_tcp_ports": [80, "9000-9500"]})
    assert (p.key, p.value) == ("firewall_extra_tcp_ports[1]", "9000-9500")
    assert "monitoring_ports['node_exporter'] = 9100, monitoring_ports['gpu_exporter'] = 9400" in p.expected


def test_the_dcgm_counters_hold_every_gpu_field_the_checks_rules_and_dashboard_read():
    fields = {
        line.split(",")[0].strip()
        for line in Path(mon.COUNTERS_TEMPLATE).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    read = {
        name
        for template in ("prometheus-rules.yml", "rayrig-gpu-dashboard.json")
        for name in re.findall(r"DCGM_FI_[A-Z_]+", Path(resource("deploy.monitoring", template)).read_text())
    }
    read |= {checks_monitoring.XID, checks_monitoring.CLOCK_REASONS[0], checks_monitoring.ECC_DBE}
    read |= {checks_monitoring.REMAPPED, checks_monitoring.REMAP_FAILED}
    assert read - fields == set()
    assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" not in fields  # the name before DCGM 3.3: the pinned 4.x refuses it
