"""Graph <-> torch_geometric.data.Data (x, edge_index, y and boolean split masks), and
TemporalData -> TemporalGraph.

PyG's `edge_index` is (source, target); a gnnsys CSR row lists a node's in-neighbours,
so `Graph.edge_index()` is already in PyG's order.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from gnnsys.graph import Graph
from gnnsys.temporal_graph import TemporalGraph

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
    labelled = np.ones(num_nodes, dtype=bool) if y is None else y >= 0
    graph = Graph.from_edge_index(data.edge_index.detach().cpu().numpy(), num_nodes,
                                  x=None if x is None else x.astype(np.float32, copy=False),
                                  y=y, num_classes=num_classes, name=name, metric=metric)
    for part in _SPLITS:
        mask = getattr(data, f"{part}_mask", None)
        if mask is not None:       # unlabelled nodes (-1) never enter a split
            setattr(graph, f"{part}_idx", np.flatnonzero(
                mask.detach().cpu().numpy() & labelled).astype(np.int64))
    return graph


def from_pyg_temporal(data, name: str = "pyg", metric: str = "ap") -> TemporalGraph:
    """A TemporalGraph from a PyG `TemporalData` (src, dst, t; msg as edge features, y as
    edge labels), sorted by time; bipartite when every source id is below every destination
    (JODIE's users and items). The split is the 70%/85% time quantiles, as in TGN."""
    src, dst, t = (getattr(data, key).detach().cpu().numpy() for key in ("src", "dst", "t"))
    order = np.argsort(t, kind="stable")
    msg = None if getattr(data, "msg", None) is None else data.msg.detach().cpu().numpy()
    label = None if getattr(data, "y", None) is None else data.y.detach().cpu().numpy()
    num_src_nodes = int(src.max()) + 1 if src.size else 0
    bipartite = bool(src.size) and num_src_nodes <= int(dst.min())
    return TemporalGraph(
        src=src[order].astype(np.int64), dst=dst[order].astype(np.int64), t=t[order],
        num_nodes=max(int(dst.max()) + 1 if dst.size else 0, num_src_nodes),
        edge_feat=msg[order].astype(np.float32) if msg is not None and msg.ndim == 2
        and msg.shape[1] else None,
        bipartite=bipartite, num_src_nodes=num_src_nodes if bipartite else None,
        name=name, metric=metric,
        edge_label=None if label is None else label[order].astype(np.int64))


def tensor_from_numpy(array: np.ndarray):
    """A torch tensor over `array`; read-only (memory-mapped) or strided arrays are copied."""
    import torch

    if sp.issparse(array):           # CSR features: PyG and DGL graphs get dense ones
        array = array.toarray()
    # Memory-mapped graphs are read-only; torch wants writable memory, so copy those.
    array = np.asarray(array)
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.array(array, order="C")
    return torch.from_numpy(array)
