"""A dataset on shared storage, read by every worker from the mount instead of downloaded on each
node: Ray Data reads the Parquet files where they are and splits the rows among the workers in
equal shares, so every row is read once, by one of them.

    rayrig submit inventories/prod.py --working-dir examples/data -- python data.py --workers 2

The dataset is ``$RAYRIG_SHARED_DIR/data/NAME`` (the folder the deploy sets on every node) or
``--storage``; the first run writes it there (``--rows`` rows in ``--files`` files) if it is not there
yet. Each worker prints the rows it read and the node it ran on; the job checks that together they
read every row once.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray


def write_dataset(folder: Path, rows: int, files: int) -> None:
    """``rows`` rows (an ``id`` and 16 features) in ``files`` Parquet files, then ``_SUCCESS``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for part, ids in enumerate(np.array_split(np.arange(rows), files)):
        table = pa.table({"id": ids, **{f"x{i}": rng.normal(size=len(ids)).astype(np.float32) for i in range(16)}})
        pq.write_table(table, folder / f"part-{part:04d}.parquet")
    (folder / "_SUCCESS").write_text(f"{rows} rows in {files} files\n")


@ray.remote(num_cpus=1)
class Reader:
    """One worker: reads its share of the dataset from the mount as a stream of batches."""

    def read(self, shard) -> dict:
        began, rows, ids = time.monotonic(), 0, 0
        for batch in shard.iter_batches(batch_size=1024, batch_format="numpy"):
            rows += len(batch["id"])
            ids += int(batch["id"].sum())
        return {
            "node": ray.util.get_node_ip_address(),
            "rows": rows,
            "id_sum": ids,
            "seconds": time.monotonic() - began,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="example-v1", help="the dataset's folder name (default: example-v1)")
    parser.add_argument("--storage", default=os.environ.get("RAYRIG_SHARED_DIR"),
                        help="where the dataset is (default: $RAYRIG_SHARED_DIR/data)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=2, help="workers that read it (default: 2)")
    parser.add_argument("--rows", type=int, default=200_000, help="rows of a dataset written by this run")
    parser.add_argument("--files", type=int, default=8, help="files of a dataset written by this run")
    args = parser.parse_args()
    if not args.storage:
        parser.error(
            "no shared storage: the cluster has no RAYRIG_SHARED_DIR (no writable shared mount); give --storage"
        )

    ray.init()
    folder = Path(args.storage) / "data" / args.name
    if not (folder / "_SUCCESS").exists():
        print(f"writing the dataset: {args.rows} rows in {args.files} files to {folder}")
        write_dataset(folder, args.rows, args.files)
    files = sorted(folder.glob("*.parquet"))
    expected_rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    print(f"dataset: {folder}, {len(files)} files, {expected_rows} rows, {sum(f.stat().st_size for f in files)} bytes")

    started = time.monotonic()
    dataset = ray.data.read_parquet(str(folder)).select_columns(["id", "x0"])
    shards = dataset.streaming_split(args.workers, equal=True)  # a share each, of the same size
    readers = [Reader.options(scheduling_strategy="SPREAD").remote() for _ in range(args.workers)]
    read = ray.get([reader.read.remote(shard) for reader, shard in zip(readers, shards, strict=True)])
    for index, share in enumerate(read):
        print(f"worker {index} on node {share['node']} read {share['rows']} rows from {folder} "
              f"in {share['seconds']:.1f} s")  # fmt: skip
    rows = sum(share["rows"] for share in read)
    once = rows == expected_rows and sum(share["id_sum"] for share in read) == expected_rows * (expected_rows - 1) // 2
    nodes = len({share["node"] for share in read})
    print(f"{args.workers} workers on {nodes} nodes read {rows} of {expected_rows} rows in "
          f"{time.monotonic() - started:.1f} s: {'every row once' if once else 'NOT every row once'}")  # fmt: skip
    return 0 if once else 1


if __name__ == "__main__":
    raise SystemExit(main())
