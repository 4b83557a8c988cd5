"""METIS, random and streaming partitioners: valid, balanced, and better cut than random."""
import sys

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


def test_metis_without_pymetis_says_what_to_do(graph, monkeypatch):
    """The GPU machine's image has no pymetis: one line naming the package and the
    partitioner that needs nothing more, not a ModuleNotFoundError traceback."""
    from partition.format import PartitionError
    monkeypatch.setitem(sys.modules, "pymetis", None)     # `import pymetis` now fails
    with pytest.raises(PartitionError, match="pip install pymetis.*partition.method: stream"):
        assign_parts(graph, "metis", 3, seed=0)
    assert assign_parts(graph, "stream", 3, seed=0).shape == (graph.num_nodes,)


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


def test_label_propagation_respects_the_size_cap_and_finds_clusters():
    from partition.coarsen import label_propagation
    # 20 cliques of 10 joined in a ring by single edges: clusters should be the cliques.
    rows, cols = [], []
    for c in range(20):
        members = range(10 * c, 10 * c + 10)
        rows += [u for u in members for v in members if u != v]
        cols += [v for u in members for v in members if u != v]
        u, v = 10 * c, (10 * c + 15) % 200
        rows += [u, v]
        cols += [v, u]
    from gnnsys.graph import csr_from_edges
    indptr, indices = csr_from_edges(np.array(rows), np.array(cols), 200)
    cluster = label_propagation(indptr, indices, max_size=10, seed=0)
    sizes = np.bincount(cluster)
    assert sizes.max() <= 10
    same = (cluster[:, None] == cluster[None, :])
    clique = (np.arange(200)[:, None] // 10) == (np.arange(200)[None, :] // 10)
    # almost every pair agrees with the clique structure
    assert (same == clique).mean() > 0.98


def test_contract_counts_edges_between_clusters():
    from partition.coarsen import contract
    # path 0-1-2-3, clusters {0,1} {2,3}: one edge between, weight 1 each direction
    indptr = np.array([0, 1, 3, 5, 6])
    indices = np.array([1, 0, 2, 1, 3, 2])
    c_indptr, c_indices, c_weights = contract(indptr, indices, np.array([0, 0, 1, 1]), 2)
    assert c_indptr.tolist() == [0, 1, 2] and c_indices.tolist() == [1, 0]
    assert c_weights.tolist() == [1, 1]


def test_coarsened_metis_is_balanced_and_cuts_like_metis(monkeypatch):
    from partition import metis
    from partition.metis import metis_parts
    monkeypatch.setattr(metis, "COARSE_CLUSTERS", 300)     # clusters of up to 10 vertices
    graph = tiny_graph(num_nodes=3000, avg_degree=10, seed=5)
    direct = metis_parts(graph.indptr, graph.indices, 4, graph.train_idx, coarsen="never")
    coarse = metis_parts(graph.indptr, graph.indices, 4, graph.train_idx, coarsen="always")
    q_direct, q_coarse = (partition_quality(graph.indptr, graph.indices, p, 4, graph.train_idx)
                          for p in (direct, coarse))
    random_cut = partition_quality(graph.indptr, graph.indices,
                                   assign_parts(graph, "random", 4), 4)["edge_cut"]
    assert set(np.unique(coarse)) == {0, 1, 2, 3}
    assert q_coarse["node_balance"] <= 1.1 and q_coarse["train_balance"] <= 1.15
    assert q_coarse["edge_cut"] < 0.8 * random_cut
    assert q_coarse["edge_cut"] <= 1.5 * q_direct["edge_cut"]
    np.testing.assert_array_equal(
        coarse, metis_parts(graph.indptr, graph.indices, 4, graph.train_idx, coarsen="always"))


def test_metis_names_a_bad_coarsen_choice(graph):
    from partition.metis import metis_parts
    with pytest.raises(ValueError, match="coarsen must be one of auto, always, never"):
        metis_parts(graph.indptr, graph.indices, 2, coarsen="sometimes")
