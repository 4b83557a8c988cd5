"""TGN's attention over each root's filled neighbour slots as one fused CPU kernel pair
(numba), with the time encoding never evaluated per slot.

The slot's time encoding is phi(t_r - t_j) = cos(w (t_r - t_j) + b), and by the angle sum

    phi(t_r - t_j) = cos(w t_r + b) cos(w t_j) + sin(w t_r + b) sin(w t_j) = A_r C_j + B_r S_j,

so cos / sin are taken once per root time (A, B) and once per distinct neighbour time
(C, S) instead of once per slot and again in the backward: on wikipedia ~200 root times and
~2,700 neighbour times against ~5,700 slots. Times are float64 seconds after the batch's
first event and the phases float64, as in `TimeEncoder`, reduced modulo 2 pi in float64
before cos / sin in the tables' dtype (float32, like its output). The backward needs
sin(phase) = B_r C_j - A_r S_j per slot, and sums the w- and b-gradients over the slots in
float64 (terms of size gap that cancel), as `TimeEncoder` does.

Per root, the kernel computes the logits q . k_j + qt . phi_j (qt = W_k_time^T q, the time
part of the key projected onto the query), the softmax over the root's slots, dropout, and
the weighted sums of the slots' vertex values and of their phi (the caller applies
W_v_time to that sum once per root): one pass over the root's slots with their phi rows in
cache, where the tensor formulation makes ~10 passes over [slots x 200] arrays and their
gradients. The backward recomputes phi the same way. `AttentionEmbedding` uses it on CPU;
elsewhere (GPU) it runs the same function as tensor operations, and the tests hold both to
the plain per-slot formula.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit
from torch import Tensor


# ----------------------------------------------------------------------- the kernels
@njit(cache=True, nogil=True, fastmath=True, inline="always")
def _slot_phi(a_tab, b_tab, c_tab, s_tab, ar, e, out):
    """out = A[ar] C[e] + B[ar] S[e]: a slot's time encoding from the tables."""
    for z in range(out.shape[0]):
        out[z] = a_tab[ar, z] * c_tab[e, z] + b_tab[ar, z] * s_tab[e, z]


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
            jj, u = j - lo, row[j]
            _slot_phi(a_tab, b_tab, c_tab, s_tab, ar, tidx[j], phi[jj])
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
def _backward_kernel(q, qt, kv, root_tau, neighbor_tau, a_tab, b_tab, c_tab, s_tab, indptr,
                     row, tidx, ridx, keep, prob, g_out_v, g_phisum, g_wsum,
                     g_q, g_qt, g_kv, g_w, g_b, phi, g_phi, g_weight):
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
            jj, u = j - lo, row[j]
            _slot_phi(a_tab, b_tab, c_tab, s_tab, ar, tidx[j], phi[jj])
            g_phi[jj, :] = 0.0
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
            # phi = cos(phase): d phi / d phase = -sin(phase) = A_r S_j - B_r C_j
            gap = root_tau[ar] - neighbor_tau[e]
            for z in range(t_dim):
                g_phase = g_phi[jj, z] * (a_tab[ar, z] * s_tab[e, z] - b_tab[ar, z] * c_tab[e, z])
                g_w[z] += g_phase * gap
                g_b[z] += g_phase


def _np(t: Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def _most_slots(indptr: Tensor) -> int:
    """The most slots any root has (at least 1): the rows of the kernels' scratch."""
    return max(int((indptr[1:] - indptr[:-1]).max()) if len(indptr) > 1 else 0, 1)


# 2 pi = _TWO_PI_HI + _TWO_PI_LO, HI with 32 significant bits: k * HI is exact for
# |k| < 2^21 turns (phases up to ~1.3e7 rad), so the reduction adds no error (Cody-Waite);
# beyond, it adds about the phase's own float64 rounding
_TWO_PI_HI = float(np.ldexp(np.round(np.ldexp(2 * math.pi, 29)), -29))
_TWO_PI_LO = 2 * math.pi - _TWO_PI_HI


@njit(cache=True, nogil=True)       # no fastmath: the reduction's order of operations matters
def _reduced_phases(tau, weight, shift, out):
    """out[i, z] = (tau[i] w[z] + shift[z]) mod 2 pi, in [-pi, pi], from float64 phases."""
    inv_two_pi = 1.0 / (2 * math.pi)
    for i in range(tau.shape[0]):
        for z in range(weight.shape[0]):
            phase = tau[i] * weight[z] + shift[z]
            turns = math.floor(phase * inv_two_pi + 0.5)
            out[i, z] = (phase - turns * _TWO_PI_HI) - turns * _TWO_PI_LO


def _time_tables(root_tau, neighbor_tau, weight, bias, dtype) -> list[Tensor]:
    """A, B = cos / sin(w tau_root + b) and C, S = cos / sin(w tau_neighbour) in `dtype`:
    float64 phases reduced modulo 2 pi in float64, then cos / sin in `dtype` (float32: ~1e-7
    from the exact value, ~4x cheaper than float64 cos / sin of the phases)."""
    tables = []
    for tau, shift in ((root_tau, bias), (neighbor_tau, torch.zeros_like(bias))):
        angle = torch.empty(len(tau), len(weight), dtype=dtype, device=tau.device)
        _reduced_phases(_np(tau), _np(weight), _np(shift), angle.numpy())
        tables += [torch.cos(angle), torch.sin(angle)]
    return tables


@torch.library.custom_op("gnnsys::slot_attention", mutates_args=(), device_types="cpu")
def _slot_attention(q: Tensor, qt: Tensor, kv: Tensor, root_tau: Tensor, neighbor_tau: Tensor,
                    weight: Tensor, bias: Tensor, indptr: Tensor, row: Tensor, tidx: Tensor,
                    ridx: Tensor, keep: Tensor
                    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    n, heads, dim = q.shape
    tables = _time_tables(root_tau, neighbor_tau, weight, bias, q.dtype)
    out_v, phisum = q.new_zeros(n, heads, dim), qt.new_zeros(qt.shape)
    wsum, prob = q.new_zeros(n, heads), q.new_zeros(len(row), heads)
    most, np_dtype = _most_slots(indptr), out_v.numpy().dtype
    _forward_kernel(_np(q), _np(qt), _np(kv), *[t.numpy() for t in tables], _np(indptr),
                    _np(row), _np(tidx), _np(ridx), _np(keep),
                    out_v.numpy(), phisum.numpy(), wsum.numpy(), prob.numpy(),
                    np.empty((most, len(weight)), np_dtype), np.empty((most, heads), np_dtype))
    return out_v, phisum, wsum, prob, *tables


@_slot_attention.register_fake
def _(q, qt, kv, root_tau, neighbor_tau, weight, bias, indptr, row, tidx, ridx, keep):
    n, heads, _ = q.shape
    t_dim = weight.shape[0]
    return (q.new_empty(q.shape), qt.new_empty(qt.shape), q.new_empty(n, heads),
            q.new_empty(row.shape[0], heads), q.new_empty(root_tau.shape[0], t_dim),
            q.new_empty(root_tau.shape[0], t_dim), q.new_empty(neighbor_tau.shape[0], t_dim),
            q.new_empty(neighbor_tau.shape[0], t_dim))


@torch.library.custom_op("gnnsys::slot_attention_backward", mutates_args=(), device_types="cpu")
def _slot_attention_backward(q: Tensor, qt: Tensor, kv: Tensor, root_tau: Tensor,
                             neighbor_tau: Tensor, a_tab: Tensor, b_tab: Tensor, c_tab: Tensor,
                             s_tab: Tensor, indptr: Tensor, row: Tensor, tidx: Tensor,
                             ridx: Tensor, keep: Tensor, prob: Tensor, g_out_v: Tensor,
                             g_phisum: Tensor, g_wsum: Tensor
                             ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    g_q, g_qt, g_kv = (torch.zeros_like(t) for t in (q, qt, kv))
    g_w, g_b = (root_tau.new_zeros(a_tab.shape[1]) for _ in range(2))   # float64 sums
    most, np_dtype, t_dim = _most_slots(indptr), g_q.numpy().dtype, a_tab.shape[1]
    _backward_kernel(_np(q), _np(qt), _np(kv), _np(root_tau), _np(neighbor_tau), _np(a_tab),
                     _np(b_tab), _np(c_tab), _np(s_tab), _np(indptr), _np(row), _np(tidx),
                     _np(ridx), _np(keep), _np(prob), _np(g_out_v), _np(g_phisum), _np(g_wsum),
                     g_q.numpy(), g_qt.numpy(), g_kv.numpy(), g_w.numpy(), g_b.numpy(),
                     np.empty((most, t_dim), np_dtype), np.empty((most, t_dim), np_dtype),
                     np.empty((most, q.shape[1]), np_dtype))
    return g_q, g_qt, g_kv, g_w, g_b


@_slot_attention_backward.register_fake
def _(q, qt, kv, root_tau, neighbor_tau, a_tab, b_tab, c_tab, s_tab, indptr, row, tidx, ridx,
      keep, prob, g_out_v, g_phisum, g_wsum):
    t_dim = a_tab.shape[1]
    return (q.new_empty(q.shape), qt.new_empty(qt.shape), kv.new_empty(kv.shape),
            root_tau.new_empty(t_dim), root_tau.new_empty(t_dim))


def _setup_context(ctx, inputs, output):
    q, qt, kv, root_tau, neighbor_tau, weight, bias, indptr, row, tidx, ridx, keep = inputs
    ctx.save_for_backward(q, qt, kv, root_tau, neighbor_tau, *output[4:], indptr, row, tidx,
                          ridx, keep, output[3])
    ctx.param_dtype = weight.dtype


def _backward(ctx, g_out_v, g_phisum, g_wsum, *_unused):
    g_q, g_qt, g_kv, g_w, g_b = _slot_attention_backward(
        *ctx.saved_tensors, g_out_v.contiguous(), g_phisum.contiguous(), g_wsum.contiguous())
    return (g_q, g_qt, g_kv, None, None, g_w.to(ctx.param_dtype), g_b.to(ctx.param_dtype),
            None, None, None, None, None)


_slot_attention.register_autograd(_backward, setup_context=_setup_context)


def slot_attention(q: Tensor, qt: Tensor, kv: Tensor, encoder, root_tau: Tensor,
                   neighbor_tau: Tensor, indptr: Tensor, row: Tensor, tidx: Tensor,
                   ridx: Tensor, keep: Tensor):
    """Per root r and head h, over its filled slots j (indptr[r]:indptr[r + 1]):

        p_j = softmax_j((q[r,h] . kv[row_j, key h] + qt[r,h] . phi_j) / sqrt(dim))
        a_j = p_j * keep[j,h]                               (dropout, or keep = 1)
        -> out_v[r,h] = sum_j a_j kv[row_j, value h],  phisum[r,h] = sum_j a_j phi_j,
           wsum[r,h] = sum_j a_j

    with phi_j = encoder(root_tau[ridx_r] - neighbor_tau[tidx_j]) (`TimeEncoder`; taus
    float64 seconds from any common reference). q [n, H, D]; qt [n, H, T]; kv [rows, 2 H D],
    keys then values; keep [slots, H]. A root without slots gets zeros. Differentiable in q,
    qt, kv and the encoder's weight and bias."""
    out = _slot_attention(q, qt, kv, root_tau.double(), neighbor_tau.double(), encoder.weight,
                          encoder.bias, indptr, row, tidx, ridx, keep)
    return out[:3]
