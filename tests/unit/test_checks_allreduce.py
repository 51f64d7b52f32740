"""The all-reduce sweep (checks/allreduce.py) in a one-rank torch.distributed group, without Ray."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from checks import allreduce  # noqa: E402

SIZES = [2**10, 2**12, 2**14]


def _group(backend: str, tmp_path: Path) -> Iterator[None]:
    if not dist.is_available() or (backend == "nccl" and not dist.is_nccl_available()):
        pytest.skip(f"torch.distributed {backend} unavailable")
    dist.init_process_group(backend, init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture
def gloo(tmp_path: Path) -> Iterator[None]:
    yield from _group("gloo", tmp_path)


def test_sweep_checks_values_and_reports_each_size(gloo: None) -> None:
    seen: list[dict[str, Any]] = []
    result = allreduce.allreduce_sweep(SIZES, warmup=1, iters=2, device=torch.device("cpu"), on_row=seen.append)
    assert (result["backend"], result["world_size"]) == ("gloo", 1)
    assert result["value_check"]["ok"] and result["value_check"]["expected"] == 1.0
    assert [row["bytes"] for row in result["sweep"]] == SIZES
    assert seen == result["sweep"]
    for row in result["sweep"]:
        assert row["time_s"] > 0 and row["algbw_gbps"] > 0
        assert row["busbw_gbps"] == 0.0  # one rank moves nothing over the bus: factor 2(n-1)/n = 0


def test_sweep_catches_wrong_sums(gloo: None, monkeypatch: pytest.MonkeyPatch) -> None:
    real = dist.all_reduce

    def corrupting(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        out = real(tensor, *args, **kwargs)
        if tensor.numel() > 1:
            tensor[0] += 1  # a flipped value, as a broken link or GPU would give
        return out

    monkeypatch.setattr(dist, "all_reduce", corrupting)
    result = allreduce.allreduce_sweep(SIZES, warmup=0, iters=1, device=torch.device("cpu"))
    assert not result["value_check"]["ok"]
    assert result["value_check"]["detail"].startswith("1 of 256 elements differ from 1 at 1024 bytes")
    assert [row["values_ok"] for row in result["sweep"]] == [False, False, False]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sweep_on_one_gpu_with_nccl(tmp_path: Path) -> None:
    for _ in _group("nccl", tmp_path):
        torch.cuda.set_device(0)
        result = allreduce.allreduce_sweep([2**20, 2**26], warmup=2, iters=5, device=torch.device("cuda:0"))
        assert result["backend"] == "nccl"
        assert result["value_check"]["ok"], result["value_check"]
        assert all(row["time_s"] > 0 for row in result["sweep"])
