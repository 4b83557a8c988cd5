"""Stochastic per-row integer quantisation of messages and its wire format (pure torch).

Each message row h (one node's embedding or gradient) travels as b-bit integers
(b in {2, 4, 8}) plus two bfloat16 parameters, its minimum m and its step
delta = (M - m) / (2^b - 1):

    q = clamp(floor((h - m) / delta + u), 0, 2^b - 1),   u ~ U[0, 1)
    h_hat = q * delta + m                                  E[h_hat] = h

Unbiasedness needs the receiver's (m, delta) to be exactly the quantiser's, so the
quantiser rounds them to bfloat16 first, m downwards and delta upwards, so that the
bf16 grid still covers [m, M] (../shared/ALGORITHMS.md 4.8: bf16 rounding bias, clamping,
constant rows, padding). Packing puts 8/b consecutive rows of one column into a byte.

Nothing here knows about graphs or communication; all functions are vectorised. This
is the reference implementation; quantize_fast.py (CPU) and quantize_gpu.py (CUDA) have
the kernels the exchange uses, tested against it.
"""
from __future__ import annotations

import numpy as np
import torch

from ..mode_choices import MODE_CHOICES

SUPPORTED_BITS = MODE_CHOICES["fullgraph.quantization.uniform_bits"]
PARAM_BYTES_PER_ROW = 4          # bf16 minimum + bf16 step


def _check_bits(bits: int) -> None:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bit-width {bits} is not supported; use one of {SUPPORTED_BITS}")


def _round_bf16(x: torch.Tensor, direction: float) -> torch.Tensor:
    """Round fp32 -> bf16 towards `direction` (-inf or +inf), returned as fp32."""
    rounded = x.to(torch.bfloat16)
    wrong_side = (rounded.float() > x) if direction < 0 else (rounded.float() < x)
    stepped = torch.nextafter(rounded, torch.full_like(rounded, direction))
    return torch.where(wrong_side, stepped, rounded).float()


def quantize_rows(h: torch.Tensor, bits: int, generator: torch.Generator | None = None,
                  noise: torch.Tensor | None = None):
    """Quantise each row of h [N, D] (float) to `bits`-bit codes; `noise` [N, D] in [0, 1)
    replaces the U[0, 1) draws (to reproduce another implementation's draws exactly).

    Returns (codes uint8 [N, D], minimum fp32 [N], step fp32 [N], row_range fp32 [N]);
    minimum and step are exactly representable in bf16 (what goes on the wire) and
    row_range = max - min of the raw row, which the variance tracer uses."""
    _check_bits(bits)
    h = h.float()
    top = (1 << bits) - 1
    if h.shape[0] == 0 or h.shape[1] == 0:
        empty = h.new_zeros(h.shape[0])
        return torch.zeros(h.shape, dtype=torch.uint8, device=h.device), empty, empty.clone(), \
            empty.clone()
    row_min, row_max = h.aminmax(dim=1)
    minimum = _round_bf16(row_min, -float("inf"))
    step = _round_bf16((row_max - minimum) / top, float("inf"))
    # A constant row (max == min) would divide by zero: any positive step codes it as 0.
    step = torch.where(step > 0, step, torch.ones_like(step))
    scaled = (h - minimum[:, None]) / step[:, None]
    if noise is None:
        noise = torch.rand(h.shape, generator=generator, dtype=h.dtype, device=h.device)
    # Clamp: fp rounding can put `scaled` a hair above `top`, and a code of 2^b would
    # spill into the neighbouring row's bits after packing.
    codes = torch.floor(scaled + noise).clamp_(0, top).to(torch.uint8)
    return codes, minimum, step, row_max - row_min


def dequantize_rows(codes: torch.Tensor, minimum: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """Inverse map h_hat = codes * step + minimum, fp32 [N, D]."""
    return torch.addcmul(minimum[:, None], codes.float(), step[:, None])


def rows_per_byte(bits: int) -> int:
    _check_bits(bits)
    return 8 // bits


def packed_size(num_rows: int, dim: int, bits: int) -> int:
    """Bytes of `num_rows` rows packed at `bits` (rows padded to a multiple of 8/bits)."""
    per = rows_per_byte(bits)
    return -(-num_rows // per) * dim


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack uint8 codes [N, D] (< 2^bits) into bytes [ceil(N / (8/bits)) * D], flat.

    byte[k*D + d] holds column d of rows k*(8/bits) .. k*(8/bits) + 8/bits - 1, row i of
    the group in bits [i*bits, (i+1)*bits). Padding rows are zeros."""
    per = rows_per_byte(bits)
    n, d = codes.shape
    if per == 1:
        return codes.reshape(-1).clone()
    pad = (-n) % per
    if pad:
        codes = torch.cat([codes, codes.new_zeros(pad, d)])
    grouped = codes.view(-1, per, d).to(torch.int32)
    shifts = (torch.arange(per, dtype=torch.int32, device=codes.device) * bits).view(1, per, 1)
    # Fields do not overlap (codes < 2^bits), so the sum equals the bitwise OR.
    return (grouped << shifts).sum(dim=1).to(torch.uint8).reshape(-1)


def unpack_codes(packed: torch.Tensor, num_rows: int, dim: int, bits: int) -> torch.Tensor:
    """Inverse of pack_codes: uint8 codes [num_rows, dim] (padding dropped)."""
    per = rows_per_byte(bits)
    expected = packed_size(num_rows, dim, bits)
    if packed.numel() != expected:
        raise ValueError(f"packed {bits}-bit buffer has {packed.numel()} bytes, expected "
                         f"{expected} for {num_rows} rows of width {dim}")
    if per == 1:
        return packed.view(num_rows, dim)
    grouped = packed.view(-1, 1, dim).to(torch.int32)
    shifts = (torch.arange(per, dtype=torch.int32, device=packed.device) * bits).view(1, per, 1)
    codes = (grouped >> shifts) & ((1 << bits) - 1)
    return codes.to(torch.uint8).reshape(-1, dim)[:num_rows]


# ----------------------------------------------------------------------------- messages
def message_order(bits_per_row: np.ndarray) -> np.ndarray:
    """Row order on the wire: grouped by bit-width ascending, stable inside a group."""
    return np.argsort(bits_per_row, kind="stable")


def message_size(bits_per_row: np.ndarray, dim: int) -> int:
    """Bytes of one encoded message (packed groups + bf16 parameters)."""
    counts = np.bincount(np.asarray(bits_per_row, dtype=np.int64), minlength=9)
    return (sum(packed_size(int(counts[b]), dim, b) for b in SUPPORTED_BITS)
            + PARAM_BYTES_PER_ROW * len(bits_per_row))


def encode_message(h: torch.Tensor, bits_per_row: np.ndarray,
                   generator: torch.Generator | None = None, noise: torch.Tensor | None = None):
    """Quantise and pack the rows of h [N, D], row i at bits_per_row[i]; `noise`, if given,
    is the U[0, 1) draws [N, D] in wire order (see quantize_rows).

    Returns (payload uint8 [message_size], row_range fp32 [N] in the original row order).
    Layout: packed 2-bit rows | packed 4-bit rows | packed 8-bit rows | bf16 minimum [n] |
    bf16 step [n], with the parameters in wire order (see message_order)."""
    bits_per_row = np.asarray(bits_per_row)
    if len(bits_per_row) != h.shape[0]:
        raise ValueError(f"{len(bits_per_row)} bit-widths for a message of {h.shape[0]} rows")
    order = message_order(bits_per_row)
    sorted_bits = bits_per_row[order]
    wire_order = torch.from_numpy(order).to(h.device)
    h = h[wire_order] if not _is_identity(order) else h
    chunks, minima, steps, ranges = [], [], [], []
    start = 0
    for bits in SUPPORTED_BITS:
        count = int(np.count_nonzero(sorted_bits == bits))
        if count == 0:
            continue
        codes, minimum, step, row_range = quantize_rows(
            h[start:start + count], bits, generator,
            None if noise is None else noise[start:start + count])
        chunks.append(pack_codes(codes, bits))
        minima.append(minimum)
        steps.append(step)
        ranges.append(row_range)
        start += count
    if start != h.shape[0]:
        raise ValueError(f"bit-widths must be in {SUPPORTED_BITS}; got "
                         f"{sorted(set(bits_per_row.tolist()) - set(SUPPORTED_BITS))}")
    if not chunks:
        return torch.zeros(0, dtype=torch.uint8, device=h.device), h.new_zeros(0)
    params = torch.stack([torch.cat(minima), torch.cat(steps)]).to(torch.bfloat16)
    payload = torch.cat(chunks + [params.reshape(-1).view(torch.uint8)])
    row_range = h.new_empty(h.shape[0])
    row_range[wire_order] = torch.cat(ranges)
    return payload, row_range


def decode_message(payload: torch.Tensor, bits_per_row: np.ndarray, dim: int) -> torch.Tensor:
    """Inverse of encode_message: fp32 [N, dim] in the original row order."""
    bits_per_row = np.asarray(bits_per_row)
    n = len(bits_per_row)
    if payload.numel() != message_size(bits_per_row, dim):
        raise ValueError(f"message has {payload.numel()} bytes, expected "
                         f"{message_size(bits_per_row, dim)} for {n} rows of width {dim}")
    if n == 0:
        return torch.zeros(0, dim, device=payload.device)
    order = message_order(bits_per_row)
    sorted_bits = bits_per_row[order]
    # clone: the parameter block may start at an odd offset, which a bf16 view rejects
    params = payload[payload.numel() - PARAM_BYTES_PER_ROW * n:].clone().view(torch.bfloat16)
    minimum, step = params.view(2, n).float()
    out_sorted = torch.empty(n, dim, device=payload.device)
    offset, start = 0, 0
    for bits in SUPPORTED_BITS:
        count = int(np.count_nonzero(sorted_bits == bits))
        if count == 0:
            continue
        size = packed_size(count, dim, bits)
        codes = unpack_codes(payload[offset:offset + size], count, dim, bits)
        out_sorted[start:start + count] = dequantize_rows(
            codes, minimum[start:start + count], step[start:start + count])
        offset += size
        start += count
    if _is_identity(order):
        return out_sorted
    out = torch.empty_like(out_sorted)
    out[torch.from_numpy(order).to(out.device)] = out_sorted
    return out


def _is_identity(order: np.ndarray) -> bool:
    return bool(np.all(order[1:] > order[:-1])) if len(order) > 1 else True


def variance_bound(row_range: torch.Tensor, dim: int, bits: int) -> torch.Tensor:
    """Worst-case Var(h_hat) summed over a row: dim * delta^2 / 4, delta = range/(2^b-1)."""
    return dim * (row_range / ((1 << bits) - 1)) ** 2 / 4
