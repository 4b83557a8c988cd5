"""Graph <-> torch_geometric.data.Data (x, edge_index, y and boolean split masks).

PyG's `edge_index` is (source, target); a gnnsys CSR row lists a node's in-neighbours,
so `Graph.edge_index()` is already in PyG's order.
"""
from __future__ import annotations

import numpy as np

from gnnsys.graph import Graph

_SPLITS = ("train", "val", "test")


def to_pyg(graph: Graph):
    """A `torch_geometric.data.Data` with x, edge_index (int64), y and train/val/test masks."""
    import torch
    from torch_geometric.data import Data

    data = Data(edge_index=torch.from_numpy(graph.edge_index()), num_nodes=graph.num_nodes)
    if graph.x is not None:
        data.x = tensor_from_numpy(graph.x)
    if graph.y is not None:
        data.y = tensor_from_numpy(np.asarray(graph.y, dtype=np.int64))
    for part in _SPLITS:
        idx = getattr(graph, f"{part}_idx")
        if idx is not None:
            mask = torch.zeros(graph.num_nodes, dtype=torch.bool)
            mask[tensor_from_numpy(np.asarray(idx, dtype=np.int64))] = True
            setattr(data, f"{part}_mask", mask)
    return data


def from_pyg(data, name: str = "pyg", num_classes: int | None = None,
             metric: str = "accuracy") -> Graph:
    """A Graph from a PyG `Data`; num_classes defaults to max(y) + 1."""
    num_nodes = int(data.num_nodes)
    x = None if getattr(data, "x", None) is None else data.x.detach().cpu().numpy()
    y = None if getattr(data, "y", None) is None else \
        data.y.detach().cpu().numpy().reshape(num_nodes, -1)[:, 0].astype(np.int64)
    if num_classes is None:
        num_classes = int(y.max()) + 1 if y is not None and y.size else 0
    graph = Graph.from_edge_index(data.edge_index.detach().cpu().numpy(), num_nodes,
                                  x=None if x is None else x.astype(np.float32, copy=False),
                                  y=y, num_classes=num_classes, name=name, metric=metric)
    for part in _SPLITS:
        mask = getattr(data, f"{part}_mask", None)
        if mask is not None:
            setattr(graph, f"{part}_idx",
                    np.flatnonzero(mask.detach().cpu().numpy()).astype(np.int64))
    return graph


def tensor_from_numpy(array: np.ndarray):
    """A torch tensor over `array`; read-only (memory-mapped) or strided arrays are copied."""
    import torch

    # Memory-mapped graphs are read-only; torch wants writable memory, so copy those.
    array = np.asarray(array)
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.array(array, order="C")
    return torch.from_numpy(array)
