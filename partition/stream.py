"""Streaming partitioner (Fennel) for graphs whose METIS run would not fit in memory.

One pass over the vertices in a random order; each vertex goes to the part that holds
most of its already-placed neighbours, minus Fennel's load penalty
alpha * gamma * |P|^(gamma-1) (Tsourakakis et al., WSDM 2014). Hard capacities of
(1 + slack) * fair share in nodes and in training nodes keep the parts balanced for
SALIENT++'s per-worker seeds. Time is O(N + E); extra memory is one int32 per vertex
plus O(K) per vertex visited, and the CSR may be memory-mapped, so it scales to graphs
much larger than RAM allows METIS (which copies and coarsens the whole graph).

Depends on numpy and numba only.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _fennel(indptr, indices, order, is_train, num_parts, alpha, gamma,
            node_cap, train_cap):
    n = indptr.size - 1
    parts = np.full(n, -1, dtype=np.int32)
    load = np.zeros(num_parts, dtype=np.float64)
    train_load = np.zeros(num_parts, dtype=np.int64)
    neighbours_in = np.zeros(num_parts, dtype=np.float64)
    for i in range(order.size):
        v = order[i]
        for k in range(num_parts):
            neighbours_in[k] = 0.0
        for e in range(indptr[v], indptr[v + 1]):
            p = parts[indices[e]]
            if p >= 0:
                neighbours_in[p] += 1.0
        best, best_score = -1, -np.inf
        for k in range(num_parts):
            if load[k] >= node_cap:
                continue
            if is_train[v] and train_load[k] >= train_cap:
                continue
            score = neighbours_in[k] - alpha * gamma * load[k] ** (gamma - 1.0)
            if score > best_score:
                best, best_score = k, score
        if best < 0:  # every part is at a capacity: fall back to the least loaded one
            best = int(np.argmin(load))
        parts[v] = best
        load[best] += 1.0
        if is_train[v]:
            train_load[best] += 1
    return parts


def fennel_parts(indptr: np.ndarray, indices: np.ndarray, num_parts: int,
                 train_idx: np.ndarray | None = None, seed: int = 0,
                 gamma: float = 1.5, slack: float = 0.05) -> np.ndarray:
    """Part id (int32) of every vertex, from one streaming Fennel pass."""
    if num_parts < 1:
        raise ValueError(f"num_parts must be >= 1, got {num_parts}")
    n = indptr.size - 1
    m = max(indices.size / 2.0, 1.0)  # undirected edge count
    # Fennel's alpha = sqrt(K) * m / n^gamma balances the cut term against the load term.
    alpha = np.sqrt(num_parts) * m / max(n, 1) ** gamma
    is_train = np.zeros(n, dtype=np.bool_)
    if train_idx is not None:
        is_train[np.asarray(train_idx)] = True
    node_cap = np.ceil((1.0 + slack) * n / num_parts)
    train_cap = int(np.ceil((1.0 + slack) * max(is_train.sum(), 1) / num_parts))
    order = np.random.default_rng(seed).permutation(n).astype(np.int64)
    return _fennel(np.asarray(indptr), np.asarray(indices), order, is_train, num_parts,
                   float(alpha), float(gamma), float(node_cap), train_cap)
