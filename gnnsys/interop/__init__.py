"""Conversions between gnnsys graphs and other GNN libraries' graph objects.

    from gnnsys.interop import to_pyg, from_pyg      # always available (PyG is a dependency)
    from gnnsys.interop import from_pyg_temporal     # TemporalData -> TemporalGraph
    from gnnsys.interop import to_dgl, from_dgl      # need `pip install gnnsys[dgl]`

DGL is imported only when a DGL conversion is called, so importing this package never
requires it.
"""
from gnnsys.interop.dgl import from_dgl, to_dgl
from gnnsys.interop.pyg import from_pyg, from_pyg_temporal, to_pyg

__all__ = ["as_graph", "from_dgl", "from_pyg", "from_pyg_temporal", "to_dgl", "to_pyg"]


def as_graph(data, name: str = "data"):
    """A gnnsys Graph / TemporalGraph of `data`: one already, a PyG `Data` or `TemporalData`,
    or a `dgl.DGLGraph` (what `gnnsys.Trainer(cfg, data=...)` trains on)."""
    from gnnsys.graph import Graph
    from gnnsys.temporal_graph import TemporalGraph
    from torch_geometric.data import Data, HeteroData, TemporalData

    if isinstance(data, (Graph, TemporalGraph)):
        return data
    if isinstance(data, TemporalData):
        return from_pyg_temporal(data, name)
    if isinstance(data, Data):
        return from_pyg(data, name)
    if isinstance(data, HeteroData):
        raise TypeError("cannot train on a HeteroData: gnnsys trains homogeneous graphs "
                        "only, heterogeneous ones not yet; train on one node type's graph "
                        "(docs/DATA.md, \"Heterogeneous bundles\")")
    if type(data).__module__.split(".")[0] == "dgl":
        return from_dgl(data, name)
    raise TypeError(f"cannot train on a {type(data).__name__}: pass a torch_geometric Data "
                    "or TemporalData, a dgl.DGLGraph, or a gnnsys Graph / TemporalGraph")
