"""Sparse (CSR) features kept sparse against the same features densified, in one run.

Trains minibatch GraphSAGE on a bag-of-words graph (default blogcatalog, whose bundle
stores CSR features) with 1 worker and with 2 workers (threads of this process, as
`cluster.launcher: threads` runs them), once with the features kept CSR and once
densified, same seed. Prints per run the feature memory (1 worker: the
graph's matrix; K workers: the feature stores' tables summed over workers), the remote
feature bytes per epoch (rows received from peers, summed over workers, mean over epochs)
and the test accuracy. Then the same for full-graph GCN with 2 workers (Ray actors,
quantisation off, `--fullgraph-epochs` full-graph steps): feature memory summed over
workers, and the boundary-message bytes sent per epoch (every layer, forward and
backward; a CSR first layer sends its projected rows, see gnnsys/fullgraph/model.py).
Byte counts are deterministic; of timings only the full-graph epoch (median over
epochs 2..) is printed, where the first layer's work changes with the representation.

    python scripts/bench_sparse_features.py
    python scripts/bench_sparse_features.py --dataset twitch_en --epochs 2
"""
import dataclasses
import statistics
import tempfile
from pathlib import Path

import harness
from gnnsys.config import from_dict
from gnnsys.datasets import load_run_graph
from gnnsys.metrics import METRIC_KEY
from gnnsys.sparse_features import densified


def settings(args, workers: int, out: Path) -> dict:
    return {"mode": "minibatch",
            "dataset": {"name": args.dataset, "normalize_features": "row"},
            "model": {"arch": "sage", "hidden": 64, "layers": 2, "dropout": 0.0},
            "sampler": {"fanouts": [10, 5], "batch_size": 256, "threads": 1, "prefetch": 1},
            "cache": {"policy": "vip", "replication": 0.1},
            "partition": {"dir": str(out / "parts")},
            "cluster": {"workers": workers, "launcher": "threads"},
            "train": {"epochs": args.epochs, "seed": args.seed, "progress": False},
            "run": {"dir": str(out / "run")}}


def fullgraph_settings(args, out: Path) -> dict:
    return {"mode": "fullgraph",
            "dataset": {"name": args.dataset, "normalize_features": "row"},
            "model": {"arch": "gcn", "hidden": 64, "layers": 2, "dropout": 0.0},
            "partition": {"method": "metis", "dir": str(out / "parts")},
            "fullgraph": {"quantization": {"mode": "none"}},
            "cluster": {"workers": 2},
            # one step per epoch: full-graph training needs many (configs/adaqp-cora.yaml)
            "train": {"epochs": args.fullgraph_epochs, "lr": 0.01, "seed": args.seed,
                      "eval_every": args.fullgraph_epochs, "progress": False},
            "run": {"dir": str(out / "run")}}


def run(args, sections: dict, graph, remote_key: str) -> dict:
    """Feature memory, `remote_key` bytes per epoch (summed over workers, mean over epochs),
    the epoch time (median over epochs 2..), test metric and final loss of one run."""
    config = from_dict(sections, args.set)
    final, epochs = harness.train(config, graph)
    return {"memory": harness.feature_memory(config.run.dir),
            "remote": statistics.mean(e.get(remote_key, 0) for e in epochs),
            "epoch_s": harness.median_after_first(e["epoch_s"] for e in epochs),
            "test": final[harness.test_metric(final)], "loss": final["final_loss"]}


def main(argv=None):
    parser = harness.parser(__doc__, epochs=1, seed=0, set=True)
    parser.add_argument("--dataset", default="blogcatalog")
    parser.add_argument("--fullgraph-epochs", type=int, default=50,
                        help="epochs (= full-graph steps) of the full-graph runs")
    args = parser.parse_args(argv)
    probe = from_dict(settings(args, 1, Path(tempfile.gettempdir())), args.set)
    sparse = load_run_graph(probe)            # loaded and row-normalised, kept CSR
    dense = dataclasses.replace(sparse, x=densified(sparse.x))
    x, test = sparse.x, f"test {METRIC_KEY[sparse.metric]}"     # ROC-AUC on twitch_en
    print(f"{probe.dataset.name}: {x.shape[0]} nodes x {x.shape[1]} features, {x.nnz} nonzeros "
          f"({100 * x.nnz / (x.shape[0] * x.shape[1]):.2f}%), {args.epochs} epoch(s), "
          f"seed {args.seed}")
    print(f"{'workers':>7} {'features':>9} {'memory bytes':>14} {'remote bytes/epoch':>19} "
          f"{test:>9} {'final loss':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            for name, graph in (("sparse", sparse), ("dense", dense)):
                out = Path(tmp) / f"{name}-{workers}"
                row = run(args, settings(args, workers, out), graph, "remote_feature_bytes")
                print(f"{workers:>7} {name:>9} {row['memory']:>14,} {row['remote']:>19,.0f} "
                      f"{row['test']:>9.4f} {row['loss']:>11.5f}")
        print(f"\nfull-graph GCN, 2 workers, {args.fullgraph_epochs} epochs: feature memory, "
              f"boundary-message bytes sent per epoch")
        print(f"{'features':>9} {'memory bytes':>14} {'message bytes/epoch':>20} "
              f"{'epoch s':>8} {test:>9} {'final loss':>11}")
        for name, graph in (("sparse", sparse), ("dense", dense)):
            out = Path(tmp) / f"fullgraph-{name}"
            row = run(args, fullgraph_settings(args, out), graph, "bytes_sent")
            print(f"{name:>9} {row['memory']:>14,} {row['remote']:>20,.0f} "
                  f"{row['epoch_s']:>8.3f} {row['test']:>9.4f} {row['loss']:>11.5f}")


if __name__ == "__main__":
    main()
