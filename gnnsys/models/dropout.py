"""Dropout whose mask comes from a counter-based hash in a parallel numba kernel (CPU).

torch's CPU dropout draws one Mersenne-twister Bernoulli per element: for the first hidden
layer of a products-scale SAGE step (147k x 256) over a third of the whole step on a
small CPU (BENCHMARKS.md, "Where a products-scale SAGE step goes"). Here one splitmix64 hash of
(seed, element group) gives 16 random bits to each of 4 elements, and the mask is a
function of the seed alone (any thread count gives the same one). p is rounded to a
multiple of 1/65536. The kernel is branch-free over the data (a branch per element made
it several times slower: BENCHMARKS.md, "A whole products epoch against DGL 2.1"). A
dropped element is x * 0, as in torch's dropout (0, or NaN where x is not finite).

`relu_dropout` is ReLU and dropout in the same pass (a hidden layer's activation): one read
and one write of the layer's output instead of two, and its backward needs no mask, as
the output is positive exactly where the gradient passes.

The seed is drawn from torch's generator, so `torch.manual_seed` still fixes every mask.
CUDA tensors, other dtypes and small tensors keep `torch.nn.functional.dropout`.
"""
from __future__ import annotations

import numba
import numpy as np
import torch
import torch.nn.functional as F
from numba import njit

from common.kernel_cache import depends_on_samplers
from common.rng import GOLDEN, mix64

depends_on_samplers(__file__)        # the kernel inlines common/rng.py's mix64

# Below this many elements torch's own dropout costs little (and the kernel call's
# overhead would show).
MIN_ELEMENTS = 1 << 16
_GROUP = 4                            # elements per 64-bit hash: 16 bits each
_CHUNK = 1 << 12                      # hash groups per parallel work item


@njit(parallel=True, cache=True, nogil=True)
def _dropout_forward(x, out, keep, seed, threshold, scale, relu):
    """out = x * scale where kept else x * 0 (relu: max(x, 0) in place of x); keep[i] = 1
    where element i is kept (keep of size 0: not recorded). Element i is kept when 16 bits
    of mix64(seed + (i // 4) * golden) are >= threshold."""
    whole = x.size // _GROUP                  # groups of 4; the last few elements after
    for c in numba.prange((whole + _CHUNK - 1) // _CHUNK):
        _forward_groups(x, out, keep, seed, threshold, scale, relu, c * _CHUNK,
                        min(whole, (c + 1) * _CHUNK), _GROUP)
    _forward_groups(x, out, keep, seed, threshold, scale, relu, whole, whole + 1,
                    x.size - whole * _GROUP)


@njit(cache=True, nogil=True, inline="always")
def _forward_groups(x, out, keep, seed, threshold, scale, relu, first, stop, width):
    # Unsigned indices and a multiply by the 0/1 flag: with signed ones (numba's
    # negative-index check) or a branch on the random flag the loop ran 6x slower.
    record = keep.size > 0
    for g in range(first, stop):
        bits = mix64(seed + np.uint64(g) * GOLDEN)
        for k in range(width):
            i = np.uint64(g * _GROUP + k)
            flag = np.int32(((bits >> np.uint64(16 * k)) & np.uint64(0xFFFF)) >= threshold)
            if record:
                keep[i] = flag
            value = max(x[i], np.float32(0.0)) if relu else x[i]
            out[i] = value * (scale * np.float32(flag))


@njit(parallel=True, cache=True, nogil=True)
def _dropout_backward(grad, passed, out, scale):
    """out = grad * scale where passed > 0 (dropout: the keep flags; ReLU and dropout: the
    forward output, positive exactly where both let the element through) else grad * 0."""
    for i in numba.prange(grad.size):
        out[i] = grad[i] * (scale * np.float32(np.int32(passed[i] > 0)))


def threshold_of(p: float) -> np.uint64:
    """The 16-bit threshold that drops a share p (rounded to 1/65536) of the elements."""
    return np.uint64(min(65536, round(p * 65536)))


class _HashDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int, relu: bool):
        flat = x.contiguous().view(-1)
        out = torch.empty_like(flat)
        # ReLU's backward reads the output instead of a mask
        keep = torch.empty(0 if relu else flat.numel(), dtype=torch.uint8)
        scale = np.float32(1.0 / (1.0 - p))
        _dropout_forward(flat.numpy(), out.numpy(), keep.numpy(), np.uint64(seed),
                         threshold_of(p), scale, relu)
        ctx.save_for_backward(out if relu else keep)
        ctx.scale = scale
        return out.view(x.shape)

    @staticmethod
    def backward(ctx, grad):
        (passed,) = ctx.saved_tensors
        flat = grad.contiguous().view(-1)
        out = torch.empty_like(flat)
        _dropout_backward(flat.numpy(), passed.numpy(), out.numpy(), ctx.scale)
        return out.view(grad.shape), None, None, None


def _hashed(x: torch.Tensor, p: float) -> bool:
    """Whether the hashed kernel takes x (else torch's dropout does)."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and x.numel() >= MIN_ELEMENTS
            and 0.0 < p < 1.0)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """`F.dropout(x, p, training)`, with the hashed CPU kernel where it pays."""
    if not training or p == 0.0:
        return x
    if not _hashed(x, p):
        return F.dropout(x, p=p, training=True)
    return _HashDropout.apply(x, p, _seed(), False)


def relu_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """`dropout(F.relu(x), p, training)` in one pass where the hashed kernel takes x (the
    same mask dropout would draw from the same generator state)."""
    if not training or p == 0.0 or not _hashed(x, p):
        return dropout(F.relu(x), p, training)
    return _HashDropout.apply(x, p, _seed(), True)


def _seed() -> int:
    return int(torch.randint(0, 2 ** 62, (1,)))       # from torch's generator
