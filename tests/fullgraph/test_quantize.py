"""The stochastic quantiser and its wire format: unbiased, bounded variance, exact packing."""
import numpy as np
import pytest
import torch

from gnnsys.fullgraph.quantize import (
    decode_message, dequantize_rows, encode_message, message_size, pack_codes, packed_size,
    quantize_rows, unpack_codes, variance_bound)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("rows", [1, 3, 8, 13])
def test_pack_round_trip_is_exact(bits, rows):
    codes = torch.randint(0, 2 ** bits, (rows, 7), dtype=torch.uint8)
    packed = pack_codes(codes, bits)
    assert packed.numel() == packed_size(rows, 7, bits) == -(-rows // (8 // bits)) * 7
    assert torch.equal(unpack_codes(packed, rows, 7, bits), codes)


def test_packing_layout_puts_consecutive_rows_of_a_column_in_one_byte():
    codes = torch.tensor([[1, 2], [3, 0], [2, 1], [0, 3]], dtype=torch.uint8)
    # byte[d] = sum_i q[i, d] << (2 i) for the 4 rows of one group
    expected = torch.tensor([1 | 3 << 2 | 2 << 4 | 0 << 6, 2 | 0 << 2 | 1 << 4 | 3 << 6],
                            dtype=torch.uint8)
    assert torch.equal(pack_codes(codes, 2), expected)


def _draws(h: torch.Tensor, bits: int, count: int, gen) -> torch.Tensor:
    """`count` independent quantise/dequantise draws of h: [count, N, D].
    Rows are quantised independently, so stacking copies of h is the same as repeating."""
    stacked = h.repeat(count, 1)
    codes, minimum, step, _ = quantize_rows(stacked, bits, gen)
    return dequantize_rows(codes, minimum, step).view(count, *h.shape).double()


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_quantiser_is_unbiased(bits):
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(6, 16, generator=gen) * torch.tensor([0.01, 1, 5, 100, 1e-4, 3])[:, None]
    draws = 4000
    mean = _draws(h, bits, draws, gen).mean(dim=0)
    # standard error of the mean is at most step/2/sqrt(draws); allow 5 of them
    _, _, step, _ = quantize_rows(h, bits, gen)
    tolerance = 5 * (step[:, None].double() / 2) / draws ** 0.5 + 1e-9
    assert torch.all((mean - h.double()).abs() <= tolerance)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_variance_within_bound(bits):
    gen = torch.Generator().manual_seed(2)
    h = torch.randn(4, 64, generator=gen) * 3
    per_row_variance = _draws(h, bits, 3000, gen).var(dim=0).sum(dim=1)   # summed over D
    _, _, _, row_range = quantize_rows(h, bits, gen)
    bound = variance_bound(row_range, h.shape[1], bits).double()
    # bf16 rounding of the step widens the grid by < 1%, sampling noise by a few %
    assert torch.all(per_row_variance <= bound * 1.1)
    # and close to the uniform-fraction average D * delta^2 / 6 the tracer assumes
    assert torch.allclose(per_row_variance, bound * 4 / 6, rtol=0.25)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_constant_and_zero_rows_round_trip_without_nan(bits):
    h = torch.zeros(5, 9)
    h[1] = 3.0
    h[2] = -1e-30
    h[3, 4] = 1.0       # one non-constant row among them
    codes, minimum, step, _ = quantize_rows(h, bits)
    out = dequantize_rows(codes, minimum, step)
    assert not torch.isnan(out).any()
    assert torch.equal(out[[0, 1, 4]], h[[0, 1, 4]])


def test_codes_are_clamped_to_the_code_range():
    # values at the row maximum with noise near 1 must not produce 2^b
    h = torch.tensor([[0.0, 1.0, 1.0, 1.0]]).repeat(64, 1)
    for bits in (2, 4, 8):
        codes, *_ = quantize_rows(h, bits, torch.Generator().manual_seed(3))
        assert int(codes.max()) <= 2 ** bits - 1


def test_message_with_mixed_bit_widths_round_trips():
    gen = torch.Generator().manual_seed(4)
    h = torch.randn(23, 11, generator=gen)
    bits = np.array([8, 2, 4] * 7 + [2, 8], dtype=np.int8)
    payload, row_range = encode_message(h, bits, gen)
    assert payload.dtype == torch.uint8 and payload.numel() == message_size(bits, 11)
    assert torch.allclose(row_range, h.max(1).values - h.min(1).values)
    out = decode_message(payload, bits, 11)
    # every row lands back in place, within one quantisation step of its input
    step = row_range / (2.0 ** torch.from_numpy(bits.astype(np.float32)) - 1)
    assert torch.all((out - h).abs() <= step[:, None] * 1.01 + 1e-6)


def test_message_bytes_are_what_the_format_promises():
    bits = np.full(100, 2)
    # 2 bits x 256 columns per row + 4 bytes of bf16 parameters, against 1024 bytes in fp32
    assert message_size(bits, 256) == 100 * 256 * 2 // 8 + 100 * 4


def test_wrong_payload_size_is_reported():
    with pytest.raises(ValueError, match="expected"):
        decode_message(torch.zeros(3, dtype=torch.uint8), np.array([8, 8]), 4)
    with pytest.raises(ValueError, match="not supported"):
        quantize_rows(torch.zeros(2, 2), 3)
