"""Seeded train/val/test splits for datasets that ship without a standard one: of the
nodes (sorted int64 ids) and of the edges (link prediction). Deterministic for a seed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .edges import symmetric_csr, unique_undirected


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


@dataclass(frozen=True)
class EdgeSplit:
    """A static graph's edges split for link prediction, laid out as the shipped link
    bundles are (../shared/data/MANIFEST.md, static link prediction): the training graph
    as a symmetric CSR, the only edges message passing may see in training; held-out
    positive pairs int64 [2, P], each undirected pair once (src < dst); and one negative
    per positive for each phase (GAE's protocol), pairs that are no edge of the whole
    graph, distinct, never a self loop, none shared between val and test."""
    indptr: np.ndarray
    indices: np.ndarray
    val_pos: np.ndarray
    test_pos: np.ndarray
    val_neg: np.ndarray
    test_neg: np.ndarray


def random_edge_split(indptr, indices, num_nodes: int, val_fraction: float,
                      test_fraction: float, seed: int = 0) -> EdgeSplit:
    """Seeded uniform split of the graph's undirected edges (a pair and its reverse go
    together; self loops and duplicates dropped, a directed graph read as undirected):
    round(fraction * edges) to val and to test, the rest train. A node may be left with
    no training edge (it then has only its features)."""
    from ..errors import DatasetError
    for name, value in (("val", val_fraction), ("test", test_fraction)):
        if not 0 <= value < 1:
            raise DatasetError(f"the {name} edge fraction is {value}; give one in [0, 1)")
    if val_fraction + test_fraction >= 1:
        raise DatasetError(f"val + test edge fractions are {val_fraction + test_fraction:g}, "
                           "leaving no training edge; keep their sum under 1")
    indptr = np.asarray(indptr, dtype=np.int64)
    rows = np.repeat(np.arange(num_nodes), np.diff(indptr))
    upper_indptr, upper_cols = unique_undirected(rows, np.asarray(indices), num_nodes)
    src = np.repeat(np.arange(num_nodes), np.diff(upper_indptr)).astype(np.int64)
    pairs = np.stack([src, upper_cols.astype(np.int64)])
    count = pairs.shape[1]
    if count == 0:
        raise DatasetError("the graph has no edge (self loops aside) to split for link "
                           "prediction")
    n_test, n_val = int(round(test_fraction * count)), int(round(val_fraction * count))
    if n_test + n_val >= count:
        raise DatasetError(f"val and test would take all {count} edges; lower the fractions")
    rng = np.random.default_rng(seed)
    order = rng.permutation(count)
    test_pos, val_pos = pairs[:, order[:n_test]], pairs[:, order[n_test:n_test + n_val]]
    train = order[n_test + n_val:]
    indptr_out, indices_out = symmetric_csr(pairs[0, train], pairs[1, train], num_nodes)
    val_neg, test_neg = _non_edges(pairs[0] * num_nodes + pairs[1], num_nodes,
                                   (n_val, n_test), rng)
    return EdgeSplit(indptr_out, indices_out, val_pos, test_pos, val_neg, test_neg)


def _non_edges(edge_keys: np.ndarray, num_nodes: int, counts, rng) -> list:
    """Distinct uniform pairs (src < dst) that are no edge (keys src * N + dst), one
    [2, count] array per count, no pair in two of them."""
    from ..errors import DatasetError
    need = sum(counts)
    free = num_nodes * (num_nodes - 1) // 2 - edge_keys.size
    if need > free:
        raise DatasetError(f"the graph has {free} unconnected pairs, fewer than the {need} "
                           "negatives its held-out edges need; lower the edge fractions")
    chosen = np.empty(0, np.int64)
    while chosen.size < need:
        draw = 2 * (need - chosen.size) + 16
        a, b = rng.integers(0, num_nodes, (2, draw))
        keys = np.minimum(a, b) * num_nodes + np.maximum(a, b)
        keys = keys[(a != b) & ~np.isin(keys, edge_keys)]
        keys = keys[~np.isin(keys, chosen)]
        _, first = np.unique(keys, return_index=True)
        chosen = np.concatenate([chosen, keys[np.sort(first)]])[:need]
    pairs = np.stack([chosen // num_nodes, chosen % num_nodes])
    return np.split(pairs, np.cumsum(counts)[:-1], axis=1)
