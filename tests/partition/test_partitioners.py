"""METIS, random and streaming partitioners: valid, balanced, and better cut than random."""
import numpy as np
import pytest

from gnnsys.testing import tiny_graph
from partition.build import assign_parts
from partition.metis import is_symmetric, symmetrize
from partition.quality import partition_quality


@pytest.fixture(scope="module")
def graph():
    return tiny_graph(num_nodes=600, avg_degree=8, seed=3)


@pytest.mark.parametrize("method", ["metis", "random", "stream"])
def test_parts_are_valid_and_balanced(graph, method):
    parts = assign_parts(graph, method, 3, seed=0)
    assert parts.shape == (graph.num_nodes,) and parts.dtype == np.int32
    assert set(np.unique(parts)) == {0, 1, 2}
    q = partition_quality(graph.indptr, graph.indices, parts, 3, graph.train_idx)
    assert sum(q["nodes"]) == graph.num_nodes
    assert sum(q["train_nodes"]) == len(graph.train_idx)
    assert q["train_balance"] <= 1.15 and q["node_balance"] <= 1.15


def test_metis_and_stream_cut_fewer_edges_than_random(graph):
    cut = {m: partition_quality(graph.indptr, graph.indices, assign_parts(graph, m, 3), 3)
           ["edge_cut"] for m in ("metis", "random", "stream")}
    assert cut["metis"] < cut["random"]
    assert cut["stream"] < cut["random"]


def test_partitioners_are_deterministic(graph):
    for method in ("metis", "random", "stream"):
        np.testing.assert_array_equal(assign_parts(graph, method, 2, seed=1),
                                      assign_parts(graph, method, 2, seed=1))


def test_symmetrize_directed_graph():
    indptr = np.array([0, 1, 2, 2])          # row 0 <- 1, row 1 <- 1 (self loop)
    indices = np.array([1, 1])
    assert not is_symmetric(indptr, indices)
    ip, ix = symmetrize(indptr, indices)
    assert is_symmetric(ip, ix)
    assert ip.tolist() == [0, 1, 2, 2] and ix.tolist() == [1, 0]


def test_quality_counts_cut_edges():
    # path 0-1-2-3, parts [0,0,1,1]: only the 1-2 edge (both directions) is cut
    indptr = np.array([0, 1, 3, 5, 6])
    indices = np.array([1, 0, 2, 1, 3, 2])
    q = partition_quality(indptr, indices, np.array([0, 0, 1, 1]), 2)
    assert q["edge_cut"] == 2 and q["edge_cut_fraction"] == pytest.approx(2 / 6)


def test_unknown_method_is_named(graph):
    with pytest.raises(ValueError, match="unknown partition method 'louvain'"):
        assign_parts(graph, "louvain", 2)


def test_metis_refuses_a_graph_that_would_not_fit(graph, monkeypatch):
    import partition.metis as metis
    monkeypatch.setattr(metis, "available_memory_bytes", lambda: 1000)
    with pytest.raises(ValueError, match="use the streaming partitioner"):
        metis.metis_parts(graph.indptr, graph.indices, 2)
