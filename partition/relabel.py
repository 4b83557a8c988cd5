"""Renumber vertices so each part owns one contiguous id range, hottest rows first.

After relabelling, part k owns new ids [offsets[k], offsets[k+1]) and the owner of any
id is `searchsorted(offsets, id, side="right") - 1` (see `PartitionBook`). Inside a part
the vertices are sorted by a caller-given key, descending (SALIENT++ uses the part's
own VIP, so the most-accessed rows sit at the front, on the fastest tier); ties keep
the original order, so the result is deterministic.

Depends on numpy and numba only.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange


def contiguous_order(parts: np.ndarray, num_parts: int, key: np.ndarray | None = None):
    """Returns (old_of_new int64 [N], new_of_old int64 [N], offsets int64 [K+1])."""
    parts = np.asarray(parts)
    n = parts.size
    if n and (parts.min() < 0 or parts.max() >= num_parts):
        raise ValueError(f"part ids must lie in [0, {num_parts}); "
                         f"got [{parts.min()}, {parts.max()}]")
    if key is None:
        old_of_new = np.argsort(parts, kind="stable")
    else:
        # lexsort's last key is primary: by part, then by key descending, then by old id.
        old_of_new = np.lexsort((np.arange(n), -np.asarray(key, dtype=np.float64), parts))
    old_of_new = old_of_new.astype(np.int64)
    new_of_old = np.empty(n, dtype=np.int64)
    new_of_old[old_of_new] = np.arange(n, dtype=np.int64)
    offsets = np.zeros(num_parts + 1, dtype=np.int64)
    np.cumsum(np.bincount(parts, minlength=num_parts), out=offsets[1:])
    return old_of_new, new_of_old, offsets


@njit(parallel=True, cache=True)
def _permute_rows(indptr, indices, old_of_new, new_of_old, out_indptr, out_indices):
    n = old_of_new.size
    for new in prange(n):
        old = old_of_new[new]
        start, stop = indptr[old], indptr[old + 1]
        dst = out_indptr[new]
        for e in range(start, stop):
            out_indices[dst + e - start] = new_of_old[indices[e]]
        # keep columns sorted within a row, as csr_from_edges produces them
        out_indices[dst:dst + stop - start].sort()


def relabel_csr(indptr: np.ndarray, indices: np.ndarray, old_of_new: np.ndarray,
                new_of_old: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The CSR with rows reordered and column ids renamed to the new numbering."""
    degree = np.diff(indptr)[old_of_new]
    out_indptr = np.zeros(indptr.size, dtype=np.int64)
    np.cumsum(degree, out=out_indptr[1:])
    out_indices = np.empty(indices.size, dtype=indices.dtype)
    _permute_rows(np.asarray(indptr), np.asarray(indices), old_of_new,
                  new_of_old.astype(indices.dtype), out_indptr, out_indices)
    return out_indptr, out_indices
