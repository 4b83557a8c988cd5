"""Graph <-> dgl.DGLGraph, imported lazily so that gnnsys never requires DGL.

Node data keys follow DGL's examples: feat, label, train_mask, val_mask, test_mask.
"""
from __future__ import annotations

import numpy as np

from gnnsys.graph import Graph

INSTALL_HINT = ("DGL is not installed: pip install gnnsys[dgl]; note dgl 2.1 needs "
                "torch<=2.2.1, so use a separate environment if your torch is newer")
_SPLITS = ("train", "val", "test")


def _import_dgl():
    try:
        import dgl
    except ImportError as err:
        raise ImportError(f"{INSTALL_HINT} (import failed: {err})") from None
    return dgl


def to_dgl(graph: Graph):
    """A DGLGraph with edges src -> dst (dst = CSR row) and node data feat/label/masks."""
    dgl = _import_dgl()
    import torch

    from gnnsys.interop.pyg import tensor_from_numpy

    src, dst = graph.edge_index()
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=graph.num_nodes)
    if graph.x is not None:
        g.ndata["feat"] = tensor_from_numpy(graph.x)
    if graph.y is not None:
        g.ndata["label"] = tensor_from_numpy(np.asarray(graph.y, dtype=np.int64))
    for part in _SPLITS:
        idx = getattr(graph, f"{part}_idx")
        if idx is not None:
            mask = torch.zeros(graph.num_nodes, dtype=torch.bool)
            mask[tensor_from_numpy(np.asarray(idx, dtype=np.int64))] = True
            g.ndata[f"{part}_mask"] = mask
    return g


def from_dgl(dgl_graph, name: str = "dgl", num_classes: int | None = None,
             metric: str = "accuracy") -> Graph:
    """A Graph from a homogeneous DGLGraph (reads feat, label and *_mask node data if set)."""
    _import_dgl()
    src, dst = (t.cpu().numpy() for t in dgl_graph.edges())
    ndata = dgl_graph.ndata
    x = ndata["feat"].cpu().numpy().astype(np.float32, copy=False) if "feat" in ndata else None
    y = ndata["label"].cpu().numpy().astype(np.int64) if "label" in ndata else None
    if num_classes is None:
        num_classes = int(y.max()) + 1 if y is not None and y.size else 0
    graph = Graph.from_edge_index(np.stack([src, dst]), dgl_graph.num_nodes(), x=x, y=y,
                                  num_classes=num_classes, name=name, metric=metric)
    for part in _SPLITS:
        if f"{part}_mask" in ndata:
            setattr(graph, f"{part}_idx",
                    np.flatnonzero(ndata[f"{part}_mask"].cpu().numpy()).astype(np.int64))
    return graph
