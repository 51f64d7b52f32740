"""The monitoring host's files and command lines, rendered from an inventory (deploy/monitoring/config.py)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from deploy.contract import settings
from deploy.contract.settings import merge
from deploy.monitoring import config as mc
from deploy.monitoring import server as ms
from deploy.ray.ray_node import docker_run_args

HEAD = mc.Member("gpu-head", "10.0.0.1", head=True)
GPU = mc.Member("gpu-01", "10.0.0.2", gpu=True)
CPU = mc.Member("cpu-01", "fd00::3")
MEMBERS = [HEAD, GPU, CPU]
SETTINGS = merge({"ray_role": "head"})


def config(ray_file: bool = True) -> dict:
    return yaml.safe_load(mc.prometheus_yml(MEMBERS, SETTINGS, ray_file=ray_file, self_host=HEAD.name))


def relabel(rules: list[dict], labels: dict[str, str]) -> dict[str, str]:
    """Prometheus's ``replace`` relabelling of ``__address__`` (its regular expressions are anchored)."""
    out = dict(labels)
    for rule in rules:
        assert rule["source_labels"] == ["__address__"]
        if re.fullmatch(rule["regex"], labels["__address__"]):
            out[rule["target_label"]] = rule["replacement"]
    return out


def test_prometheus_yml_has_the_contracts_jobs_and_reads_its_rules():
    text = config()
    assert [job["job_name"] for job in text["scrape_configs"]] == ["ray", "node", "gpu", "prometheus"]
    assert text["rule_files"] == [mc.RULES_YML]
    files = {job["job_name"]: job.get("file_sd_configs", [{}])[0].get("files") for job in text["scrape_configs"]}
    assert files["node"] == [f"{mc.TARGETS_DIR}/node.json"] and files["gpu"] == [f"{mc.TARGETS_DIR}/gpu.json"]
    # On the head, the copy of Ray's file in a folder of its own (deploy/monitoring/ray_sd.py), not Ray's folder.
    assert files["ray"] == [f"{mc.TARGETS_DIR}/ray.json", "/var/lib/rayrig/ray-sd/ray.json"]
    assert config(ray_file=False)["scrape_configs"][0]["file_sd_configs"][0]["files"] == [f"{mc.TARGETS_DIR}/ray.json"]
    me = text["scrape_configs"][3]["static_configs"][0]
    assert me == {"targets": ["127.0.0.1:9090"], "labels": {"host": HEAD.name}}


def test_every_target_is_labelled_with_its_inventory_host():
    files = mc.target_files(MEMBERS, SETTINGS)
    node = json.loads(files[f"{mc.TARGETS_DIR}/node.json"])
    assert [(g["targets"], g["labels"]) for g in node] == [
        (["10.0.0.1:9100"], {"host": "gpu-head"}),
        (["10.0.0.2:9100"], {"host": "gpu-01"}),
        (["[fd00::3]:9100"], {"host": "cpu-01"}),
    ]
    gpu = json.loads(files[f"{mc.TARGETS_DIR}/gpu.json"])
    assert gpu == [{"labels": {"host": "gpu-01"}, "targets": ["10.0.0.2:9400"]}]  # GPU hosts only
    ray = json.loads(files[f"{mc.TARGETS_DIR}/ray.json"])
    assert [(g["targets"][0], g["labels"]["host"], g["labels"]["ray_component"]) for g in ray] == [
        ("10.0.0.1:6383", "gpu-head", "node"),
        ("10.0.0.1:44227", "gpu-head", "dashboard"),
        ("10.0.0.1:44217", "gpu-head", "autoscaler"),
        ("10.0.0.2:6383", "gpu-01", "node"),
        ("[fd00::3]:6383", "cpu-01", "node"),
    ]
    assert mc.target_files([HEAD], SETTINGS)[f"{mc.TARGETS_DIR}/gpu.json"] == "[]\n"


def test_rays_own_targets_get_the_inventory_lists_labels_so_prometheus_scrapes_each_once():
    """Prometheus merges targets whose labels and address are equal: a node in Ray's file (labelled only
    ``job: ray``) and in the inventory's list must end with the same labels."""
    rules = config()["scrape_configs"][0]["relabel_configs"]
    inventory = json.loads(mc.target_files(MEMBERS, SETTINGS)[f"{mc.TARGETS_DIR}/ray.json"])
    for group in inventory:
        address = group["targets"][0]
        from_ray = relabel(rules, {"__address__": address, "job": "ray"})
        from_inventory = relabel(rules, {"__address__": address, "job": "ray", **group["labels"]})
        assert from_ray == from_inventory, address
    stranger = relabel(rules, {"__address__": "10.0.0.10:6383", "job": "ray"})
    assert "host" not in stranger and stranger["ray_component"] == "node"  # a node not in the inventory
    assert relabel(rules, {"__address__": "10.0.0.11:6383"}).get("host") is None  # "10.0.0.1" is not a prefix


def test_the_five_alert_rules_are_there_with_their_thresholds():
    rules = yaml.safe_load(mc.rules_yml())["groups"][0]["rules"]
    by_name = {r["alert"]: r for r in rules}
    assert list(by_name) == ["NodeDown", "RayNodeMissing", "GpuXidError", "GpuTooHot", "DiskAlmostFull"]
    assert by_name["NodeDown"]["expr"] == 'up{job="node"} == 0'
    assert by_name["RayNodeMissing"]["expr"] == 'up{job="ray", ray_component="node"} == 0'
    assert "DCGM_FI_DEV_XID_ERRORS > 0" in by_name["GpuXidError"]["expr"]
    hot = by_name["GpuTooHot"]["expr"]
    assert "DCGM_FI_DEV_SLOWDOWN_TEMP" in hot and "DCGM_FI_DEV_GPU_TEMP >= 85" in hot
    assert "DCGM_FI_DEV_THERMAL_VIOLATION" in hot
    assert (
        "< 0.10" in by_name["DiskAlmostFull"]["expr"]
        and "node_filesystem_avail_bytes" in by_name["DiskAlmostFull"]["expr"]
    )
    for rule in rules:
        assert "{{ $labels.host }}" in rule["annotations"]["summary"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Prometheus's checker) is not installed here")
@pytest.mark.parametrize("gate", [False, True], ids=["", "health gate"])
def test_promtool_accepts_the_config_and_the_rules(tmp_path: Path, gate: bool):
    settings = {**SETTINGS, "health_gate": gate}
    (tmp_path / "rules.yml").write_text(mc.rules_yml(gate))
    prometheus = mc.prometheus_yml(MEMBERS, settings, ray_file=False).replace(mc.RULES_YML, str(tmp_path / "rules.yml"))
    (tmp_path / "prometheus.yml").write_text(prometheus)
    for args in (["check", "rules", str(tmp_path / "rules.yml")], ["check", "config", "--syntax-only",
                                                                     str(tmp_path / "prometheus.yml")]):  # fmt: skip
        done = subprocess.run(["promtool", *args], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_health_gate_is_scraped_on_loopback_with_its_own_host_labels_and_alerted_on_only_when_on():
    assert "rayrig-health" not in mc.prometheus_yml(MEMBERS, SETTINGS, ray_file=False)
    assert "NodeQuarantined" not in mc.rules_yml(False)
    config = yaml.safe_load(mc.prometheus_yml(MEMBERS, {**SETTINGS, "health_gate": True}, ray_file=False))
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "rayrig-health"]
    assert job["honor_labels"] is True  # its series name the host they are about, not the gate's
    assert job["static_configs"][0]["targets"] == [f"127.0.0.1:{SETTINGS['health_metrics_port']}"]
    [rule] = [r for r in yaml.safe_load(mc.rules_yml(True))["groups"][0]["rules"] if r["alert"] == "NodeQuarantined"]
    assert rule["expr"] == "rayrig_node_quarantined == 1"


def test_grafana_provisions_the_data_source_every_dashboard_names():
    source = yaml.safe_load(mc.grafana_datasource_yml(SETTINGS))["datasources"]
    assert source == [
        {
            "name": "Prometheus",
            "uid": "rayrig-prometheus",
            "type": "prometheus",
            "access": "proxy",
            "url": "http://127.0.0.1:9090",
            "isDefault": True,
            "editable": False,
        }
    ]
    providers = yaml.safe_load(mc.grafana_providers_yml(SETTINGS, ray_dashboards=True))["providers"]
    assert [(p["name"], p["options"]["path"]) for p in providers] == [
        ("rayrig", mc.GRAFANA_DASHBOARDS),
        ("Ray", "/var/lib/rayrig/ray/grafana-dashboards"),
    ]
    assert [
        p["name"] for p in yaml.safe_load(mc.grafana_providers_yml(SETTINGS, ray_dashboards=False))["providers"]
    ] == ["rayrig"]


def _datasources(node: object) -> list[object]:
    """Every ``datasource`` value in a dashboard, at any depth."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                found.append(value)
            found += _datasources(value)
    elif isinstance(node, list):
        for item in node:
            found += _datasources(item)
    return found


@pytest.mark.parametrize("path", sorted(Path(mc.__file__).parent.glob("*dashboard*.json")))
def test_every_dashboard_file_is_json_naming_the_provisioned_data_source(path: Path):
    dashboard = json.loads(path.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["panels"]
    sources = _datasources(dashboard)
    assert sources and all(s == {"type": "prometheus", "uid": mc.DATASOURCE_UID} for s in sources), sources
    for panel in dashboard["panels"]:
        assert panel["targets"] and all("DCGM_FI_DEV_" in t["expr"] for t in panel["targets"])


def test_the_gpu_dashboard_is_the_one_grafana_is_given():
    assert json.loads(mc.gpu_dashboard_json())["uid"] == "rayrig-gpus"
    assert mc.grafana_files(SETTINGS, ray_dashboards=False)[mc.GPU_DASHBOARD] == mc.gpu_dashboard_json()
    assert mc.grafana_env(SETTINGS)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] == mc.GPU_DASHBOARD


def test_prometheus_and_grafana_listen_on_loopback_only_and_keep_what_retention_says():
    args = mc.prometheus_args(SETTINGS)
    assert "--web.listen-address=127.0.0.1:9090" in args
    assert "--storage.tsdb.retention.time=15d" in args and "--storage.tsdb.retention.size=10GB" in args
    assert not any("lifecycle" in a for a in args)  # no HTTP stop or reload for anyone on the host
    unbounded = mc.prometheus_args({**SETTINGS, "monitoring_retention_size": None})
    assert not any("retention.size" in a for a in unbounded)
    env = mc.grafana_env({**SETTINGS, "monitoring_grafana_port": 3300})
    assert env["GF_SERVER_HTTP_ADDR"] == "127.0.0.1" and env["GF_SERVER_HTTP_PORT"] == "3300"
    assert env["GF_SECURITY_DISABLE_INITIAL_ADMIN_CREATION"] == "true" and env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"


def test_the_heads_ray_dashboard_gets_grafanas_addresses_only_with_grafana():
    env = mc.ray_head_env(SETTINGS)
    assert env == {
        "RAY_PROMETHEUS_HOST": "http://127.0.0.1:9090",
        "RAY_GRAFANA_HOST": "http://127.0.0.1:3000",
        "RAY_GRAFANA_IFRAME_HOST": "http://127.0.0.1:3000",
        "RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR": "/var/lib/rayrig/ray/grafana-dashboards",
    }
    assert mc.ray_head_env({**SETTINGS, "monitoring_grafana": False}) == {
        "RAY_PROMETHEUS_HOST": "http://127.0.0.1:9090"
    }


def test_the_monitoring_host_is_found_by_name_first_then_by_address():
    hosts = [("head", "10.0.0.1", "head"), ("10.0.0.1", "10.0.0.9", "worker"), ("w2", "10.0.0.3", "worker")]
    assert settings.resolve_monitoring_host(None, hosts) == "head"
    assert settings.resolve_monitoring_host("10.0.0.1", hosts) == "10.0.0.1"  # a host of that name wins
    assert settings.resolve_monitoring_host("10.0.0.3", hosts) == "w2"
    assert settings.resolve_monitoring_host("nowhere", hosts) is None


def test_a_unit_line_keeps_its_words_and_its_hash_follows_them():
    words = ms.run_words("c", "img:1", 65534, [], {"X": "50%", "Y": "$HOME"}, ["--flag"])
    assert ms.systemd_line(words).endswith("--env=X=50%% '--env=Y=$$HOME' img:1 --flag")
    other = ms.run_words("c", "img:1", 65534, [], {"X": "50%", "Y": "$HOME"}, ["--flag", "--more"])
    assert ms.run_hash(words) != ms.run_hash(other)
    assert ms.run_hash(words) == ms.run_hash(
        ms.run_words("c", "img:1", 65534, [], {"Y": "$HOME", "X": "50%"}, ["--flag"])
    )


def test_ray_env_may_point_the_heads_dashboard_elsewhere():
    settings = merge({"ray_role": "head", "ray_env": {"RAY_GRAFANA_HOST": "http://grafana.lab.example:3000"}})
    args = docker_run_args(settings, "head", ["ray", "start"], 0, "2g", None, None, monitoring=True)
    assert "--env=RAY_GRAFANA_HOST=http://grafana.lab.example:3000" in args
    assert "--env=RAY_PROMETHEUS_HOST=http://127.0.0.1:9090" in args
    assert (
        "--mount=type=bind,src=/var/lib/rayrig/ray/grafana-dashboards,dst=/var/lib/rayrig/ray/grafana-dashboards"
        in args
    )
    plain = docker_run_args(settings, "head", ["ray", "start"], 0, "2g", None, None)
    assert not any("RAY_PROMETHEUS_HOST" in a or "grafana-dashboards" in a for a in plain)


#: A web page's origin, as a browser sends it with a script's request to Prometheus.
ORIGIN = "https://attacker.example"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Prometheus is not installed here")
def test_a_real_prometheus_scrapes_a_node_in_both_lists_once_with_the_inventorys_labels(tmp_path: Path):
    port = _free_port()
    members = [mc.Member("head-a", "127.0.0.1", head=True), mc.Member("w-b", "127.0.0.2")]
    settings = {**SETTINGS, "monitoring_prometheus_port": port}
    text = mc.prometheus_yml(members, settings, ray_file=True, self_host="head-a")
    text = text.replace(mc.TARGETS_DIR, str(tmp_path)).replace(mc.RULES_YML, str(tmp_path / "rules.yml"))
    (tmp_path / "prometheus.yml").write_text(text.replace(mc.RAY_SD_FILE, str(tmp_path / "ray_sd.json")))
    (tmp_path / "rules.yml").write_text(mc.rules_yml())
    for path, body in mc.target_files(members, settings).items():
        (tmp_path / Path(path).name).write_text(body)
    ray_file = [
        {"labels": {"job": "ray"}, "targets": ["127.0.0.1:6383", "127.0.0.2:6383", "127.0.0.1:44227", "127.0.0.9:6383"]}
    ]
    (tmp_path / "ray_sd.json").write_text(json.dumps(ray_file))  # as Ray writes it, with a node the inventory lacks
    here = {mc.PROMETHEUS_YML: str(tmp_path / "prometheus.yml"), mc.PROMETHEUS_DATA: str(tmp_path / "data")}
    args = [re.sub("|".join(map(re.escape, here)), lambda m: here[m[0]], a) for a in mc.prometheus_args(settings)]
    process = subprocess.Popen(["prometheus", *args], stderr=subprocess.DEVNULL)
    try:
        targets: list[dict] = []
        deadline = time.monotonic() + 30
        while len(targets) < 8 and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=2) as answer:
                    targets = json.load(answer)["data"]["activeTargets"]
            except OSError:
                continue
        ray = sorted((t["labels"]["instance"], t["labels"].get("host"), t["labels"]["ray_component"])
                     for t in targets if t["labels"]["job"] == "ray")  # fmt: skip
        assert ray == [
            ("127.0.0.1:44217", "head-a", "autoscaler"),
            ("127.0.0.1:44227", "head-a", "dashboard"),
            ("127.0.0.1:6383", "head-a", "node"),
            ("127.0.0.2:6383", "w-b", "node"),
            ("127.0.0.9:6383", None, "node"),
        ]
        # A web page the operator's browser opens cannot read Prometheus through the tunnel: no CORS grant.
        query = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/query?query=up", headers={"Origin": ORIGIN})
        with urllib.request.urlopen(query, timeout=5) as answer:
            assert answer.status == 200 and "Access-Control-Allow-Origin" not in answer.headers
    finally:
        process.terminate()
        process.wait(timeout=30)
