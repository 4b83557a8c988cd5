"""Size-constrained label propagation: shrink a large graph before METIS sees it.

METIS copies the graph and builds its whole coarsening hierarchy in memory (about 150
bytes per directed edge here), far beyond a 24 GiB box for a 124M-edge graph. Clustering
first with label propagation (Raghavan et al. 2007; the size-constrained form that
KaHIP and Mt-KaHyPar use to coarsen social and web graphs) costs O(E) time per round and
O(N) extra memory, and the cluster graph it leaves is small enough for METIS to partition
well. The partition is then projected back to the vertices.

Each round visits the vertices in a seeded random order; a vertex joins the cluster that
holds most of its neighbours, if that cluster is still under `max_size` vertices (so
METIS can still balance the parts). Runs serially, so a seed gives one answer.

Depends on numpy, scipy and numba only.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit


@njit(cache=True)
def propagate(indptr, indices, order, cluster, size, max_size, rounds):
    """Move vertices (in `order`) to their neighbours' most common label while that label
    has under `max_size` vertices; `cluster` and `size` (per label) are updated in place.
    A vertex whose own label is over `max_size` leaves for the best neighbouring label
    with room even when fewer neighbours hold it (this rebalances projected parts)."""
    n = indptr.size - 1
    score = np.zeros(n, dtype=np.int64)      # neighbours per cluster, reset after each vertex
    touched = np.empty(n, dtype=np.int64)
    for _ in range(rounds):
        moved = 0
        for i in range(order.size):
            v = order[i]
            own = cluster[v]
            count = 0
            for e in range(indptr[v], indptr[v + 1]):
                c = cluster[indices[e]]
                if score[c] == 0:
                    touched[count] = c
                    count += 1
                score[c] += 1
            best, best_score = own, score[own] if size[own] <= max_size else -1
            for t in range(count):
                c = touched[t]
                if score[c] > best_score and size[c] < max_size:
                    best, best_score = c, score[c]
            for t in range(count):
                score[touched[t]] = 0
            if best != own:
                size[own] -= 1
                size[best] += 1
                cluster[v] = best
                moved += 1
        if moved < n // 1000:   # converged: under 0.1% of vertices moved this round
            break


def label_propagation(indptr: np.ndarray, indices: np.ndarray, max_size: int,
                      rounds: int = 5, seed: int = 0) -> np.ndarray:
    """Cluster id in [0, C) of every vertex; every cluster has at most `max_size` vertices."""
    n = indptr.size - 1
    cluster = np.arange(n, dtype=np.int64)
    size = np.ones(n, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(n)
    propagate(np.asarray(indptr), np.asarray(indices), order, cluster, size, max_size,
               rounds)
    _, dense = np.unique(cluster, return_inverse=True)
    return dense.astype(np.int64)


def contract(indptr: np.ndarray, indices: np.ndarray, cluster: np.ndarray,
             num_clusters: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR (indptr, indices, edge weights) of the cluster graph, without self loops.

    The weight of cluster edge (a, b) is the number of vertex edges between a and b, so
    METIS minimising the weighted cut minimises the vertex edge cut.
    """
    assert cluster.size == indptr.size - 1, "one cluster id per vertex"
    row_cluster = np.repeat(cluster.astype(np.int32), np.diff(indptr))
    col_cluster = cluster.astype(np.int32)[np.asarray(indices)]
    crossing = row_cluster != col_cluster
    row_cluster, col_cluster = row_cluster[crossing], col_cluster[crossing]
    del crossing
    weights = np.ones(row_cluster.size, dtype=np.int64)
    coarse = sp.csr_matrix((weights, (row_cluster, col_cluster)),
                           shape=(num_clusters, num_clusters))
    coarse.sum_duplicates()
    return coarse.indptr.astype(np.int64), coarse.indices.astype(np.int64), coarse.data
