"""The operator-side checks: preflight parsing and judging, cluster totals, the commands sent."""

from __future__ import annotations

import shlex
import tarfile

import pytest

from checks import runner
from checks.verdict import FAIL, INFO, WARN
from deploy.settings import merge

H100 = "NVIDIA H100 80GB HBM3, 550.54.15, 81559"


def preflight(*extra: str, gpus: int = 0, container_gpus: int | None = None, version: str = "2.60.0") -> dict:
    lines = [f"PCI_GPUS={gpus}", "NVSWITCHES=0", *(f"HOST_GPU={H100}" for _ in range(gpus))]
    lines += ["RUNNING=true", f"RAY_VERSION={version}", "SHM_KB=1048576"]
    if gpus:
        lines.append(f"CONTAINER_GPUS={gpus if container_gpus is None else container_gpus}")
    return runner.parse_preflight([*lines, *extra])


def levels(reasons) -> list[tuple[str, str]]:
    return [(r.level, r.message) for r in reasons]


def test_parse_preflight_reads_gpus_and_keys():
    facts = preflight(gpus=2)
    assert facts["pci_gpus"] == "2"
    assert [g["model"] for g in facts["host_gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert facts["host_gpus"][0]["driver"] == "550.54.15"
    assert facts["running"] == "true"


def test_healthy_gpu_node_has_only_information():
    reasons = runner.preflight_reasons("gpu-1", merge({"ray_num_gpus": 2}), preflight(gpus=2), 2**20)
    assert [r.level for r in reasons] == [INFO]
    assert "2 x NVIDIA H100 80GB HBM3, driver 550.54.15" in reasons[0].message


def test_declared_gpus_differ_from_the_host():
    reasons = runner.preflight_reasons("gpu-1", merge({"ray_num_gpus": 8}), preflight(gpus=4), 2**20)
    assert (FAIL, "ray_num_gpus = 8 but the host has 4 GPUs") in levels(reasons)
    assert all(r.host == "gpu-1" for r in reasons)


def test_container_sees_fewer_gpus_than_the_host():
    reasons = runner.preflight_reasons("gpu-1", merge({}), preflight(gpus=8, container_gpus=0), 2**20)
    assert (FAIL, "the ray-node container sees 0 GPUs, the host 8") in levels(reasons)


def test_gpus_without_a_working_driver():
    facts = runner.parse_preflight(["PCI_GPUS=4", "NVSWITCHES=0", "RUNNING=true", "RAY_VERSION=2.60.0"])
    reasons = runner.preflight_reasons("gpu-1", merge({}), facts, 2**20)
    assert (FAIL, "4 NVIDIA GPUs on the PCI bus but no working driver (nvidia-smi)") in levels(reasons)


def test_ray_version_mismatch_and_missing_container():
    reasons = runner.preflight_reasons("w1", merge({"ray_num_gpus": 0}), preflight(version="2.59.0"), 2**20)
    assert (FAIL, "Ray 2.59.0 in the container, expected ray_version 2.60.0") in levels(reasons)
    stopped = runner.parse_preflight(["PCI_GPUS=0", "RUNNING=false"])
    assert levels(runner.preflight_reasons("w1", merge({}), stopped, 2**20)) == [
        (FAIL, "the ray-node container is not running")
    ]


def test_small_shm_warns_and_nvswitch_needs_fabricmanager():
    facts = preflight("NVSWITCHES=4", "FABRICMANAGER=inactive", gpus=8)
    reasons = runner.preflight_reasons("hgx", merge({"ray_num_gpus": 8}), facts, 2 * 2**30)
    assert (WARN, "/dev/shm in the container is 1024 MiB (Ray's object store falls back to disk)") in levels(reasons)
    assert (FAIL, "NVSwitch system but nvidia-fabricmanager is inactive") in levels(reasons)
    healthy = preflight("NVSWITCHES=4", "FABRICMANAGER=active", gpus=8)
    assert FAIL not in {r.level for r in runner.preflight_reasons("hgx", merge({"ray_num_gpus": 8}), healthy, 1)}


DECLARED = [
    {"name": "head", "address": "10.0.0.1", "num_cpus": 2, "num_gpus": 0, "resources": {"a": 1}},
    {"name": "w1", "address": "10.0.0.2", "num_cpus": 4, "num_gpus": 8, "resources": {"b": 1}},
]


def test_expected_totals():
    assert runner.expected_totals(DECLARED) == {"CPU": 6.0, "GPU": 8.0, "a": 1.0, "b": 1.0}
    auto = [{**DECLARED[0], "num_cpus": "auto", "num_gpus": None}, DECLARED[1]]
    assert runner.expected_totals(auto) == {"a": 1.0, "b": 1.0}


def test_cluster_state_matches_the_declarations():
    state = {
        "nodes": [{"ip": "10.0.0.1", "resources": {}}, {"ip": "10.0.0.2", "resources": {}}],
        "total": {"CPU": 6.0, "GPU": 8.0, "a": 1.0, "b": 1.0, "memory": 1e9},
    }
    assert [r.level for r in runner.cluster_reasons(DECLARED, state)] == [INFO]


def test_cluster_state_names_a_missing_node_and_a_wrong_total():
    state = {"nodes": [{"ip": "10.0.0.1", "resources": {}}], "total": {"CPU": 2.0, "GPU": 0.0, "a": 1.0}}
    found = levels(runner.cluster_reasons(DECLARED, state))
    assert (FAIL, "not an alive Ray node (expected at 10.0.0.2)") in found
    assert (FAIL, "cluster total CPU is 2, the inventory declares 6") in found
    assert (FAIL, "cluster total GPU is 0, the inventory declares 8") in found
    assert (FAIL, "cluster total b is 0, the inventory declares 1") in found
    missing = next(r for r in runner.cluster_reasons(DECLARED, state) if "alive" in r.message)
    assert missing.host == "w1"


def test_benchmark_command_passes_thresholds_aliases_and_expected_nodes():
    settings = merge({"checks_profile": "quick", "checks_outlier_fraction": 0.8})
    command = runner.benchmark_command("ray-node", settings, {"10.0.0.2": "w1"}, ["10.0.0.2", "10.0.0.1"])
    run = next(part for part in command.split(" && ") if "checks.benchmark" in part)
    args = shlex.split(run.split("; status=")[0])
    assert args[:5] == ["docker", "exec", "--workdir", runner.IN_CONTAINER_DIR, "ray-node"]
    assert "--quick" in args
    assert args[args.index("--expect-nodes") + 1] == "10.0.0.1,10.0.0.2"
    assert args[args.index("--outlier-fraction") + 1] == "0.8"
    assert args[args.index("--matmul-min-fraction") + 1] == "0.65"
    assert args[args.index("--host-alias") + 1] == "10.0.0.2=w1"
    assert "--quick" not in runner.benchmark_command("ray-node", merge({}), {}, ["10.0.0.1"])


def test_package_tarball_holds_the_checks_package():
    with tarfile.open(fileobj=runner.package_tarball(), mode="r:gz") as tar:
        names = set(tar.getnames())
    assert {"checks/benchmark.py", "checks/kernels.py", "checks/verdict.py", "checks/__init__.py"} <= names
    assert "checks/runner.py" in names


def test_combined_verdict_fails_on_preflight_even_when_the_benchmark_passes():
    bench = {"mode": "cluster", "cpu_only": True, "devices": [], "allreduce": None, "sweep_test": None}
    extra = [runner.Reason(FAIL, "the ray-node container is not running", host="w1")]
    thresholds = {"matmul_min_fraction": 0.65, "membw_min_fraction": 0.8, "outlier_fraction": 0.9}
    verdict = runner.combined_verdict(bench, extra, thresholds)
    assert verdict.status == FAIL
    assert verdict.reasons[0].host == "w1"


@pytest.mark.parametrize("expected", [["10.0.0.1"], ["10.0.0.2", "10.0.0.1"]])
def test_cluster_state_command_is_one_quoted_python_call(expected):
    args = shlex.split(runner.cluster_state_command("ray-node", expected, wait_s=30))
    assert args[:5] == ["docker", "exec", "ray-node", "python", "-c"]
    assert repr(sorted(expected)) in args[5]
    compile(args[5], "<cluster-state>", "exec")


def test_a_cpu_node_keeps_its_best_round():
    from checks.benchmark import _best_round

    rounds = [{"host": "w1", "matmul": {"tflops": r}} for r in (0.08, 0.22, 0.2)]
    best = _best_round(rounds)
    assert best["matmul"]["tflops"] == 0.22
    assert best["matmul"]["rounds_tflops"] == [0.08, 0.22, 0.2]
    assert rounds[1]["matmul"] == {"tflops": 0.22}  # the inputs are left as they were
