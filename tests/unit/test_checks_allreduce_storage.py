"""The all-reduce's Ray Train storage: a private directory of its own per run, gone afterwards.

Ray Train is faked (``ray.train``, ``ray.train.torch``): what matters is the ``storage_path``
the run is given and what becomes of it, whether the training run succeeds or fails.
"""

from __future__ import annotations

import stat
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest

from checks import allreduce

NODES = [{"num_gpus": 0, "num_cpus": 4}, {"num_gpus": 0, "num_cpus": 4}]


class FakeTrainer:
    """Records the storage it was given and what it looked like while the run was on."""

    runs: list[dict[str, Any]] = []
    fail = False

    def __init__(self, loop: Any, *, run_config: dict[str, Any], **_kwargs: Any) -> None:
        self.storage = Path(run_config["storage_path"])

    def fit(self) -> Any:
        info = self.storage.stat()
        mode = stat.S_IMODE(info.st_mode)
        FakeTrainer.runs.append({"path": self.storage, "mode": mode, "is_dir": self.storage.is_dir()})
        if FakeTrainer.fail:
            raise RuntimeError("the training run failed")
        table = {"backend": "gloo", "sweep": [{"bytes": 1024}]}
        return types.SimpleNamespace(return_value=table, metrics={}, error=None)


@pytest.fixture
def fake_train(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    ray, train, torch = (types.ModuleType(n) for n in ("ray", "ray.train", "ray.train.torch"))
    train.RunConfig = train.ScalingConfig = dict
    torch.TorchConfig, torch.TorchTrainer = dict, FakeTrainer
    ray.train, train.torch = train, torch
    for name, module in (("ray", ray), ("ray.train", train), ("ray.train.torch", torch)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(allreduce, "_wait_for_free", lambda resource, amount, timeout_s: amount)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp makes its directories
    monkeypatch.setattr(FakeTrainer, "runs", [])
    monkeypatch.setattr(FakeTrainer, "fail", False)
    return tmp_path


def test_each_run_gets_a_fresh_private_directory_removed_afterwards(fake_train: Path) -> None:
    first = allreduce.run_allreduce(NODES, sizes=[1024])
    second = allreduce.run_allreduce(NODES, sizes=[1024])
    assert first["sweep"] == second["sweep"] == [{"bytes": 1024}]
    one, two = FakeTrainer.runs
    assert one["path"] != two["path"]
    for run in (one, two):
        assert run["is_dir"] and run["mode"] == 0o700
        assert run["path"].parent == fake_train and run["path"].name.startswith("rayrig-train.")
        assert not run["path"].exists()
    assert list(fake_train.iterdir()) == []


def test_a_failed_run_removes_its_directory_too(fake_train: Path) -> None:
    FakeTrainer.fail = True
    result = allreduce.run_allreduce(NODES, sizes=[1024])
    assert "the training run failed" in result["error"]
    [run] = FakeTrainer.runs
    assert run["mode"] == 0o700 and not run["path"].exists()
    assert list(fake_train.iterdir()) == []
