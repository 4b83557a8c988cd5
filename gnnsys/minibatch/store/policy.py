"""Which remote vertices a worker caches: none, highest degree, or highest VIP.

Every policy scores all N vertices for one part's training set, zeroes the part's own
vertices (they are local anyway), and keeps the floor(replication * N / K) best, capped
at the vertices with a positive score (SALIENT++ `create_vip_cache`). Replication is
relative to the partition size N/K, not to N.
"""
from __future__ import annotations

import numpy as np

from partition.format import PartitionBook
from partition.vip import degree_reachable_weights, vip_weights

from ...mode_choices import MODE_CHOICES

POLICIES = MODE_CHOICES["cache.policy"]


def cache_weights(policy: str, indptr, indices, book: PartitionBook, part: int,
                  train_ids, fanouts, batch_size: int) -> np.ndarray | None:
    """Score of every vertex for caching on `part` (own vertices 0); None for 'none'."""
    if policy == "none":
        return None
    if policy == "vip":
        weights = vip_weights(indptr, indices, train_ids, fanouts, batch_size)
    elif policy == "degree":
        # Degree among vertices the part's sampler can reach at all (degree-reachable).
        weights = degree_reachable_weights(indptr, indices, train_ids, len(fanouts))
    else:
        raise ValueError(f"unknown cache policy {policy!r}; allowed: {', '.join(POLICIES)}")
    lo, hi = book.range(part)
    weights[lo:hi] = 0.0
    return weights


def cache_size(replication: float, book: PartitionBook) -> int:
    return int(np.floor(replication * book.num_nodes / book.num_parts))


def top_remote(weights: np.ndarray | None, size: int) -> np.ndarray:
    """Ids of the `size` highest positive weights, best first (int64)."""
    if weights is None or size <= 0:
        return np.empty(0, dtype=np.int64)
    size = min(size, int(np.count_nonzero(weights > 0)))
    if size == 0:
        return np.empty(0, dtype=np.int64)
    top = np.argpartition(-weights, size - 1)[:size]
    # Stable tie-break on id keeps the cache deterministic across runs.
    return top[np.lexsort((top, -weights[top]))].astype(np.int64)


def select_cache(policy: str, indptr, indices, book: PartitionBook, part: int, train_ids,
                 fanouts, batch_size: int, replication: float) -> np.ndarray:
    """Global ids of the remote vertices `part` caches, hottest first."""
    weights = cache_weights(policy, indptr, indices, book, part, train_ids, fanouts,
                            batch_size)
    return top_remote(weights, cache_size(replication, book))
