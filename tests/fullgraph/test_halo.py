"""Halo plans: node classes, index lists that agree across ranks, exact aggregation."""
import numpy as np
import pytest
import torch

from gnnsys.config import from_dict
from gnnsys.fullgraph.halo import aggregation_weights, build_halo_plan
from gnnsys.partition_cache import ensure_partitions, fullgraph_parts
from gnnsys.testing import tiny_graph


def dense_operator(graph, arch):
    """The full-graph aggregation matrix, written out plainly."""
    n = graph.num_nodes
    a = np.zeros((n, n))
    for v in range(n):
        for u in graph.indices[graph.indptr[v]:graph.indptr[v + 1]]:
            if u != v:
                a[v, u] = 1.0
    if arch == "gcn":
        a += np.eye(n)
        d_in, d_out = a.sum(1), a.sum(0)
        return a / np.sqrt(np.outer(d_in, d_out))
    return a / np.maximum(a.sum(1, keepdims=True), 1)


@pytest.fixture(scope="module")
def graph():
    return tiny_graph(num_nodes=120, avg_degree=5, num_features=6, seed=3)


def plans(graph, world, arch, seed=0):
    parts = np.random.default_rng(seed).integers(0, world, graph.num_nodes)
    weights = aggregation_weights(graph, arch)
    return [build_halo_plan(graph, parts, r, world, arch, weights) for r in range(world)], parts


@pytest.mark.parametrize("arch", ["gcn", "sage"])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_partitioned_aggregation_equals_full_graph(graph, arch, world):
    x = np.random.default_rng(0).normal(size=(graph.num_nodes, 5)).astype(np.float32)
    reference = dense_operator(graph, arch) @ x
    for plan in plans(graph, world, arch)[0]:
        inner = torch.from_numpy(x[plan.inner_gid])
        halo = torch.from_numpy(x[plan.halo_gid])
        central = torch.sparse.mm(plan.central.forward, inner) if plan.num_central else \
            torch.zeros(0, 5)
        marginal = (torch.sparse.mm(plan.marginal_local.forward, inner)
                    + torch.sparse.mm(plan.marginal_halo.forward, halo)) if plan.num_marginal \
            else torch.zeros(0, 5)
        out = torch.cat([central, marginal]).numpy()
        np.testing.assert_allclose(out, reference[plan.inner_gid], rtol=1e-5, atol=1e-6)


def test_node_classes_and_index_lists_agree_across_ranks(graph):
    world = 3
    ps, parts = plans(graph, world, "gcn", seed=1)
    assert sorted(np.concatenate([p.inner_gid for p in ps]).tolist()) == list(range(graph.num_nodes))
    for p in ps:
        assert np.all(parts[p.inner_gid] == p.rank)
        assert np.all(parts[p.halo_gid] != p.rank)
        # marginal rows have a remote in-neighbour, central rows none
        for pos, v in enumerate(p.inner_gid):
            nbrs = graph.indices[graph.indptr[v]:graph.indptr[v + 1]]
            assert (pos >= p.num_central) == bool(np.any(parts[nbrs] != p.rank))
        assert np.all(np.diff(p.halo_owner) >= 0)          # halo slots grouped by owner
    for sender in ps:
        for receiver in ps:
            if sender is receiver:
                continue
            start, end = receiver.recv_ranges[sender.rank]
            sent = sender.inner_gid[sender.send_idx[receiver.rank]]
            assert np.array_equal(sent, receiver.halo_gid[start:end])


def test_forward_scores_sum_the_receivers_edge_weights(graph):
    ps, parts = plans(graph, 2, "gcn")
    a = dense_operator(graph, "gcn")
    sender = ps[0]
    sent = sender.inner_gid[sender.send_idx[1]]
    receiver_rows = np.flatnonzero(parts == 1)
    expected = a[np.ix_(receiver_rows, sent)].sum(axis=0)
    np.testing.assert_allclose(sender.send_scores[1], expected, rtol=1e-5)


def test_bad_partition_vector_is_rejected(graph):
    with pytest.raises(ValueError, match="partition vector"):
        build_halo_plan(graph, np.full(graph.num_nodes, 5), 0, 2, "gcn")
    with pytest.raises(ValueError, match="model.arch"):
        aggregation_weights(graph, "gat")


def test_streaming_the_edges_in_small_chunks_changes_nothing(graph, monkeypatch):
    import gnnsys.fullgraph.halo as halo
    one_chunk, parts = plans(graph, 3, "gcn", seed=2)
    monkeypatch.setattr(halo, "CHUNK_EDGES", 7)
    chunked, _ = plans(graph, 3, "gcn", seed=2)
    for a, b in zip(one_chunk, chunked):
        assert np.array_equal(a.inner_gid, b.inner_gid) and np.array_equal(a.halo_gid, b.halo_gid)
        assert all(np.array_equal(x, y) for x, y in zip(a.send_idx, b.send_idx))
        assert all(np.allclose(x, y) for x, y in zip(a.send_scores, b.send_scores))
        for op in ("central", "marginal_local", "marginal_halo"):
            assert torch.equal(getattr(a, op).forward.to_dense(), getattr(b, op).forward.to_dense())


def test_full_graph_and_minibatch_share_one_partition_cache(graph, tmp_path, monkeypatch):
    import partition.build
    calls = []
    real = partition.build.assign_parts
    monkeypatch.setattr(partition.build, "assign_parts",
                        lambda *a, **k: calls.append(a) or real(*a, **k))
    settings = {"cluster": {"workers": 3}, "partition": {"method": "random", "seed": 4,
                                                         "dir": str(tmp_path / "parts")}}
    fullgraph = from_dict({"mode": "fullgraph", **settings})
    first = fullgraph_parts(fullgraph, graph, progress=False)
    again = fullgraph_parts(fullgraph, graph, progress=False)
    assert np.array_equal(first, again) and len(calls) == 1
    assert np.array_equal(first, real(graph, "random", 3, seed=4))
    # a minibatch run with the same settings reads the very same parts
    minibatch = from_dict({"mode": "minibatch", "model": {"layers": 2}, **settings})
    assert ensure_partitions(minibatch, progress=False).path == tmp_path / "parts"
    assert len(calls) == 1
