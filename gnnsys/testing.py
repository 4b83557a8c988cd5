"""Helpers for tests and examples: tiny graphs with learnable labels, skip markers.

Kept in the package (as PyG's `testing` module is) so every test suite and notebook
builds its toy inputs the same way.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .graph import Graph, csr_from_edges


def tiny_graph(num_nodes: int = 200, avg_degree: int = 6, num_features: int = 8,
               num_classes: int = 3, seed: int = 0, isolated: int = 2) -> Graph:
    """A small symmetric graph whose labels follow communities and whose features carry
    a noisy class signal; the last `isolated` nodes have degree 0."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, num_classes, num_nodes)
    connected = num_nodes - isolated
    m = connected * avg_degree // 2
    src = rng.integers(0, connected, m)
    # 80% of edges stay inside the class: pick a partner of the same class
    same = rng.random(m) < 0.8
    dst = rng.integers(0, connected, m)
    by_class = [np.flatnonzero(y[:connected] == c) for c in range(num_classes)]
    for c in range(num_classes):
        pick = same & (y[src] == c)
        if len(by_class[c]):
            dst[pick] = rng.choice(by_class[c], pick.sum())
    keep = src != dst
    src, dst = src[keep], dst[keep]
    pairs = np.unique(np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])]), axis=1)
    indptr, indices = csr_from_edges(pairs[0], pairs[1], num_nodes)
    centroids = rng.normal(0, 1, (num_classes, num_features))
    x = (centroids[y] + rng.normal(0, 1.0, (num_nodes, num_features))).astype(np.float32)
    perm = rng.permutation(num_nodes)
    a, b = int(0.6 * num_nodes), int(0.8 * num_nodes)
    return Graph(indptr=indptr, indices=indices, x=x, y=y.astype(np.int64),
                 train_idx=np.sort(perm[:a]), val_idx=np.sort(perm[a:b]),
                 test_idx=np.sort(perm[b:]), num_classes=num_classes, name="tiny")


def tiny_temporal_graph(num_nodes: int = 60, num_events: int = 1200, edge_dim: int = 0,
                        node_dim: int = 0, seed: int = 0, name: str = "tiny-temporal"):
    """A small learnable event stream: destinations come from a small 'hot' set that
    drifts every 150 events, so recent activity (memory, recent neighbours) predicts links;
    times have ties (several events per second) to exercise the latest-by-(time, event)
    rule."""
    from .temporal_graph import TemporalGraph
    rng = np.random.default_rng(seed)
    window = np.arange(num_events) // 150
    hot = rng.integers(0, num_nodes, size=(window.max() + 1, 6))
    src = rng.integers(0, num_nodes, size=num_events)
    dst = hot[window, rng.integers(0, 6, size=num_events)]
    same = src == dst
    src[same] = (src[same] + 1) % num_nodes
    t = np.sort(rng.integers(0, num_events // 2, size=num_events)).astype(np.int64)
    edge_feat = rng.normal(size=(num_events, edge_dim)).astype(np.float32) if edge_dim else None
    node_feat = rng.normal(size=(num_nodes, node_dim)).astype(np.float32) if node_dim else None
    return TemporalGraph(src=src, dst=dst, t=t, num_nodes=num_nodes, edge_feat=edge_feat,
                         node_feat=node_feat, name=name)


def shared_data_dir() -> Path | None:
    """The `shared/data` directory beside the repo checkout, when present."""
    here = Path(__file__).resolve().parents[2] / "shared" / "data"
    return here if here.is_dir() else None


def steady_state_faults(block_bytes: int = 128 << 20, steps: int = 40, measured: int = 10) -> int:
    """Minor page faults of the last `measured` of `steps` alloc-fill-free steps of one
    block: a training step's pattern, for checking that freed memory is reused
    (gnnsys/allocator.py). The first steps grow the heap until the freed blocks fit the
    next requests. torch, not numpy: numpy asks for huge pages on large arrays, which
    hides the faults on a THP-madvise kernel."""
    import resource
    import torch
    for step in range(steps):
        if step == steps - measured:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        block = torch.empty(block_bytes, dtype=torch.uint8)
        block.fill_(1)
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
