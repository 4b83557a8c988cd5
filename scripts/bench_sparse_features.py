"""Sparse (CSR) features kept sparse against the same features densified, in one run.

Trains minibatch GraphSAGE on a bag-of-words graph (default blogcatalog, whose bundle
stores CSR features) with 1 worker and with 2 workers (threads of this process, each
with its own fetch group, as gnnsys.distributed.local runs them), once with the features
kept CSR and once densified, same seed. Prints per run the feature memory (1 worker: the
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
from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from pathlib import Path

import torch

from gnnsys.config import from_dict
from gnnsys.datasets import load_run_graph
from gnnsys.distributed.launcher import WorkerContext
from gnnsys.distributed.local import ThreadGroup
from gnnsys.partitions import ensure_partitions
from gnnsys.runlog import read_metrics
from gnnsys.sparse_features import densified, feature_bytes
from gnnsys.training import TrainingLoop, fit


def settings(args, workers: int, out: Path) -> dict:
    return {"mode": "minibatch",
            "dataset": {"name": args.dataset, "normalize_features": "row"},
            "model": {"arch": "sage", "hidden": 64, "layers": 2, "dropout": 0.0},
            "sampler": {"fanouts": [10, 5], "batch_size": 256, "threads": 1, "prefetch": 1},
            "cache": {"policy": "vip", "replication": 0.1},
            "partition": {"dir": str(out / "parts")},
            "cluster": {"workers": workers},
            "train": {"epochs": args.epochs, "seed": args.seed, "progress": False},
            "run": {"dir": str(out / "run")}}


def thread_workers(config, graph) -> dict:
    path = str(ensure_partitions(config, graph, force=True, progress=False).path)
    fetch = ThreadGroup(config.cluster.workers)
    return ThreadGroup(config.cluster.workers).run(lambda comm: TrainingLoop(
        WorkerContext(comm.rank, comm.world_size, torch.device("cpu"), comm,
                      fetch_comm=fetch.comm(comm.rank)), config, (path,)).run())[0]


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


def setup_and_epochs(run_dir) -> tuple[list, list]:
    """A run's per-rank set-up records (its start event) and its epoch records."""
    records = read_metrics(run_dir)
    setup = next(r for r in records if r.get("event") == "start")["setup"]
    return setup, [r for r in records if "loss" in r and "epoch" in r]


def run_fullgraph(args, graph, out: Path) -> dict:
    config = from_dict(fullgraph_settings(args, out))
    result = fit(config, graph=graph)
    setup, epochs = setup_and_epochs(config.run.dir)
    return {"memory": sum(rank["feature_bytes"] for rank in setup),
            "remote": statistics.mean(e["bytes_sent"] for e in epochs),
            "epoch_s": statistics.median(e["epoch_s"] for e in epochs[1:]),
            "test_acc": result["test_acc"], "loss": result["final_loss"]}


def run(args, graph, workers: int, out: Path) -> dict:
    config = from_dict(settings(args, workers, out))
    result = fit(config, graph=graph) if workers == 1 else thread_workers(config, graph)
    setup, epochs = setup_and_epochs(config.run.dir)
    if workers == 1:
        memory, remote = feature_bytes(graph.x), 0
    else:
        memory = sum(rank["table_bytes"] for rank in setup)
        remote = statistics.mean(sum(w["remote_feature_bytes"] for w in e["workers"])
                                 for e in epochs)
    return {"memory": memory, "remote": remote, "test_acc": result["test_acc"],
            "loss": result["final_loss"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="blogcatalog")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--fullgraph-epochs", type=int, default=50,
                        help="epochs (= full-graph steps) of the full-graph runs")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    probe = from_dict(settings(args, 1, Path(tempfile.gettempdir())))
    sparse = load_run_graph(probe)            # loaded and row-normalised, kept CSR
    dense = dataclasses.replace(sparse, x=densified(sparse.x))
    x = sparse.x
    print(f"{args.dataset}: {x.shape[0]} nodes x {x.shape[1]} features, {x.nnz} nonzeros "
          f"({100 * x.nnz / (x.shape[0] * x.shape[1]):.2f}%), {args.epochs} epoch(s), "
          f"seed {args.seed}")
    print(f"{'workers':>7} {'features':>9} {'memory bytes':>14} {'remote bytes/epoch':>19} "
          f"{'test acc':>9} {'final loss':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            for name, graph in (("sparse", sparse), ("dense", dense)):
                row = run(args, graph, workers, Path(tmp) / f"{name}-{workers}")
                print(f"{workers:>7} {name:>9} {row['memory']:>14,} {row['remote']:>19,.0f} "
                      f"{row['test_acc']:>9.4f} {row['loss']:>11.5f}")
        print(f"\nfull-graph GCN, 2 workers, {args.fullgraph_epochs} epochs: feature memory, "
              f"boundary-message bytes sent per epoch")
        print(f"{'features':>9} {'memory bytes':>14} {'message bytes/epoch':>20} "
              f"{'epoch s':>8} {'test acc':>9} {'final loss':>11}")
        for name, graph in (("sparse", sparse), ("dense", dense)):
            row = run_fullgraph(args, graph, Path(tmp) / f"fullgraph-{name}")
            print(f"{name:>9} {row['memory']:>14,} {row['remote']:>20,.0f} "
                  f"{row['epoch_s']:>8.3f} {row['test_acc']:>9.4f} {row['loss']:>11.5f}")


if __name__ == "__main__":
    main()
