"""The bit-width MILP and the variance tracer."""
import numpy as np
import pytest
import torch

from gnnsys.fullgraph.assign import ChannelStats, LinkCost, VarianceTracer, solve_assignment
from gnnsys.fullgraph.exchange import BitAssignment


def channels(rows=300, dim=64, seed=0):
    rng = np.random.default_rng(seed)
    return {(0, 1): ChannelStats(rng.exponential(1.0, rows), dim),
            (1, 0): ChannelStats(rng.exponential(1.0, rows // 2), dim)}


LINKS = {(0, 1): LinkCost(10.0, 0.5), (1, 0): LinkCost(10.0, 0.5)}


def test_lambda_extremes_pick_the_extreme_bit_widths():
    only_variance, _ = solve_assignment(channels(), LINKS, 2, lam=1.0, group_size=50)
    only_time, _ = solve_assignment(channels(), LINKS, 2, lam=0.0, group_size=50)
    assert all(np.all(b == 8) for b in only_variance.values())
    assert all(np.all(b == 2) for b in only_time.values())


def test_balanced_solution_gives_more_bits_to_higher_variance_rows():
    stats = channels()
    bits, info = solve_assignment(stats, LINKS, 2, lam=0.5, group_size=25)
    assert "Optimal" in info["status"] and info["groups"] == 12 + 6
    assert set(np.unique(np.concatenate(list(bits.values())))) <= {2, 4, 8}
    mean_bits = np.mean(np.concatenate(list(bits.values())))
    assert 2 < mean_bits < 8
    for channel, b in bits.items():
        w = stats[channel].weights
        # bits never decrease as the variance weight increases (groups are weight-sorted)
        order = np.argsort(-w, kind="stable")
        assert np.all(np.diff(b[order].astype(int)) <= 0)


def test_the_slower_link_gets_fewer_bits():
    stats = {(0, 1): ChannelStats(np.ones(200), 64), (1, 0): ChannelStats(np.ones(200), 64)}
    links = {(0, 1): LinkCost(100.0, 0.0), (1, 0): LinkCost(1.0, 0.0)}
    # the two links share a round, whose time is the slower link's: bits on the fast link are
    # free until it becomes the bottleneck
    bits, _ = solve_assignment(stats, links, 2, lam=0.5, group_size=20)
    assert bits[(0, 1)].mean() < bits[(1, 0)].mean()


def test_empty_channels_keep_the_largest_width():
    bits, info = solve_assignment({(0, 1): ChannelStats(np.zeros(0), 8)}, LINKS, 2)
    assert info["status"] == "no messages" and len(bits[(0, 1)]) == 0


def test_tracer_accumulates_range_squared_times_dim_over_six():
    tracer = VarianceTracer()
    tracer("forward0", 1, torch.tensor([1.0, 2.0]), 6)
    tracer("forward0", 1, torch.tensor([1.0, 0.0]), 6)
    assert torch.allclose(tracer.tau[("forward0", 1)], torch.tensor([2.0, 4.0], dtype=torch.float64))


def test_assignment_state_round_trips():
    a = BitAssignment(8, {"forward0": {(0, 1): np.array([2, 4, 8], dtype=np.int8)}})
    b = BitAssignment.from_state_dict(a.state_dict())
    assert np.array_equal(b.bits("forward0", 0, 1, 3), [2, 4, 8])
    assert np.array_equal(b.bits("forward1", 0, 1, 2), [8, 8])
    assert b.histogram() == {"forward0": {2: 1, 4: 1, 8: 1}}


def test_profile_sizes_span_enough_to_separate_alpha_from_beta():
    from gnnsys.fullgraph.assign import MAX_PROFILE_BYTES, profile_range
    assert profile_range(100, 10_000) == (100, 10_000)
    # messages bigger than the cap: still a wide range below it (products-sized boundaries)
    low, high = profile_range(30 * 2 ** 20, 120 * 2 ** 20)
    assert high == MAX_PROFILE_BYTES and high >= 8 * low


def test_link_fit_recovers_the_line_and_survives_noise():
    from gnnsys.fullgraph.assign import fit_link_cost
    mb = np.linspace(0.1, 4, 20)
    cost = fit_link_cost(mb, 3.0 * mb + 0.5)
    assert abs(cost.alpha_ms_per_mb - 3.0) < 1e-6 and abs(cost.beta_ms - 0.5) < 1e-6
    flat = fit_link_cost(np.full(5, 2.0), np.array([5.0, 4.0, 6.0, 5.0, 5.0]))
    assert flat.alpha_ms_per_mb > 0 and flat.beta_ms == 4.0
    falling = fit_link_cost(mb, 10 - mb)
    assert falling.alpha_ms_per_mb > 0 and falling.beta_ms == pytest.approx(6.0)
