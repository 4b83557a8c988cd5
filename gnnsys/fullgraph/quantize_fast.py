"""Fused numba kernels for the message wire format of quantize.py (CPU tensors).

`encode_rows` quantises and packs rows h[rows[w]] (w = wire position) in one pass per
row: min/max, bf16-rounded minimum and step, stochastic rounding, clamping, OR into the
packed byte. `decode_rows` unpacks, dequantises and writes (or adds) each row straight
into its target row of an output tensor (halo slots, or gradient rows), so no block
is gathered, permuted or concatenated on the way.

The noise is counter-based: u(w, j) = splitmix64(seed + (w * D + j) * golden) >> 40,
scaled to [0, 1) with 24 bits, and `seed` is one draw from the caller's torch
generator, so a run is reproducible for a given seed. `counter_uniforms` is the same
noise in plain numpy: passed as `noise` to the torch reference `encode_message`, it
makes the reference produce the same bytes as `encode_rows` (see the tests). Rows are
wire-ordered: grouped by bit-width ascending (2, 4, 8), which the caller arranges.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit

from common.kernel_cache import depends_on_samplers
from common.rng import GOLDEN, mix64

from . import quantize
from .quantize import PARAM_BYTES_PER_ROW, SUPPORTED_BITS, packed_size

MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
INV_2_24 = np.float32(1.0 / (1 << 24))
# The kernels inline common/rng.py's mix64 and quantize.py's constants.
depends_on_samplers(__file__, quantize.__file__)


# ----------------------------------------------------------------------------- noise
def counter_uniforms(seed: int, rows: int, dim: int) -> np.ndarray:
    """The kernel's noise for `rows` x `dim` wire positions, float32 in [0, 1) (numpy)."""
    counter = np.arange(rows * dim, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + counter * GOLDEN
        z = (z ^ (z >> np.uint64(30))) * MIX1
        z = (z ^ (z >> np.uint64(27))) * MIX2
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(40)).astype(np.float32) * INV_2_24).reshape(rows, dim)


@njit(cache=True, nogil=True, inline="always")
def _uniform(seed, counter):
    z = mix64(seed + counter * GOLDEN)          # the samplers' splitmix64 finaliser
    return np.float32(z >> np.uint64(40)) * INV_2_24


# ----------------------------------------------------------------------------- bf16
@njit(cache=True, nogil=True, inline="always")
def _bf16_directed(x, up, f32, u32):
    """x rounded to a bf16 value towards +inf (up) or -inf, as float32. f32/u32 are one
    scratch word seen as float32 and uint32 (numba has no scalar bit-cast)."""
    f32[0] = x
    bits = u32[0]
    if bits & np.uint32(0xFFFF) == 0:
        return x
    truncated = bits & np.uint32(0xFFFF0000)          # rounds the magnitude down
    negative = (bits >> np.uint32(31)) != 0
    # away from zero when that is the requested direction
    u32[0] = truncated + np.uint32(0x10000) if up != negative else truncated
    return f32[0]


# ----------------------------------------------------------------------------- kernels
@njit(cache=True, nogil=True)
def _encode(h, rows, counts, seed, payload, row_range):
    n, dim = rows.shape[0], h.shape[1]
    scratch = np.empty(1, np.float32)
    f32, u32 = scratch, scratch.view(np.uint32)
    params = payload[payload.shape[0] - PARAM_BYTES_PER_ROW * n:]
    offset, start = 0, 0
    for g in range(3):
        bits = 2 << g                                   # 2, 4, 8
        per, top = 8 // bits, np.float32((1 << bits) - 1)
        count = counts[g]
        size = ((count + per - 1) // per) * dim
        payload[offset:offset + size] = 0
        for i in range(count):
            w = start + i
            src = h[rows[w]]
            lo, hi = src[0], src[0]
            for j in range(1, dim):
                v = src[j]
                lo = min(lo, v)
                hi = max(hi, v)
            minimum = _bf16_directed(lo, False, f32, u32)
            step = _bf16_directed(np.float32(hi - minimum) / top, True, f32, u32)
            if not step > 0:                            # constant row: any step codes it as 0
                step = np.float32(1.0)
            row_range[w] = hi - lo
            f32[0] = minimum
            params[2 * w] = np.uint8((u32[0] >> np.uint32(16)) & np.uint32(0xFF))
            params[2 * w + 1] = np.uint8(u32[0] >> np.uint32(24))
            f32[0] = step
            params[2 * (n + w)] = np.uint8((u32[0] >> np.uint32(16)) & np.uint32(0xFF))
            params[2 * (n + w) + 1] = np.uint8(u32[0] >> np.uint32(24))
            base = offset + (i // per) * dim
            dst = payload[base:base + dim]
            # int32 throughout: an int64 shift or OR keeps LLVM from vectorising (3x slower)
            shift = np.int32((i % per) * bits)
            counter = np.uint64(w) * np.uint64(dim)
            for j in range(dim):
                scaled = (src[j] - minimum) / step
                q = np.floor(scaled + _uniform(seed, counter + np.uint64(j)))
                # clamp: rounding can reach 2^b, which would spill into the next row's bits
                q = min(max(q, np.float32(0.0)), top)
                dst[j] = np.uint8(np.int32(dst[j]) | (np.int32(q) << shift))
        offset += size
        start += count


@njit(cache=True, nogil=True)
def _decode(payload, counts, out, targets, accumulate):
    n, dim = targets.shape[0], out.shape[1]
    scratch = np.empty(1, np.float32)
    f32, u32 = scratch, scratch.view(np.uint32)
    params = payload[payload.shape[0] - PARAM_BYTES_PER_ROW * n:]
    offset, start = 0, 0
    for g in range(3):
        bits = 2 << g
        per, mask = 8 // bits, np.int32((1 << bits) - 1)
        count = counts[g]
        for i in range(count):
            w = start + i
            u32[0] = (np.uint32(params[2 * w]) | (np.uint32(params[2 * w + 1]) << 8)) << 16
            minimum = f32[0]
            u32[0] = (np.uint32(params[2 * (n + w)])
                      | (np.uint32(params[2 * (n + w) + 1]) << 8)) << 16
            step = f32[0]
            base = offset + (i // per) * dim
            src = payload[base:base + dim]
            shift = np.int32((i % per) * bits)
            dst = out[targets[w]]
            if accumulate:
                for j in range(dim):
                    dst[j] += np.float32((np.int32(src[j]) >> shift) & mask) * step + minimum
            else:
                for j in range(dim):
                    dst[j] = np.float32((np.int32(src[j]) >> shift) & mask) * step + minimum
        offset += ((count + per - 1) // per) * dim
        start += count


# ----------------------------------------------------------------------------- wrappers
def group_counts(sorted_bits: np.ndarray) -> np.ndarray:
    """Rows per bit-width (2, 4, 8) of a wire-ordered bit vector."""
    counts = np.array([np.count_nonzero(sorted_bits == b) for b in SUPPORTED_BITS], np.int64)
    if counts.sum() != len(sorted_bits):
        raise ValueError(f"bit-widths must be in {SUPPORTED_BITS}; got "
                         f"{sorted(set(np.asarray(sorted_bits).tolist()) - set(SUPPORTED_BITS))}")
    return counts


def wire_size(counts: np.ndarray, dim: int) -> int:
    """Bytes of a message with `counts` rows at 2, 4, 8 bits (= quantize.message_size)."""
    return (sum(packed_size(int(c), dim, b) for c, b in zip(counts, SUPPORTED_BITS))
            + PARAM_BYTES_PER_ROW * int(counts.sum()))


def encode_rows(h: torch.Tensor, rows: np.ndarray, counts: np.ndarray, seed: int):
    """Quantise and pack h[rows[w]] for every wire position w (CPU float32 h [M, D]).

    Returns (payload uint8 tensor, row range max - min float32 [n] in wire order)."""
    h = h.detach()
    if h.dtype != torch.float32 or not h.is_contiguous():
        h = h.float().contiguous()
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    payload = np.empty(wire_size(counts, h.shape[1]), np.uint8)
    row_range = np.zeros(len(rows), np.float32)
    if len(rows) and h.shape[1]:
        _encode(h.numpy(), rows, counts, np.uint64(seed), payload, row_range)
    return torch.from_numpy(payload), torch.from_numpy(row_range)


def decode_rows(payload: torch.Tensor, counts: np.ndarray, out: torch.Tensor,
                targets: np.ndarray, accumulate: bool) -> torch.Tensor:
    """Dequantise a payload of encode_rows into out[targets[w]] (= or +=); returns out."""
    expected = wire_size(counts, out.shape[1])
    if payload.numel() != expected:
        raise ValueError(f"message has {payload.numel()} bytes, expected {expected} for "
                         f"{int(counts.sum())} rows of width {out.shape[1]}")
    if len(targets) and out.shape[1]:
        _decode(payload.numpy(), counts, out.numpy(), np.ascontiguousarray(targets, np.int64),
                accumulate)
    return out
