"""partition.temporal: ownership kinds and the min-max traffic balancer."""
from __future__ import annotations

import numpy as np
import pytest

from partition.temporal import (AccessCounter, balanced_ownership, hash_ownership,
                                make_ownership, range_ownership, traffic_per_worker)


def brute_force_traffic(access, owner):
    cost = np.zeros(access.shape[0])
    for v in range(access.shape[1]):
        for g in range(access.shape[0]):
            if g != owner[v]:
                cost[g] += access[g, v]          # g receives v's rows / sends its writes
                cost[owner[v]] += access[g, v]   # the owner serves them
    return cost


def test_range_and_hash_cover_all_workers():
    r = range_ownership(10, 3)
    assert r.tolist() == sorted(r.tolist()) and set(r.tolist()) == {0, 1, 2}
    assert hash_ownership(7, 3).tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_traffic_matches_brute_force():
    rng = np.random.default_rng(0)
    access = rng.integers(0, 5, size=(3, 40)).astype(float)
    owner = rng.integers(0, 3, size=40)
    np.testing.assert_allclose(traffic_per_worker(access, owner), brute_force_traffic(access, owner))


def test_balanced_lowers_the_maximum_and_respects_capacity():
    rng = np.random.default_rng(1)
    num_workers, n = 4, 400
    # skewed: a few hub vertices in the first range are read by everyone
    access = rng.poisson(0.5, size=(num_workers, n)).astype(float)
    access[:, :20] += rng.poisson(40, size=(num_workers, 20))
    base = range_ownership(n, num_workers)
    owner = balanced_ownership(access, base, capacity_slack=0.1)
    before = traffic_per_worker(access, base)
    after = traffic_per_worker(access, owner)
    assert after.max() < before.max()
    assert np.bincount(owner, minlength=num_workers).max() <= np.ceil(1.1 * n / num_workers)


def test_access_counter_and_dispatch():
    counter = AccessCounter(5, 2)
    counter.add(0, np.array([0, 1]), np.array([1]))
    counter.add(1, np.array([1, 4]), np.array([4]))
    w = counter.weights(read_row_bytes=10, write_row_bytes=3)
    assert w[0].tolist() == [10, 13, 0, 0, 0] and w[1].tolist() == [0, 10, 0, 0, 13]
    assert make_ownership("balanced", 5, 2, w).shape == (5,)
    with pytest.raises(ValueError, match="access counts"):
        make_ownership("balanced", 5, 2)
    with pytest.raises(ValueError, match="unknown"):
        make_ownership("metis", 5, 2)
