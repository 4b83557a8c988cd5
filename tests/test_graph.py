import numpy as np
import pytest

from gnnsys.graph import Graph, csr_from_edges
from gnnsys.testing import tiny_graph


def test_csr_from_edges_rows_are_targets():
    indptr, indices = csr_from_edges(np.array([0, 2, 1]), np.array([1, 1, 2]), 3)
    assert indptr.tolist() == [0, 0, 2, 3]
    assert indices.tolist() == [0, 2, 1]
    assert indices.dtype == np.int32


def test_csr_rejects_out_of_range_ids():
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        csr_from_edges(np.array([0]), np.array([3]), 3)


def test_save_load_roundtrip_memmapped(tmp_path):
    g = tiny_graph()
    g.save(tmp_path / "g")
    h = Graph.load(tmp_path / "g")
    assert isinstance(h.x, np.memmap)
    for key in ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(g, key), getattr(h, key))
    assert (h.num_classes, h.name) == (g.num_classes, g.name)
    np.testing.assert_array_equal(h.edge_index(), g.edge_index())


def test_load_detects_corruption(tmp_path):
    g = tiny_graph()
    g.save(tmp_path / "g")
    np.save(tmp_path / "g" / "indices.npy", g.indices[:-3])
    with pytest.raises(ValueError, match="inconsistent|corrupt"):
        Graph.load(tmp_path / "g")
    with pytest.raises(FileNotFoundError, match="meta.json"):
        Graph.load(tmp_path / "nothing")


def test_inconsistent_features_are_rejected():
    g = tiny_graph(num_nodes=20)
    with pytest.raises(ValueError, match="x has 5 rows"):
        Graph(indptr=g.indptr, indices=g.indices, x=g.x[:5])
