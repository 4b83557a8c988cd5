"""Features stored as float16 against float32 (`dataset.feature_dtype`), in one run.

SALIENT++ stores vertex features in half precision: half the memory, half the bytes the
sampler gathers per batch and half the bytes a remote row takes on the wire; the model
still computes in float32. This trains a minibatch config twice per worker count, once
per dtype, same seed, the dtypes alternating (float32, float16, float32, ...) so both see
the same machine load, and prints per run: feature memory (1 worker: the graph's matrix;
K workers: the feature stores' tables summed over workers), remote feature bytes per
epoch (summed over workers), the epoch time and the time the step waited for batches
(median over epochs, the first left out when there are more), test accuracy and final
loss. K workers run as threads of this process (`cluster.launcher: threads`): their bytes
are the real Communicator's, their timings share one process, so only the 1-worker
timings compare with `gnnsys train`.

    python scripts/bench_feature_dtype.py --config configs/dist-synthetic-products.yaml \\
        --workers 1 --epochs 2
    python scripts/bench_feature_dtype.py --config configs/quickstart.yaml --workers 1 2
"""
import statistics
import tempfile
from pathlib import Path

import harness
from gnnsys.config import load_config
from gnnsys.datasets import load_run_graph

DTYPES = ("float32", "float16")


def run(args, graph32, dtype: str, workers: int, out: Path) -> dict:
    config = load_config(args.config, [
        f"dataset.feature_dtype={dtype}", f"cluster.workers={workers}", "cluster.launcher=threads",
        f"train.epochs={args.epochs}", "train.progress=false", f"run.dir={out / 'run'}",
        f"partition.dir={out / 'parts'}", *args.set])
    final, epochs = harness.train(config, load_run_graph(config, graph32))
    return {"memory": harness.feature_memory(config.run.dir),
            "remote": statistics.mean(e.get("remote_feature_bytes", 0) for e in epochs),
            "epoch_s": harness.median_after_first(e["epoch_s"] for e in epochs),
            "wait_s": harness.median_after_first(e["batch_wait_s"] for e in epochs),
            "test": final[harness.test_metric(final)], "loss": final["final_loss"]}


def main(argv=None):
    parser = harness.parser(__doc__, config="configs/quickstart.yaml", epochs=2, set=True)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    base = load_config(args.config, args.set)
    graph32 = load_run_graph(base)
    print(f"{args.config}: {graph32}, {args.epochs} epoch(s), seed {base.train.seed}, "
          f"sampler.threads {base.sampler.threads}, load average {harness.load_average()}",
          flush=True)
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
    print(f"load average at the end {harness.load_average()}")


if __name__ == "__main__":
    main()
