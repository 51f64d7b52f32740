"""nccl-tests formulas, medians and outliers (checks/maths.py)."""

from __future__ import annotations

import pytest

from checks import maths


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 1, 0.0),
        ("all_reduce", 2, 1.0),
        ("all_reduce", 8, 1.75),
        ("allreduce", 4, 1.5),
        ("all-reduce", 16, 1.875),
        ("all_gather", 8, 0.875),
        ("reduce_scatter", 2, 0.5),
        ("all_gather", 1, 0.0),
        ("broadcast", 8, 1.0),
        ("reduce", 1, 1.0),
    ],
)
def test_busbw_factor(op: str, n: int, factor: float) -> None:
    assert maths.busbw_factor(op, n) == pytest.approx(factor)


def test_busbw_factor_rejects_unknown_op_and_bad_rank_count() -> None:
    with pytest.raises(ValueError, match="unknown collective 'all_scatter'"):
        maths.busbw_factor("all_scatter", 8)
    with pytest.raises(ValueError, match="at least 1"):
        maths.busbw_factor("all_reduce", 0)


def test_algbw_is_bytes_per_second_in_gb() -> None:
    assert maths.algbw(2e9, 2.0) == pytest.approx(1.0)
    assert maths.algbw(2**30, 0.5) == pytest.approx(2.147483648)


def test_algbw_rejects_non_positive_time() -> None:
    with pytest.raises(ValueError, match="positive"):
        maths.algbw(1e9, 0)


def test_busbw_is_algbw_times_factor() -> None:
    # 1 GiB all-reduced across 8 ranks in 10 ms: algbw 107.37 GB/s, busbw 1.75x.
    assert maths.algbw(2**30, 0.01) == pytest.approx(107.3741824)
    assert maths.busbw(2**30, 0.01, "all_reduce", 8) == pytest.approx(187.9048192)
    assert maths.busbw(2**30, 0.01, "all_reduce", 1) == 0.0


def test_median() -> None:
    assert maths.median([3.0, 1.0, 2.0]) == 2.0
    assert maths.median([1.0, 2.0, 3.0, 10.0]) == 2.5
    with pytest.raises(ValueError):
        maths.median([])


def test_outliers_names_values_below_fraction_of_median() -> None:
    values = {"gpu-a": 100.0, "gpu-b": 101.0, "gpu-c": 60.0, "gpu-d": 99.0}
    assert maths.outliers(values) == ["gpu-c"]
    assert maths.outliers(values, fraction=0.5) == []


def test_outliers_boundary_is_inclusive() -> None:
    # median 100: exactly 90 is not an outlier at 0.9, a hair below is.
    assert maths.outliers({"a": 100.0, "b": 100.0, "c": 90.0}) == []
    assert maths.outliers({"a": 100.0, "b": 100.0, "c": 89.99}) == ["c"]


def test_outliers_need_peers() -> None:
    assert maths.outliers({}) == []
    assert maths.outliers({"only": 1.0}) == []
    # two values: the median is their mean, so a clearly slow one is still caught
    assert maths.outliers({"fast": 100.0, "slow": 50.0}) == ["slow"]


def test_outliers_rejects_bad_fraction() -> None:
    with pytest.raises(ValueError, match="fraction"):
        maths.outliers({"a": 1.0, "b": 2.0}, fraction=1.5)
