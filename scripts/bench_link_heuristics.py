"""Link-prediction heuristics (common neighbours, Adamic-Adar, resource allocation) scored
on the training graph under the held-out pairs and negatives a model is ranked against.

The baselines a static link-prediction model must beat, as EdgeBank is for temporal ones.
ogbl_ddi (../shared/data/link/ogbl_ddi.npz): OGB's split and fixed negatives, Hits@20 as
OGB's evaluator counts it (the share of positives scored strictly above the 20th-highest
negative), beside the published heuristic figures. Any static graph of the registry: a
seeded edge split (`--val` / `--test`, GAE's 5 % / 10 % by default; one negative per
held-out positive, `gnnsys.datasets.splits.random_edge_split`), AUC and AP (GAE's
protocol) and Hits@{20,50,100} against the phase's negatives.

    python scripts/bench_link_heuristics.py --datasets ogbl_ddi cora citeseer
"""
import harness  # first: gnnsys sets the OpenMP wait default before numpy's BLAS spins
import time

import numpy as np
import scipy.sparse as sp

from gnnsys.datasets import load_dataset
from gnnsys.datasets.bundles import require_bundle
from gnnsys.datasets.npz import read_npz
from gnnsys.datasets.registry import data_root
from gnnsys.datasets.splits import random_edge_split
from gnnsys.graph import csr_from_edges
from gnnsys.metrics import average_precision, hits_at, roc_auc

HEURISTICS = ("cn", "aa", "ra")
HITS = (20, 50, 100)
# Test Hits@20 of the heuristics on ogbl-ddi as published (OGB leaderboard; tabulated by
# Wang et al., ICLR 2024, "Neural common neighbor with completion", Table 2).
PUBLISHED = {"ogbl_ddi": {"cn": 0.1773, "aa": 0.1861, "ra": 0.2760}}
OGB_FILE = "link/ogbl_ddi.npz"
CHUNK = 8192        # pairs scored at once (rows of two sparse slices)


def heuristic_scores(indptr, indices, num_nodes: int, pairs: np.ndarray, kind: str) -> np.ndarray:
    """Score of each pair (u, v) of `pairs` [2, P] over the graph (symmetric CSR): the sum
    over common neighbours w of 1 (cn), 1 / log(deg w) (aa) or 1 / deg w (ra)."""
    adjacency = sp.csr_matrix((np.ones(len(indices), np.float64), np.asarray(indices),
                               np.asarray(indptr)), shape=(num_nodes, num_nodes))
    degree = np.diff(np.asarray(indptr)).astype(np.float64)
    # a common neighbour of two distinct nodes has degree >= 2, so log(deg) > 0 where read
    weight = {"cn": np.ones_like(degree),
              "aa": 1.0 / np.log(np.maximum(degree, 2.0)),
              "ra": 1.0 / np.maximum(degree, 1.0)}[kind]
    weighted = adjacency @ sp.diags(weight)
    scores = np.empty(pairs.shape[1], np.float64)
    for start in range(0, pairs.shape[1], CHUNK):
        u, v = pairs[0, start:start + CHUNK], pairs[1, start:start + CHUNK]
        scores[start:start + CHUNK] = np.asarray(
            adjacency[u].multiply(weighted[v]).sum(axis=1)).ravel()
    return scores


def split_of(name: str, val: float, test: float, seed: int):
    """(indptr, indices, num_nodes, {phase: (positives, negatives)}) of dataset `name`."""
    if name == "ogbl_ddi":
        arrays = read_npz(require_bundle(name, OGB_FILE, data_root()),
                          "see ../shared/data/MANIFEST.md (static link prediction)")
        num_nodes = int(arrays["num_nodes"])
        indptr, indices = csr_from_edges(*arrays["edge_index"], num_nodes)   # symmetric
        phases = {p: (np.asarray(arrays[f"{p}_pos"], np.int64),
                      np.asarray(arrays[f"{p}_neg"], np.int64)) for p in ("val", "test")}
        return indptr, indices, num_nodes, phases
    graph = load_dataset(name)
    split = random_edge_split(graph.indptr, graph.indices, graph.num_nodes, val, test, seed)
    return (split.indptr, split.indices, graph.num_nodes,
            {"val": (split.val_pos, split.val_neg), "test": (split.test_pos, split.test_neg)})


def bench(name: str, val: float, test: float, seed: int) -> list[dict]:
    indptr, indices, num_nodes, phases = split_of(name, val, test, seed)
    rows = []
    for kind in HEURISTICS:
        started, row = time.perf_counter(), {"dataset": name, "seed": seed, "heuristic": kind}
        for phase, (positive, negative) in phases.items():
            pos = heuristic_scores(indptr, indices, num_nodes, positive, kind)
            neg = heuristic_scores(indptr, indices, num_nodes, negative, kind)
            labels = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
            row[f"{phase}_auc"] = roc_auc(np.r_[pos, neg], labels)
            row[f"{phase}_ap"] = average_precision(np.r_[pos, neg], labels)
            for k in HITS:
                row[f"{phase}_hits{k}"] = hits_at(pos, neg, k)
        row["published_test_hits20"] = PUBLISHED.get(name, {}).get(kind)
        row["seconds"] = time.perf_counter() - started
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    cells = [[r["dataset"], r["seed"], r["heuristic"],
              *(f"{r[f'test_{m}']:.4f}" for m in ("auc", "ap", *(f"hits{k}" for k in HITS))),
              f"{r['val_hits20']:.4f}",
              "-" if r["published_test_hits20"] is None else f"{r['published_test_hits20']:.4f}"]
             for r in rows]
    return harness.markdown(["dataset", "seed", "heuristic", "test AUC", "test AP",
                             *(f"test Hits@{k}" for k in HITS), "val Hits@20",
                             "published test Hits@20"], cells)


def main(argv=None) -> list[dict]:
    ap = harness.parser(__doc__, json=True)
    ap.add_argument("--datasets", nargs="+", default=["ogbl_ddi", "cora", "citeseer"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0],
                    help="seeds of the edge split (not ogbl_ddi's, which is fixed)")
    ap.add_argument("--val", type=float, default=0.05, help="held-out validation edge share")
    ap.add_argument("--test", type=float, default=0.10, help="held-out test edge share")
    args = ap.parse_args(argv)
    rows = []
    for name in args.datasets:
        for seed in ([0] if name == "ogbl_ddi" else args.seeds):
            rows += bench(name, args.val, args.test, seed)
            harness.write_json(args.json, rows)
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
