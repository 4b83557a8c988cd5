"""The seeded edge split for link prediction: no held-out edge in the training graph (either
direction), the parts a partition of the undirected edges, negatives that are no edge."""
import numpy as np
import pytest

from gnnsys.datasets.edges import symmetric_csr
from gnnsys.datasets.splits import random_edge_split
from gnnsys.errors import DatasetError


def random_graph(num_nodes=300, edges=2000, seed=0):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, num_nodes, (2, edges))
    return symmetric_csr(src, dst, num_nodes)


def pair_set(indptr, indices):
    rows = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    return set(zip(rows.tolist(), np.asarray(indices).tolist()))


def columns(pairs):
    return set(zip(pairs[0].tolist(), pairs[1].tolist()))


def test_no_held_out_edge_reaches_the_training_graph():
    indptr, indices = random_graph()
    split = random_edge_split(indptr, indices, 300, 0.1, 0.2, seed=3)
    train = pair_set(split.indptr, split.indices)
    assert train == {(v, u) for u, v in train}                        # symmetric
    assert all(np.all(np.diff(split.indices[a:b]) > 0)                # rows sorted, simple
               for a, b in zip(split.indptr[:-1], split.indptr[1:]))
    for held in (split.val_pos, split.test_pos):
        for u, v in columns(held):
            assert u < v and (u, v) not in train and (v, u) not in train
    whole = {(u, v) for u, v in pair_set(indptr, indices) if u < v}
    train_upper = {(u, v) for u, v in train if u < v}
    val, test = columns(split.val_pos), columns(split.test_pos)
    assert train_upper | val | test == whole                           # nothing lost
    assert len(train_upper) + len(val) + len(test) == len(whole)       # nothing twice
    assert (len(val), len(test)) == (round(0.1 * len(whole)), round(0.2 * len(whole)))


def test_negatives_are_distinct_non_edges_one_per_positive():
    indptr, indices = random_graph()
    split = random_edge_split(indptr, indices, 300, 0.1, 0.2, seed=3)
    edges = pair_set(indptr, indices)
    val_neg, test_neg = columns(split.val_neg), columns(split.test_neg)
    assert split.val_neg.shape == split.val_pos.shape
    assert split.test_neg.shape == split.test_pos.shape
    assert len(val_neg) == split.val_neg.shape[1] and not val_neg & test_neg
    for u, v in val_neg | test_neg:
        assert u < v and (u, v) not in edges


def test_seeded():
    indptr, indices = random_graph()
    a, b = (random_edge_split(indptr, indices, 300, 0.1, 0.1, seed=1) for _ in range(2))
    c = random_edge_split(indptr, indices, 300, 0.1, 0.1, seed=2)
    for field in ("indices", "val_pos", "test_pos", "val_neg", "test_neg"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.test_pos, c.test_pos)


def test_a_directed_pair_and_its_reverse_go_together():
    # 0->1 and 1->0 listed separately, plus a self loop: one undirected edge {0, 1} + {1, 2}
    indptr, indices = np.array([0, 2, 4, 4]), np.array([0, 1, 0, 2])
    split = random_edge_split(indptr, indices, 3, 0.0, 0.5, seed=0)
    assert split.test_pos.shape == (2, 1) and split.indices.size == 2


@pytest.mark.parametrize("val, test, message", [
    (0.5, 0.5, "leaving no training edge"),
    (1.0, 0.0, "the val edge fraction is 1.0"),
    (0.0, -0.1, "the test edge fraction is -0.1"),
])
def test_bad_fractions_are_one_line(val, test, message):
    indptr, indices = random_graph()
    with pytest.raises(DatasetError, match=message):
        random_edge_split(indptr, indices, 300, val, test)


def test_a_graph_with_no_edge_or_no_room_for_negatives_is_refused():
    with pytest.raises(DatasetError, match="has no edge"):
        random_edge_split(np.zeros(4, np.int64), np.zeros(0, np.int64), 3, 0.1, 0.1)
    full = symmetric_csr(np.array([0, 0, 1]), np.array([1, 2, 2]), 3)   # a triangle
    with pytest.raises(DatasetError, match="unconnected pairs"):
        random_edge_split(*full, 3, 0.3, 0.3)
