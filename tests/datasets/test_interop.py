"""Conversions to and from PyG (always) and DGL (skipped when DGL is not installed)."""
import numpy as np
import pytest

from gnnsys.datasets import load_dataset
from gnnsys.interop import from_pyg, to_pyg


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return load_dataset("synthetic-tiny", root=tmp_path_factory.mktemp("data"))


def assert_same_graph(a, b):
    for key in ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)
    assert a.num_classes == b.num_classes


def test_pyg_round_trip(graph):
    data = to_pyg(graph)
    assert data.num_nodes == graph.num_nodes and data.edge_index.shape == (2, graph.num_edges)
    assert int(data.train_mask.sum()) == len(graph.train_idx)
    assert_same_graph(graph, from_pyg(data, name="back"))


def test_pyg_edge_direction_matches_csr_rows():
    from gnnsys.graph import Graph

    g = Graph.from_edge_index(np.array([[0, 0], [1, 2]]), 3)   # 0 -> 1, 0 -> 2
    assert to_pyg(g).edge_index.tolist() == [[0, 0], [1, 2]]


def test_dgl_round_trip(graph):
    pytest.importorskip("dgl")
    from gnnsys.interop import from_dgl, to_dgl

    dgl_graph = to_dgl(graph)
    assert dgl_graph.num_edges() == graph.num_edges
    assert_same_graph(graph, from_dgl(dgl_graph))


def test_missing_dgl_says_how_to_install(graph, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def refuse_dgl(name, *args, **kwargs):
        if name == "dgl" or name.startswith("dgl."):
            raise ImportError("No module named 'dgl'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse_dgl)
    from gnnsys.interop import to_dgl
    with pytest.raises(ImportError, match=r"pip install gnnsys\[dgl\].*torch<=2.2.1"):
        to_dgl(graph)
