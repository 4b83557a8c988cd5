"""Seeded train/val/test splits for datasets that ship without a standard one.

Both helpers return sorted int64 node ids and are deterministic for a given seed.
"""
from __future__ import annotations

import numpy as np


def random_split(num_nodes: int, train_fraction: float, val_fraction: float, seed: int = 0):
    """Uniformly random split of all nodes; the rest after train and val is the test set."""
    order = np.random.default_rng(seed).permutation(num_nodes)
    n_train = int(round(train_fraction * num_nodes))
    n_val = int(round(val_fraction * num_nodes))
    return (np.sort(order[:n_train]), np.sort(order[n_train:n_train + n_val]),
            np.sort(order[n_train + n_val:]))


def stratified_split(labels: np.ndarray, train_fraction: float, val_fraction: float,
                     seed: int = 0):
    """Per-class random split of the labelled nodes (label >= 0); unlabelled ones are left out.

    Each class contributes round(fraction * class size) nodes to train and val, so small
    classes keep their share in every part.
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    parts = ([], [], [])
    for cls in np.unique(labels[labels >= 0]):
        members = rng.permutation(np.flatnonzero(labels == cls))
        n_train = int(round(train_fraction * members.size))
        n_val = int(round(val_fraction * members.size))
        parts[0].append(members[:n_train])
        parts[1].append(members[n_train:n_train + n_val])
        parts[2].append(members[n_train + n_val:])
    return tuple(np.sort(np.concatenate(p)).astype(np.int64) if p else np.empty(0, np.int64)
                 for p in parts)
