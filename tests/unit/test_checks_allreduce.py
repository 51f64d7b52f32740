"""The all-reduce sweep (checks/allreduce.py) in a one-rank torch.distributed group, without Ray:
each rank's own code (``AllreduceRank``, what every Ray actor of the sweep runs) and the result."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from checks import allreduce  # noqa: E402

SIZES = [2**10, 2**12, 2**14]


def _group(backend: str, tmp_path: Path) -> Iterator[allreduce.AllreduceRank]:
    """The one rank of a one-rank group, joined as the sweep's actors join theirs."""
    if not dist.is_available() or (backend == "nccl" and not dist.is_nccl_available()):
        pytest.skip(f"torch.distributed {backend} unavailable")
    rank = allreduce.AllreduceRank()
    rank.setup(0, 1, backend, f"file://{tmp_path / 'pg'}", None, 0, 60)
    try:
        yield rank
    finally:
        dist.destroy_process_group()


def sweep(rank: allreduce.AllreduceRank, sizes: list[int], warmup: int, iters: int) -> dict[str, Any]:
    """The sweep's result from one rank: each size in turn, as the driver asks every rank."""
    rows = [rank.run_size(nbytes, warmup, iters) for nbytes in sizes]
    return allreduce.sweep_result(str(dist.get_backend()), [{"rank": 0, "device": str(rank.device)}], rows)


@pytest.fixture
def gloo(tmp_path: Path) -> Iterator[allreduce.AllreduceRank]:
    yield from _group("gloo", tmp_path)


def test_sweep_checks_values_and_reports_each_size(gloo: allreduce.AllreduceRank) -> None:
    result = sweep(gloo, SIZES, warmup=1, iters=2)
    assert (result["backend"], result["world_size"]) == ("gloo", 1)
    assert result["value_check"]["ok"] and result["value_check"]["expected"] == 1.0
    assert [row["bytes"] for row in result["sweep"]] == SIZES
    calls = allreduce.calls_per_size(1, 2)  # what the driver watches to name a rank that hangs
    progress = {"bytes": SIZES[-1], "entered": calls, "completed": calls, "calls": calls, "total": 3 * calls}
    assert gloo.progress() == progress
    for row in result["sweep"]:
        assert row["time_s"] > 0 and row["algbw_gbps"] > 0
        assert row["busbw_gbps"] == 0.0  # one rank moves nothing over the bus: factor 2(n-1)/n = 0


def test_sweep_catches_wrong_sums(gloo: allreduce.AllreduceRank, monkeypatch: pytest.MonkeyPatch) -> None:
    real = dist.all_reduce

    def corrupting(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        out = real(tensor, *args, **kwargs)
        if tensor.numel() > 1:
            tensor[0] += 1  # a flipped value, as a broken link or GPU would give
        return out

    monkeypatch.setattr(dist, "all_reduce", corrupting)
    result = sweep(gloo, SIZES, warmup=0, iters=1)
    assert not result["value_check"]["ok"]
    assert result["value_check"]["detail"].startswith("1 of 256 elements differ from 1 at 1024 bytes")
    assert [row["values_ok"] for row in result["sweep"]] == [False, False, False]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sweep_on_one_gpu_with_nccl(tmp_path: Path) -> None:
    for rank in _group("nccl", tmp_path):
        result = sweep(rank, [2**20, 2**26], warmup=2, iters=5)
        assert result["backend"] == "nccl"
        assert result["value_check"]["ok"], result["value_check"]
        assert all(row["time_s"] > 0 for row in result["sweep"])
