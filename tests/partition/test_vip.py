"""VIP recurrence against a plain reference, and against measured sampler access counts."""
import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from gnnsys.testing import tiny_graph
from partition.vip import degree_reachable_weights, reachable, vip_weights


def reference_vip(indptr, indices, train_ids, fanouts, batch_size):
    n = len(indptr) - 1
    deg = np.diff(indptr)
    p = [0.0] * n
    for t in train_ids:
        p[t] = min(1.0, batch_size / len(train_ids))
    not_seen = [1.0] * n
    for f in fanouts:
        nxt = []
        for u in range(n):
            miss = 1.0
            for v in indices[indptr[u]:indptr[u + 1]]:
                pick = 1.0 if f < 0 else min(1.0, f / deg[v])
                miss *= 1.0 - p[v] * pick
            nxt.append(1.0 - miss)
        p = nxt
        not_seen = [a * (1.0 - b) for a, b in zip(not_seen, p)]
    return np.array([1.0 - s for s in not_seen])


@pytest.mark.parametrize("fanouts,batch", [([3, 2], 16), ([5, -1], 1000), ([2, 2, 2], 8)])
def test_vip_matches_reference(fanouts, batch):
    g = tiny_graph(num_nodes=120, avg_degree=5, seed=4)
    train = g.train_idx[:40]
    got = vip_weights(g.indptr, g.indices, train, fanouts, batch)
    want = reference_vip(g.indptr, g.indices, train, fanouts, batch)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert got.dtype == np.float64 and (got >= 0).all() and (got <= 1).all()


def test_vip_ranks_measured_access_counts():
    from gnnsys.minibatch.store.access import epoch_access_counts
    from samplers import FusedSampler
    g = tiny_graph(num_nodes=3000, avg_degree=4, seed=5)
    train = g.train_idx[:300]
    vip = vip_weights(g.indptr, g.indices, train, [4, 3], 32)
    sampler = FusedSampler(g.indptr, g.indices, [4, 3])
    counts = sum(epoch_access_counts(sampler, train, 32, seed=s) for s in range(5))
    others = np.setdiff1d(np.arange(g.num_nodes), train)
    assert spearmanr(vip[others], counts[others]).statistic > 0.8
    # seeds are read every batch; any other vertex with VIP 0 is unreachable: never read
    assert (counts[others][vip[others] == 0] == 0).all()


def test_reachable_and_degree_weights():
    # path 0-1-2-3
    indptr = np.array([0, 1, 3, 5, 6])
    indices = np.array([1, 0, 2, 1, 3, 2])
    assert reachable(indptr, indices, np.array([0]), 2).tolist() == [True, True, True, False]
    w = degree_reachable_weights(indptr, indices, np.array([0]), 1)
    assert w.tolist() == [1.0, 2.0, 0.0, 0.0]
    assert not math.isnan(vip_weights(indptr, indices, np.array([0]), [-1], 1).sum())
