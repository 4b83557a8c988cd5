"""Link prediction on static graphs: gnnsys's link mode (each `--configs` file) beside the
heuristics (common neighbours, Adamic-Adar, resource allocation), all scored under the
same held-out pairs and negatives, the heuristics on the training graph.

The heuristics are the baselines a static link-prediction model must beat, as EdgeBank is
for temporal ones. ogbl_ddi (../shared/data/link/ogbl_ddi.npz): OGB's split and fixed
negatives, Hits@20 as OGB's evaluator counts it (the share of positives scored strictly
above the 20th-highest negative), beside the published heuristic figures (heuristics
only). Any static graph of the registry: link mode's seeded edge split (`--val` /
`--test`, GAE's 5 % / 10 % by default, `--seeds` its `link.split_seed`; one negative per
held-out positive, `gnnsys.link.data.LinkData`), AUC and AP (GAE's protocol),
Hits@{20,50,100} against the phase's negatives and MRR against each positive's ranking
negatives; a config's run trains on that very split (`dataset.name`, `link.*` set here).

    python scripts/bench_link.py --datasets ogbl_ddi cora citeseer
    python scripts/bench_link.py --datasets cora citeseer --seeds 0 1 2 3 4 \
        --configs configs/link-cora.yaml
"""
import harness  # first: gnnsys sets the OpenMP wait default before numpy's BLAS spins
import time

import numpy as np
import scipy.sparse as sp

from gnnsys.config import load_config
from gnnsys.datasets.bundles import require_bundle
from gnnsys.datasets.npz import read_npz
from gnnsys.datasets.registry import data_root
from gnnsys.graph import csr_from_edges
from gnnsys.link.data import LinkData
from gnnsys.metrics import average_precision, hits_at, mean_reciprocal_rank, roc_auc

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


def link_overrides(name: str, val: float, test: float, seed: int) -> list[str]:
    """The config keys that put a link-mode run on dataset `name`'s split of `seed`."""
    return ["mode=link", f"dataset.name={name}", f"link.val={val}", f"link.test={test}",
            f"link.split_seed={seed}"]


def split_of(name: str, val: float, test: float, seed: int):
    """(indptr, indices, num_nodes, {phase: (positives, negatives, ranking destinations
    or None)}) of dataset `name`."""
    if name == "ogbl_ddi":
        arrays = read_npz(require_bundle(name, OGB_FILE, data_root()),
                          "see ../shared/data/MANIFEST.md (static link prediction)")
        num_nodes = int(arrays["num_nodes"])
        indptr, indices = csr_from_edges(*arrays["edge_index"], num_nodes)   # symmetric
        phases = {p: (np.asarray(arrays[f"{p}_pos"], np.int64),
                      np.asarray(arrays[f"{p}_neg"], np.int64), None) for p in ("val", "test")}
        return indptr, indices, num_nodes, phases
    data = LinkData(load_config(overrides=link_overrides(name, val, test, seed)))
    g = data.graph
    return g.indptr, g.indices, g.num_nodes, {p: data.held_out(p) for p in ("val", "test")}


def scored(row: dict, phase: str, pos, neg, ranked) -> None:
    """The phase's metrics of positive, negative and ranking scores into `row`."""
    labels = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    row[f"{phase}_auc"] = roc_auc(np.r_[pos, neg], labels)
    row[f"{phase}_ap"] = average_precision(np.r_[pos, neg], labels)
    row[f"{phase}_mrr"] = None if ranked is None else mean_reciprocal_rank(pos, ranked)
    for k in HITS:
        row[f"{phase}_hits{k}"] = hits_at(pos, neg, k)


def bench(name: str, val: float, test: float, seed: int) -> list[dict]:
    indptr, indices, num_nodes, phases = split_of(name, val, test, seed)
    rows = []
    for kind in HEURISTICS:
        started, row = time.perf_counter(), {"dataset": name, "seed": seed, "method": kind}
        for phase, (positive, negative, fakes) in phases.items():
            pos = heuristic_scores(indptr, indices, num_nodes, positive, kind)
            neg = heuristic_scores(indptr, indices, num_nodes, negative, kind)
            ranked = None
            if fakes is not None:
                ranked = heuristic_scores(indptr, indices, num_nodes,
                                          np.stack([np.repeat(positive[0], fakes.shape[1]),
                                                    fakes.reshape(-1)]), kind)
                ranked = ranked.reshape(fakes.shape)
            scored(row, phase, pos, neg, ranked)
        row["published_test_hits20"] = PUBLISHED.get(name, {}).get(kind)
        row["seconds"] = time.perf_counter() - started
        rows.append(row)
    return rows


def bench_model(config_path, name: str, val: float, test: float, seed: int,
                overrides: list, workers: int = 1) -> dict:
    """One link-mode run of `config_path` on `workers` workers on the split `bench`
    scores (its final metrics)."""
    config = load_config(config_path, overrides=[*overrides, *link_overrides(name, val, test,
                                                                             seed),
                                                 f"cluster.workers={workers}"])
    started = time.perf_counter()
    final, _ = harness.train(config)
    row = {"dataset": name, "seed": seed, "method": f"{config.model.arch} "
           f"({config_path.stem}, {config.link.decoder}"
           f"{f', {workers} workers' if workers > 1 else ''})", "published_test_hits20": None,
           "seconds": time.perf_counter() - started}
    row.update({k: final[k] for phase in ("val", "test")
                for k in (f"{phase}_{m}" for m in ("auc", "ap", "mrr",
                                                   *(f"hits{h}" for h in HITS)))})
    return row


def table(rows: list[dict]) -> str:
    cells = [[r["dataset"], r["seed"], r["method"],
              *("-" if r[f"test_{m}"] is None else f"{r[f'test_{m}']:.4f}"
                for m in ("auc", "ap", "mrr", *(f"hits{k}" for k in HITS))),
              f"{r['val_hits20']:.4f}",
              "-" if r["published_test_hits20"] is None else f"{r['published_test_hits20']:.4f}"]
             for r in rows]
    return harness.markdown(["dataset", "seed", "method", "test AUC", "test AP", "test MRR",
                             *(f"test Hits@{k}" for k in HITS), "val Hits@20",
                             "published test Hits@20"], cells)


def main(argv=None) -> list[dict]:
    ap = harness.parser(__doc__, json=True, configs=[], set=True)
    ap.add_argument("--datasets", nargs="+", default=["ogbl_ddi", "cora", "citeseer"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0],
                    help="seeds of the edge split (not ogbl_ddi's, which is fixed)")
    ap.add_argument("--workers", nargs="+", type=int, default=[1],
                    help="train each config on these worker counts (cluster.workers)")
    ap.add_argument("--val", type=float, default=0.05, help="held-out validation edge share")
    ap.add_argument("--test", type=float, default=0.10, help="held-out test edge share")
    args = ap.parse_args(argv)
    rows = []
    for name in args.datasets:
        for seed in ([0] if name == "ogbl_ddi" else args.seeds):
            rows += bench(name, args.val, args.test, seed)
            if name != "ogbl_ddi":       # link mode reads no shipped split yet
                rows += [bench_model(path, name, args.val, args.test, seed, args.set, k)
                         for path in args.configs for k in args.workers]
            harness.write_json(args.json, rows)
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
