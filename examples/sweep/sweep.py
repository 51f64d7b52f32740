"""A hyperparameter sweep with Ray Tune: every combination of learning rate, batch size and epochs,
one trial each, run side by side on the cluster, a trial that fails retried, and the results and the
best configuration written to shared storage.

    rayrig submit inventories/prod.py --working-dir examples/sweep -- python sweep.py

Each trial declares what it needs (``--cpus``, and one GPU where the cluster has GPUs), so Ray runs as
many at once as the cluster holds. The results go to ``$RAYRIG_SHARED_DIR/sweep/NAME`` (the folder
the deploy sets on every node, on the first writable shared mount), or to ``--storage``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path

import numpy as np
import ray
from ray import tune

LEARNING_RATES = (0.3, 0.1, 0.03)
BATCH_SIZES = (32, 128)
EPOCHS = (2, 6)


def grid() -> list[dict]:
    """Every configuration, each with its index (the trial that may crash on purpose is named by it)."""
    combos = itertools.product(LEARNING_RATES, BATCH_SIZES, EPOCHS)
    return [{"index": i, "lr": lr, "batch_size": b, "epochs": e} for i, (lr, b, e) in enumerate(combos)]


def dataset(seed: int = 0, rows: int = 4096, features: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """A fixed regression problem: y = X @ w + noise."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    w = rng.normal(size=features).astype(np.float32)
    return x, x @ w + 0.1 * rng.normal(size=rows).astype(np.float32)


def train(config: dict) -> dict:
    """One trial: linear regression by minibatch SGD (torch, on the trial's GPU when it has one)."""
    import torch  # noqa: PLC0415 (imported where the trial runs)

    crash = config.get("crash_index")
    marker = Path(config["storage"]) / f"crashed-{config['index']}"
    if crash == config["index"] and not marker.exists():  # once: a retried trial finds the marker
        marker.write_text(f"trial {config['index']} crashed its worker on purpose\n")
        print(f"trial {config['index']}: crashing its worker process on purpose", flush=True)
        os._exit(1)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x, y = (torch.from_numpy(a).to(device) for a in dataset())
    model = torch.nn.Linear(x.shape[1], 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    for epoch in range(config["epochs"]):
        for start in range(0, len(x), config["batch_size"]):
            batch = slice(start, start + config["batch_size"])
            loss = torch.nn.functional.mse_loss(model(x[batch]).squeeze(1), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            mse = torch.nn.functional.mse_loss(model(x).squeeze(1), y).item()
        tune.report(
            {"mse": mse if np.isfinite(mse) else 1e30, "epoch": epoch + 1, "node": ray.util.get_node_ip_address()}
        )
    return {"mse": mse}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default=time.strftime("sweep-%Y%m%d-%H%M%S"), help="the run's folder name")
    parser.add_argument("--storage", default=os.environ.get("RAYRIG_SHARED_DIR"),
                        help="where results go (default: $RAYRIG_SHARED_DIR/sweep)")  # fmt: skip
    parser.add_argument("--cpus", type=float, default=1, help="CPUs each trial declares (default: 1)")
    parser.add_argument("--retries", type=int, default=2, help="times a failed trial is tried again (default: 2)")
    parser.add_argument("--crash-trial", type=int, default=None, metavar="INDEX",
                        help="the trial that crashes its worker once, on purpose, to show the retry")  # fmt: skip
    args = parser.parse_args()
    if not args.storage:
        parser.error(
            "no shared storage: the cluster has no RAYRIG_SHARED_DIR (no writable shared mount); give --storage"
        )

    ray.init()
    gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
    storage = Path(args.storage) / "sweep"
    run = storage / args.name
    run.mkdir(parents=True, exist_ok=True)
    space = {"index": tune.grid_search([c["index"] for c in grid()])}
    configs = {c["index"]: c for c in grid()}

    def trial(config: dict) -> dict:
        return train({**configs[config["index"]], "crash_index": args.crash_trial, "storage": str(run)})

    started = time.monotonic()
    tuner = tune.Tuner(
        tune.with_resources(trial, {"cpu": args.cpus, "gpu": gpus}),
        param_space=space,
        tune_config=tune.TuneConfig(metric="mse", mode="min"),
        run_config=tune.RunConfig(
            name=args.name, storage_path=str(storage), failure_config=tune.FailureConfig(max_failures=args.retries)
        ),
    )
    results = tuner.fit()
    rows = []
    for result in results:
        index = result.config["index"]
        rows.append({**configs[index], "mse": result.metrics.get("mse") if result.metrics else None,
                     "error": repr(result.error) if result.error else None})  # fmt: skip
    rows.sort(key=lambda r: r["index"])
    best = results.get_best_result()
    best_config = {**configs[best.config["index"]], "mse": best.metrics["mse"]}
    (run / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    (run / "best.json").write_text(json.dumps(best_config) + "\n")
    failed = [r for r in rows if r["error"]]
    print(f"{len(rows)} trials, {len(rows) - len(failed)} with results, {len(failed)} failed, "
          f"in {time.monotonic() - started:.1f} s ({args.cpus:g} CPU{'' if args.cpus == 1 else 's'}"
          f"{', 1 GPU' if gpus else ''} each)")  # fmt: skip
    for row in rows:
        print(f"  trial {row['index']:2d}: lr={row['lr']:<5} batch_size={row['batch_size']:<4} "
              f"epochs={row['epochs']}  mse={row['mse']}")  # fmt: skip
    print(f"best configuration: lr={best_config['lr']} batch_size={best_config['batch_size']} "
          f"epochs={best_config['epochs']} (mse {best_config['mse']:.4f})")  # fmt: skip
    print(f"results: {run / 'results.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
