"""Partition quality: edge cut and balance of nodes, training nodes and edges per part.

Depends on numpy only.
"""
from __future__ import annotations

import numpy as np


def partition_quality(indptr: np.ndarray, indices: np.ndarray, parts: np.ndarray,
                      num_parts: int, train_idx: np.ndarray | None = None) -> dict:
    """Edge cut (share of edges whose ends lie in different parts) and, per part, the node,
    training-node and edge counts with their balance (max / mean; 1.0 is perfect)."""
    parts = np.asarray(parts)
    degree = np.diff(indptr)
    row_part = np.repeat(parts, degree)
    cut = int(np.count_nonzero(row_part != parts[np.asarray(indices)]))
    nodes = np.bincount(parts, minlength=num_parts)
    edges = np.bincount(parts, weights=degree, minlength=num_parts).astype(np.int64)
    train = (np.bincount(parts[np.asarray(train_idx)], minlength=num_parts)
             if train_idx is not None else np.zeros(num_parts, dtype=np.int64))

    def balance(counts):
        mean = counts.mean()
        return round(float(counts.max() / mean), 4) if mean > 0 else 1.0

    return {"num_parts": int(num_parts), "edge_cut": cut,
            "edge_cut_fraction": round(cut / max(indices.size, 1), 6),
            "nodes": nodes.tolist(), "train_nodes": train.tolist(), "edges": edges.tolist(),
            "node_balance": balance(nodes), "train_balance": balance(train),
            "edge_balance": balance(edges)}
