"""Batch norm over every rank's rows: the statistics of the whole graph, not a part's.

A full-graph step sees all of a rank's rows at once, so one rank's batch statistics
would make K workers train another model than one process; here the column sums and
sums of squares are all-reduced (and their gradients, in backward), so every rank
normalises by the statistics one process computes, up to summation order.
"""
from __future__ import annotations

import torch
from torch import nn


class _AllReduceSum(torch.autograd.Function):
    """The sum over ranks; its gradient is the sum over ranks of each rank's gradient
    (every rank's loss reads the sum)."""

    @staticmethod
    def forward(ctx, tensor, comm):
        ctx.comm = comm
        return comm.all_reduce(tensor.clone())

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.all_reduce(grad.clone()), None


def synced_batch_norm(norm: nn.Module, x: torch.Tensor, comm) -> torch.Tensor:
    """`norm` (a BatchNorm1d, or PyG's BatchNorm holding one) on rows `x` of this rank:
    in training by the statistics of every rank's rows, its running statistics updated
    with them as BatchNorm1d would; in evaluation the module itself."""
    norm = getattr(norm, "module", norm)
    if not norm.training:
        return norm(x)
    width = x.shape[1]
    count = torch.full((1,), float(x.shape[0]), dtype=x.dtype, device=x.device)
    totals = _AllReduceSum.apply(torch.cat([x.sum(0), (x * x).sum(0), count]), comm)
    rows = totals[-1].detach()
    mean = totals[:width] / rows
    var = (totals[width:2 * width] / rows - mean * mean).clamp_min(0)
    if norm.track_running_stats:
        with torch.no_grad():
            norm.num_batches_tracked += 1
            m = norm.momentum if norm.momentum is not None else \
                1.0 / float(norm.num_batches_tracked)      # BatchNorm1d's running average
            norm.running_mean.mul_(1 - m).add_(m * mean)
            norm.running_var.mul_(1 - m).add_(m * var * rows / (rows - 1).clamp_min(1))
    out = (x - mean) * torch.rsqrt(var + norm.eps)
    return out * norm.weight + norm.bias if norm.affine else out
