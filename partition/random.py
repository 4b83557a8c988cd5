"""Random balanced partitioning: the baseline every other partitioner must beat on cut.

Vertices are dealt round-robin over a random permutation, so part sizes differ by at
most one; training vertices are dealt separately so every part gets an equal share of
seeds too. Depends on numpy only.
"""
from __future__ import annotations

import numpy as np


def random_parts(num_nodes: int, num_parts: int, train_idx: np.ndarray | None = None,
                 seed: int = 0) -> np.ndarray:
    """Part id (int32) of every vertex; balanced in nodes and in training nodes."""
    if num_parts < 1:
        raise ValueError(f"num_parts must be >= 1, got {num_parts}")
    rng = np.random.default_rng(seed)
    parts = np.empty(num_nodes, dtype=np.int32)
    is_train = np.zeros(num_nodes, dtype=bool)
    if train_idx is not None:
        is_train[np.asarray(train_idx)] = True
    for group in (np.flatnonzero(is_train), np.flatnonzero(~is_train)):
        order = rng.permutation(group)
        # A random starting part per group keeps the two groups' remainders from piling up.
        parts[order] = (np.arange(order.size) + rng.integers(num_parts)) % num_parts
    return parts
