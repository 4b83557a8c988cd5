"""temporal.pair_history: how often and when last each scored pair met and how many events
each end had since, against a plain reference over the event list; the batch carries it for (src, dst) and every (src,
negative) in root order; K workers still reproduce one process exactly."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnsys.temporal.batch import BatchPlanner, to_device
from gnnsys.temporal.data import prepare_events
from gnnsys.temporal.placement import vertex_ownership
from gnnsys.testing import tiny_temporal_graph
from gnnsys.training import fit, run_worker
from samplers.temporal import build_pair_index, build_temporal_csr, events_between, pair_history


def reference_pair_history(src, dst, t, u, v, time):
    """(count, last time or -1) of the events between u and v, either way, before `time`."""
    hits = [t[e] for e in range(len(src)) if (src[e], dst[e]) in ((u, v), (v, u)) and t[e] < time]
    return len(hits), (max(hits) if hits else -1.0)


def reference_since(src, dst, t, u, after, before):
    """Events of u strictly between `after` and `before` (a self-loop once per end)."""
    between = (t > after) & (t < before)
    return int((between & (src == u)).sum() + (between & (dst == u)).sum())


@pytest.fixture
def repeated_pairs():
    rng = np.random.default_rng(5)
    n, e = 12, 600                      # few nodes: most pairs repeat many times
    src = rng.integers(0, n, e)
    dst = rng.integers(0, n, e)         # self-loops included: each must count once
    t = np.sort(rng.integers(0, 200, e)).astype(np.float64)      # many ties
    return src, dst, t, n


def test_pair_history_matches_reference(repeated_pairs):
    src, dst, t, n = repeated_pairs
    assert (src == dst).any()
    index = build_pair_index(src, dst, t, n)
    rng = np.random.default_rng(1)
    u, v = rng.integers(0, n, 300), rng.integers(0, n, 300)
    u[:20] = v[:20]                     # self-pairs
    times = rng.integers(0, 210, 300).astype(np.float64)
    count, last = pair_history(index, u, v, times)
    for q in range(len(u)):
        assert (count[q], last[q]) == reference_pair_history(src, dst, t, u[q], v[q], times[q])
    assert count.max() > 3 and (count == 0).any()


def test_events_between_matches_reference(repeated_pairs):
    src, dst, t, n = repeated_pairs
    csr = build_temporal_csr(src, dst, t, n)
    rng = np.random.default_rng(2)
    nodes = rng.integers(0, n, 300)
    after = rng.integers(-1, 210, 300).astype(np.float64)
    before = after + rng.integers(0, 60, 300)
    got = events_between(csr, nodes, after, before)
    for q in range(len(nodes)):
        assert got[q] == reference_since(src, dst, t, nodes[q], after[q], before[q])
    assert got.max() > 10 and (got == 0).any()


def test_pair_history_bad_inputs_name_the_problem(repeated_pairs):
    src, dst, t, n = repeated_pairs
    index = build_pair_index(src, dst, t, n)
    with pytest.raises(ValueError, match="equal length"):
        pair_history(index, np.array([0, 1]), np.array([1]), np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="pair endpoints"):
        pair_history(index, np.array([0]), np.array([n]), np.array([1.0]))


def test_batches_carry_each_scored_pairs_history_in_root_order():
    events = prepare_events(tiny_temporal_graph(num_nodes=40, seed=2))
    planner = BatchPlanner(events, 50, 0, 1, seed=0, num_neighbors=5, strategy="recent",
                           uses_neighbors=True, pair_history=True)
    lo, hi = planner.batches("val")[1]
    batch = planner.batch("val", 0, 1, lo, hi, num_negatives=3)
    b = len(batch.src)
    pairs = [(batch.src[i], batch.dst[i], batch.time[i]) for i in range(b)] + \
        [(batch.src[i], batch.negatives[i, j], batch.time[i]) for i in range(b) for j in range(3)]
    ev = events
    for p, (u, v, time) in enumerate(pairs):
        count, last = reference_pair_history(ev.src, ev.dst, ev.t, u, v, time)
        assert batch.pair_count[p] == count
        assert batch.pair_gap[p] == (time - last if count else 0.0)
        assert tuple(batch.pair_since[p]) == ((0, 0) if count == 0 else (
            reference_since(ev.src, ev.dst, ev.t, u, last, time),
            reference_since(ev.src, ev.dst, ev.t, v, last, time)))
    assert batch.pair_count[:b].sum() > 0          # positives that repeat a pair
    moved = to_device(batch, np.arange(batch.num_roots + batch.neighbors.mask.sum()), "cpu")
    np.testing.assert_array_equal(moved.pairs[0].numpy(), batch.pair_count.astype(np.float32))
    np.testing.assert_allclose(moved.pairs[1].numpy(), batch.pair_gap, rtol=1e-6)
    for end in (0, 1):
        np.testing.assert_array_equal(moved.pairs[2 + end].numpy(), batch.pair_since[:, end])
    assert batch.pair_since[:b].max() > 0


def test_workers_reproduce_single_process_with_pair_history(tiny_config, threaded_workers,
                                                            tmp_path):
    graph = tiny_temporal_graph()
    sections = dict(temporal={"pair_history": True})
    single = fit(tiny_config(run={"dir": str(tmp_path / "single")}, **sections), graph)
    cfg = tiny_config(run={"dir": str(tmp_path / "two")}, cluster={"workers": 2}, **sections)
    events = prepare_events(graph)
    out = threaded_workers(run_worker, 2, cfg, "", events, vertex_ownership(cfg, events))[0]
    assert out["test_ap"] == pytest.approx(single["test_ap"], abs=1e-4)
    one = torch.load(tmp_path / "single" / "checkpoint.pt", weights_only=True)["current"]
    two = torch.load(tmp_path / "two" / "checkpoint.pt", weights_only=True)["current"]
    assert any("pair_encoder" in name for name in one["model"])
    for name, value in one["model"].items():
        torch.testing.assert_close(two["model"][name], value, rtol=1e-4, atol=1e-5)
