"""Datasheet figures of the GPUs rayrig knows, and a lookup by nvidia-smi name.

Every figure is the *dense* one (no 2:4 structured sparsity): NVIDIA's
datasheets print the sparse figure first and footnote the dense one as half of
it. ``tflops`` is the dense tensor-core throughput in the dtype named by
``dtype``: bf16 where the GPU has it, fp16 (with fp32 accumulate) on T4 and
V100, which have no bf16 tensor cores. The benchmark measures in that same
dtype, so the fraction of spec compares like with like.

``mem_bw_gbs`` is the datasheet memory bandwidth in GB/s (10^9 bytes/s).
``memory_gib`` is the nominal capacity the datasheet prints as "GB" (the
device reports a little less usable memory, e.g. 79.1 GiB on an "80GB" H100).
``nvswitch`` says whether the usual 8-GPU board of that form factor connects
its GPUs through NVSwitch (HGX/DGX), which sets what all-reduce bus bandwidth
to expect inside a node; PCIe and NVL cards at most pair over NVLink bridges.

A GPU that is not in the table gets ``None`` from :func:`lookup`; the verdict
then warns that it has nothing to compare against rather than guessing.

Example::

    >>> lookup("NVIDIA H100 80GB HBM3").key
    'H100-SXM'
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures of one GPU model (dense, see the module docstring)."""

    key: str  # our short name, e.g. "H100-SXM"
    name: str  # human name, e.g. "NVIDIA H100 SXM5 80GB"
    tflops: float  # dense tensor-core TFLOPS in ``dtype``
    dtype: str  # "bf16", or "fp16" where the GPU has no bf16
    mem_bw_gbs: float  # memory bandwidth, GB/s (1e9 bytes/s)
    memory_gib: float  # nominal memory capacity ("80GB" on the datasheet)
    nvswitch: bool  # 8-GPU boards of this form factor use NVSwitch
    source: str  # where the figures come from
    # Token sets that identify this model in an nvidia-smi name; the longest
    # matching set wins, so "h200 nvl" beats "h200".
    patterns: tuple[tuple[str, ...], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict (without the matching patterns)."""
        data = asdict(self)
        del data["patterns"]
        return data


SPECS: tuple[GpuSpec, ...] = (
    # NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column): BF16 1,979 TFLOPS
    # with sparsity -> 989.4 dense (same die and clocks as H100 SXM); 4.8 TB/s
    # HBM3e; 141 GB. nvidia-smi: "NVIDIA H200".
    GpuSpec(
        key="H200-SXM",
        name="NVIDIA H200 SXM 141GB",
        tflops=989.4,
        dtype="bf16",
        mem_bw_gbs=4800,
        memory_gib=141,
        nvswitch=True,
        source="NVIDIA H200 Tensor Core GPU datasheet, H200 SXM",
        patterns=(("h200",), ("h200", "sxm")),
    ),
    # Same datasheet, H200 NVL column: BF16 1,671 TFLOPS sparse -> 835.5 dense;
    # 4.8 TB/s; 141 GB; NVLink bridge (2- or 4-way), no NVSwitch.
    GpuSpec(
        key="H200-NVL",
        name="NVIDIA H200 NVL 141GB",
        tflops=835.5,
        dtype="bf16",
        mem_bw_gbs=4800,
        memory_gib=141,
        nvswitch=False,
        source="NVIDIA H200 Tensor Core GPU datasheet, H200 NVL",
        patterns=(("h200", "nvl"),),
    ),
    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: BF16 1,979 TFLOPS
    # sparse -> 989.4 dense; 3.35 TB/s HBM3; 80 GB. nvidia-smi: "NVIDIA H100 80GB HBM3".
    GpuSpec(
        key="H100-SXM",
        name="NVIDIA H100 SXM5 80GB",
        tflops=989.4,
        dtype="bf16",
        mem_bw_gbs=3350,
        memory_gib=80,
        nvswitch=True,
        source="NVIDIA H100 Tensor Core GPU datasheet, H100 SXM",
        patterns=(("h100", "hbm3"), ("h100", "sxm")),
    ),
    # Same datasheet, H100 PCIe column (80 GB HBM2e): BF16 1,513 TFLOPS sparse ->
    # 756 dense; 2.0 TB/s (early datasheets: 2.0; some list 2.04). nvidia-smi: "NVIDIA H100 PCIe".
    GpuSpec(
        key="H100-PCIE",
        name="NVIDIA H100 PCIe 80GB",
        tflops=756.5,
        dtype="bf16",
        mem_bw_gbs=2000,
        memory_gib=80,
        nvswitch=False,
        source="NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe",
        patterns=(("h100", "pcie"),),
    ),
    # Same datasheet, H100 NVL column (per GPU of the pair): BF16 1,671 TFLOPS
    # sparse -> 835.5 dense; 3.9 TB/s; 94 GB HBM3. nvidia-smi: "NVIDIA H100 NVL".
    GpuSpec(
        key="H100-NVL",
        name="NVIDIA H100 NVL 94GB",
        tflops=835.5,
        dtype="bf16",
        mem_bw_gbs=3900,
        memory_gib=94,
        nvswitch=False,
        source="NVIDIA H100 Tensor Core GPU datasheet, H100 NVL",
        patterns=(("h100", "nvl"),),
    ),
    # NVIDIA A100 Tensor Core GPU datasheet: BF16 312 TFLOPS dense (624 sparse)
    # for every form factor. A100 80GB SXM: 2,039 GB/s HBM2e.
    GpuSpec(
        key="A100-SXM-80GB",
        name="NVIDIA A100 SXM4 80GB",
        tflops=312,
        dtype="bf16",
        mem_bw_gbs=2039,
        memory_gib=80,
        nvswitch=True,
        source="NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM",
        patterns=(("a100", "sxm", "80gb"),),
    ),
    # Same datasheet, A100 40GB SXM: 1,555 GB/s HBM2.
    GpuSpec(
        key="A100-SXM-40GB",
        name="NVIDIA A100 SXM4 40GB",
        tflops=312,
        dtype="bf16",
        mem_bw_gbs=1555,
        memory_gib=40,
        nvswitch=True,
        source="NVIDIA A100 Tensor Core GPU datasheet, A100 40GB SXM",
        patterns=(("a100", "sxm", "40gb"),),
    ),
    # Same datasheet, A100 80GB PCIe: 1,935 GB/s. nvidia-smi: "NVIDIA A100 80GB PCIe".
    GpuSpec(
        key="A100-PCIE-80GB",
        name="NVIDIA A100 PCIe 80GB",
        tflops=312,
        dtype="bf16",
        mem_bw_gbs=1935,
        memory_gib=80,
        nvswitch=False,
        source="NVIDIA A100 Tensor Core GPU datasheet, A100 80GB PCIe",
        patterns=(("a100", "pcie", "80gb"),),
    ),
    # Same datasheet, A100 40GB PCIe: 1,555 GB/s. nvidia-smi: "NVIDIA A100-PCIE-40GB".
    GpuSpec(
        key="A100-PCIE-40GB",
        name="NVIDIA A100 PCIe 40GB",
        tflops=312,
        dtype="bf16",
        mem_bw_gbs=1555,
        memory_gib=40,
        nvswitch=False,
        source="NVIDIA A100 Tensor Core GPU datasheet, A100 40GB PCIe",
        patterns=(("a100", "pcie", "40gb"), ("a100", "pcie")),
    ),
    # NVIDIA L40S datasheet: BF16 733 TFLOPS sparse -> 362.05 dense; 864 GB/s GDDR6; 48 GB.
    GpuSpec(
        key="L40S",
        name="NVIDIA L40S 48GB",
        tflops=362.05,
        dtype="bf16",
        mem_bw_gbs=864,
        memory_gib=48,
        nvswitch=False,
        source="NVIDIA L40S GPU datasheet",
        patterns=(("l40s",),),
    ),
    # NVIDIA L40 datasheet: BF16 362.1 TFLOPS sparse -> 181.05 dense; 864 GB/s; 48 GB.
    GpuSpec(
        key="L40",
        name="NVIDIA L40 48GB",
        tflops=181.05,
        dtype="bf16",
        mem_bw_gbs=864,
        memory_gib=48,
        nvswitch=False,
        source="NVIDIA L40 GPU datasheet",
        patterns=(("l40",),),
    ),
    # NVIDIA L4 Tensor Core GPU datasheet: BF16 242 TFLOPS sparse -> 121 dense;
    # 300 GB/s GDDR6; 24 GB.
    GpuSpec(
        key="L4",
        name="NVIDIA L4 24GB",
        tflops=121,
        dtype="bf16",
        mem_bw_gbs=300,
        memory_gib=24,
        nvswitch=False,
        source="NVIDIA L4 Tensor Core GPU datasheet",
        patterns=(("l4",),),
    ),
    # A10G is AWS's variant of the A10 (EC2 G5); neither NVIDIA nor AWS publishes
    # a datasheet for it. AWS lists 24 GB and the A10's 600 GB/s; the 70 TFLOPS
    # dense BF16 figure is the commonly quoted one (half the A10's tensor rate
    # per clock, 72 SMs at ~1.7 GHz) and is UNCERTAIN: treat its % of spec as
    # approximate.
    GpuSpec(
        key="A10G",
        name="NVIDIA A10G 24GB (AWS)",
        tflops=70,
        dtype="bf16",
        mem_bw_gbs=600,
        memory_gib=24,
        nvswitch=False,
        source="AWS EC2 G5 instance page (memory); tensor figure third-party, uncertain",
        patterns=(("a10g",),),
    ),
    # NVIDIA A10 Tensor Core GPU datasheet: BF16 250 TFLOPS sparse -> 125 dense;
    # 600 GB/s GDDR6; 24 GB.
    GpuSpec(
        key="A10",
        name="NVIDIA A10 24GB",
        tflops=125,
        dtype="bf16",
        mem_bw_gbs=600,
        memory_gib=24,
        nvswitch=False,
        source="NVIDIA A10 Tensor Core GPU datasheet",
        patterns=(("a10",),),
    ),
    # NVIDIA T4 Tensor Core GPU datasheet: mixed-precision (FP16/FP32) 65 TFLOPS
    # (Turing has no sparsity, so this is dense); no bf16; 320 GB/s GDDR6; 16 GB.
    GpuSpec(
        key="T4",
        name="NVIDIA T4 16GB",
        tflops=65,
        dtype="fp16",
        mem_bw_gbs=320,
        memory_gib=16,
        nvswitch=False,
        source="NVIDIA T4 Tensor Core GPU datasheet (fp16: T4 has no bf16)",
        patterns=(("t4",),),
    ),
    # NVIDIA V100 Tensor Core GPU datasheet, V100 SXM2: tensor (fp16) 125 TFLOPS
    # (dense, Volta has no sparsity); no bf16; 900 GB/s HBM2; 16 or 32 GB (the
    # name carries it, see lookup). DGX-1/p3 boards use a hybrid cube-mesh, not
    # NVSwitch (only DGX-2/HGX-2 had NVSwitch).
    GpuSpec(
        key="V100-SXM2",
        name="NVIDIA V100 SXM2",
        tflops=125,
        dtype="fp16",
        mem_bw_gbs=900,
        memory_gib=32,
        nvswitch=False,
        source="NVIDIA V100 Tensor Core GPU datasheet, V100 SXM2 (fp16: no bf16)",
        patterns=(("v100", "sxm"),),
    ),
    # Same datasheet, V100 PCIe: 112 TFLOPS fp16 tensor; 900 GB/s; 16 or 32 GB.
    GpuSpec(
        key="V100-PCIE",
        name="NVIDIA V100 PCIe",
        tflops=112,
        dtype="fp16",
        mem_bw_gbs=900,
        memory_gib=32,
        nvswitch=False,
        source="NVIDIA V100 Tensor Core GPU datasheet, V100 PCIe (fp16: no bf16)",
        patterns=(("v100", "pcie"),),
    ),
    # NVIDIA V100S datasheet: 130 TFLOPS fp16 tensor; 1,134 GB/s; 32 GB.
    GpuSpec(
        key="V100S-PCIE",
        name="NVIDIA V100S PCIe 32GB",
        tflops=130,
        dtype="fp16",
        mem_bw_gbs=1134,
        memory_gib=32,
        nvswitch=False,
        source="NVIDIA V100S Tensor Core GPU datasheet (fp16: no bf16)",
        patterns=(("v100s",),),
    ),
)

_BY_KEY = {spec.key: spec for spec in SPECS}
_MEMORY = re.compile(r"^(\d+)gb$")


def tokens(name: str) -> frozenset[str]:
    """Normalise a GPU name into lower-case tokens.

    Case, spaces, dashes and underscores do not matter; "80 GB" becomes
    "80gb"; form-factor tokens such as "sxm4" also yield "sxm".
    """
    text = name.lower()
    text = re.sub(r"(\d+)\s*gb\b", r"\1gb", text)
    words = set(re.findall(r"[a-z0-9]+", text))
    words |= {w.rstrip("0123456789") for w in words if re.fullmatch(r"sxm\d+", w)}
    return frozenset(words)


def lookup(name: str | None) -> GpuSpec | None:
    """The spec of the GPU called ``name`` (as nvidia-smi or torch print it).

    Accepts our keys too ("H100-SXM"). The most specific entry wins
    ("NVIDIA H200 NVL" is the NVL card, not the SXM one). When the name states
    a capacity the table holds in several sizes (V100 16/32 GB), the returned
    spec carries the stated one. Unknown or ambiguous names give ``None``.

    >>> lookup("Tesla V100-SXM2-16GB").memory_gib
    16
    >>> lookup("NVIDIA GeForce RTX 4090") is None
    True
    """
    if not name or not name.strip():
        return None
    wanted = tokens(name)
    best: list[tuple[int, GpuSpec]] = []
    for spec in SPECS:
        score = max((len(p) for p in spec.patterns if wanted.issuperset(p)), default=0)
        if score:
            best.append((score, spec))
    if not best:
        return None
    best.sort(key=lambda item: item[0], reverse=True)
    if len(best) > 1 and best[0][0] == best[1][0]:
        return None  # two entries match equally well: do not guess
    spec = best[0][1]
    for word in wanted:
        match = _MEMORY.match(word)
        if match and spec.key.startswith("V100"):
            return replace(spec, memory_gib=int(match.group(1)))
    return spec


def by_key(key: str) -> GpuSpec:
    """The spec with our short name ``key``; raises ``KeyError`` naming the known keys."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise KeyError(f"unknown GPU spec {key!r}; known: {', '.join(sorted(_BY_KEY))}") from None


def annotate(entries: list[dict[str, Any]]) -> None:
    """Set each device entry's ``"spec"``: its GPU's datasheet as a dict, None for a CPU or an unknown GPU."""
    for entry in entries:
        spec = lookup(entry.get("model")) if entry.get("kind") == "gpu" else None
        entry["spec"] = spec.as_dict() if spec else None
