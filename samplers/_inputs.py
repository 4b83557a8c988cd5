"""Checks of what the fused samplers take, shared by the CPU and the GPU one (same graph,
fanouts, feature row map and seeds): each bad input fails with one line that names the
sampler, the argument and what is allowed. numpy only."""
from __future__ import annotations

import numpy as np

ALL_NEIGHBOURS = -1          # a fanout of -1 takes every neighbour


def checked_csr(indptr, indices, sampler: str) -> tuple[np.ndarray, np.ndarray]:
    """(indptr as contiguous int64, indices contiguous) of a consistent CSR."""
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    indices = np.asarray(indices)
    if indptr.ndim != 1 or indptr.size < 1:
        raise ValueError(f"{sampler}: indptr must be a 1-D int64 array of length N+1")
    if indices.ndim != 1 or indices.dtype not in (np.int32, np.int64):
        raise ValueError(f"{sampler}: indices must be 1-D int32 or int64, got "
                         f"{indices.dtype} with shape {indices.shape}")
    if int(indptr[-1]) != indices.size:
        raise ValueError(f"{sampler}: indptr[-1]={int(indptr[-1])} but indices has "
                         f"{indices.size} entries; the CSR is inconsistent")
    return indptr, np.ascontiguousarray(indices)


def checked_fanouts(fanouts, sampler: str) -> list[int]:
    checked = [int(f) for f in fanouts]
    if not checked or any(f < 0 and f != ALL_NEIGHBOURS for f in checked):
        raise ValueError(f"{sampler}: fanouts must be a non-empty list of counts >= 0 or -1 "
                         f"(all neighbours), got {list(fanouts)}")
    return checked


def checked_row_of(row_of, num_nodes: int, num_rows: int, sampler: str) -> np.ndarray | None:
    """The global id -> feature row map as contiguous int64 (None: row = global id, which
    needs a row per node)."""
    if row_of is None:
        if num_rows < num_nodes:
            raise ValueError(f"{sampler}: features has {num_rows} rows for {num_nodes} "
                             f"nodes; pass row_of to map ids")
        return None
    row_of = np.ascontiguousarray(row_of, dtype=np.int64)
    if row_of.shape != (num_nodes,):
        raise ValueError(f"{sampler}: row_of must have shape ({num_nodes},), got "
                         f"{row_of.shape}")
    if row_of.size and (row_of.min() < -1 or row_of.max() >= num_rows):
        raise ValueError(f"{sampler}: row_of values must lie in [-1, {num_rows}) "
                         f"(rows of features)")
    return row_of


def checked_seeds(seeds, num_nodes: int, sampler: str) -> np.ndarray:
    """Seeds (global ids, repeats allowed) as a contiguous int64 array."""
    seeds = np.asarray(seeds)
    if seeds.ndim != 1 or (seeds.size and seeds.dtype.kind not in "iu"):
        raise ValueError(f"{sampler}.sample: seeds must be a 1-D integer array, got "
                         f"{seeds.dtype} with shape {seeds.shape}")
    seeds = np.ascontiguousarray(seeds, dtype=np.int64)
    if seeds.size and (seeds.min() < 0 or seeds.max() >= num_nodes):
        raise ValueError(f"{sampler}.sample: seed ids must lie in [0, {num_nodes}), got "
                         f"[{seeds.min()}, {seeds.max()}]")
    return seeds
