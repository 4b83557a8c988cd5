"""Cache selection: size, no own vertices, ranking; access counts and their split."""
import numpy as np

from gnnsys.minibatch.store.access import cache_effect, epoch_access_counts
from gnnsys.minibatch.store.policy import cache_size, select_cache, top_remote
from gnnsys.testing import tiny_graph
from partition.format import PartitionBook
from samplers import FusedSampler


def test_select_cache_size_and_no_own_vertices():
    g = tiny_graph(num_nodes=400, seed=1)
    book = PartitionBook(np.array([0, 200, 400]))
    train = g.train_idx[g.train_idx < 200]
    for policy in ("degree", "vip"):
        ids = select_cache(policy, g.indptr, g.indices, book, 0, train, [5, 5], 32, 0.5)
        assert len(ids) == cache_size(0.5, book) == 100
        assert (ids >= 200).all() and len(np.unique(ids)) == len(ids)
    assert select_cache("none", g.indptr, g.indices, book, 0, train, [5, 5], 32, 0.5).size == 0


def test_top_remote_orders_and_caps_at_positive():
    w = np.array([0.0, 0.5, 0.9, 0.0, 0.5])
    assert top_remote(w, 10).tolist() == [2, 1, 4]
    assert top_remote(w, 2).tolist() == [2, 1]


def test_cache_effect_splits_every_read():
    g = tiny_graph(num_nodes=300, seed=2)
    book = PartitionBook(np.array([0, 150, 300]))
    sampler = FusedSampler(g.indptr, g.indices, [3, 3])
    train = g.train_idx[g.train_idx < 150]
    counts = epoch_access_counts(sampler, train, 16, seed=0)
    cached = np.arange(150, 200)
    effect = cache_effect(counts, book, 0, cached)
    assert effect.local_rows + effect.cache_hits + effect.remote_rows == counts.sum()
    assert effect.cache_hits == counts[150:200].sum()
    assert effect.remote_rows == counts[200:].sum() and effect.cache_hits > 0
    assert effect.hit_rate == effect.cache_hits / (effect.cache_hits + effect.remote_rows)
