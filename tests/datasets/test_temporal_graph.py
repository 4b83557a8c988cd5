"""TemporalGraph: validation, chronological split masks, defaults."""
import numpy as np
import pytest

from gnnsys.temporal_graph import TemporalGraph


def make(t, **kwargs):
    n = len(t)
    return TemporalGraph(src=np.arange(n) % 3, dst=(np.arange(n) + 1) % 3, t=np.asarray(t),
                         num_nodes=3, **kwargs)


def test_split_masks_follow_the_thresholds():
    g = make([1, 2, 3, 4, 5, 6], val_time=3, test_time=5)
    train, val, test = g.split_masks()
    assert train.tolist() == [True, True, True, False, False, False]
    assert val.tolist() == [False, False, False, True, True, False]
    assert test.tolist() == [False, False, False, False, False, True]


def test_default_thresholds_are_the_70_85_quantiles():
    t = np.arange(100)
    g = make(t)
    assert (g.val_time, g.test_time) == tuple(np.quantile(t, [0.70, 0.85]))
    train, val, test = g.split_masks()
    assert (train.sum(), val.sum(), test.sum()) == (70, 15, 15)
    assert g.metric == "ap" and "events=100" in repr(g)


def test_unsorted_times_are_rejected():
    with pytest.raises(ValueError, match="sorted ascending"):
        make([3, 1, 2])


def test_mismatched_lengths_are_rejected():
    with pytest.raises(ValueError, match="edge_feat has 2 rows for 3 events"):
        make([1, 2, 3], edge_feat=np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="num_nodes"):
        TemporalGraph(src=np.array([0]), dst=np.array([5]), t=np.array([1]), num_nodes=3)
    with pytest.raises(ValueError, match="num_src_nodes"):
        make([1, 2], bipartite=True)
