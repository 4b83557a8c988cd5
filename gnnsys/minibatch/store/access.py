"""What an epoch really reads: per-vertex access counts from running the sampler.

`epoch_access_counts` runs the fused sampler over one epoch of a part's training seeds
(shuffled, in batches) and counts, for every vertex, in how many batches its feature row
is read. From those counts `cache_effect` splits the epoch's rows into local reads,
cache hits and remote fetches for any cache, without re-running the sampler; this is
how `scripts/bench_cache.py` compares policies (SALIENT++ `evaluate_communication_volume`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from partition.format import PartitionBook


def epoch_access_counts(sampler, seeds: np.ndarray, batch_size: int, seed: int = 0,
                        num_nodes: int | None = None, progress=None) -> np.ndarray:
    """int64 [N]: number of batches of one epoch that read each vertex's row.

    sampler: a `samplers.FusedSampler` (features=None is enough).
    """
    num_nodes = num_nodes or sampler.num_nodes
    counts = np.zeros(num_nodes, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(np.asarray(seeds, dtype=np.int64))
    starts = range(0, order.size, batch_size)
    if progress is not None:
        starts = progress(starts)
    for i, start in enumerate(starts):
        sub = sampler.sample(order[start:start + batch_size], seed=seed * 1_000_003 + i)
        # n_id holds each node once per batch (seeds are distinct), so += 1 is exact.
        counts[sub.n_id] += 1
    return counts


@dataclass
class CacheEffect:
    local_rows: int      # rows the part owns
    cache_hits: int      # remote rows served by the cache
    remote_rows: int     # remote rows fetched from their owners

    @property
    def hit_rate(self) -> float:
        remote = self.cache_hits + self.remote_rows
        return self.cache_hits / remote if remote else 0.0


def cache_effect(counts: np.ndarray, book: PartitionBook, part: int,
                 cached_ids: np.ndarray) -> CacheEffect:
    lo, hi = book.range(part)
    local = int(counts[lo:hi].sum())
    hits = int(counts[np.asarray(cached_ids, dtype=np.int64)].sum())
    remote = int(counts.sum()) - local - hits
    return CacheEffect(local_rows=local, cache_hits=hits, remote_rows=remote)
