"""GCN and GraphSAGE whose layers aggregate over a partition with halo exchange.

Each layer aggregates, then transforms (AdaQP order, ../shared/ALGORITHMS.md 4.3.2), so the
messages of layer l have that layer's input width:

    GCN:  out = (A_hat H) W + b
    SAGE: out = (mean_{u in N(v)} H_u) W_neigh + H_v W_root + b
    hidden layers: ReLU(norm(out)) then dropout; the last layer gives logits.

Sparse (CSR) input features are the exception: the first layer projects, then
aggregates, (A X) W = A (X W), so X is only ever multiplied sparse x dense and the
first layer's messages are its projected rows (output width, e.g. 64 instead of a
bag-of-words width of thousands), whose gradients travel back like any later layer's.

The model itself is an ordinary nn.Module; where the rows live is the business of
`HaloAggregate`, so with one worker it is plain full-graph training.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..models.dropout import relu_dropout
from ..models.norm import NORM_LAYERS
from .exchange import AggregationStep, HaloExchanger, halo_aggregate

NORMS = ("none", "layer")   # batch norm would need statistics synchronised across partitions


class FullGraphGNN(nn.Module):
    def __init__(self, arch: str, in_dim: int, hidden: int, out_dim: int, layers: int,
                 dropout: float = 0.5, norm: str = "none"):
        super().__init__()
        self.arch, self.dropout = arch, dropout
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.neigh = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.root = nn.ModuleList(nn.Linear(a, b, bias=False)
                                  for a, b in zip(dims[:-1], dims[1:])) if arch == "sage" else None
        self.norms = nn.ModuleList(NORM_LAYERS[norm](d) for d in dims[1:-1])

    @property
    def num_layers(self) -> int:
        return len(self.neigh)

    def forward(self, x: torch.Tensor, exchanger: HaloExchanger, quantized: bool,
                layers: int | None = None) -> torch.Tensor:
        """x: features of this worker's inner nodes [central | marginal]; returns their
        logits (or the output of the first `layers` layers)."""
        h = x
        for layer in range(layers or self.num_layers):
            step = AggregationStep(exchanger.plan, exchanger, layer, quantized)
            neigh = self.neigh[layer]
            if h.layout == torch.strided:
                out = neigh(halo_aggregate(h, step))
            else:                   # sparse x dense first: see the module docstring
                out = halo_aggregate(F.linear(h, neigh.weight), step) + neigh.bias
            if self.root is not None:
                out = out + self.root[layer](h)
            if layer < self.num_layers - 1:
                out = relu_dropout(self.norms[layer](out), self.dropout, self.training)
            h = out
        return h
