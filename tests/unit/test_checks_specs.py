"""GPU spec table and nvidia-smi name lookup (checks/specs.py)."""

from __future__ import annotations

import pytest

from checks import specs


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIE"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA H200", "H200-SXM"),
        ("NVIDIA H200 NVL", "H200-NVL"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-SXM-40GB"),
        ("NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L40", "L40"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100-SXM2"),
        ("Tesla V100-SXM2-32GB", "V100-SXM2"),
        ("Tesla V100-PCIE-32GB", "V100-PCIE"),
        ("Tesla V100S-PCIE-32GB", "V100S-PCIE"),
        # case, spaces, dashes and underscores do not matter; our keys work too
        ("nvidia a100 sxm4 80 gb", "A100-SXM-80GB"),
        ("NVIDIA_A100-PCIE_40GB", "A100-PCIE-40GB"),
        ("  nvidia   h100   80gb   hbm3 ", "H100-SXM"),
        ("H100-SXM", "H100-SXM"),
        ("l40s", "L40S"),
    ],
)
def test_lookup_nvidia_smi_names(name: str, key: str) -> None:
    spec = specs.lookup(name)
    assert spec is not None, name
    assert spec.key == key


@pytest.mark.parametrize(
    "name",
    ["NVIDIA GeForce RTX 4090", "AMD Instinct MI300X", "NVIDIA GH200 480GB", "NVIDIA H100", "", "   ", None],
)
def test_lookup_unknown_or_ambiguous_names(name: str | None) -> None:
    assert specs.lookup(name) is None


def test_most_specific_match_wins() -> None:
    # "h200" alone matches the SXM part; "h200 nvl" must not fall back to it
    assert specs.lookup("NVIDIA H200 NVL").tflops < specs.lookup("NVIDIA H200").tflops
    # the 80 GB PCIe card has more bandwidth than the 40 GB one
    assert specs.lookup("NVIDIA A100 80GB PCIe").mem_bw_gbs == 1935
    assert specs.lookup("NVIDIA A100-PCIE-40GB").mem_bw_gbs == 1555


def test_memory_comes_from_the_name_when_the_table_has_several_sizes() -> None:
    assert specs.lookup("Tesla V100-SXM2-16GB").memory_gib == 16
    assert specs.lookup("Tesla V100-PCIE-32GB").memory_gib == 32


def test_dense_figures_of_well_known_parts() -> None:
    h100 = specs.by_key("H100-SXM")
    assert (h100.tflops, h100.mem_bw_gbs, h100.dtype, h100.nvswitch) == (989.4, 3350, "bf16", True)
    h200 = specs.by_key("H200-SXM")
    assert (h200.tflops, h200.mem_bw_gbs, h200.memory_gib) == (989.4, 4800, 141)
    assert specs.by_key("A100-SXM-80GB").mem_bw_gbs == 2039
    assert specs.by_key("A100-SXM-40GB").mem_bw_gbs == 1555
    assert specs.by_key("L40S").tflops == pytest.approx(362.05)
    assert specs.by_key("L4").tflops == 121


def test_gpus_without_bf16_are_rated_in_fp16() -> None:
    for key in ("T4", "V100-SXM2", "V100-PCIE", "V100S-PCIE"):
        assert specs.by_key(key).dtype == "fp16", key
    assert {s.dtype for s in specs.SPECS} == {"bf16", "fp16"}


def test_every_spec_is_complete_and_sane() -> None:
    keys = [s.key for s in specs.SPECS]
    assert len(keys) == len(set(keys))
    for spec in specs.SPECS:
        assert spec.source and spec.patterns, spec.key
        assert 10 < spec.tflops < 2000, spec.key  # dense, never the sparse figure
        assert 100 < spec.mem_bw_gbs < 10000, spec.key
        assert specs.lookup(spec.key) == spec, spec.key
        assert "patterns" not in spec.as_dict()


def test_by_key_names_the_known_keys() -> None:
    with pytest.raises(KeyError, match="H100-SXM"):
        specs.by_key("B300")
