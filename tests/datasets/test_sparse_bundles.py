"""CSR features in bundles stay CSR: loading, checks, row normalisation, save/load."""
import dataclasses
import logging

import numpy as np
import pytest
import scipy.sparse as sp

from gnnsys.datasets import DatasetError, load_dataset
from gnnsys.datasets.for_run import check_finite, normalize_features
from gnnsys.graph import Graph
from gnnsys.testing import tiny_graph

X = sp.csr_matrix(np.array([[0, 2, 0], [1, 0, 0], [0, 0, 0], [3, 0, 1]], dtype=np.float32))
BUNDLE = dict(edge_index=np.array([[0, 1, 2, 3], [1, 2, 3, 0]]), y=np.array([0, 1, 0, 1]),
              x_indptr=X.indptr, x_indices=X.indices, x_data=X.data, x_shape=np.array(X.shape))


def test_a_csr_bundle_loads_as_csr(tmp_path):
    np.savez(tmp_path / "g.npz", **BUNDLE)
    graph = load_dataset("g", path=str(tmp_path / "g.npz"))
    assert sp.issparse(graph.x) and graph.x.dtype == np.float32
    assert graph.num_features == 3 and graph.meta["features"] == "sparse"
    assert np.array_equal(graph.x.toarray(), X.toarray())


@pytest.mark.parametrize("key, value, words", [
    ("x_indices", np.array([1, 0, 0, 7]), "indices must be < 3"),
    ("x_indptr", np.array([0, 1, 2, 2]), "index pointer"),
])
def test_a_malformed_csr_bundle_gets_one_line(tmp_path, key, value, words):
    np.savez(tmp_path / "bad.npz", **{**BUNDLE, key: value})
    with pytest.raises(DatasetError) as err:
        load_dataset("bad", path=str(tmp_path / "bad.npz"))
    message = str(err.value)
    assert "\n" not in message and str(tmp_path / "bad.npz") in message, message
    assert "x_indptr/x_indices" in message and words in message, message
    assert "docs/DATA.md" in message, message


def _sparse_tiny():
    graph = tiny_graph(num_nodes=50, num_features=12)
    keep = np.random.default_rng(0).random(graph.x.shape) < 0.2
    return dataclasses.replace(graph, x=sp.csr_matrix(np.where(keep, np.abs(graph.x), 0)))


def test_row_normalisation_keeps_csr_and_equals_dense():
    graph = _sparse_tiny()
    before = graph.x.copy()
    sparse = normalize_features(graph, "row")
    dense = normalize_features(dataclasses.replace(graph, x=graph.x.toarray()), "row")
    assert sp.issparse(sparse.x)
    np.testing.assert_allclose(sparse.x.toarray(), dense.x, rtol=1e-6)
    assert (graph.x != before).nnz == 0          # the loaded graph is left as it was


def test_standard_normalisation_densifies_with_a_logged_line(caplog):
    graph = _sparse_tiny()
    with caplog.at_level(logging.WARNING):
        out = normalize_features(graph, "standard")
    assert isinstance(out.x, np.ndarray) and "densifying" in caplog.text


def test_nan_in_csr_values_is_refused_naming_the_row():
    x = X.copy()
    x.data[2] = np.nan                              # row 3's first value
    with pytest.raises(ValueError, match="1 feature rows hold NaN .*first: row 3"):
        check_finite("g", x, "feature")
    check_finite("g", X, "feature")


def test_graph_save_load_keeps_csr(tmp_path):
    graph = _sparse_tiny()
    loaded = Graph.load(graph.save(tmp_path / "g"))
    assert sp.issparse(loaded.x) and (loaded.x != graph.x).nnz == 0
