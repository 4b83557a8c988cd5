"""VIP recurrence against a plain reference, exact enumeration of the sampler, Monte-Carlo
runs of the real FusedSampler (with the approximation error stated in partition/vip.py),
and measured access counts; directed graphs included."""
import itertools
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


# ------------------------------------------------------------------ exact and Monte-Carlo
def exact_inclusion(indptr, indices, train, fanouts, batch):
    """P(u in a batch's sampled subgraph) by enumerating every seed set (drawn without
    replacement) and every equally likely pick of every target at every hop, with the
    FusedSampler's semantics: each hop expands every vertex known so far, picking
    min(f, d) of its CSR row without replacement."""
    total = np.zeros(len(indptr) - 1)
    seed_sets = list(itertools.combinations(train, batch))

    def expand(known, hop, prob):
        if hop == len(fanouts):
            total[known] += prob
            return
        fanout, options = fanouts[hop], []
        for target in known:
            row = [int(v) for v in indices[indptr[target]:indptr[target + 1]]]
            options.append([row] if fanout < 0 or len(row) <= fanout
                           else list(itertools.combinations(row, fanout)))
        share = prob / math.prod(len(o) for o in options)
        for picks in itertools.product(*options):
            grown = list(known)
            for u in itertools.chain(*picks):
                if u not in grown:
                    grown.append(u)
            expand(grown, hop + 1, share)

    for seeds in seed_sets:
        expand(list(seeds), 0, 1.0 / len(seed_sets))
    return total


def monte_carlo_inclusion(indptr, indices, train, fanouts, batch, trials):
    from samplers import FusedSampler
    sampler = FusedSampler(indptr, indices, fanouts)
    rng = np.random.default_rng(0)
    counts = np.zeros(len(indptr) - 1)
    for trial in range(trials):
        seeds = rng.choice(train, batch, replace=False)
        counts[np.unique(sampler.sample(seeds, seed=trial).n_id)] += 1
    return counts / trials


def directed_graph(n=8, seed=2):
    """A small directed graph (no edge's reverse in general) as a CSR of in-neighbours."""
    rng = np.random.default_rng(seed)
    rows = [sorted(rng.choice(np.delete(np.arange(n), v), rng.integers(1, 4), replace=False))
            for v in range(n)]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    return indptr, np.concatenate(rows).astype(np.int64)


def test_monte_carlo_of_the_sampler_matches_exact_enumeration():
    indptr, indices = directed_graph()
    train, fanouts, batch, trials = np.array([0, 3, 5]), [2, 1], 2, 4000
    exact = exact_inclusion(indptr, indices, train, fanouts, batch)
    measured = monte_carlo_inclusion(indptr, indices, train, fanouts, batch, trials)
    # 5 standard errors of a frequency over `trials` batches (at most 0.0079 each)
    assert np.abs(measured - exact).max() <= 5 * 0.5 / math.sqrt(trials)


@pytest.mark.parametrize("fanout", [1, 2, -1])
def test_one_hop_with_every_training_vertex_a_seed_is_exact_on_a_directed_graph(fanout):
    """No approximation is involved here (each target picks independently), so the
    recurrence must equal enumeration; it reads columns, not rows, of the CSR. (VIP counts
    hops 1..L: compared on vertices that are never seeds.)"""
    indptr, indices = directed_graph()
    train, others = np.array([0, 3, 5]), np.array([1, 2, 4, 6, 7])
    exact = exact_inclusion(indptr, indices, train, [fanout], len(train))
    got = vip_weights(indptr, indices, train, [fanout], len(train))
    np.testing.assert_allclose(got[others], exact[others], atol=1e-12)
    assert 0 < exact[others].sum() < len(others)          # not all 0 or 1: a real check


def test_approximation_error_is_as_documented():
    """partition/vip.py states the recurrence's error against the sampler it models:
    tiny directed graph (exact) and a 120-node graph (Monte-Carlo, SE <= 0.0071)."""
    indptr, indices = directed_graph()
    train, others = np.array([0, 3, 5]), np.array([1, 2, 4, 6, 7])
    exact = exact_inclusion(indptr, indices, train, [2, 1], 2)
    vip = vip_weights(indptr, indices, train, [2, 1], 2)
    assert np.abs(vip - exact)[others].max() <= 0.25
    g = tiny_graph(num_nodes=120, avg_degree=5, seed=4)
    train = g.train_idx[:40]
    others = np.setdiff1d(np.arange(g.num_nodes), train)
    for fanouts, batch, max_error, mean_error in (([3, 2], 16, 0.1, 0.035),
                                                  ([2, 2, 2], 8, 0.22, 0.08)):
        measured = monte_carlo_inclusion(g.indptr, g.indices, train, fanouts, batch, 5000)
        vip = vip_weights(g.indptr, g.indices, train, fanouts, batch)
        error = np.abs(vip - measured)[others]
        assert error.max() <= max_error and error.mean() <= mean_error, (error.max(), error.mean())
        assert spearmanr(vip[others], measured[others]).statistic > 0.95
