"""GAT's attention-weighted sum on the CPU without a message per edge.

PyG's `GATConv` writes `alpha * x_j` for every edge and head (on synthetic-products the
first layer's 882k edges and self loops x 256 columns, 0.9 GB, kept for the backward)
and sums them with a scatter; its products-scale epoch barely kept up with DGL's, whose
GAT fuses the sum into sparse kernels (BENCHMARKS.md, "GAT and GCN over CSR rows").
Here the sum is one pass over the block's CSR rows
(numba, parallel over targets) and the backward is the two products it needs: the
attention weights' gradient (a dot product per edge and head) and the sources' gradient
(the same sum over the transposed rows). Only the logits and weights exist per edge
(edges x heads). Tested against `GATConv` (forward and every gradient).
"""
from __future__ import annotations

import numba
import numpy as np
import torch
import torch.nn.functional as F
from numba import njit
from torch_geometric.nn import GATConv
from torch_geometric.utils import softmax


@njit(parallel=True, cache=True, nogil=True)
def _weighted_sum(indptr, columns, alpha, values, out):
    """out[t, h] = sum over row t's entries e of alpha[e, h] * values[columns[e], h]."""
    heads, width = values.shape[1], values.shape[2]
    for t in numba.prange(out.shape[0]):
        target = out[t]
        target[:] = 0
        for e in range(indptr[t], indptr[t + 1]):
            source = values[columns[e]]
            for h in range(heads):
                weight = alpha[e, h]
                for c in range(width):
                    target[h, c] += weight * source[h, c]


@njit(parallel=True, cache=True, nogil=True)
def _weight_grad(indptr, columns, grad_out, values, grad_alpha):
    """grad_alpha[e, h] = <grad_out[t, h], values[columns[e], h]> for e in row t."""
    heads, width = values.shape[1], values.shape[2]
    for t in numba.prange(grad_out.shape[0]):
        upstream = grad_out[t]
        for e in range(indptr[t], indptr[t + 1]):
            source = values[columns[e]]
            for h in range(heads):
                total = np.float32(0.0)
                for c in range(width):
                    total += upstream[h, c] * source[h, c]
                grad_alpha[e, h] = total


@njit(cache=True, nogil=True)
def _by_source(indptr, columns, num_sources):
    """The rows transposed (a counting sort by source): (source_indptr, entry, target) with
    source s's entries at [source_indptr[s], source_indptr[s + 1])."""
    source_indptr = np.zeros(num_sources + 1, dtype=np.int64)
    for e in range(columns.size):
        source_indptr[columns[e] + 1] += 1
    for s in range(num_sources):
        source_indptr[s + 1] += source_indptr[s]
    fill = source_indptr[:-1].copy()
    entry = np.empty(columns.size, dtype=np.int64)
    target = np.empty(columns.size, dtype=np.int64)
    for t in range(indptr.size - 1):
        for e in range(indptr[t], indptr[t + 1]):
            position = fill[columns[e]]
            entry[position], target[position] = e, t
            fill[columns[e]] = position + 1
    return source_indptr, entry, target


@njit(parallel=True, cache=True, nogil=True)
def _source_grad(source_indptr, entry, target, alpha, grad_out, grad_values):
    """grad_values[s, h] = sum over the entries e with source s of alpha[e, h] * grad_out[t(e), h]."""
    heads, width = grad_values.shape[1], grad_values.shape[2]
    for s in numba.prange(grad_values.shape[0]):
        source = grad_values[s]
        source[:] = 0
        for k in range(source_indptr[s], source_indptr[s + 1]):
            e = entry[k]
            upstream = grad_out[target[k]]
            for h in range(heads):
                weight = alpha[e, h]
                for c in range(width):
                    source[h, c] += weight * upstream[h, c]


class _WeightedSum(torch.autograd.Function):
    """out [rows, H, C] = per row, the alpha-weighted sum of its entries' value rows."""

    @staticmethod
    def forward(ctx, indptr, columns, alpha, values):
        alpha, values = alpha.detach().contiguous(), values.detach().contiguous()
        out = values.new_empty(indptr.numel() - 1, values.shape[1], values.shape[2])
        _weighted_sum(indptr.numpy(), columns.numpy(), alpha.numpy(), values.numpy(),
                      out.numpy())
        ctx.save_for_backward(indptr, columns, alpha, values)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        indptr, columns, alpha, values = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_alpha = grad_values = None
        if ctx.needs_input_grad[2]:
            grad_alpha = torch.empty_like(alpha)
            _weight_grad(indptr.numpy(), columns.numpy(), grad_out.numpy(), values.numpy(),
                         grad_alpha.numpy())
        if ctx.needs_input_grad[3]:
            grad_values = torch.empty_like(values)
            by_source = _by_source(indptr.numpy(), columns.numpy(), values.shape[0])
            _source_grad(*by_source, alpha.numpy(), grad_out.numpy(), grad_values.numpy())
        return None, None, grad_alpha, grad_values


def gat_csr(conv: GATConv, x: torch.Tensor, indptr: torch.Tensor, columns: torch.Tensor,
            training: bool) -> torch.Tensor:
    """PyG's GATConv (one shared projection, no edge features, no residual) over a block
    given as CSR rows of sources per target, each row holding its target's self loop
    and no other (see `gat_rows`): the same logits, softmax and dropout of the weights,
    head concat or mean and bias, with the weighted sum in `_WeightedSum`. float32."""
    with torch.autocast(device_type=x.device.type, enabled=False):
        projected, from_source, at_target = gat_inputs(conv, x)
        return gat_attend(conv, projected, from_source, at_target[:indptr.numel() - 1],
                          indptr, columns, training)


def gat_inputs(conv: GATConv, x: torch.Tensor) -> tuple:
    """Per row of x: (its projection [rows, heads, width], its attention term as a source
    and as a target [rows, heads]). float32. Layer-wise inference computes them once
    for every node of the graph."""
    heads, width = conv.heads, conv.out_channels
    x, weight = x.float(), conv.lin.weight
    projected = F.linear(x, weight).view(-1, heads, width)
    # <x W_h, att_h> = x <W_h, att_h>: each head's attention term straight from x
    # through a [heads, in] map (no [rows, heads, width] product and its backward)
    by_head = weight.view(heads, width, -1)
    return (projected, F.linear(x, (conv.att_src.view(heads, width, 1) * by_head).sum(1)),
            F.linear(x, (conv.att_dst.view(heads, width, 1) * by_head).sum(1)))


def gat_attend(conv: GATConv, projected, from_source, at_target, indptr, columns,
               training: bool) -> torch.Tensor:
    """GATConv's output for the rows' targets (`at_target`: theirs, in row order) from
    the sources' `gat_inputs` (rows of them indexed by `columns`)."""
    heads, width = conv.heads, conv.out_channels
    num_dst = indptr.numel() - 1
    rows = torch.repeat_interleave(torch.arange(num_dst, device=indptr.device),
                                   torch.diff(indptr), output_size=columns.numel())
    logits = F.leaky_relu(from_source[columns] + at_target[rows], conv.negative_slope)
    alpha = F.dropout(softmax(logits, ptr=indptr, num_nodes=num_dst), conv.dropout, training)
    out = _WeightedSum.apply(indptr, columns, alpha, projected)
    out = out.reshape(num_dst, heads * width) if conv.concat else out.mean(1)
    return out if conv.bias is None else out + conv.bias
