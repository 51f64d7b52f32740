"""Prometheus and Grafana on the monitoring host (deploy/monitoring/server.py), as planned commands."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml

from deploy.contract import settings
from deploy.contract.schema import InventoryError
from deploy.host.image_mirror import local_name, source_reference
from deploy.monitoring import config as mc
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, OSES, reference_cluster
from tests.plan.harness import HostRun, run_deploy

PROMETHEUS_UNIT = "/etc/systemd/system/rayrig-prometheus.service"
GRAFANA_UNIT = "/etc/systemd/system/rayrig-grafana.service"
DASHBOARDS = "/var/lib/rayrig/ray/grafana-dashboards"
#: The default images, pinned by digest, and the names the monitoring host runs them by (pulled by digest).
PROMETHEUS_IMAGE, GRAFANA_IMAGE = (settings.defaults()[f"monitoring_{x}_image"] for x in ("prometheus", "grafana"))
PROMETHEUS_LOCAL, GRAFANA_LOCAL = local_name(PROMETHEUS_IMAGE), local_name(GRAFANA_IMAGE)
#: Everything the step writes on the monitoring host (Grafana on).
FILES = (
    mc.PROMETHEUS_YML, mc.RULES_YML, f"{mc.TARGETS_DIR}/ray.json", f"{mc.TARGETS_DIR}/node.json",
    f"{mc.TARGETS_DIR}/gpu.json", mc.GRAFANA_DATASOURCE, mc.GRAFANA_PROVIDERS, mc.GPU_DASHBOARD,
    PROMETHEUS_UNIT, GRAFANA_UNIT,
)  # fmt: skip


def exec_start(run: HostRun, unit: str) -> list[str]:
    """The ``docker run`` words of a unit the run wrote."""
    line = next(x for x in run.uploads[unit].splitlines() if x.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart=/usr/bin/env "))


def monitoring_changes(run: HostRun) -> list[str]:
    return [op.name for op in run.changes if op.name.startswith("Monitoring server")]


@pytest.mark.parametrize("os_name", OSES)
def test_a_fresh_cluster_runs_prometheus_and_grafana_on_the_head_only(os_name):
    run = run_deploy(reference_cluster(os_name, "fresh"))
    head = run[HEAD]
    for path in FILES:
        assert path in head.uploads, path
    assert head.op("Write Prometheus's configuration").commands[-1] == f"chmod 644 {mc.PROMETHEUS_YML}"
    source = source_reference(PROMETHEUS_IMAGE)
    assert source == "quay.io/prometheus/prometheus@" + PROMETHEUS_IMAGE.split("@")[1]
    assert head.op(f"Get Prometheus's image {re.escape(PROMETHEUS_IMAGE)}").commands == [
        f"docker pull --quiet {source}",  # by the digest, then named for it: Docker tags no digest
        f"docker tag {source} {PROMETHEUS_LOCAL} && docker rmi {source}",
    ]
    assert head.op(f"Get Grafana's image {re.escape(GRAFANA_IMAGE)}").changed
    assert head.op("Keep the rayrig-prometheus service").commands == [
        "systemctl start rayrig-prometheus.service",
        "systemctl enable rayrig-prometheus.service",
    ]
    assert head.op("Keep the rayrig-grafana service").changed
    assert head.op(r"Make /var/lib/rayrig/prometheus the").commands == [
        "chown -R 65534:65534 /var/lib/rayrig/prometheus"
    ]
    assert head.op(r"Make /var/lib/rayrig/grafana the").commands == ["chown -R 472:472 /var/lib/rayrig/grafana"]
    prometheus = exec_start(head, PROMETHEUS_UNIT)
    assert prometheus[:3] == ["docker", "run", "--rm"] and "--network=host" in prometheus
    assert PROMETHEUS_LOCAL in prometheus and GRAFANA_LOCAL in exec_start(head, GRAFANA_UNIT)
    assert "--web.listen-address=127.0.0.1:9090" in prometheus
    assert "--storage.tsdb.retention.time=15d" in prometheus and "--storage.tsdb.retention.size=10GB" in prometheus
    # Only the folder of the copy of Ray's service-discovery file, read-only; nothing of Ray's own folder.
    assert "--mount=type=bind,src=/var/lib/rayrig/ray-sd,dst=/var/lib/rayrig/ray-sd,readonly" in prometheus
    assert not any("/var/lib/rayrig/ray/" in w or "/tmp/ray" in w for w in prometheus)
    grafana = exec_start(head, GRAFANA_UNIT)
    assert "--env=GF_SERVER_HTTP_ADDR=127.0.0.1" in grafana and "--env=GF_SERVER_HTTP_PORT=3000" in grafana
    assert f"--mount=type=bind,src={DASHBOARDS},dst={DASHBOARDS},readonly" in grafana
    # The head's Ray dashboard knows where they are, and shares its dashboards with the host.
    create = head.docker_create()
    grafana_url = "http://127.0.0.1:3000"
    wanted = [
        "RAY_PROMETHEUS_HOST=http://127.0.0.1:9090",
        f"RAY_GRAFANA_HOST={grafana_url}",
        f"RAY_GRAFANA_IFRAME_HOST={grafana_url}",
        f"RAY_METRICS_GRAFANA_DASHBOARD_OUTPUT_DIR={DASHBOARDS}",
    ]
    for env in wanted:
        assert f"--env={env}" in create
    assert f"--mount=type=bind,src={DASHBOARDS},dst={DASHBOARDS}" in create
    for worker in (GPU_WORKER, CPU_WORKER):
        assert monitoring_changes(run[worker]) == []
        assert not any("RAY_GRAFANA" in a or "RAY_PROMETHEUS" in a for a in run[worker].docker_create())


def test_the_targets_name_every_host_and_the_gpu_job_only_the_gpu_host():
    head = run_deploy(reference_cluster("ubuntu22", "fresh"))[HEAD]
    config = yaml.safe_load(head.uploads[mc.PROMETHEUS_YML])
    assert [job["job_name"] for job in config["scrape_configs"]] == ["ray", "node", "gpu", "prometheus"]
    ray_files = config["scrape_configs"][0]["file_sd_configs"][0]["files"]
    assert ray_files == [f"{mc.TARGETS_DIR}/ray.json", mc.RAY_SD_FILE]
    node = json.loads(head.uploads[f"{mc.TARGETS_DIR}/node.json"])
    assert [(g["targets"], g["labels"]["host"]) for g in node] == [
        (["10.0.0.1:9100"], HEAD), (["10.0.0.2:9100"], GPU_WORKER), (["10.0.0.3:9100"], CPU_WORKER)
    ]  # fmt: skip
    gpu = json.loads(head.uploads[f"{mc.TARGETS_DIR}/gpu.json"])
    assert gpu == [{"labels": {"host": GPU_WORKER}, "targets": ["10.0.0.2:9400"]}]


def test_no_gpu_exporter_leaves_the_gpu_job_empty():
    head = run_deploy(reference_cluster("rocky9", "fresh", data={"monitoring_gpu_exporter": "none"}))[HEAD]
    assert json.loads(head.uploads[f"{mc.TARGETS_DIR}/gpu.json"]) == []


@pytest.mark.parametrize("os_name", OSES)
def test_a_converged_monitoring_host_plans_nothing(os_name):
    run = run_deploy(reference_cluster(os_name, "converged"))
    assert run.changed_hosts == {}
    assert run[HEAD].has_op("Keep the rayrig-prometheus service")  # it looked, and found it running


@pytest.mark.parametrize("value", [GPU_WORKER, "10.0.0.2"])
def test_monitoring_host_may_name_a_worker_by_name_or_address(value):
    run = run_deploy(reference_cluster("debian12", "fresh", data={"monitoring_host": value}))
    worker, head = run[GPU_WORKER], run[HEAD]
    for path in FILES:
        assert path in worker.uploads, path
    assert monitoring_changes(head) == [] and monitoring_changes(run[CPU_WORKER]) == []
    # Ray's file and dashboards are the head's: the worker's Prometheus scrapes the inventory's list only.
    config = yaml.safe_load(worker.uploads[mc.PROMETHEUS_YML])
    assert config["scrape_configs"][0]["file_sd_configs"][0]["files"] == [f"{mc.TARGETS_DIR}/ray.json"]
    assert not any("/tmp/ray" in w or "ray-sd" in w for w in exec_start(worker, PROMETHEUS_UNIT))
    assert not worker.has_op("rayrig-ray-sd") and not head.has_op("rayrig-ray-sd")
    providers = yaml.safe_load(worker.uploads[mc.GRAFANA_PROVIDERS])["providers"]
    assert [p["name"] for p in providers] == ["rayrig"]
    ray = json.loads(worker.uploads[f"{mc.TARGETS_DIR}/ray.json"])
    assert {g["labels"]["host"] for g in ray} == {HEAD, GPU_WORKER, CPU_WORKER}
    # The head's Ray dashboard cannot reach a worker's loopback: no embedding.
    assert not any("RAY_GRAFANA" in a or "RAY_PROMETHEUS" in a for a in head.docker_create())
    assert not head.has_op("Create the folder of Ray's Grafana dashboards")


def test_grafana_off_runs_prometheus_only():
    run = run_deploy(reference_cluster("ubuntu24", "fresh", data={"monitoring_grafana": False}))
    head = run[HEAD]
    assert PROMETHEUS_UNIT in head.uploads and GRAFANA_UNIT not in head.uploads
    assert not any("grafana" in path for path in head.uploads)
    assert not head.has_op("rayrig-grafana service") and not head.has_op("Grafana's image")
    create = head.docker_create()
    assert "--env=RAY_PROMETHEUS_HOST=http://127.0.0.1:9090" in create
    assert not any("GRAFANA" in a or "grafana" in a for a in create)


def test_turning_grafana_off_removes_it_from_a_converged_head():
    leftovers = [("PATH", GRAFANA_UNIT), ("CONTAINER", "rayrig-grafana"), ("IMAGE", GRAFANA_LOCAL),
                 ("PATH", mc.GRAFANA_DIR), ("PATH", mc.GRAFANA_DATA), ("PATH", DASHBOARDS)]  # fmt: skip
    hosts = reference_cluster(
        "ubuntu22", "converged", data={"monitoring_grafana": False},
        options={HEAD: {"monitoring": {"leftovers": leftovers}}},
    )  # fmt: skip
    head = run_deploy(hosts)[HEAD]
    assert head.op("Stop and disable the rayrig-grafana service").commands == [
        "systemctl stop rayrig-grafana.service",
        "systemctl disable rayrig-grafana.service",
    ]
    assert head.op("Remove the rayrig-grafana systemd unit").commands == [f"rm -f {GRAFANA_UNIT}"]
    assert head.op("Remove the rayrig-grafana container").commands == ["docker rm --force rayrig-grafana"]
    assert head.op(f"Remove the image {GRAFANA_LOCAL}").commands == [f"docker rmi {GRAFANA_LOCAL}"]
    for folder in (mc.GRAFANA_DIR, mc.GRAFANA_DATA, DASHBOARDS):
        assert head.op(f"Remove {folder}$").commands == [f"rm -rf {folder}"]
    assert not head.has_op("Remove the rayrig-prometheus")


def test_monitoring_off_removes_everything_and_a_rerun_plans_nothing():
    every = [("PATH", PROMETHEUS_UNIT), ("PATH", GRAFANA_UNIT), ("CONTAINER", "rayrig-prometheus"),
             ("CONTAINER", "rayrig-grafana"), ("IMAGE", PROMETHEUS_LOCAL),
             ("IMAGE", GRAFANA_LOCAL), ("PATH", mc.CONFIG_DIR), ("PATH", mc.PROMETHEUS_DATA),
             ("PATH", mc.GRAFANA_DATA), ("PATH", DASHBOARDS)]  # fmt: skip
    off = {"monitoring_enabled": False}
    was_on = {"leftovers": every, "head_monitors": True}  # ray-node still runs with the monitoring environment
    hosts = reference_cluster("al2023", "converged", data=off, options={HEAD: {"monitoring": was_on}})
    head = run_deploy(hosts)[HEAD]
    removed = monitoring_changes(head)
    names = ["Stop and disable the rayrig-prometheus service", "Remove the rayrig-prometheus systemd unit",
             "Reload systemd units without rayrig-prometheus", "Remove the rayrig-prometheus container",
             f"Remove the image {PROMETHEUS_LOCAL}", f"Remove {mc.CONFIG_DIR}",
             f"Remove {mc.PROMETHEUS_DATA}", "Remove the rayrig-grafana container", f"Remove {DASHBOARDS}"]  # fmt: skip
    for name in names:
        assert f"Monitoring server | {name}" in removed, name
    assert not any("RAY_PROMETHEUS" in a or "grafana" in a for a in head.docker_create())  # replaced without it
    # Once it is all gone (the fakes' converged hosts without monitoring), nothing is planned.
    again = run_deploy(reference_cluster("al2023", "converged", data=off))
    assert again.changed_hosts == {}


def test_moving_the_monitoring_host_removes_it_from_the_head():
    leftovers = [("PATH", PROMETHEUS_UNIT), ("CONTAINER", "rayrig-prometheus"), ("PATH", mc.CONFIG_DIR)]
    hosts = reference_cluster(
        "ubuntu22",
        "fresh",
        data={"monitoring_host": CPU_WORKER},
        options={HEAD: {"monitoring": {"leftovers": leftovers}}},
    )
    run = run_deploy(hosts)
    assert run[HEAD].op("Remove the rayrig-prometheus container").changed
    assert run[HEAD].op(f"Remove {mc.CONFIG_DIR}$").changed
    assert PROMETHEUS_UNIT in run[CPU_WORKER].uploads


def test_configuration_written_after_the_last_reload_is_reloaded_not_restarted():
    hosts = reference_cluster("ubuntu22", "converged", options={HEAD: {"monitoring": {"config_unread": True}}})
    head = run_deploy(hosts)[HEAD]
    assert head.op("Reload Prometheus's configuration").commands == ["docker kill --signal=HUP rayrig-prometheus"]
    assert not head.op("Keep the rayrig-prometheus service").changed


def test_a_container_that_is_not_its_units_is_restarted():
    hosts = reference_cluster("debian12", "converged", options={HEAD: {"monitoring": {"prometheus_label": "0ld"}}})
    head = run_deploy(hosts)[HEAD]
    assert head.op("Keep the rayrig-prometheus service").commands == ["systemctl restart rayrig-prometheus.service"]
    assert not head.has_op("Reload Prometheus's configuration")  # the restart reads it


def test_a_changed_retention_rewrites_the_unit_and_restarts_prometheus():
    hosts = reference_cluster("ubuntu22", "converged")
    hosts = [(n, {**d, "monitoring_retention_time": "30d"}) for n, d in hosts]
    head = run_deploy(hosts)[HEAD]
    assert "--storage.tsdb.retention.time=30d" in exec_start(head, PROMETHEUS_UNIT)
    assert head.op("Keep the rayrig-prometheus service").commands == ["systemctl restart rayrig-prometheus.service"]
    assert head.op("Reload systemd units for rayrig-prometheus").changed


@pytest.mark.parametrize(
    "data,key,expected",
    [
        ({"monitoring_host": "gpu-99"}, "monitoring_host", "the name or address of a present host"),
        ({"monitoring_prometheus_port": 6383}, "monitoring_prometheus_port", "ray_ports['metrics_export']"),
        ({"monitoring_grafana_port": 9090}, "monitoring_grafana_port", "monitoring_prometheus_port"),
        ({"monitoring_retention_time": "15 days"}, "monitoring_retention_time", "a Prometheus duration"),
    ],
)
def test_bad_monitoring_data_stops_before_any_operation(data, key, expected):
    with pytest.raises(InventoryError) as error:
        run_deploy(reference_cluster("ubuntu22", "fresh", data=data))
    message = str(error.value)
    assert key in message and expected in message and "Nothing was changed on any host." in message


def test_a_new_data_source_restarts_grafana_which_reads_it_at_start_only():
    hosts = [(n, {**d, "monitoring_prometheus_port": 9091}) for n, d in reference_cluster("ubuntu22", "converged")]
    head = run_deploy(hosts)[HEAD]
    assert 'url: "http://127.0.0.1:9091"' in head.op("Write Grafana's data source").uploads[mc.GRAFANA_DATASOURCE]
    assert head.op("Restart Grafana for its provisioning").commands == ["systemctl restart rayrig-grafana.service"]
    assert not head.op("Keep the rayrig-grafana service").changed  # its own command line is the same
    assert "--web.listen-address=127.0.0.1:9091" in exec_start(head, PROMETHEUS_UNIT)
    assert "--env=RAY_PROMETHEUS_HOST=http://127.0.0.1:9091" in head.docker_create()


def test_a_converged_grafana_plans_no_restart():
    head = run_deploy(reference_cluster("ubuntu24", "converged"))[HEAD]
    assert not head.op("Restart Grafana for its provisioning").changed


# --- Ray's service-discovery file: a copy in a folder of its own -------------------------------------

SD_UNIT = "/etc/systemd/system/rayrig-ray-sd.service"
SD_SCRIPT = "/usr/local/lib/rayrig/ray-sd-copy.sh"


def test_the_head_copies_rays_service_discovery_file_for_prometheus_before_prometheus_starts():
    head = run_deploy(reference_cluster("ubuntu22", "fresh"))[HEAD]
    assert head.op("Create /var/lib/rayrig/ray-sd").commands[-1] == "chmod 755 /var/lib/rayrig/ray-sd"
    assert head.op("Install the copier of Ray's service-discovery file").commands[-1] == f"chmod 755 {SD_SCRIPT}"
    unit = head.uploads[SD_UNIT]
    line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    assert shlex.split(line.removeprefix("ExecStart=")) == [
        "/bin/bash", SD_SCRIPT, "/var/lib/rayrig/ray/tmp", "/var/lib/rayrig/ray-sd"
    ]  # fmt: skip
    assert "ReadWritePaths=/var/lib/rayrig/ray-sd\n" in unit and "ProtectSystem=strict\n" in unit
    assert head.op("Keep rayrig-ray-sd.service enabled and running").commands == [
        "systemctl start rayrig-ray-sd.service",
        "systemctl enable rayrig-ray-sd.service",
    ]
    names = [op.name for op in head.ops]
    copier = names.index("Monitoring server | Keep rayrig-ray-sd.service enabled and running")
    assert copier < names.index("Monitoring server | Keep the rayrig-prometheus service enabled and running")


def test_a_changed_copier_is_restarted():
    hosts = reference_cluster("rocky9", "converged")
    for name, data in hosts:
        if name == HEAD:
            data["ray_temp_dir"] = "/srv/ray"  # the copier reads another folder: its unit changes
    head = run_deploy(hosts)[HEAD]
    assert "/srv/ray/tmp" in head.uploads[SD_UNIT]
    assert head.op("Restart rayrig-ray-sd.service").commands == ["systemctl restart rayrig-ray-sd.service"]


def test_a_head_that_no_longer_runs_prometheus_loses_the_copier_and_its_folder():
    leftovers = [("PATH", SD_UNIT), ("PATH", SD_SCRIPT), ("PATH", mc.RAY_SD_DIR)]
    hosts = reference_cluster(
        "ubuntu22",
        "converged",
        data={"monitoring_host": GPU_WORKER},
        options={HEAD: {"monitoring": {"leftovers": leftovers}}},
    )
    head = run_deploy(hosts)[HEAD]
    assert head.op("Stop and disable rayrig-ray-sd.service").changed
    assert head.op("Remove the rayrig-ray-sd.service systemd unit").commands == [f"rm -f {SD_UNIT}"]
    assert head.op("Remove the copier of Ray's service-discovery file").commands == [f"rm -f {SD_SCRIPT}"]
    assert head.op("Remove /var/lib/rayrig/ray-sd").commands == ["rm -rf /var/lib/rayrig/ray-sd"]
