"""The post-deploy checks, driven from the operator's machine over pyinfra's connections.

Three parts, one verdict:

1. preflight on every node: the GPUs the driver sees against ``ray_num_gpus``,
   the same GPUs inside the ray-node container, the Ray version inside the
   container against ``ray_version``, the container's shared-memory size, and
   nvidia-fabricmanager active on NVSwitch systems;
2. cluster state from inside the head container: every inventory host is an
   alive Ray node, and the cluster's CPU, GPU and custom-resource totals equal
   the declarations;
3. the benchmark (:mod:`checks.benchmark` ``--cluster``) inside the head
   container, which drives every node through Ray.

The JSON report and the all-reduce plot are saved on the operator's machine
(``checks_report_dir``) and their paths printed. The checks observe and change
nothing, so they are not pyinfra operations: a re-run that changes nothing
still reports "No changes".
"""

from __future__ import annotations

import io
import shlex
import tarfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from checks import report as report_mod
from checks import verdict as verdict_mod
from checks.verdict import FAIL, INFO, WARN, Reason, Verdict

PACKAGE_DIR = Path(__file__).resolve().parent
REMOTE_DIR = "/tmp/rayrig-checks"
IN_CONTAINER_DIR = "/tmp/rayrig-checks"

PREFLIGHT_SCRIPT = r"""
c={container}
n=0; nvswitch=0
for d in /sys/bus/pci/devices/*; do
  [ -r "$d/vendor" ] || continue
  [ "$(cat "$d/vendor")" = 0x10de ] || continue
  case "$(cat "$d/class")" in 0x0300*|0x0302*) n=$((n+1));; 0x0680*) nvswitch=$((nvswitch+1));; esac
done
echo "PCI_GPUS=$n"
echo "NVSWITCHES=$nvswitch"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader,nounits 2>/dev/null \
    | sed 's/^/HOST_GPU=/' || echo HOST_SMI_FAILED=1
fi
if [ "$nvswitch" -gt 0 ]; then echo "FABRICMANAGER=$(systemctl is-active nvidia-fabricmanager 2>/dev/null)"; fi
echo "RUNNING=$(docker inspect --format '{{{{.State.Running}}}}' "$c" 2>/dev/null || echo missing)"
echo "RAY_VERSION=$(docker exec "$c" python -c 'import ray; print(ray.__version__)' 2>/dev/null)"
echo "SHM_KB=$(docker exec "$c" df -k /dev/shm 2>/dev/null | awk 'NR==2 {{print $2}}')"
if [ "$n" -gt 0 ]; then echo "CONTAINER_GPUS=$(docker exec "$c" nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"; fi
"""

CLUSTER_STATE_SCRIPT = """
import json, time, ray
ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
expected, deadline = sorted({expected!r}), time.time() + {wait}
while True:
    nodes = [n for n in ray.nodes() if n["Alive"]]
    if sorted(n["NodeManagerAddress"] for n in nodes) == expected or time.time() > deadline:
        break
    time.sleep(2)
nodes = [{{"ip": n["NodeManagerAddress"], "resources": n["Resources"]}} for n in nodes]
print("RESULT", json.dumps({{"nodes": nodes, "total": ray.cluster_resources()}}))
"""


class ChecksFailed(Exception):
    """The verdict is FAIL; the message lists the reasons."""


def parse_preflight(lines: Iterable[str]) -> dict[str, Any]:
    """The preflight script's ``KEY=VALUE`` lines as a dict (GPUs as a list)."""
    facts: dict[str, Any] = {"host_gpus": []}
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if not sep:
            continue
        if key == "HOST_GPU":
            parts = [p.strip() for p in value.split(",")]
            facts["host_gpus"].append(
                {"model": parts[0], "driver": parts[1] if len(parts) > 1 else "", "memory_mib": parts[-1]}
            )
        else:
            facts[key.lower()] = value.strip()
    return facts


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def preflight_reasons(host: str, settings: dict[str, Any], facts: dict[str, Any], min_shm_bytes: int) -> list[Reason]:
    """What is wrong (or worth knowing) about one node before the benchmark."""
    reasons: list[Reason] = []
    if facts.get("running") != "true":
        reasons.append(Reason(FAIL, f"the {settings['ray_container_name']} container is not running", host=host))
        return reasons
    pci = _int(facts.get("pci_gpus")) or 0
    driver_gpus = facts["host_gpus"]
    declared = settings["ray_num_gpus"]
    if pci and (facts.get("host_smi_failed") or not driver_gpus):
        reasons.append(Reason(FAIL, f"{pci} NVIDIA GPUs on the PCI bus but no working driver (nvidia-smi)", host=host))
    seen = len(driver_gpus) if driver_gpus else pci
    if declared != "auto" and int(declared) != seen:
        reasons.append(Reason(FAIL, f"ray_num_gpus = {declared} but the host has {seen} GPUs", host=host))
    if driver_gpus:
        models = sorted({g["model"] for g in driver_gpus})
        reasons.append(
            Reason(INFO, f"{len(driver_gpus)} x {', '.join(models)}, driver {driver_gpus[0]['driver']}", host=host)
        )
    container_gpus = _int(facts.get("container_gpus"))
    if pci and container_gpus is not None and container_gpus != seen:
        reasons.append(Reason(FAIL, f"the ray-node container sees {container_gpus} GPUs, the host {seen}", host=host))
    version = facts.get("ray_version", "")
    if version != settings["ray_version"]:
        found = version or "no Ray"
        reasons.append(
            Reason(FAIL, f"Ray {found} in the container, expected ray_version {settings['ray_version']}", host=host)
        )
    shm_kb = _int(facts.get("shm_kb"))
    if shm_kb is not None and shm_kb * 1024 < min_shm_bytes:
        reasons.append(
            Reason(WARN, f"/dev/shm in the container is {shm_kb // 1024} MiB (Ray's object store falls back to disk)",
                   host=host)  # fmt: skip
        )
    if _int(facts.get("nvswitches")) and facts.get("fabricmanager") != "active":
        reasons.append(
            Reason(FAIL, f"NVSwitch system but nvidia-fabricmanager is {facts.get('fabricmanager') or 'absent'}",
                   host=host)  # fmt: skip
        )
    return reasons


def expected_totals(declarations: list[dict[str, Any]]) -> dict[str, float]:
    """The cluster totals the inventory declares.

    CPUs only when every host declares a number; GPUs only when every count is
    known (declared, or detected on a host that this run inspected).
    """
    totals: dict[str, float] = {}
    if all(d["num_cpus"] != "auto" for d in declarations):
        totals["CPU"] = float(sum(d["num_cpus"] for d in declarations))
    if all(d["num_gpus"] is not None for d in declarations):
        totals["GPU"] = float(sum(d["num_gpus"] for d in declarations))
    for d in declarations:
        for name, amount in d["resources"].items():
            totals[name] = totals.get(name, 0.0) + float(amount)
    return totals


def cluster_reasons(declarations: list[dict[str, Any]], state: dict[str, Any]) -> list[Reason]:
    """Every inventory host alive in Ray, and the totals equal to the declarations."""
    reasons: list[Reason] = []
    alive = {n["ip"] for n in state["nodes"]}
    for d in declarations:
        if d["address"] not in alive:
            reasons.append(Reason(FAIL, f"not an alive Ray node (expected at {d['address']})", host=d["name"]))
    extra = alive - {d["address"] for d in declarations}
    if extra:
        reasons.append(Reason(WARN, f"alive Ray nodes not in the inventory: {', '.join(sorted(extra))}"))
    for resource, wanted in expected_totals(declarations).items():
        got = float(state["total"].get(resource, 0.0))
        if abs(got - wanted) > 1e-6:
            reasons.append(Reason(FAIL, f"cluster total {resource} is {got:g}, the inventory declares {wanted:g}"))
    if not reasons:
        reasons.append(Reason(INFO, f"{len(alive)} Ray nodes alive with the declared resources"))
    return reasons


def package_tarball() -> io.BytesIO:
    """The ``checks`` package as a tar.gz, to copy into the head container."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(PACKAGE_DIR.glob("*.py")):
            tar.add(path, arcname=f"checks/{path.name}")
    buffer.seek(0)
    return buffer


def cluster_state_command(container: str, expected_ips: list[str], wait_s: int = 180) -> str:
    """The shell command that prints the cluster state once the expected nodes are alive (or time is up)."""
    script = CLUSTER_STATE_SCRIPT.format(expected=sorted(expected_ips), wait=int(wait_s))
    return f"docker exec {shlex.quote(container)} python -c {shlex.quote(script)}"


def benchmark_command(container: str, settings: dict[str, Any], aliases: dict[str, str],
                      expected_ips: list[str]) -> str:  # fmt: skip
    """The shell command that runs the cluster benchmark in the head container."""
    args = [
        "python", "-m", "checks.benchmark", "--cluster",
        "--expect-nodes", ",".join(sorted(expected_ips)),
        "--out", f"{IN_CONTAINER_DIR}/report.json",
        "--matmul-min-fraction", str(settings["checks_matmul_min_fraction"]),
        "--membw-min-fraction", str(settings["checks_membw_min_fraction"]),
        "--outlier-fraction", str(settings["checks_outlier_fraction"]),
        "--timeout", str(settings["checks_timeout_s"]),
    ]  # fmt: skip
    if settings["checks_profile"] == "quick":
        args.append("--quick")
    for ip, name in sorted(aliases.items()):
        args += ["--host-alias", f"{ip}={name}"]
    c = shlex.quote(container)
    return " && ".join(
        [
            f"mkdir -p {REMOTE_DIR}",
            f"tar -xzf {REMOTE_DIR}/checks.tgz -C {REMOTE_DIR}",
            f"docker exec {c} mkdir -p {IN_CONTAINER_DIR}",
            f"docker cp {REMOTE_DIR}/checks {c}:{IN_CONTAINER_DIR}/",
            f"docker exec --workdir {IN_CONTAINER_DIR} {c} {shlex.join(args)}; status=$?",
            f"docker cp {c}:{IN_CONTAINER_DIR}/report.json {REMOTE_DIR}/report.json",
            f"chmod 644 {REMOTE_DIR}/report.json",
            "exit $(( status > 1 ? status : 0 ))",
        ]
    )


def combined_verdict(bench: dict[str, Any], extra: list[Reason], thresholds: dict[str, float]) -> Verdict:
    """The benchmark's own verdict with the preflight and cluster-state reasons added."""
    judged = verdict_mod.evaluate(bench, **thresholds) if bench else Verdict([Reason(FAIL, "no benchmark report")])
    return Verdict(extra + judged.reasons)


def save_report(result: dict[str, Any], report_dir: Path, cluster: str) -> tuple[Path, Path | None]:
    """Write the JSON report and the bus-bandwidth plot; return their paths."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = report_dir / f"checks-{cluster}-{stamp}"
    json_path = report_mod.write_json(result, base.with_suffix(".json"))
    plot_path = report_mod.plot_busbw(result, base.with_name(base.name + "-busbw.png"))
    return json_path, plot_path
