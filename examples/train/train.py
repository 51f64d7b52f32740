"""Distributed data-parallel training with Ray Train: a ``TorchTrainer`` of N workers (one GPU each
where the cluster has GPUs), metrics reported every epoch, a checkpoint on shared storage every
epoch, and a run that goes on from its last checkpoint when a worker is lost.

    rayrig submit inventories/prod.py --working-dir examples/train -- python train.py --workers 2

Checkpoints go to ``$RAYRIG_SHARED_DIR/train/NAME`` (the folder the deploy sets on every node) or to
``--storage``: every worker reaches them, so a worker group started again on other nodes resumes
from them. A run started again with the same ``--name`` resumes too.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import ray
import ray.train
import torch
from ray.train.torch import TorchTrainer, prepare_model


def dataset(rank: int, world: int, rows: int = 8192, features: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """This worker's shard of a fixed regression problem (every worker a different part of it)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, features, generator=generator)
    y = x @ torch.randn(features, generator=generator) + 0.1 * torch.randn(rows, generator=generator)
    return x[rank::world], y[rank::world]


def train_loop(config: dict) -> None:
    """One worker of the group: DDP over the group, resumes from the checkpoint Ray Train hands it."""
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    print(f"rank {rank} of {world} on node {ray.util.get_node_ip_address()}", flush=True)
    device = ray.train.torch.get_device()
    x, y = (t.to(device) for t in dataset(rank, world))
    model = prepare_model(torch.nn.Sequential(torch.nn.Linear(x.shape[1], 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder:
            state = torch.load(os.path.join(folder, "state.pt"), map_location=device)
        model.module.load_state_dict(state["model"]) if world > 1 else model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
        if rank == 0:
            print(f"resumed from the checkpoint of epoch {state['epoch']} ({checkpoint.path})", flush=True)
    for epoch in range(start, config["epochs"]):
        began = time.monotonic()
        for first in range(0, len(x), config["batch_size"]):
            batch = slice(first, first + config["batch_size"])
            loss = torch.nn.functional.mse_loss(model(x[batch]).squeeze(1), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        time.sleep(max(0.0, config["epoch_seconds"] - (time.monotonic() - began)))  # a longer epoch, on request
        metrics = {"epoch": epoch, "loss": loss.item()}
        with tempfile.TemporaryDirectory() as folder:
            saved = None
            if rank == 0:  # one copy of the weights: every worker holds the same after DDP's all-reduce
                plain = model.module if world > 1 else model
                state = {"model": plain.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
                torch.save(state, os.path.join(folder, "state.pt"))
                saved = ray.train.Checkpoint.from_directory(folder)
            ray.train.report(metrics, checkpoint=saved)
        if rank == 0:
            print(f"epoch {epoch}: loss {metrics['loss']:.4f}, checkpoint saved", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default=time.strftime("train-%Y%m%d-%H%M%S"), help="the run's folder name")
    parser.add_argument("--storage", default=os.environ.get("RAYRIG_SHARED_DIR"),
                        help="where checkpoints go (default: $RAYRIG_SHARED_DIR/train)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=2, help="training workers (default: 2)")
    parser.add_argument("--cpus", type=float, default=1, help="CPUs each worker declares (default: 1)")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--epoch-seconds", type=float, default=0, help="make each epoch last at least this long")
    parser.add_argument("--max-failures", type=int, default=3, help="worker losses the run survives (default: 3)")
    args = parser.parse_args()
    if not args.storage:
        parser.error(
            "no shared storage: the cluster has no RAYRIG_SHARED_DIR (no writable shared mount); give --storage"
        )

    ray.init()
    gpus = ray.cluster_resources().get("GPU", 0) >= args.workers
    started = time.monotonic()
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"lr": 0.05, "batch_size": 256, "epochs": args.epochs, "epoch_seconds": args.epoch_seconds},
        scaling_config=ray.train.ScalingConfig(
            num_workers=args.workers, use_gpu=gpus, resources_per_worker={"CPU": args.cpus}, placement_strategy="SPREAD"
        ),
        run_config=ray.train.RunConfig(
            name=args.name,
            storage_path=os.path.join(args.storage, "train"),
            failure_config=ray.train.FailureConfig(max_failures=args.max_failures),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2),
        ),
    )
    result = trainer.fit()
    print(f"trained {args.epochs} epochs on {args.workers} workers{' with GPUs' if gpus else ''} "
          f"in {time.monotonic() - started:.1f} s: loss {result.metrics['loss']:.4f}")  # fmt: skip
    print(f"final checkpoint: {result.checkpoint.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
