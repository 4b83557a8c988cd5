"""Features stored as float16 against float32 (`dataset.feature_dtype`), in one run.

SALIENT++ stores vertex features in half precision: half the memory, half the bytes the
sampler gathers per batch and half the bytes a remote row takes on the wire; the model
still computes in float32. This trains a minibatch config twice per worker count, once
per dtype, same seed, the dtypes alternating (float32, float16, float32, ...) so both see
the same machine load, and prints per run: feature memory (1 worker: the graph's matrix;
K workers: the feature stores' tables summed over workers), remote feature bytes per
epoch (summed over workers), the epoch time and the time the step waited for batches
(median over epochs, the first left out when there are more), test accuracy and final
loss. K workers run as threads of this process (each with its own fetch group, as
gnnsys.distributed.local runs them): their bytes are the real Communicator's, their
timings share one process, so only the 1-worker timings compare with `gnnsys train`.

    python scripts/bench_feature_dtype.py --config configs/dist-synthetic-products.yaml \\
        --workers 1 --epochs 2
    python scripts/bench_feature_dtype.py --config configs/quickstart.yaml --workers 1 2
"""
from __future__ import annotations

import gnnsys  # noqa: F401  (first: sets the OpenMP wait default before torch loads OpenMP)
import argparse
import os
import statistics
import tempfile
from pathlib import Path

from bench_sparse_features import setup_and_epochs, thread_workers   # scripts/ is on sys.path
from gnnsys.config import load_config
from gnnsys.datasets import load_run_graph
from gnnsys.training import fit

DTYPES = ("float32", "float16")


def run(args, graph32, dtype: str, workers: int, out: Path) -> dict:
    overrides = [*args.set, f"dataset.feature_dtype={dtype}", f"cluster.workers={workers}",
                 f"train.epochs={args.epochs}", "train.progress=false",
                 f"run.dir={out / 'run'}", f"partition.dir={out / 'parts'}"]
    config = load_config(args.config, overrides)
    graph = load_run_graph(config, graph32)
    result = fit(config, graph=graph) if workers == 1 else thread_workers(config, graph)
    setup, epochs = setup_and_epochs(config.run.dir)
    timed = epochs[1:] or epochs
    return {"memory": sum(rank.get("feature_bytes", rank.get("table_bytes", 0))
                          for rank in setup),
            "remote": statistics.mean(sum(w["remote_feature_bytes"] for w in e["workers"])
                                      for e in epochs) if workers > 1 else 0,
            "epoch_s": statistics.median(e["epoch_s"] for e in timed),
            "wait_s": statistics.median(e["batch_wait_s"] for e in timed),
            "test": result.get("test_acc", result.get("test_auc")),
            "loss": result["final_loss"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/quickstart.yaml",
                        help="a minibatch config (its dataset needs dense features)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override, as gnnsys train --set")
    args = parser.parse_args()
    base = load_config(args.config, args.set)
    graph32 = load_run_graph(base)
    print(f"{args.config}: {graph32}, {args.epochs} epoch(s), seed {base.train.seed}, "
          f"sampler.threads {base.sampler.threads}, load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    print(f"{'workers':>7} {'dtype':>8} {'memory bytes':>14} {'remote bytes/epoch':>19} "
          f"{'epoch s':>8} {'wait s':>7} {'test':>7} {'final loss':>11}", flush=True)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in args.workers:
            for dtype in DTYPES:
                row = run(args, graph32, dtype, workers, Path(tmp) / f"{dtype}-{workers}")
                rows[workers, dtype] = row
                print(f"{workers:>7} {dtype:>8} {row['memory']:>14,} {row['remote']:>19,.0f} "
                      f"{row['epoch_s']:>8.2f} {row['wait_s']:>7.2f} {row['test']:>7.4f} "
                      f"{row['loss']:>11.5f}", flush=True)
    for workers in args.workers:
        full, half = rows[workers, "float32"], rows[workers, "float16"]
        print(f"{workers} worker(s): float16 memory {full['memory'] / half['memory']:.2f}x "
              f"smaller, epoch {full['epoch_s'] / half['epoch_s']:.2f}x faster, test "
              f"{half['test'] - full['test']:+.4f}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
