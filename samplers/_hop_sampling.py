"""Per-hop neighbour sampling kernels of the fused sampler: count picks, then fill them.

Pass 1 (`count_hop`) reads each target's CSR row bounds and prefix-sums the pick counts
into the hop's block_indptr; pass 2 (`fill_hop`) writes every target's picks, drawn
with Robert Floyd's algorithm from the target's own counter-based random stream
(common/rng.py), at its offset. Both hand out chunks of targets to threads from a
shared counter (samplers/_intrinsics.py) and are deterministic whatever the thread
count or the order chunks are taken in. Numba only.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from samplers._intrinsics import next_chunk, prefetch
from common.rng import floyd_positions

# Targets whose CSR rows are requested ahead of use (DRAM latency / work per target).
TARGETS_AHEAD = 4
# Prefetch stride for whole rows: one request per 64-byte line of int32 ids (for int64
# ids this requests every other line; the hardware prefetcher fills in on long rows).
INDICES_PER_LINE = 16
# Targets per work item of fill_hop: their pick positions stay in L1 between stages.
FILL_BLOCK = 256
# Targets per work item of count_hop, and how far ahead it prefetches their CSR
# bounds (one random line each and little work per target: far ahead pays).
COUNT_CHUNK = 2048
BOUNDS_AHEAD = 16


@njit(parallel=True, nogil=True, cache=True)
def count_hop(indptr, n_id, num_targets, fanout, row_start, row_degree, block_indptr,
              num_workers):
    """Pass 1 of a hop: per-target pick counts, prefix-summed into block_indptr.
    Also keeps each target's CSR start and degree so pass 2 need not touch indptr."""
    num_chunks = (num_targets + COUNT_CHUNK - 1) // COUNT_CHUNK
    counter = np.zeros(1, dtype=np.int64)
    for _ in prange(num_workers):
        while True:
            chunk = next_chunk(counter)
            if chunk >= num_chunks:
                break
            end = min((chunk + 1) * COUNT_CHUNK, num_targets)
            for i in range(chunk * COUNT_CHUNK, end):
                if i + BOUNDS_AHEAD < end:
                    prefetch(indptr, n_id[i + BOUNDS_AHEAD])
                node = n_id[i]
                start = indptr[node]
                degree = indptr[node + 1] - start
                row_start[i] = start
                row_degree[i] = degree
                block_indptr[i + 1] = degree if (fanout < 0 or degree <= fanout) else fanout
    block_indptr[0] = 0
    for i in range(num_targets):
        block_indptr[i + 1] += block_indptr[i]


@njit(inline="always", cache=True)
def _draw_positions(target, row_degree, block_indptr, batch_seed, hop, candidates):
    """Floyd's sample of one target's neighbour positions, written at its offset
    (common/rng.py floyd_positions); a whole row is copied in order later."""
    offset = block_indptr[target]
    take = block_indptr[target + 1] - offset
    degree = row_degree[target]
    if take < degree:
        floyd_positions(batch_seed, hop, target, degree, take, candidates, offset)


@njit(inline="always", cache=True)
def _prefetch_picks(target, indices, row_start, row_degree, block_indptr, candidates):
    offset = block_indptr[target]
    take = block_indptr[target + 1] - offset
    start = row_start[target]
    if take == row_degree[target]:
        for k in range(0, take, INDICES_PER_LINE):
            prefetch(indices, start + k)
    else:
        for q in range(take):
            prefetch(indices, start + candidates[offset + q])


@njit(inline="always", cache=True)
def _positions_to_ids(target, indices, row_start, row_degree, block_indptr, candidates):
    offset = block_indptr[target]
    take = block_indptr[target + 1] - offset
    start = row_start[target]
    if take == row_degree[target]:
        for k in range(take):
            candidates[offset + k] = indices[start + k]
    else:
        for q in range(take):
            candidates[offset + q] = indices[start + candidates[offset + q]]


@njit(parallel=True, nogil=True, cache=True)
def fill_hop(indices, row_start, row_degree, block_indptr, num_targets, batch_seed, hop,
             candidates, num_workers):
    """Pass 2 of a hop: write each target's picks (global ids) at its block offset.

    Per block of targets: first draw every pick position (arithmetic only, no graph
    access), then turn positions into neighbour ids while prefetching the picks of a
    target TARGETS_AHEAD places on, which keeps many independent misses in flight."""
    num_blocks = (num_targets + FILL_BLOCK - 1) // FILL_BLOCK
    counter = np.zeros(1, dtype=np.int64)
    for _ in prange(num_workers):
        while True:
            block = next_chunk(counter)
            if block >= num_blocks:
                break
            first = block * FILL_BLOCK
            end = min(first + FILL_BLOCK, num_targets)
            for target in range(first, end):
                _draw_positions(target, row_degree, block_indptr, batch_seed, hop,
                                candidates)
            for target in range(first, min(first + TARGETS_AHEAD, end)):
                _prefetch_picks(target, indices, row_start, row_degree, block_indptr,
                                candidates)
            for target in range(first, end):
                if target + TARGETS_AHEAD < end:
                    _prefetch_picks(target + TARGETS_AHEAD, indices, row_start,
                                    row_degree, block_indptr, candidates)
                _positions_to_ids(target, indices, row_start, row_degree, block_indptr,
                                  candidates)
