"""The exporters on every supported OS: the node exporter from a package or a container, the DCGM
exporter on GPU hosts only, through the head's mirror when it runs one; their ports open to the
members only; a re-run that plans nothing; and everything rayrig installed taken away with
monitoring_enabled = False, a package the host had before rayrig left as it was."""

from __future__ import annotations

import re
import shlex

import pytest

from deploy.contract import settings
from deploy.firewall import nftables
from deploy.host.image_mirror import local_name, source_reference
from deploy.monitoring import exporters as mon
from tests.plan.fakes import fake_mirror
from tests.plan.fakes.fakehosts import CPU_WORKER, GPU_WORKER, HEAD, NVIDIA_DAEMON_JSON, OSES, reference_cluster
from tests.plan.harness import HostRun, Run, run_deploy

ALL = (HEAD, GPU_WORKER, CPU_WORKER)
ADDRESS = {HEAD: "10.0.0.1", GPU_WORKER: "10.0.0.2", CPU_WORKER: "10.0.0.3"}
NODE_IMAGE = settings.defaults()["monitoring_node_exporter_image"]  # pinned by digest
NODE_SOURCE, NODE_LOCAL = source_reference(NODE_IMAGE), local_name(NODE_IMAGE)  # pulled by it, run by a name
DCGM_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"
#: The node exporter per OS: (package, its unit); None: the container.
PACKAGE = {
    "ubuntu22": ("prometheus-node-exporter", "prometheus-node-exporter"),
    "ubuntu24": ("prometheus-node-exporter", "prometheus-node-exporter"),
    "debian12": ("prometheus-node-exporter", "prometheus-node-exporter"),
    "rocky9": ("node-exporter", "node_exporter"),
    "al2023": None,
}
OFF = {"monitoring_enabled": False}


def exporter_ops(host: HostRun) -> list[str]:
    return [op.name.split(" | ", 1)[1] for op in host.changes if op.name.startswith("Monitoring exporters |")]


def off(os_name: str, state: str = "converged", exporters: dict | None = None) -> Run:
    """A cluster in ``state`` (converged: deployed with the exporters), now deployed with
    monitoring_enabled = False; ``exporters``: host -> fake_monitoring_exporters options."""
    options = {name: {"exporters": (exporters or {}).get(name, {})} for name in ALL}
    options[GPU_WORKER]["daemon_json"] = NVIDIA_DAEMON_JSON
    hosts = reference_cluster(os_name, state, options=options)
    return run_deploy([(name, {**data, **OFF}) for name, data in hosts])


@pytest.fixture(scope="module", params=OSES)
def fresh(request):
    return request.param, run_deploy(reference_cluster(request.param))


# --- Installing --------------------------------------------------------------------------------------


def test_the_node_exporter_comes_from_the_os_package_or_the_container(fresh):
    os_name, run = fresh
    for name in ALL:
        host = run[name]
        listen = f"--web.listen-address={ADDRESS[name]}:9100"
        if PACKAGE[os_name] is None:  # Amazon Linux 2023: no package, the pinned container
            assert host.op(f"Fetch the exporter image {re.escape(NODE_IMAGE)}$").commands == [
                f"timeout 3600 docker pull --quiet {NODE_SOURCE}",
                f"docker tag {NODE_SOURCE} {NODE_LOCAL} && docker rmi {NODE_SOURCE}",
                f"mkdir -p /var/lib/rayrig/exporters && {{ grep -qxF -- {NODE_LOCAL} /var/lib/rayrig/exporters/images "
                f"2>/dev/null || echo {NODE_LOCAL} >> /var/lib/rayrig/exporters/images; }}",
            ]
            unit = host.op("Install the rayrig-node-exporter unit").uploads[
                "/etc/systemd/system/rayrig-node-exporter.service"
            ]
            start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
            assert shlex.split(start.removeprefix("ExecStart=")) == [
                "/usr/bin/env", "docker", "run", "--rm", "--name=rayrig-node-exporter", "--pull=never", "--net=host",
                "--pid=host", "--volume=/:/host:ro,rslave", NODE_LOCAL, "--path.rootfs=/host", listen,
            ]  # fmt: skip
            assert "Restart=always" in unit
            assert host.op("Enable and start rayrig-node-exporter").commands == [
                "systemctl start rayrig-node-exporter.service",
                "systemctl enable rayrig-node-exporter.service",
            ]
            assert not any("node-exporter" in c and c.startswith(("apt-get", "dnf")) for c in host.commands)
            continue
        package, service = PACKAGE[os_name]
        assert not host.has_op("Fetch the exporter image quay.io")
        if os_name == "rocky9":  # EPEL's package, EPEL added first
            assert host.op("Add the EPEL repository \\(for the node exporter\\)").commands == [
                "dnf install -y epel-release"
            ]
            assert host.op("Install the node exporter package").commands == [f"dnf install -y {package}"]
        else:
            assert (
                host.op("Install the node exporter package")
                .commands[-1]
                .endswith(f"install --no-install-recommends {package}")
            )
        marker = host.op("Record that rayrig installs the node exporter package")
        assert marker.uploads[mon.PACKAGE_MARKER] == f"{package}\n"
        assert marker.step < host.op("Install the node exporter package").step  # recorded before the install
        drop_in = host.op(f"Make {service} listen on the node's address").uploads[
            f"/etc/systemd/system/{service}.service.d/rayrig.conf"
        ]
        binary = "/usr/bin/prometheus-node-exporter" if package.startswith("prometheus") else "/usr/bin/node_exporter"
        assert f"ExecStart=\nExecStart={binary} {listen}\n" in drop_in
        assert "After=rayrig-firewall.service" in drop_in
        # The package's install starts it with its own flags: restarted with rayrig's.
        assert host.op(f"Restart {service} with rayrig's flags").commands == [f"systemctl restart {service}.service"]
        assert not host.has_op("rayrig-node-exporter")
        waited = host.op(f"Wait for {service} to answer on port 9100").commands[0]
        assert f"_ {ADDRESS[name]} 9100 ||" in waited and f"journalctl --unit {service}.service" in waited


def test_the_dcgm_exporter_runs_on_the_gpu_host_only(fresh):
    os_name, run = fresh
    gpu = run[GPU_WORKER]
    assert (
        gpu.op(f"Fetch the exporter image {DCGM_IMAGE}$").commands[0]
        == f"timeout 3600 docker pull --quiet {DCGM_IMAGE}"
    )
    unit = gpu.op("Install the rayrig-gpu-exporter unit").uploads["/etc/systemd/system/rayrig-gpu-exporter.service"]
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert shlex.split(start.removeprefix("ExecStart=")) == [
        "/usr/bin/env", "docker", "run", "--rm", "--name=rayrig-gpu-exporter", "--pull=never", "--net=host",
        "--gpus=all", "--env=DCGM_EXPORTER_LISTEN=10.0.0.2:9400",
        "--volume=/etc/rayrig/dcgm-counters.csv:/etc/dcgm-exporter/rayrig-counters.csv:ro",
        "--env=DCGM_EXPORTER_COLLECTORS=/etc/dcgm-exporter/rayrig-counters.csv", DCGM_IMAGE,
    ]  # fmt: skip
    assert "SYS_ADMIN" not in unit
    # The counters the checks and the alert rules read, which the exporter's defaults leave out.
    counters = gpu.op("Install the DCGM exporter's counters").uploads["/etc/rayrig/dcgm-counters.csv"]
    fields = {line.split(",")[0] for line in counters.splitlines() if line and not line.startswith("#")}
    assert {
        "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_SLOWDOWN_TEMP", "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL",
    } <= fields  # fmt: skip
    assert gpu.op("Wait for rayrig-gpu-exporter to answer on port 9400").commands
    # The image comes before the unit that runs it, and after Ray's node.
    steps = [
        gpu.op(p).step for p in ("Start the Ray worker container", "Fetch the exporter image nvcr", "gpu-exporter unit")
    ]
    assert steps == sorted(steps)
    for name in (HEAD, CPU_WORKER):
        assert not run[name].has_op("gpu-exporter") and not run[name].has_op("(?i)dcgm"), (os_name, name)


def test_no_gpu_exporter_when_the_data_says_none():
    run = run_deploy(reference_cluster("ubuntu22", data={"monitoring_gpu_exporter": "none"}))
    assert not run[GPU_WORKER].has_op("gpu-exporter") and not run[GPU_WORKER].has_op("(?i)dcgm")
    ruleset = run[GPU_WORKER].op("Install rayrig's nftables ruleset").uploads[nftables.RULESET_PATH]
    assert "9400" not in ruleset and "9100,  # node_exporter" in ruleset


@pytest.mark.parametrize("os_name", OSES)
def test_a_converged_host_plans_nothing(os_name):
    run = run_deploy(reference_cluster(os_name, "converged"))
    assert {name: exporter_ops(run[name]) for name in ALL} == {name: [] for name in ALL}
    assert run.changed_hosts == {}


@pytest.mark.parametrize("os_name", ["ubuntu22", "rocky9", "al2023"])
def test_an_exporter_running_with_other_flags_is_restarted(os_name):
    """What runs counts, not whether a file changed: a run cut short between the unit and the restart."""
    service = PACKAGE[os_name][1] if PACKAGE[os_name] else "rayrig-node-exporter"
    live = {service: ["/usr/bin/whatever", "--web.listen-address=:9100"], "rayrig-gpu-exporter": ["docker", "run"]}
    hosts = reference_cluster(os_name, "converged", exporters={"live_args": live})
    run = run_deploy(hosts)
    for name in ALL:
        assert exporter_ops(run[name])[:1] == [f"Restart {service} with rayrig's flags"], name
        assert f"Wait for {service} to answer on port 9100" in exporter_ops(run[name])
    assert "Restart rayrig-gpu-exporter with rayrig's flags" in exporter_ops(run[GPU_WORKER])


def test_a_package_the_host_already_had_is_configured_but_not_recorded_as_rayrigs():
    hosts = reference_cluster("debian12", "converged", exporters={"installed": False, "package_only": True})
    run = run_deploy(hosts)
    head = run[HEAD]
    assert not head.has_op("Record that rayrig installs") and not head.has_op("Install the node exporter package")
    assert head.has_op("Make prometheus-node-exporter listen on the node's address")
    assert head.op("Restart prometheus-node-exporter with rayrig's flags").commands  # it ran with its own flags


def test_the_metrics_ports_are_open_to_the_members_only(fresh):
    _os, run = fresh
    for name in ALL:
        ruleset = run[name].op("Install rayrig's nftables ruleset").uploads[nftables.RULESET_PATH]
        members = ruleset.split("set ray_ports {", 1)[1].split("\n\t}", 1)[0]
        for port, what in ((9100, "node_exporter"), (9400, "gpu_exporter"), (6383, "metrics_export"),
                           (44217, "autoscaler_metrics"), (44227, "dashboard_metrics")):  # fmt: skip
            assert f"{port},  # {what}" in members
            assert not [line for line in ruleset.splitlines() if f"dport {port}" in line]
        assert "ip saddr @members_v4 tcp dport @ray_ports accept" in ruleset


def test_the_heads_ray_node_pins_its_metrics_ports(fresh):
    _os, run = fresh
    create = run[HEAD].docker_create()
    assert "--env=DASHBOARD_METRIC_PORT=44227" in create and "--env=AUTOSCALER_METRIC_PORT=44217" in create
    assert not [a for a in run[CPU_WORKER].docker_create() if "METRIC_PORT" in a]


# --- Through the head's mirror -----------------------------------------------------------------------


def test_the_head_copies_the_dcgm_image_once_and_the_gpu_host_fetches_it_from_there():
    """The head is a CPU host: it copies what another host needs without running it itself."""
    run = run_deploy(reference_cluster("ubuntu22", data={"image_mirror": "head"}))
    copy = run[HEAD].op(f"Copy the exporter image {DCGM_IMAGE} to the head's mirror")
    words = shlex.split(copy.commands[0])
    # mirror-copy.sh SOURCE DEST WRITER_ADDR WRITER_CONFIG DIGEST_FILE SRC_TLS_VERIFY AUTHFILE TIMEOUT_S
    assert words[:4] == ["/usr/local/lib/rayrig/mirror-copy.sh", DCGM_IMAGE, words[2], "127.0.0.1:5000"]
    assert re.fullmatch(r"nvidia/k8s/dcgm-exporter:rayrig-\d{14}-[0-9a-f]{6}", words[2]), words
    assert words[-1] == "3600"
    fetch = run[GPU_WORKER].op(f"Fetch the exporter image {DCGM_IMAGE} through the head's mirror")
    pinned = f"10.0.0.1:5000/nvidia/k8s/dcgm-exporter@{fake_mirror.DIGEST}"
    assert fetch.commands[0] == (
        f"timeout 3600 docker pull --quiet {pinned} && docker tag {pinned} {DCGM_IMAGE} "
        f"&& {{ docker rmi {pinned} 10.0.0.1:5000/{words[2]} >/dev/null 2>&1 || true; }}"
    )  # the digest the head's copy printed (tests/plan/fakes/fake_mirror.py), never the tag
    assert copy.step < fetch.step  # pyinfra runs the head's copy on every host before anyone fetches
    assert not run[HEAD].has_op("Fetch the exporter image") and not run[CPU_WORKER].has_op("exporter image")


PINNED_DCGM = f"{DCGM_IMAGE}@sha256:{'ab' * 32}"
PINNED_DCGM_LOCAL = "nvcr.io/nvidia/k8s/dcgm-exporter:rayrig-abababababab"


def test_a_pinned_exporter_image_is_copied_by_its_digest_and_runs_by_the_name_of_that_digest():
    data = {"image_mirror": "head", "monitoring_gpu_exporter_image": PINNED_DCGM}
    run = run_deploy(reference_cluster("ubuntu22", data=data))
    copy = run[HEAD].op(f"Copy the exporter image {PINNED_DCGM} to the head's mirror")
    assert shlex.split(copy.commands[0])[1] == f"nvcr.io/nvidia/k8s/dcgm-exporter@sha256:{'ab' * 32}"  # no tag
    fetch = run[GPU_WORKER].op(f"Fetch the exporter image {PINNED_DCGM} through the head's mirror")
    assert f" {PINNED_DCGM_LOCAL} " in fetch.commands[0]  # Docker tags no digest
    unit = run[GPU_WORKER].op(f"Install the {mon.GPU_UNIT} unit").uploads[f"/etc/systemd/system/{mon.GPU_UNIT}.service"]
    assert PINNED_DCGM_LOCAL in unit and "@sha256" not in unit
    direct = run_deploy(reference_cluster("ubuntu22", data={"monitoring_gpu_exporter_image": PINNED_DCGM}))
    [pull, tag, record] = direct[GPU_WORKER].op(f"Fetch the exporter image {PINNED_DCGM}").commands
    source = f"nvcr.io/nvidia/k8s/dcgm-exporter@sha256:{'ab' * 32}"
    assert pull.endswith(f"docker pull --quiet {source}")
    assert tag == f"docker tag {source} {PINNED_DCGM_LOCAL} && docker rmi {source}"
    assert PINNED_DCGM_LOCAL in record


def test_with_the_mirror_and_every_image_present_nothing_is_copied():
    run = run_deploy(reference_cluster("ubuntu22", "converged", data={"image_mirror": "head"}))
    assert not any(run[name].has_op("exporter image") for name in ALL)


# --- Removing ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("os_name", OSES)
def test_monitoring_off_removes_what_rayrig_installed(os_name):
    run = off(os_name)
    for name in ALL:
        host = run[name]
        ops = exporter_ops(host)
        if PACKAGE[os_name]:
            package, service = PACKAGE[os_name]
            assert host.op(f"Remove rayrig's drop-in for {service}").commands == [
                f"rm -f /etc/systemd/system/{service}.service.d/rayrig.conf",
                f"rmdir --ignore-fail-on-non-empty /etc/systemd/system/{service}.service.d",
            ]
            removal = " ".join(host.op("Remove the node exporter package rayrig installed").commands)
            assert package in removal and ("remove" in removal)
            assert not host.has_op("with its own flags")  # it is going away
        else:
            assert host.op("Stop and disable rayrig-node-exporter.service").commands == [
                "systemctl stop rayrig-node-exporter.service",
                "systemctl disable rayrig-node-exporter.service",
            ]
            assert host.op("Remove the rayrig-node-exporter.service unit").commands == [
                "rm -f /etc/systemd/system/rayrig-node-exporter.service"
            ]
        assert ops[-1] == "Remove rayrig's exporter records"
        assert host.op("Remove rayrig's exporter records").commands == ["rm -rf /var/lib/rayrig/exporters"]
    gpu = run[GPU_WORKER]
    assert gpu.has_op("Stop and disable rayrig-gpu-exporter.service")
    assert gpu.op("Remove the DCGM exporter's counters").commands == ["rm -f /etc/rayrig/dcgm-counters.csv"]
    images = gpu.op("Remove the exporter images rayrig pulled").commands[0]
    assert f"docker image rm -- {DCGM_IMAGE}" in images
    assert (f"docker image rm -- {NODE_LOCAL}" in images) == (PACKAGE[os_name] is None)
    for name in (HEAD, CPU_WORKER):
        assert not run[name].has_op("gpu-exporter")
    # Monitoring is off: the exporters' ports leave the members' set; Ray's metrics ports stay.
    ruleset = run[HEAD].op("Install rayrig's nftables ruleset").uploads[nftables.RULESET_PATH]
    assert "9100" not in ruleset and "9400" not in ruleset and "44227,  # dashboard_metrics" in ruleset


@pytest.mark.parametrize("os_name", OSES)
def test_monitoring_off_twice_plans_nothing(os_name):
    run = off(os_name, "fresh")
    assert {name: exporter_ops(run[name]) for name in ALL} == {name: [] for name in ALL}


def test_monitoring_off_keeps_a_package_the_host_had_before_rayrig():
    run = off("ubuntu24", exporters={HEAD: {"own_package": True}})
    head = run[HEAD]
    assert not head.has_op("Remove the node exporter package")
    assert head.has_op("Remove rayrig's drop-in for prometheus-node-exporter")
    assert head.op("Restart prometheus-node-exporter with its own flags").commands == [
        "systemctl try-restart prometheus-node-exporter.service"
    ]
    assert run[CPU_WORKER].has_op("Remove the node exporter package rayrig installed")


def test_a_gpu_exporter_no_longer_wanted_is_removed_with_its_image():
    hosts = reference_cluster("rocky9", "converged")
    hosts = [(n, {**d, "monitoring_gpu_exporter": "none"}) for n, d in hosts]
    run = run_deploy(hosts)
    gpu = run[GPU_WORKER]
    assert exporter_ops(gpu) == [
        "Stop and disable rayrig-gpu-exporter.service",
        "Remove the rayrig-gpu-exporter.service unit",
        "Reload systemd units without rayrig's exporters",
        "Remove the DCGM exporter's counters",
        "Remove the exporter images no longer used",
    ]
    assert f"docker image rm -- {DCGM_IMAGE}" in gpu.op("Remove the exporter images no longer used").commands[0]


def test_a_host_leaving_the_cluster_loses_its_exporters_before_its_firewall():
    hosts = reference_cluster("rocky9", "converged")
    hosts = [(n, {**d, "ray_state": "absent"} if n == GPU_WORKER else d) for n, d in hosts]
    run = run_deploy(hosts)
    gone = run[GPU_WORKER]
    stop = gone.op("Stop and disable rayrig-gpu-exporter.service")
    assert "dnf remove -y node-exporter" in gone.op("Remove the node exporter package rayrig installed").commands
    assert gone.has_op("Remove the exporter images rayrig pulled") and gone.has_op("Remove rayrig's exporter records")
    assert stop.step < gone.op("Delete rayrig's nftables table").step
    assert exporter_ops(run[HEAD]) == [] and exporter_ops(run[CPU_WORKER]) == []
