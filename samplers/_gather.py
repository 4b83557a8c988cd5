"""Feature-row gather of the fused sampler: rows of n_id copied straight into its buffer.

Each row is a short contiguous copy that LLVM vectorises. Rows are not prefetched in
software: every row is an independent random read, which the out-of-order core already
overlaps across loop iterations, and asking for each row's lines 8 rows ahead made the
gather slower (BENCHMARKS.md, "CPU speed: sampler, batch wait, huge pages": without it
`scripts/bench_sampler.py`'s gather phase runs at index_select's speed).
Tables are passed in as byte views (the kernel only moves bits), so one compiled kernel
serves float32, float16 and any other dtype. Numba only.

`row_of` maps global id -> table row (-1: no local copy; that row is zeroed, because the
buffer is reused and would otherwise hold stale data, and flagged in `is_missing`). An
empty `row_of` means row = global id.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from samplers._intrinsics import next_chunk

# Rows per work item of the parallel gather (200 KB of 100 float32 features).
GATHER_BLOCK = 512
NO_ROW_MAP = np.empty(0, dtype=np.int64)
NO_MISSING_FLAGS = np.empty(0, dtype=np.uint8)


def as_bytes(array: np.ndarray) -> np.ndarray:
    """The view the gather kernels take: [rows, row bytes] uint8 over the same memory (a
    np.memmap becomes a plain ndarray view of the same pages). Needs C order."""
    return np.asarray(array).view(np.uint8)


@njit(inline="always", cache=True)
def _table_row(row_of, node):
    return node if row_of.size == 0 else row_of[node]


@njit(inline="always", cache=True)
def _copy_rows(features, row_of, n_id, begin, end, out, is_missing):
    width = features.shape[1]
    for i in range(begin, end):
        row = _table_row(row_of, n_id[i])
        if row < 0:
            is_missing[i] = 1
            for k in range(width):
                out[i, k] = 0
            continue
        if row_of.size:
            is_missing[i] = 0
        for k in range(width):
            out[i, k] = features[row, k]


@njit(inline="always", cache=True)
def gather_blocks(features, row_of, n_id, begin, end, out, is_missing, counter):
    """Copy blocks of rows of [begin, end), claimed from `counter`, until none is left:
    any number of threads can run this side by side (see samplers/_intrinsics.py)."""
    num_blocks = (end - begin + GATHER_BLOCK - 1) // GATHER_BLOCK
    while True:
        block = next_chunk(counter)
        if block >= num_blocks:
            return
        first = begin + block * GATHER_BLOCK
        _copy_rows(features, row_of, n_id, first, min(first + GATHER_BLOCK, end), out,
                   is_missing)


@njit(parallel=True, nogil=True, cache=True)
def gather_rows(features, row_of, n_id, begin, end, out, is_missing, num_workers):
    """out[i] = features[row of n_id[i]] for begin <= i < end, on num_workers threads."""
    counter = np.zeros(1, dtype=np.int64)
    for _ in prange(num_workers):
        gather_blocks(features, row_of, n_id, begin, end, out, is_missing, counter)
