"""The first layer's aggregation inside the fused CPU sampler (samplers/_aggregate.py)
against the unfused sampler: the same batch, with the last hop's sources aggregated by a
plain loop (SAGE's mean; GCN's normalised sum with the self loop, the model's weights)."""
import numpy as np
import pytest

from samplers import FusedSampler


def graph(num_nodes=3000, mean_degree=12, num_features=24, seed=0):
    rng = np.random.default_rng(seed)
    degree = rng.integers(0, 2 * mean_degree, num_nodes)
    degree[:5] = 0                                     # targets without any neighbour
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    indices = rng.integers(0, num_nodes, indptr[-1]).astype(np.int32)
    features = rng.standard_normal((num_nodes, num_features)).astype(np.float32)
    return indptr, indices, features


def plain_aggregate(kind, features, degree, targets, block_indptr, sources):
    """Row i: the aggregate of features[sources of target i] (global ids)."""
    out = np.zeros((len(block_indptr) - 1, features.shape[1]), dtype=np.float64)
    x = features.astype(np.float64)
    for i, t in enumerate(targets):
        picks = sources[block_indptr[i]:block_indptr[i + 1]]
        if kind == "mean":
            out[i] = x[picks].mean(0) if len(picks) else 0.0
            continue
        d_t = degree[t]
        for s in picks:                                 # GCNConv over the sampled block
            out[i] += x[s] * (d_t / max(len(picks), 1)) / np.sqrt((degree[s] + 1) * (d_t + 1))
        out[i] += x[t] / (d_t + 1)                      # the self loop
    return out


@pytest.mark.parametrize("aggregate", ["mean", "gcn"])
@pytest.mark.parametrize("fanouts", [[4], [5, 3], [3, 4, -1]])
@pytest.mark.parametrize("threads", [1, 2])
def test_aggregate_in_the_sampler_equals_the_unfused_batch(fanouts, threads, aggregate):
    indptr, indices, features = graph()
    seeds = np.array([0, 1, 7, 7, 100, 2999, 1500, 42])
    plain = FusedSampler(indptr, indices, fanouts, features=features, num_threads=threads)
    fused = FusedSampler(indptr, indices, fanouts, features=features, num_threads=threads,
                         aggregate=aggregate)
    for seed in (3, 4):
        a, b = plain.sample(seeds, seed), fused.sample(seeds, seed)
        targets = a.hop_sizes[-2]
        # everything up to the last hop is the same batch
        assert b.hop_sizes == a.hop_sizes[:-1] + [targets]
        np.testing.assert_array_equal(b.n_id, a.n_id[:targets])
        np.testing.assert_array_equal(b.x, a.x[:targets])
        for h in range(len(fanouts) - 1):
            np.testing.assert_array_equal(b.block_indptr[h], a.block_indptr[h])
            np.testing.assert_array_equal(b.block_indices[h], a.block_indices[h])
        # the last hop: the same picks, as global ids, averaged
        np.testing.assert_array_equal(b.block_indptr[-1], a.block_indptr[-1])
        np.testing.assert_array_equal(b.block_indices[-1], a.n_id[a.block_indices[-1]])
        assert b.num_sampled_edges == a.num_sampled_edges
        assert b.x_agg.dtype == np.float32 and b.x_agg.shape == (targets, features.shape[1])
        expected = plain_aggregate(aggregate, features, np.diff(indptr), b.n_id,
                                   b.block_indptr[-1], b.block_indices[-1])
        np.testing.assert_allclose(b.x_agg, expected, rtol=1e-5, atol=1e-5)
        assert a.x_agg is None


def test_rows_without_picks_are_zero_or_the_self_loop_though_the_buffer_is_reused():
    indptr, indices, features = graph()
    fused = FusedSampler(indptr, indices, [3], features=features, num_buffers=1,
                         aggregate="mean")
    fused.sample(np.arange(5, 400), 0)                 # fills the one buffer
    sub = fused.sample(np.arange(0, 5), 1)             # nodes 0-4 have no neighbours
    assert not sub.x_agg.any() and sub.x_agg.shape == (5, features.shape[1])
    gcn = FusedSampler(indptr, indices, [3], features=features, num_buffers=1,
                       aggregate="gcn")
    gcn.sample(np.arange(5, 400), 0)
    np.testing.assert_array_equal(gcn.sample(np.arange(0, 5), 1).x_agg, features[:5])


def test_aggregate_needs_dense_local_rows():
    indptr, indices, features = graph()
    with pytest.raises(ValueError, match="no row_of"):
        FusedSampler(indptr, indices, [3], features=features, aggregate="mean",
                     row_of=np.arange(len(indptr) - 1))
    with pytest.raises(ValueError, match="no row_of"):
        FusedSampler(indptr, indices, [3], aggregate="mean")
    with pytest.raises(ValueError, match="float32"):
        FusedSampler(indptr, indices, [3], features=features.astype(np.float16),
                     aggregate="mean")
    with pytest.raises(ValueError, match="'mean' or 'gcn'"):
        FusedSampler(indptr, indices, [3], features=features, aggregate="sum")
