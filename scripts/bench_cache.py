"""Remote feature rows per epoch under no cache, a degree cache and the VIP cache.

For each dataset: partition into K parts (METIS; the streaming partitioner where METIS
would not fit), then for every part run the fused sampler over one real epoch of the
part's own training seeds (federated seeds, batch 1024, fanouts 15,10,5) and count how
often each vertex's row is read. Remote rows for a cache = reads of vertices the part
neither owns nor caches; each policy caches floor(alpha * N / K) vertices. The baseline
is no cache, measured in the same run. Also reports how well the predicted VIP ranks
the measured access counts (Spearman over all remote vertices).

    python scripts/bench_cache.py                       # the BENCHMARKS.md table
    python scripts/bench_cache.py --datasets tolokers --replication 0.1 0.5
    # how the cache's gain depends on locality: the products preset with other params
    python scripts/bench_cache.py --datasets synthetic-products \
        --variant local_fraction=0.99 --variant local_fraction=0.0
"""
import time

import harness  # first: gnnsys sets the OpenMP wait default before numba loads OpenMP
import numpy as np
import yaml
from scipy.stats import pearsonr, spearmanr

from gnnsys.runlog import progress
from gnnsys.minibatch.store.access import cache_effect, epoch_access_counts
from gnnsys.minibatch.store.policy import cache_size, cache_weights, top_remote
from partition.build import assign_parts
from partition.format import PartitionBook
from partition.quality import partition_quality
from partition.relabel import contiguous_order, relabel_csr
from samplers import FusedSampler

DEFAULT_DATASETS = ["synthetic-products", "tolokers", "github"]


def measure(graph, num_parts: int, fanouts, batch_size: int, replications, method: str,
            seed: int = 0, empirical: int = 0) -> dict:
    """Remote rows per epoch (summed over parts) per policy and replication. `empirical`
    > 0 adds the policy 'sampled': the reads of that many other simulated epochs, a
    Monte-Carlo estimate of the inclusion probability (what VIP approximates)."""
    t0 = time.perf_counter()
    parts = assign_parts(graph, method, num_parts, seed)
    quality = partition_quality(graph.indptr, graph.indices, parts, num_parts, graph.train_idx)
    t_part = time.perf_counter() - t0
    old_of_new, new_of_old, offsets = contiguous_order(parts, num_parts)
    indptr, indices = relabel_csr(graph.indptr, graph.indices, old_of_new, new_of_old)
    book = PartitionBook(offsets)
    train = np.sort(new_of_old[np.asarray(graph.train_idx)])
    sampler = FusedSampler(indptr, indices, fanouts)

    policies = ("none", "degree", "vip") + (("sampled",) if empirical else ())
    remote = {(p, a): 0 for p in policies for a in replications}
    hits = dict.fromkeys(remote, 0)
    total_reads = 0
    spearman, pearson = [], []
    t_sample = t_vip = 0.0
    for k in range(num_parts):
        lo, hi = book.range(k)
        own_train = train[(train >= lo) & (train < hi)]
        t1 = time.perf_counter()
        counts = epoch_access_counts(
            sampler, own_train, batch_size, seed=seed + k,
            progress=lambda it: progress(it, desc=f"{graph.name} part {k}: sample epoch"))
        t2 = time.perf_counter()
        weights = {p: cache_weights(p, indptr, indices, book, k, own_train, fanouts,
                                    batch_size) for p in ("none", "degree", "vip")}
        if empirical:                    # other epochs' reads (other seeds), own rows 0
            sampled = sum(epoch_access_counts(sampler, own_train, batch_size,
                                              seed=seed + 1000 * (e + 1) + k)
                          for e in range(empirical)).astype(np.float64)
            sampled[lo:hi] = 0.0
            weights["sampled"] = sampled
        t_sample += t2 - t1
        t_vip += time.perf_counter() - t2
        total_reads += int(counts.sum())
        for p, w in weights.items():
            # The largest cache once; smaller caches are its prefixes (same ranking).
            ranked = top_remote(w, cache_size(max(replications), book))
            for a in replications:
                effect = cache_effect(counts, book, k, ranked[:cache_size(a, book)])
                remote[(p, a)] += effect.remote_rows
                hits[(p, a)] += effect.cache_hits
        remote_mask = np.ones(book.num_nodes, dtype=bool)
        remote_mask[lo:hi] = False
        vip = weights["vip"][remote_mask]
        measured = counts[remote_mask]
        spearman.append(spearmanr(vip, measured).statistic)
        # Expected reads per epoch = VIP x batches per epoch.
        expected = vip * -(-own_train.size // batch_size)
        pearson.append(pearsonr(expected, measured).statistic)
    return {"name": graph.name, "nodes": graph.num_nodes, "edges": graph.num_edges,
            "train": int(train.size), "method": method, "quality": quality,
            "remote": remote, "hits": hits, "total_reads": total_reads,
            "spearman": float(np.mean(spearman)), "pearson": float(np.mean(pearson)),
            "partition_s": t_part, "sample_s": t_sample, "weights_s": t_vip}


def print_table(result: dict, replications) -> None:
    r, q = result, result["quality"]
    print(f"\n### {r['name']}: {r['nodes']:,} nodes, {r['edges']:,} edges, "
          f"{r['train']:,} training nodes, {q['num_parts']} parts ({r['method']}; "
          f"edge cut {q['edge_cut_fraction']:.1%}, train balance {q['train_balance']})")
    print(f"rows read per epoch (all parts): {r['total_reads']:,}; "
          f"remote rows with no cache: {r['remote'][('none', replications[0])]:,}")
    rows = []
    for a in replications:
        none, deg, vip = (r["remote"][(p, a)] for p in ("none", "degree", "vip"))
        hit = r["hits"][("vip", a)] / max(r["hits"][("vip", a)] + vip, 1)
        rows.append([a, f"{none:,}", f"{deg:,}", f"{vip:,}", f"{none / max(vip, 1):.2f}x",
                     f"{deg / max(vip, 1):.2f}x", f"{hit:.1%}"])
    print("\n" + harness.markdown(["alpha", "none", "degree", "vip", "none / vip",
                                   "degree / vip", "vip hit rate"], rows))
    if ("sampled", replications[0]) in r["remote"]:
        rows = [[a, f"{r['remote'][('vip', a)]:,}", f"{r['remote'][('sampled', a)]:,}",
                 f"{r['remote'][('vip', a)] / max(r['remote'][('sampled', a)], 1):.3f}"]
                for a in replications]
        print("\n" + harness.markdown(["alpha", "vip", "sampled (Monte-Carlo estimate)",
                                       "vip / sampled"], rows))
    print(f"\nVIP vs measured reads over remote vertices: Spearman {r['spearman']:.3f}, "
          f"Pearson (expected reads = VIP x batches) {r['pearson']:.3f}")
    print(f"time: partition {r['partition_s']:.1f}s, sampling {r['sample_s']:.1f}s, "
          f"cache weights {r['weights_s']:.1f}s")


def main(argv=None) -> None:
    parser = harness.parser(__doc__, seed=0)
    parser.add_argument("--datasets", nargs="+", default=DEFAULT_DATASETS)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--fanouts", type=int, nargs="+", default=[15, 10, 5])
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--replication", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.5])
    parser.add_argument("--method", choices=["metis", "random", "stream"], default="metis",
                        help="partitioner for every dataset (metis coarsens graphs over 20M "
                             "edges first)")
    parser.add_argument("--variant", action="append", default=[], metavar="K=V[,K=V]",
                        help="also measure a synthetic dataset generated with these params "
                             "changed (repeatable; generated in memory, not cached)")
    parser.add_argument("--empirical", type=int, default=0, metavar="EPOCHS",
                        help="also cache by the reads of this many other simulated epochs")
    args = parser.parse_args(argv)
    print(f"# Remote feature rows per epoch: {args.parts} parts, fanouts "
          f"{','.join(map(str, args.fanouts))}, batch {args.batch_size}")
    for name in args.datasets:
        for graph in graphs(name, args.variant):
            result = measure(graph, args.parts, args.fanouts, args.batch_size,
                             args.replication, args.method, args.seed,
                             empirical=args.empirical)
            print_table(result, args.replication)


def graphs(name: str, variants):
    """The dataset, then (synthetic only) one graph per variant of its parameters."""
    from gnnsys.datasets import load_dataset, registry
    from gnnsys.datasets.synthetic import generate
    from gnnsys.datasets.synthetic_source import resolve_params

    yield load_dataset(name)
    entry = registry.lookup(name)
    for variant in variants if entry.get("source") == "synthetic" else []:
        changes = {k: yaml.safe_load(v) for k, v in
                   (item.split("=", 1) for item in variant.split(","))}
        # Only the structure matters for access counts: one feature column saves memory.
        params = resolve_params(name, entry, {**changes, "num_features": 1})
        yield generate(params, name=f"{name} ({variant})")


if __name__ == "__main__":
    main()
