"""Conversions between gnnsys graphs and other GNN libraries' graph objects.

    from gnnsys.interop import to_pyg, from_pyg      # always available (PyG is a dependency)
    from gnnsys.interop import to_dgl, from_dgl      # need `pip install gnnsys[dgl]`

DGL is imported only when a DGL conversion is called, so importing this package never
requires it.
"""
from gnnsys.interop.dgl import from_dgl, to_dgl
from gnnsys.interop.pyg import from_pyg, to_pyg

__all__ = ["from_dgl", "from_pyg", "to_dgl", "to_pyg"]
