"""Dropout whose mask comes from a counter-based hash in a parallel numba kernel (CPU).

torch's CPU dropout draws one Mersenne-twister Bernoulli per element: on the 2-core dev
machine 717 ms for the first hidden layer of a products-scale SAGE step (147k x 256),
37% of the whole step (torch.profiler, issue 34). Here one splitmix64 hash of
(seed, element group) gives 16 random bits to each of 4 elements: 136 ms with a hash per
element, less with one per four, and the mask is a function of the seed alone (any thread
count gives the same one). p is rounded to a multiple of 1/65536.

The seed is drawn from torch's generator, so `torch.manual_seed` still fixes every mask.
CUDA tensors, other dtypes and small tensors keep `torch.nn.functional.dropout`.
"""
from __future__ import annotations

import numba
import numpy as np
import torch
import torch.nn.functional as F
from numba import njit

from samplers.kernel_cache import depends_on_samplers
from samplers.rng import GOLDEN, mix64

depends_on_samplers(__file__)        # the kernel inlines samplers/rng.py's mix64

# Below this many elements torch's own dropout costs little (and the kernel call's
# overhead would show).
MIN_ELEMENTS = 1 << 16
_GROUP = 4                            # elements per 64-bit hash: 16 bits each
_CHUNK = 1 << 12                      # hash groups per parallel work item


@njit(parallel=True, cache=True, nogil=True)
def _dropout_forward(x, out, keep, seed, threshold, scale):
    """out = x * scale where kept else 0; keep[i] = 1 where element i is kept. Element i is
    kept when 16 bits of mix64(seed + (i // 4) * golden) are >= threshold."""
    n = x.size
    groups = (n + _GROUP - 1) // _GROUP
    for c in numba.prange((groups + _CHUNK - 1) // _CHUNK):
        for g in range(c * _CHUNK, min(groups, (c + 1) * _CHUNK)):
            bits = mix64(seed + np.uint64(g) * GOLDEN)
            for k in range(_GROUP):
                i = g * _GROUP + k
                if i < n:
                    kept = ((bits >> np.uint64(16 * k)) & np.uint64(0xFFFF)) >= threshold
                    keep[i] = kept
                    out[i] = x[i] * scale if kept else np.float32(0.0)


@njit(parallel=True, cache=True, nogil=True)
def _dropout_backward(grad, keep, out, scale):
    for i in numba.prange(grad.size):
        out[i] = grad[i] * scale if keep[i] else np.float32(0.0)


def threshold_of(p: float) -> np.uint64:
    """The 16-bit threshold that drops a share p (rounded to 1/65536) of the elements."""
    return np.uint64(min(65536, round(p * 65536)))


class _HashDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int):
        flat = x.contiguous().view(-1)
        out = torch.empty_like(flat)
        keep = torch.empty(flat.numel(), dtype=torch.uint8)
        scale = np.float32(1.0 / (1.0 - p))
        _dropout_forward(flat.numpy(), out.numpy(), keep.numpy(), np.uint64(seed),
                         threshold_of(p), scale)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return out.view(x.shape)

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        flat = grad.contiguous().view(-1)
        out = torch.empty_like(flat)
        _dropout_backward(flat.numpy(), keep.numpy(), out.numpy(), ctx.scale)
        return out.view(grad.shape), None, None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """`F.dropout(x, p, training)`, with the hashed CPU kernel where it pays."""
    if not training or p == 0.0:
        return x
    if (x.device.type != "cpu" or x.dtype != torch.float32 or x.numel() < MIN_ELEMENTS
            or not 0.0 < p < 1.0):
        return F.dropout(x, p=p, training=True)
    seed = int(torch.randint(0, 2 ** 62, (1,)))       # from torch's generator
    return _HashDropout.apply(x, p, seed)
