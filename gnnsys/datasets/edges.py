"""Edge-list clean-up kernels: undirected dedup and symmetric CSR construction, in numba.

Used by the synthetic generator (tens of millions of sampled pairs) and by loaders whose
source graph is directed (ogbn-arxiv, ogbn-papers100M). Everything is O(E) bucketing plus
per-row sorts run in parallel, so a 124M-entry graph builds in seconds, not minutes.
Depends on numpy and numba only.
"""
from __future__ import annotations

import numba
import numpy as np

from gnnsys.graph import index_dtype


@numba.njit(cache=True)
def _bucket_canonical_pairs(u, v, num_nodes):
    """Counting sort of the pairs (min, max) by min; self loops (u == v) are dropped."""
    counts = np.zeros(num_nodes + 1, np.int64)
    for i in range(u.size):
        a, b = u[i], v[i]
        if a != b:
            counts[min(a, b) + 1] += 1
    indptr = np.cumsum(counts)
    fill = indptr[:-1].copy()
    cols = np.empty(indptr[-1], v.dtype)
    for i in range(u.size):
        a, b = u[i], v[i]
        if a != b:
            lo = min(a, b)
            cols[fill[lo]] = max(a, b)
            fill[lo] += 1
    return indptr, cols


@numba.njit(parallel=True, cache=True)
def _sort_unique_rows(indptr, cols):
    """Sort each CSR row in place, then compact the rows to their distinct entries."""
    n = indptr.size - 1
    distinct = np.zeros(n + 1, np.int64)
    for r in numba.prange(n):
        lo, hi = indptr[r], indptr[r + 1]
        if hi > lo:
            cols[lo:hi].sort()
            count = 1
            for k in range(lo + 1, hi):
                if cols[k] != cols[k - 1]:
                    count += 1
            distinct[r + 1] = count
    out_indptr = np.cumsum(distinct)
    out = np.empty(out_indptr[-1], cols.dtype)
    for r in numba.prange(n):
        lo, hi = indptr[r], indptr[r + 1]
        pos = out_indptr[r]
        for k in range(lo, hi):
            if k == lo or cols[k] != cols[k - 1]:
                out[pos] = cols[k]
                pos += 1
    return out_indptr, out


@numba.njit(cache=True)
def _mirror_counts_and_lower_half(upper_indptr, upper_cols, num_nodes, indices):
    """First half of the symmetric CSR: every row gets its smaller neighbours, ascending.

    Visiting rows a = 0, 1, 2, ... in order and appending `a` to row b for each upper edge
    (a, b) leaves each row's smaller neighbours sorted without any sort.
    """
    degree = np.zeros(num_nodes + 1, np.int64)
    for a in range(num_nodes):
        degree[a + 1] += upper_indptr[a + 1] - upper_indptr[a]
        for k in range(upper_indptr[a], upper_indptr[a + 1]):
            degree[upper_cols[k] + 1] += 1
    indptr = np.cumsum(degree)
    fill = indptr[:-1].copy()
    for a in range(num_nodes):
        for k in range(upper_indptr[a], upper_indptr[a + 1]):
            b = upper_cols[k]
            indices[fill[b]] = a
            fill[b] += 1
    return indptr, fill


@numba.njit(parallel=True, cache=True)
def _append_upper_half(upper_indptr, upper_cols, indices, fill):
    """Second half: each row's larger neighbours (already sorted) go after the smaller ones."""
    for a in numba.prange(upper_indptr.size - 1):
        pos = fill[a]
        for k in range(upper_indptr[a], upper_indptr[a + 1]):
            indices[pos] = upper_cols[k]
            pos += 1


def unique_undirected(u: np.ndarray, v: np.ndarray, num_nodes: int):
    """Distinct undirected edges of the pairs (u, v), self loops dropped.

    Returns the upper triangle as CSR (indptr int64 [N+1], cols [M]): row a lists every
    b > a with an edge {a, b}, ascending. Input ids must lie in [0, num_nodes).
    """
    u, v = _as_ids(u, num_nodes), _as_ids(v, num_nodes)
    indptr, cols = _bucket_canonical_pairs(u, v, num_nodes)
    return _sort_unique_rows(indptr, cols)


def upper_to_symmetric_csr(upper_indptr: np.ndarray, upper_cols: np.ndarray, num_nodes: int):
    """Symmetric CSR (both directions of every edge, rows sorted) from an upper triangle."""
    indices = np.empty(2 * upper_cols.size, index_dtype(num_nodes))
    indptr, fill = _mirror_counts_and_lower_half(upper_indptr, upper_cols, num_nodes, indices)
    _append_upper_half(upper_indptr, upper_cols, indices, fill)
    return indptr, indices


def symmetric_csr(src: np.ndarray, dst: np.ndarray, num_nodes: int):
    """CSR of the undirected simple graph behind a (possibly directed, duplicated) edge list.

    Every edge appears in both directions, self loops and duplicates are removed and each
    row is sorted: the layout every static dataset in gnnsys uses.
    """
    upper_indptr, upper_cols = unique_undirected(src, dst, num_nodes)
    return upper_to_symmetric_csr(upper_indptr, upper_cols, num_nodes)


def _as_ids(ids: np.ndarray, num_nodes: int) -> np.ndarray:
    ids = np.asarray(ids)
    if ids.dtype not in (np.int32, np.int64):
        ids = ids.astype(np.int64)
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise ValueError(f"edge ids must lie in [0, {num_nodes}); got "
                         f"[{int(ids.min())}, {int(ids.max())}]")
    # The kernels write ids into an array of the output index dtype.
    return ids.astype(index_dtype(num_nodes), copy=False)
