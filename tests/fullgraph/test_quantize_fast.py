"""The fused numba quantiser against the torch reference (quantize.py).

Given the kernel's counter-based noise (`counter_uniforms`), the reference must produce
the very same bytes; the noise itself is checked statistically."""
import numpy as np
import pytest
import torch

from gnnsys.fullgraph.quantize import decode_message, encode_message, message_order
from gnnsys.fullgraph.quantize_fast import (
    counter_uniforms, decode_rows, encode_rows, group_counts, wire_size)


def awkward_rows(rows: int, dim: int, seed: int) -> torch.Tensor:
    """Rows of very different scales, plus constant, zero, tiny and max-heavy rows."""
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(rows, dim, generator=gen) * torch.logspace(-4, 3, rows)[:, None]
    h[0] = 0.0
    h[1 % rows] = 3.0
    h[2 % rows] = -1e-30
    h[3 % rows, :dim // 2] = 1.0            # half the row sits exactly at its maximum
    return h


def encode_both(h, bits, seed, rows=None):
    """(fast payload, fast ranges in row order, reference payload, reference ranges)."""
    rows = np.arange(len(h)) if rows is None else rows
    order = message_order(bits)
    payload, wire_range = encode_rows(h, rows[order], group_counts(bits[order]), seed)
    row_range = torch.empty_like(wire_range)
    row_range[torch.from_numpy(order)] = wire_range
    noise = torch.from_numpy(counter_uniforms(seed, len(rows), h.shape[1]))
    ref, ref_range = encode_message(h[torch.from_numpy(rows)], bits, noise=noise)
    return payload, row_range, ref, ref_range


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("rows", [1, 3, 8, 13])
def test_uniform_width_bytes_equal_the_reference(bits, rows):
    h = awkward_rows(rows, 9, seed=rows)
    payload, row_range, ref, ref_range = encode_both(h, np.full(rows, bits, np.int8), seed=17)
    assert torch.equal(payload, ref)            # codes, padding, bf16 parameters
    assert torch.equal(row_range, ref_range)


def test_mixed_widths_from_gathered_rows_equal_the_reference():
    h = awkward_rows(40, 33, seed=5)
    rows = np.random.default_rng(0).permutation(40)[:29]     # a gather, as send_idx is
    bits = np.random.default_rng(1).choice([2, 4, 8], len(rows)).astype(np.int8)
    payload, row_range, ref, ref_range = encode_both(h, bits, seed=2 ** 61 + 3, rows=rows)
    assert payload.numel() == wire_size(group_counts(np.sort(bits)), 33)
    assert torch.equal(payload, ref)
    assert torch.equal(row_range, ref_range)


@pytest.mark.parametrize("accumulate", [False, True])
def test_decode_into_target_rows_matches_the_reference(accumulate):
    h = awkward_rows(23, 11, seed=6)
    bits = np.array([8, 2, 4] * 7 + [2, 8], dtype=np.int8)
    payload, *_ = encode_both(h, bits, seed=9)
    targets = np.random.default_rng(2).permutation(30)[:23]   # e.g. send_idx rows of grad_h
    start = torch.randn(30, 11)
    order = message_order(bits)
    out = decode_rows(payload, group_counts(bits[order]), start.clone(), targets[order],
                      accumulate)
    expected = start.clone()
    decoded = decode_message(payload, bits, 11)
    if accumulate:
        expected.index_add_(0, torch.from_numpy(targets), decoded)
    else:
        expected[torch.from_numpy(targets)] = decoded
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-6)
    untouched = np.setdiff1d(np.arange(30), targets)
    assert torch.equal(out[untouched], start[untouched])
    assert not torch.isnan(out).any()


def test_counter_noise_is_uniform_and_seed_dependent():
    u = counter_uniforms(12345, 1000, 200).astype(np.float64)
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 0.003 and abs(u.var() - 1 / 12) < 0.002
    # neighbouring counters are not correlated
    assert abs(np.corrcoef(u.ravel()[:-1], u.ravel()[1:])[0, 1]) < 0.01
    assert not np.array_equal(counter_uniforms(1, 4, 4), counter_uniforms(2, 4, 4))


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_fast_quantiser_is_unbiased_with_bounded_variance(bits):
    h = torch.randn(4, 32, generator=torch.Generator().manual_seed(3)) * 3
    draws = 3000
    counts = group_counts(np.full(4, bits))
    out = torch.empty(draws, 4, 32)
    for k in range(draws):               # one message per seed, as the exchanger does
        payload, row_range = encode_rows(h, np.arange(4), counts, seed=1000 + k)
        decode_rows(payload, counts, out[k], np.arange(4), accumulate=False)
    step = row_range / (2 ** bits - 1)
    # standard error of the mean is at most step/2/sqrt(draws); allow 5 of them
    assert torch.all((out.double().mean(0) - h.double()).abs()
                     <= 5 * step[:, None].double() / 2 / draws ** 0.5 + 1e-9)
    per_row = out.double().var(0).sum(1)
    bound = 32 * step.double() ** 2 / 4
    assert torch.all(per_row <= bound * 1.1)
    assert torch.allclose(per_row, bound * 4 / 6, rtol=0.25)


def test_sizes_and_bit_widths_are_checked():
    counts = group_counts(np.array([2, 8]))
    with pytest.raises(ValueError, match="expected"):
        decode_rows(torch.zeros(3, dtype=torch.uint8), counts, torch.zeros(2, 4),
                    np.arange(2), False)
    with pytest.raises(ValueError, match="must be in"):
        group_counts(np.array([2, 3]))


def test_codes_are_clamped_where_rounding_reaches_two_to_the_bits():
    # A row [0, 255, 255, ...] at 8 bits has step 1, so (h - m) / step = 255 exactly, and
    # 255 + u rounds to 256.0 in float32 once u > 1 - 2^-17: find a seed where that happens.
    rows, dim = 16, 4096
    h = torch.full((rows, dim), 255.0)
    h[:, 0] = 0.0
    seed = next(s for s in range(100) if (counter_uniforms(s, rows, dim)[:, 1:]
                                          > 1 - 2.0 ** -17).any())
    counts = group_counts(np.full(rows, 8))
    payload, _ = encode_rows(h, np.arange(rows), counts, seed)
    out = decode_rows(payload, counts, torch.zeros(rows, dim), np.arange(rows), False)
    assert torch.equal(out, h)        # an unclamped 256 would wrap to code 0
