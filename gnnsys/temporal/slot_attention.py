"""TGN's attention over each root's filled neighbour slots as one fused CPU kernel pair
(numba), with the time encoding never evaluated per slot.

The slot's time encoding is phi(t_r - t_j) = cos(w (t_r - t_j) + b), and by the angle sum

    phi(t_r - t_j) = cos(w t_r + b) cos(w t_j) + sin(w t_r + b) sin(w t_j) = A_r C_j + B_r S_j,

so cos / sin are taken once per root time (A, B) and once per distinct neighbour time
(C, S) instead of once per slot and again in the backward: on wikipedia ~200 root times and
~2,700 neighbour times against ~5,700 slots. Times are seconds relative to the batch's
first event, in float64, so the phases are as exact as the per-slot formula's; the tables
are float32 like its output (`angle_tables`; its w- and b-gradients sum in float64).

Per root, `slot_attention` computes the logits q . k_j + qt . phi_j (qt = W_k_time^T q,
the time part of the key projected onto the query), the masked softmax, dropout, and the
weighted sums of the slots' vertex values and of their phi (the caller applies W_v_time to
that sum once per root): one pass over the root's slots with its phi rows in cache, where
the tensor formulation makes ~10 passes over [slots x 200] arrays and their gradients.
The backward recomputes phi the same way. `AttentionEmbedding` uses it on CPU; elsewhere
(GPU) it runs the same function as tensor operations, and the tests hold both to the
plain per-slot formula.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit
from torch import Tensor


# ----------------------------------------------------------------------- time tables
# An opaque op, so torch.compile keeps the saved tables instead of recomputing cos / sin
# in the backward.
@torch.library.custom_op("gnnsys::angle_tables", mutates_args=())
def _angle_tables(root_tau: Tensor, neighbor_tau: Tensor, weight: Tensor, bias: Tensor,
                  like: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    root_phase = torch.addcmul(bias, root_tau.unsqueeze(-1), weight)
    neighbor_phase = neighbor_tau.unsqueeze(-1) * weight
    return tuple(f(phase).to(like.dtype) for phase in (root_phase, neighbor_phase)
                 for f in (torch.cos, torch.sin))


@_angle_tables.register_fake
def _(root_tau, neighbor_tau, weight, bias, like):
    return tuple(like.new_empty(len(tau), len(weight)) for tau in (root_tau, root_tau,
                                                                   neighbor_tau, neighbor_tau))


def _angle_tables_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1], *output)


def _angle_tables_backward(ctx, g_a, g_b, g_c, g_s):
    root_tau, neighbor_tau, a, b, c, s = ctx.saved_tensors
    # d cos(x)/dx = -sin(x), d sin(x)/dx = cos(x); the products in the tables' dtype, the
    # sums over times in float64: they add terms of size tau that cancel
    g_root = (g_b * a - g_a * b).double()                      # dL/d(root phase)
    g_neighbor = (g_s * c - g_c * s).double()                  # dL/d(neighbour phase)
    grad_w = root_tau @ g_root + neighbor_tau @ g_neighbor
    return None, None, grad_w, g_root.sum(0), None


_angle_tables.register_autograd(_angle_tables_backward, setup_context=_angle_tables_setup)


def angle_tables(encoder, root_tau: Tensor, neighbor_tau: Tensor, like: Tensor):
    """A, B [roots' times, T] and C, S [neighbours' times, T] of a `TimeEncoder` in the
    dtype of `like`, for float64 times relative to one reference (any: phi depends only on
    differences). The phases are float64, as in `TimeEncoder`."""
    return _angle_tables(root_tau.double(), neighbor_tau.double(), encoder.weight,
                         encoder.bias, like)


# ----------------------------------------------------------------------- the kernels
@njit(cache=True, nogil=True, fastmath=True)
def _forward_kernel(q, qt, kv, a_tab, b_tab, c_tab, s_tab, indptr, row, tidx, ridx, keep,
                    out_v, phisum, wsum, prob, phi, logit):
    n, heads, dim = q.shape
    hd = heads * dim
    t_dim = a_tab.shape[1]
    scale = 1.0 / math.sqrt(dim)
    for r in range(n):
        lo, hi = indptr[r], indptr[r + 1]
        if hi == lo:
            continue
        ar = ridx[r]
        for j in range(lo, hi):
            jj, u, e = j - lo, row[j], tidx[j]
            for z in range(t_dim):
                phi[jj, z] = a_tab[ar, z] * c_tab[e, z] + b_tab[ar, z] * s_tab[e, z]
            for h in range(heads):
                acc = 0.0
                for d in range(dim):
                    acc += q[r, h, d] * kv[u, h * dim + d]
                for z in range(t_dim):
                    acc += qt[r, h, z] * phi[jj, z]
                logit[jj, h] = acc * scale
        for h in range(heads):
            top = logit[0, h]
            for jj in range(1, hi - lo):
                top = max(top, logit[jj, h])
            total = 0.0
            for jj in range(hi - lo):
                ex = math.exp(logit[jj, h] - top)
                logit[jj, h] = ex
                total += ex
            for jj in range(hi - lo):
                prob[lo + jj, h] = logit[jj, h] / total
        for j in range(lo, hi):
            jj, u = j - lo, row[j]
            for h in range(heads):
                weight = prob[j, h] * keep[j, h]
                wsum[r, h] += weight
                for d in range(dim):
                    out_v[r, h, d] += weight * kv[u, hd + h * dim + d]
                for z in range(t_dim):
                    phisum[r, h, z] += weight * phi[jj, z]


@njit(cache=True, nogil=True, fastmath=True)
def _backward_kernel(q, qt, kv, a_tab, b_tab, c_tab, s_tab, indptr, row, tidx, ridx, keep,
                     prob, g_out_v, g_phisum, g_wsum,
                     g_q, g_qt, g_kv, g_a, g_b, g_c, g_s, phi, g_phi, g_weight):
    n, heads, dim = q.shape
    hd = heads * dim
    t_dim = a_tab.shape[1]
    scale = 1.0 / math.sqrt(dim)
    for r in range(n):
        lo, hi = indptr[r], indptr[r + 1]
        if hi == lo:
            continue
        ar = ridx[r]
        # pass 1: gradients through the weighted sums, and of each dropped-out weight
        for j in range(lo, hi):
            jj, u, e = j - lo, row[j], tidx[j]
            for z in range(t_dim):
                phi[jj, z] = a_tab[ar, z] * c_tab[e, z] + b_tab[ar, z] * s_tab[e, z]
                g_phi[jj, z] = 0.0
            for h in range(heads):
                weight = prob[j, h] * keep[j, h]
                acc = g_wsum[r, h]
                for d in range(dim):
                    acc += g_out_v[r, h, d] * kv[u, hd + h * dim + d]
                    g_kv[u, hd + h * dim + d] += weight * g_out_v[r, h, d]
                for z in range(t_dim):
                    acc += g_phisum[r, h, z] * phi[jj, z]
                    g_phi[jj, z] += weight * g_phisum[r, h, z]
                g_weight[jj, h] = acc * keep[j, h]
        # pass 2: softmax backward, then the logits' inputs
        for h in range(heads):
            dot = 0.0
            for jj in range(hi - lo):
                dot += prob[lo + jj, h] * g_weight[jj, h]
            for jj in range(hi - lo):
                g_weight[jj, h] = prob[lo + jj, h] * (g_weight[jj, h] - dot) * scale
        for j in range(lo, hi):
            jj, u, e = j - lo, row[j], tidx[j]
            for h in range(heads):
                g_logit = g_weight[jj, h]
                for d in range(dim):
                    g_q[r, h, d] += g_logit * kv[u, h * dim + d]
                    g_kv[u, h * dim + d] += g_logit * q[r, h, d]
                for z in range(t_dim):
                    g_qt[r, h, z] += g_logit * phi[jj, z]
                    g_phi[jj, z] += g_logit * qt[r, h, z]
            for z in range(t_dim):
                g_a[ar, z] += g_phi[jj, z] * c_tab[e, z]
                g_b[ar, z] += g_phi[jj, z] * s_tab[e, z]
                g_c[e, z] += g_phi[jj, z] * a_tab[ar, z]
                g_s[e, z] += g_phi[jj, z] * b_tab[ar, z]


def _np(t: Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def _scratch(indptr: Tensor, width: int, dtype) -> np.ndarray:
    most = int((indptr[1:] - indptr[:-1]).max()) if len(indptr) > 1 else 0
    return np.empty((max(most, 1), width), dtype=dtype)


@torch.library.custom_op("gnnsys::slot_attention", mutates_args=(), device_types="cpu")
def _slot_attention(q: Tensor, qt: Tensor, kv: Tensor, a_tab: Tensor, b_tab: Tensor,
                    c_tab: Tensor, s_tab: Tensor, indptr: Tensor, row: Tensor, tidx: Tensor,
                    ridx: Tensor, keep: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    n, heads, dim = q.shape
    out_v, phisum = q.new_zeros(n, heads, dim), qt.new_zeros(qt.shape)
    wsum, prob = q.new_zeros(n, heads), q.new_zeros(len(row), heads)
    np_dtype = out_v.numpy().dtype
    _forward_kernel(_np(q), _np(qt), _np(kv), _np(a_tab), _np(b_tab), _np(c_tab), _np(s_tab),
                    _np(indptr), _np(row), _np(tidx), _np(ridx), _np(keep),
                    out_v.numpy(), phisum.numpy(), wsum.numpy(), prob.numpy(),
                    _scratch(indptr, a_tab.shape[1], np_dtype), _scratch(indptr, heads, np_dtype))
    return out_v, phisum, wsum, prob


@_slot_attention.register_fake
def _(q, qt, kv, a_tab, b_tab, c_tab, s_tab, indptr, row, tidx, ridx, keep):
    n, heads, _ = q.shape
    return (q.new_empty(q.shape), qt.new_empty(qt.shape), q.new_empty(n, heads),
            q.new_empty(row.shape[0], heads))


@torch.library.custom_op("gnnsys::slot_attention_backward", mutates_args=(), device_types="cpu")
def _slot_attention_backward(q: Tensor, qt: Tensor, kv: Tensor, a_tab: Tensor, b_tab: Tensor,
                             c_tab: Tensor, s_tab: Tensor, indptr: Tensor, row: Tensor,
                             tidx: Tensor, ridx: Tensor, keep: Tensor, prob: Tensor,
                             g_out_v: Tensor, g_phisum: Tensor, g_wsum: Tensor
                             ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    grads = [torch.zeros_like(t) for t in (q, qt, kv, a_tab, b_tab, c_tab, s_tab)]
    np_dtype = grads[0].numpy().dtype
    _backward_kernel(_np(q), _np(qt), _np(kv), _np(a_tab), _np(b_tab), _np(c_tab), _np(s_tab),
                     _np(indptr), _np(row), _np(tidx), _np(ridx), _np(keep), _np(prob),
                     _np(g_out_v), _np(g_phisum), _np(g_wsum), *[g.numpy() for g in grads],
                     _scratch(indptr, a_tab.shape[1], np_dtype),
                     _scratch(indptr, a_tab.shape[1], np_dtype),
                     _scratch(indptr, q.shape[1], np_dtype))
    return tuple(grads)


@_slot_attention_backward.register_fake
def _(q, qt, kv, a_tab, b_tab, c_tab, s_tab, indptr, row, tidx, ridx, keep, prob,
      g_out_v, g_phisum, g_wsum):
    return tuple(t.new_empty(t.shape) for t in (q, qt, kv, a_tab, b_tab, c_tab, s_tab))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs, output[3])


def _backward(ctx, g_out_v, g_phisum, g_wsum, _g_prob):
    *inputs, prob = ctx.saved_tensors
    grads = _slot_attention_backward(*inputs, prob, g_out_v.contiguous(), g_phisum.contiguous(),
                                     g_wsum.contiguous())
    return (*grads, None, None, None, None, None)


_slot_attention.register_autograd(_backward, setup_context=_setup_context)


def slot_attention(q: Tensor, qt: Tensor, kv: Tensor, tables: tuple, indptr: Tensor,
                   row: Tensor, tidx: Tensor, ridx: Tensor, keep: Tensor):
    """Per root r and head h, over its filled slots j (indptr[r]:indptr[r + 1]):

        p_j = softmax_j((q[r,h] . kv[row_j, key h] + qt[r,h] . phi_j) / sqrt(dim))
        a_j = p_j * keep[j,h]                               (dropout, or keep = 1)
        -> out_v[r,h] = sum_j a_j kv[row_j, value h],  phisum[r,h] = sum_j a_j phi_j,
           wsum[r,h] = sum_j a_j

    with phi_j = A[ridx_r] * C[tidx_j] + B[ridx_r] * S[tidx_j] (`angle_tables`). q [n, H, D];
    qt [n, H, T]; kv [rows, 2 H D], keys then values; keep [slots, H]. A root without slots
    gets zeros. Differentiable in q, qt, kv and the tables."""
    a_tab, b_tab, c_tab, s_tab = tables
    out_v, phisum, wsum, _ = _slot_attention(q, qt, kv, a_tab, b_tab, c_tab, s_tab, indptr,
                                             row, tidx, ridx, keep)
    return out_v, phisum, wsum
