"""Partition a Graph into K on-disk parts: split, order by VIP, relabel, write.

    stats = build_partitions(graph, "parts/cora-metis-2", method="metis", num_parts=2,
                             fanouts=[15, 10], batch_size=1024)

Stages (each reported through the optional `progress` wrapper, e.g. a tqdm bar):
assign parts -> measure edge cut and balance -> VIP of each part's own training set
(orders rows inside a part, hottest first) -> relabel to contiguous ranges -> write.
Depends on numpy, numba and pymetis only; never imports gnnsys or torch.
"""
from __future__ import annotations

import time

import numpy as np

from .format import graph_fingerprint, write_parts
from .metis import metis_parts
from .quality import partition_quality
from .random import random_parts
from .relabel import contiguous_order, relabel_csr
from .stream import fennel_parts
from .vip import vip_weights

METHODS = ("metis", "random", "stream")


def assign_parts(graph, method: str, num_parts: int, seed: int = 0) -> np.ndarray:
    """Part id of every vertex of `graph` with the named partitioner."""
    if method == "metis":
        return metis_parts(graph.indptr, graph.indices, num_parts, graph.train_idx, seed=seed)
    if method == "random":
        return random_parts(graph.num_nodes, num_parts, graph.train_idx, seed=seed)
    if method == "stream":
        return fennel_parts(graph.indptr, graph.indices, num_parts, graph.train_idx, seed=seed)
    raise ValueError(f"unknown partition method {method!r}; allowed: {', '.join(METHODS)}")


def _identity(iterable, **_):
    return iterable


def build_partitions(graph, path, *, method: str, num_parts: int, fanouts, batch_size: int,
                     seed: int = 0, progress=None, extra: dict | None = None) -> dict:
    """Partition `graph` and write it to `path`; returns the manifest's quality report."""
    progress = progress or _identity
    stages = ["assign parts", "edge cut", "VIP order", "relabel", "write"]
    bar = progress(stages, desc=f"partition {graph.name} ({method}, {num_parts} parts)")
    timings = {}
    it = iter(bar)
    t0 = time.perf_counter()

    def stage():
        name = next(it)
        if hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(name)
        return name

    stage()
    parts = assign_parts(graph, method, num_parts, seed)
    timings["assign_s"] = round(time.perf_counter() - t0, 3)

    stage()
    quality = partition_quality(graph.indptr, graph.indices, parts, num_parts, graph.train_idx)

    stage()
    # Each part's rows sorted by the part's own VIP: the rows its trainer reads most.
    key = np.zeros(graph.num_nodes, dtype=np.float64)
    train = graph.train_idx if graph.train_idx is not None else np.empty(0, np.int64)
    for k in range(num_parts):
        mine = np.flatnonzero(parts == k)
        own_train = train[parts[train] == k]
        if own_train.size:
            key[mine] = vip_weights(graph.indptr, graph.indices, own_train, fanouts,
                                    batch_size)[mine]

    stage()
    old_of_new, new_of_old, offsets = contiguous_order(parts, num_parts, key)
    indptr, indices = relabel_csr(graph.indptr, graph.indices, old_of_new, new_of_old)
    x = None if graph.x is None else graph.x[old_of_new]       # dense or CSR rows
    y = None if graph.y is None else np.asarray(graph.y)[old_of_new]
    splits = {name: None if getattr(graph, name) is None
              else new_of_old[np.asarray(getattr(graph, name))]
              for name in ("train_idx", "val_idx", "test_idx")}

    stage()
    timings["total_s"] = round(time.perf_counter() - t0, 3)
    manifest_extra = {
        "dataset": graph.name, "method": method, "seed": seed,
        "num_classes": int(graph.num_classes), "metric": graph.metric,
        "source_fingerprint": graph_fingerprint(graph.indptr, graph.num_features),
        "row_order": {"key": "vip", "fanouts": list(fanouts), "batch_size": int(batch_size)},
        "quality": quality, "timings": timings, **(extra or {})}
    write_parts(path, indptr=indptr, indices=indices, offsets=offsets, x=x, y=y,
                splits=splits, orig_ids=old_of_new, manifest_extra=manifest_extra)
    if hasattr(bar, "close"):
        bar.close()
    return quality
