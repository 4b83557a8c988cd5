"""CUDA kernels for the message wire format of quantize.py (numba.cuda, on CUDA tensors).

The GPU twin of quantize_fast.py, with its signatures and its bytes: `encode_rows`
quantises and packs h[rows[w]] for every wire position w, `decode_rows` unpacks and
dequantises each row straight into (or onto) its target row of an output tensor. Three
small kernels, each thread writing its own outputs (no atomics, no zeroing pass):

- row_parameters, a thread per row: min and max, the bf16-rounded minimum (down) and
  step (up), the raw range, and the row's four parameter bytes;
- pack_codes, a thread per packed byte (one column of the 8/b rows sharing it): the
  minimum and step read back from the parameter bytes, stochastic rounding with the
  counter noise u(w, j), clamping, each code shifted into the byte;
- unpack_rows, a thread per (row, column): the code out of its byte, then
  q * step + minimum written or added into out[targets[w], j]. Targets are distinct
  within a message (halo slots, or the rows sent to one peer), so no two threads touch
  the same element.

Bit for bit the CPU kernels' numbers: the noise is quantize_fast's splitmix64 counter
noise (common/rng.py's mix64, compiled for the device by samplers/gpu_kernels.py),
the bf16 rounding works on the float's bits, division is IEEE (numba's default without
fastmath), and the multiply-adds use explicitly rounded fmul_rn / fadd_rn because NVVM
would otherwise contract `q * step + minimum` into one FMA, whose single rounding is not
the CPU's two.

Two layers: `encode_device` / `decode_device` launch on numba device arrays (what the
simulator tests drive); `encode_rows` / `decode_rows` take CUDA torch tensors, view them
through __cuda_array_interface__ (no copy, no host sync) and launch on torch's current
stream, so the kernels run after NCCL's receive (`work.wait()` orders that stream) and
before torch's next use of their output.
"""
from __future__ import annotations

import math
import warnings
from contextlib import contextmanager

import numpy as np
import torch
from numba import cuda

from samplers.gpu_kernels import ELEMENTWISE_THREADS, IN_SIMULATOR, mix64, thread_index
from common.rng import GOLDEN

from .quantize import packed_size
from .quantize_fast import INV_2_24, wire_size

if IN_SIMULATOR:
    # The simulator runs kernels as Python on numpy float32 scalars: every operation is
    # rounded on its own already (and libdevice has no simulator implementation).
    def multiply_rn(a, b):
        return a * b

    def add_rn(a, b):
        return a + b
else:
    from numba.cuda.libdevice import fadd_rn as add_rn, fmul_rn as multiply_rn


# ----------------------------------------------------------------------------- device helpers
@cuda.jit(device=True)
def float_to_bits(x):
    word = cuda.local.array(1, np.float32)
    word[0] = x
    return word.view(np.uint32)[0]


@cuda.jit(device=True)
def bits_to_float(bits):
    word = cuda.local.array(1, np.uint32)
    word[0] = bits
    return word.view(np.float32)[0]


@cuda.jit(device=True)
def bf16_directed(x, up):
    """x rounded to a bf16 value towards +inf (up) or -inf, as float32."""
    bits = float_to_bits(x)
    if bits & np.uint32(0xFFFF) == 0:
        return x
    truncated = bits & np.uint32(0xFFFF0000)           # rounds the magnitude down
    negative = (bits >> np.uint32(31)) != 0
    # away from zero when that is the requested direction
    return bits_to_float(truncated + np.uint32(0x10000) if up != negative else truncated)


@cuda.jit(device=True)
def write_bf16(params, at, value):
    bits = float_to_bits(value)
    params[at] = np.uint8((bits >> np.uint32(16)) & np.uint32(0xFF))
    params[at + 1] = np.uint8(bits >> np.uint32(24))


@cuda.jit(device=True)
def read_bf16(params, at):
    return bits_to_float((np.uint32(params[at]) | (np.uint32(params[at + 1]) << np.uint32(8)))
                         << np.uint32(16))


@cuda.jit(device=True)
def uniform(seed, counter):
    """quantize_fast's noise: the top 24 bits of splitmix64(seed + counter * golden)."""
    z = mix64(seed + counter * GOLDEN)
    return multiply_rn(np.float32(z >> np.uint64(40)), INV_2_24)


@cuda.jit(device=True)
def bits_of_row(w, start4, start8):
    """(bit-width, first wire row of its group) of wire row w (groups 2 | 4 | 8 bits)."""
    if w < start4:
        return 2, 0
    if w < start8:
        return 4, start4
    return 8, start8


# ----------------------------------------------------------------------------- kernels
@cuda.jit
def row_parameters(h, rows, start4, start8, params, row_range):
    w = thread_index()
    n = rows.shape[0]
    if w >= n:
        return
    row = rows[w]
    lo = h[row, 0]
    hi = lo
    for j in range(1, h.shape[1]):
        v = h[row, j]
        if v < lo:
            lo = v
        if v > hi:
            hi = v
    bits, _ = bits_of_row(w, start4, start8)
    top = np.float32((1 << bits) - 1)
    minimum = bf16_directed(lo, False)
    step = bf16_directed((hi - minimum) / top, True)
    if not step > 0:                                   # constant row: any step codes it as 0
        step = np.float32(1.0)
    row_range[w] = hi - lo
    write_bf16(params, 2 * w, minimum)
    write_bf16(params, 2 * (n + w), step)


@cuda.jit
def pack_codes(h, rows, params, seed, start4, start8, offset4, offset8, packed):
    t = thread_index()
    if t >= packed.shape[0]:
        return
    n, dim = rows.shape[0], h.shape[1]
    if t < offset4:
        bits, first, end, offset = 2, 0, start4, 0
    elif t < offset8:
        bits, first, end, offset = 4, start4, start8, offset4
    else:
        bits, first, end, offset = 8, start8, n, offset8
    per, top = 8 // bits, (1 << bits) - 1
    block, column = (t - offset) // dim, (t - offset) % dim
    byte = 0
    for slot in range(per):
        w = first + block * per + slot
        if w < end:                                    # else a padding row: zeros
            minimum, step = read_bf16(params, 2 * w), read_bf16(params, 2 * (n + w))
            scaled = (h[rows[w], column] - minimum) / step
            counter = np.uint64(w) * np.uint64(dim) + np.uint64(column)
            q = np.int64(math.floor(scaled + uniform(seed, counter)))
            # clamp: rounding can reach 2^b, which would spill into the next row's bits
            q = 0 if q < 0 else (top if q > top else q)
            byte |= q << (slot * bits)
    packed[t] = np.uint8(byte)


@cuda.jit
def unpack_rows(packed, params, start4, start8, offset4, offset8, out, targets, accumulate):
    t = thread_index()
    n, dim = targets.shape[0], out.shape[1]
    if t >= n * dim:
        return
    w, column = t // dim, t % dim
    bits, first = bits_of_row(w, start4, start8)
    offset = 0 if bits == 2 else (offset4 if bits == 4 else offset8)
    per, i = 8 // bits, w - first
    code = (np.int64(packed[offset + (i // per) * dim + column]) >> ((i % per) * bits)) \
        & ((1 << bits) - 1)
    value = add_rn(multiply_rn(np.float32(code), read_bf16(params, 2 * (n + w))),
                   read_bf16(params, 2 * w))
    row = targets[w]
    out[row, column] = add_rn(out[row, column], value) if accumulate else value


# ----------------------------------------------------------------------------- launches
def message_layout(counts, dim: int) -> tuple[int, int, int, int, int]:
    """(first 4-bit row, first 8-bit row, byte offset of the 4-bit group, of the 8-bit
    group, packed bytes) of a message with counts = rows at 2, 4, 8 bits."""
    c2, c4, c8 = (int(c) for c in counts)
    s2, s4, s8 = packed_size(c2, dim, 2), packed_size(c4, dim, 4), packed_size(c8, dim, 8)
    return c2, c2 + c4, s2, s2 + s4, s2 + s4 + s8


def _launch(kernel, items: int, stream, *args) -> None:
    threads = min(ELEMENTWISE_THREADS, items)     # right-sized: the simulator pays per thread
    kernel[(items + threads - 1) // threads, threads, stream](*args)


@contextmanager
def _quiet():
    with warnings.catch_warnings():     # (numba's small-grid hint: samplers/gpu_kernels.py)
        if IN_SIMULATOR:
            # numpy scalars warn on the (intended, modulo 2**64) wrap of the noise hash
            warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)
        yield


def encode_device(h, rows, counts, seed: int, payload, row_range, stream=0) -> None:
    """encode_rows on numba device arrays: h float32 [M, D], rows int64 [n] (wire order),
    payload uint8 [wire_size(counts, D)] and row_range float32 [n] filled."""
    n, dim = rows.shape[0], h.shape[1]
    if n == 0 or dim == 0:
        return
    start4, start8, offset4, offset8, packed_bytes = message_layout(counts, dim)
    params = payload[packed_bytes:]
    with _quiet():
        _launch(row_parameters, n, stream, h, rows, start4, start8, params, row_range)
        _launch(pack_codes, packed_bytes, stream, h, rows, params, np.uint64(seed),
                start4, start8, offset4, offset8, payload[:packed_bytes])


def decode_device(payload, counts, out, targets, accumulate: bool, stream=0) -> None:
    """decode_rows on numba device arrays: out float32 [*, D], targets int64 [n]."""
    n, dim = targets.shape[0], out.shape[1]
    if n == 0 or dim == 0:
        return
    start4, start8, offset4, offset8, packed_bytes = message_layout(counts, dim)
    with _quiet():
        _launch(unpack_rows, n * dim, stream, payload[:packed_bytes], payload[packed_bytes:],
                start4, start8, offset4, offset8, out, targets, bool(accumulate))


# ----------------------------------------------------------------------------- torch wrappers
def _require_cuda(*tensors) -> None:
    for tensor in tensors:
        if tensor.device.type != "cuda":
            raise ValueError(f"quantize_gpu works on CUDA tensors, got one on {tensor.device}; "
                             "use quantize_fast for host tensors")


def _device_view(tensor: torch.Tensor):
    # sync=False: the kernels run on torch's current stream, which orders them already
    return cuda.as_cuda_array(tensor.detach(), sync=False)


def _torch_stream(device: torch.device):
    return cuda.external_stream(torch.cuda.current_stream(device).cuda_stream)


def _index(index, device) -> torch.Tensor:
    """Row indices as an int64 CUDA tensor (numpy: one copy; a CUDA tensor: as it is)."""
    return torch.as_tensor(index, dtype=torch.int64, device=device)


def encode_rows(h: torch.Tensor, rows, counts: np.ndarray, seed: int):
    """Quantise and pack h[rows[w]] for every wire position w (CUDA float32 h [M, D];
    rows numpy or a CUDA tensor). Returns (payload uint8, row range max - min float32
    [n] in wire order), CUDA tensors, the bytes of quantize_fast.encode_rows."""
    h = h.detach()
    if h.dtype != torch.float32 or not h.is_contiguous():
        h = h.float().contiguous()
    _require_cuda(h)
    rows = _index(rows, h.device)
    payload = torch.empty(wire_size(counts, h.shape[1]), dtype=torch.uint8, device=h.device)
    row_range = torch.zeros(len(rows), dtype=torch.float32, device=h.device)
    if len(rows) and h.shape[1]:
        encode_device(_device_view(h), _device_view(rows), counts, seed,
                      _device_view(payload), _device_view(row_range), _torch_stream(h.device))
    return payload, row_range


def decode_rows(payload: torch.Tensor, counts: np.ndarray, out: torch.Tensor, targets,
                accumulate: bool) -> torch.Tensor:
    """Dequantise a payload of encode_rows into out[targets[w]] (= or +=); returns out
    (CUDA float32; targets numpy or a CUDA tensor, distinct rows)."""
    expected = wire_size(counts, out.shape[1])
    if payload.numel() != expected:
        raise ValueError(f"message has {payload.numel()} bytes, expected {expected} for "
                         f"{int(counts.sum())} rows of width {out.shape[1]}")
    if out.dtype != torch.float32:
        raise ValueError(f"decode_rows writes float32 rows, got an output of {out.dtype}")
    _require_cuda(payload, out)
    if len(targets) and out.shape[1]:
        decode_device(_device_view(payload), counts, _device_view(out),
                      _device_view(_index(targets, out.device)), accumulate,
                      _torch_stream(out.device))
    return out

