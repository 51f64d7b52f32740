"""The JSON Schema of the checks' report (``checks-<cluster>-<time>.json``, written by :mod:`checks.report`),
with a ``description`` per field: what docs/reference/checks-report.md says of each.

The full checks (:mod:`checks.full`) write the benchmark's report (:mod:`checks.benchmark`) with their own
sections added; the quick checks (:mod:`checks.quick`) write ``checks``, ``cluster_state`` and ``verdict``
only. Fields a run could not fill are null or absent; a report may hold more fields than these.
"""

from __future__ import annotations

from typing import Any

_SECONDS = {"type": ["number", "null"]}
_OBJECT_OR_NULL = {"type": ["object", "null"]}


def _field(text: str, kind: Any = "object", **more: Any) -> dict[str, Any]:
    return {"type": kind, "description": text, **more}


_REASON = {
    "type": "object",
    "required": ["level", "message"],
    "properties": {
        "level": {"enum": ["FAIL", "WARN", "INFO"], "description": "How much the finding weighs."},
        "message": _field("The finding in words, naming the host, device or mount.", "string"),
        "host": _field("The host it concerns, when one.", ["string", "null"]),
        "device": _field("The device it concerns (`cuda:N`, `cpu`), when one.", ["string", "null"]),
        "flag": _field(
            "The device table's flag (`SLOW`, `LOW-TFLOPS`, `THROTTLED` ...), when one.", ["string", "null"]
        ),
        "source": _field(
            "Where its threshold comes from (a datasheet, the peers' median ...), when one.", ["string", "null"]
        ),
    },
}

_DEVICE = {
    "type": "object",
    "properties": {
        "host": _field("The host's inventory name.", "string"),
        "ip": _field("The node's address.", "string"),
        "device": _field("`cuda:N` (N as the node numbers its GPUs) or `cpu`.", "string"),
        "kind": {"enum": ["gpu", "cpu"], "description": "A GPU or the CPU (a cluster without GPUs)."},
        "model": _field("The device's model, as its driver names it.", ["string", "null"]),
        "spec": _field("Its datasheet's figures (`checks/specs.py`), or null when unknown.", ["object", "null"]),
        "matmul": _field(
            "The matrix multiply: `tflops` (median), `sustained_tflops`, `n`, `dtype`, times.", ["object", "null"]
        ),  # fmt: skip
        "copy": _field("The device-to-device copy: `gbps` (median), `nbytes`, times.", ["object", "null"]),
        "h2d": _field("The host-to-device copy: `gbps`, or `skipped`.", ["object", "null"]),
        "throttle_under_load": _field("The clock event reasons sampled during the sustained matmul.", "object"),
        "error": _field("Why the device could not be measured.", ["string", "null"]),
    },
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "rayrig checks report",
    "description": "The report the post-deploy checks save in `checks_report_dir` as "
    "`checks-<ray_cluster_name>-<time>.json`, one per run (deploy or `rayrig check`), beside a bus bandwidth "
    "plot when matplotlib is installed. `rayrig status` shows the newest one's verdict. The quick checks "
    "write `checks`, `cluster_state` and `verdict`; the full checks all of it.",
    "type": "object",
    "required": ["checks", "verdict"],
    "properties": {
        "schema": _field('The benchmark report\'s format, `"rayrig.checks.benchmark/1"`.', "string"),
        "checks": _field(
            "Which checks ran and why.",
            properties={
                "mode": {"enum": ["full", "quick"], "description": "The full checks or the quick ones."},
                "why": _field("Why these ran (`checks_mode`, a ray-node replaced, `rayrig check`).", "string"),
            },
            required=["mode", "why"],
        ),
        "mode": {"enum": ["local", "cluster"], "description": "Where the benchmark ran: this machine or the cluster."},
        "quick": _field("The benchmark's quick profile (`checks_profile`).", "boolean"),
        "started_at": _field("When the benchmark started (ISO 8601).", "string"),
        "versions": _field("The versions the benchmark ran with: `torch`, `cuda`, `ray`, `python`.", "object"),
        "cpu_only": _field("True when the cluster has no GPU: the CPUs are measured instead.", "boolean"),
        "nodes": _field(
            "The Ray nodes the benchmark found.",
            "array",
            items=_field(
                "One node.",
                properties={
                    "node_id": _field("Ray's node id.", "string"),
                    "host": _field("The host's inventory name.", "string"),
                    "ip": _field("The node's address.", "string"),
                    "num_cpus": _field("CPUs Ray schedules there.", "number"),
                    "num_gpus": _field("GPUs Ray schedules there.", "number"),
                    "is_head": _field("Whether it is the head.", "boolean"),
                },
            ),
        ),
        "devices": _field("Every measured device, GPU or CPU, of every node.", "array", items=_DEVICE),
        "left_out": _field("Nodes left out of the all-reduce and the smoke test, by node id, and why.", "object"),
        "allreduce": _field(
            "The all-reduce across every node (torch.distributed), or null where it did not run.",
            ["object", "null"],
            properties={
                "backend": _field("`nccl` on GPUs, `gloo` on CPUs.", "string"),
                "world_size": _field("How many ranks took part.", "integer"),
                "sweep": _field(
                    "The sizes that finished, smallest first.",
                    "array",
                    items=_field(
                        "One size.",
                        properties={
                            "bytes": _field("The tensor's size in bytes.", "integer"),
                            "time_s": _field("Seconds per all-reduce (median).", "number"),
                            "algbw_gbps": _field("Algorithm bandwidth, GB/s.", "number"),
                            "busbw_gbps": _field("Bus bandwidth, GB/s (NCCL's definition).", "number"),
                            "values_ok": _field("Whether every rank got the right sum.", "boolean"),
                        },
                    ),
                ),
                "value_check": _field("Whether the results were right: `ok`, `expected`, `detail`.", "object"),
                "deadlines": _field("Each size's deadline and where it came from.", "object"),
                "hung": _field("The size that did not finish, and each rank's state then.", "object"),
                "error": _field("Why it failed.", ["string", "null"]),
            },
        ),
        "sweep_test": _field(
            "The scheduling smoke test: small tasks spread over every node, or null where it did not run.",
            ["object", "null"],
            properties={
                "tasks": _field("Tasks submitted.", "integer"),
                "completed": _field("Tasks that finished.", "integer"),
                "failures": _field("What went wrong, one line each.", "array"),
                "per_node": _field("Finished tasks by node (`host (ip)`).", "object"),
                "missing_nodes": _field("Nodes that ran no task.", "array"),
            },
        ),
        "timing": _field(
            "The benchmark's seconds by phase: `devices_s`, `allreduce_s`, `sweep_test_s`, `total_s`.", "object"
        ),  # fmt: skip
        "preflight": _field(
            "Each host's preflight, by inventory name: its ray-node container, GPUs and their health.",
            "object",
            additionalProperties=_field(
                "One host's preflight.",
                properties={
                    "gpus": _field(
                        "The GPU facts the deploy read (`pci_count`, `driver` ...).", _OBJECT_OR_NULL["type"]
                    ),
                    "running": _field('Whether its ray-node container runs (`"true"`).', ["string", "null"]),
                    "gpu_health": _field("What `nvidia-smi`, the kernel log and DCGM say of its GPUs.", "object"),
                    "error": _field("Why the host could not be read.", ["string", "null"]),
                },
            ),
        ),
        "cluster_state": _field(
            "The cluster as Ray sees it from the head: alive nodes and total resources; null when unread.",
            ["object", "null"],
            properties={
                "nodes": _field("Every alive node: `ip`, `resources`.", "array"),
                "total": _field("The cluster's total resources.", "object"),
                "hosts": _field("Inventory names by node address.", "object"),
            },
        ),
        "storage": _field(
            "The shared storage round trip: a file written on one node, read on the others, per mount.",
            ["object", "null"],
            properties={
                "mounts": _field("One entry per mount: `path`, `kind`, `ok`, `errors`, `seconds` ...", "array"),
                "hosts": _field("Inventory names by node address.", "object"),
            },
        ),
        "monitoring": _field(
            "What the checks read from Prometheus: targets and their health, XID, throttling and ECC findings; "
            "`skipped` with why when not read.",
            ["object", "null"],
            properties={
                "prometheus": _field("The Prometheus that was read.", "string"),
                "targets": _field("Every scrape target: `host`, `job`, `health`, `instance`, `error`.", "array"),
                "findings": _field("What Prometheus showed, as verdict reasons.", "array", items=_REASON),
                "skipped": _field("Why Prometheus was not read.", "string"),
                "error": _field("Why reading it failed.", ["string", "null"]),
            },
        ),
        "budget": _field(
            "The checks' time budget (`checks_timeout_s`).",
            properties={
                "total_s": _field("The budget.", "number"),
                "spent_s": _field("Seconds spent.", "number"),
                "by_part": _field("Seconds per part (null: it did not run).", "object", additionalProperties=_SECONDS),
            },
        ),
        "verdict": _field(
            "The verdict and its reasons.",
            required=["status", "reasons"],
            properties={
                "status": {"enum": ["PASS", "WARN", "FAIL"], "description": "The worst of the reasons' levels."},
                "slow_hosts": _field("Hosts with a device flagged `SLOW`: below its peers' median.", "array"),
                "reasons": _field("Every finding.", "array", items=_REASON),
                "thresholds": _field("The fractions judged by (`checks_*_fraction`).", "object"),
            },
        ),
        "phases": _field(
            "Where the deploy's time went, by phase (the deploy's closing table).",
            "array",
            items=_field(
                "One phase.",
                properties={
                    "phase": _field("The phase.", "string"),
                    "seconds": _field("Wall seconds.", "number"),
                    "slowest_host": _field("The host that took longest in it.", ["string", "null"]),
                    "slowest_host_seconds": _field("That host's own seconds in it.", ["number", "null"]),
                },
            ),
        ),
    },
}
