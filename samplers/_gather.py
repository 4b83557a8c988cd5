"""Feature-row gather of the fused sampler: rows of n_id copied straight into its buffer.

Parallel over output rows; each row is a short contiguous copy that LLVM vectorises.
float16 tables are passed in as uint16 views (the kernel only moves bits), so one
compiled kernel per element width serves every dtype. Numba only.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from samplers._prefetch import prefetch, prefetch2d

# Rows requested ahead of the copy: enough to cover DRAM latency at a row per ~10 ns.
ROWS_AHEAD = 8
CACHE_LINE_BYTES = 64


def as_copyable(array: np.ndarray) -> np.ndarray:
    """The array the gather kernel should see: a plain ndarray (a np.memmap becomes a
    view of the same pages) and float16 as its bits, which numba copies natively."""
    array = np.asarray(array)
    return array.view(np.uint16) if array.dtype == np.float16 else array


@njit(inline="always", cache=True)
def _prefetch_row(features, row):
    """Request every cache line of one row (rows need not start on a line)."""
    width = features.shape[1]
    step = max(CACHE_LINE_BYTES // features.itemsize, 1)
    for k in range(0, width, step):
        prefetch2d(features, row, k)
    prefetch2d(features, row, width - 1)


@njit(parallel=True, nogil=True, cache=True)
def gather_rows(features, n_id, num_rows, out):
    """out[i] = features[n_id[i]] for i < num_rows (row = global id)."""
    width = features.shape[1]
    for i in prange(num_rows):
        if i + ROWS_AHEAD < num_rows:
            _prefetch_row(features, n_id[i + ROWS_AHEAD])
        row = n_id[i]
        for k in range(width):
            out[i, k] = features[row, k]


@njit(parallel=True, nogil=True, cache=True)
def gather_rows_mapped(features, row_of, n_id, num_rows, out, is_missing):
    """Like gather_rows through row_of (global id -> table row, -1 = not held here):
    missing rows are zeroed (the buffer is reused, so they would hold stale data) and
    flagged in is_missing[i]. Returns the number of missing rows."""
    width = features.shape[1]
    num_missing = 0
    for i in prange(num_rows):
        # row_of is itself a random read: fetch it twice as far ahead as the row.
        if i + 2 * ROWS_AHEAD < num_rows:
            prefetch(row_of, n_id[i + 2 * ROWS_AHEAD])
        if i + ROWS_AHEAD < num_rows:
            ahead = row_of[n_id[i + ROWS_AHEAD]]
            if ahead >= 0:
                _prefetch_row(features, ahead)
        row = row_of[n_id[i]]
        if row < 0:
            is_missing[i] = 1
            num_missing += 1
            for k in range(width):
                out[i, k] = 0
        else:
            is_missing[i] = 0
            for k in range(width):
                out[i, k] = features[row, k]
    return num_missing
