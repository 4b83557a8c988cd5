"""Link decoders: the score of a node pair from its two embeddings (`link.decoder`,
`registry.DECODERS`); `score_all` scores rows against every node (top-k partners). Both are symmetric in the pair, so an undirected edge scores the
same either way round. `dot` is GAE's inner product; `mlp` is OGB's link predictor for
GraphSAGE (an MLP over the element-wise product)."""
from __future__ import annotations

import torch
from torch import nn

from .dropout import relu_dropout


class DotDecoder(nn.Module):
    """score(u, v) = <h_u, h_v>: no parameters."""

    def __init__(self, width: int, dropout: float = 0.0):
        super().__init__()

    def forward(self, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        return (h_src * h_dst).sum(-1)

    @torch.no_grad()
    def score_all(self, h_src: torch.Tensor, h_all: torch.Tensor) -> torch.Tensor:
        """[R, N] scores of each of R rows against every one of N (one matrix product)."""
        return h_src @ h_all.T


class MLPDecoder(nn.Module):
    """score(u, v) = MLP(h_u * h_v): Linear(width, width), ReLU, dropout, Linear(width, 1)."""

    def __init__(self, width: int, dropout: float = 0.0):
        super().__init__()
        self.hidden, self.out, self.dropout = nn.Linear(width, width), nn.Linear(width, 1), dropout

    def forward(self, h_src: torch.Tensor, h_dst: torch.Tensor) -> torch.Tensor:
        h = relu_dropout(self.hidden(h_src * h_dst), self.dropout, self.training)
        return self.out(h).squeeze(-1)

    @torch.no_grad()
    def score_all(self, h_src: torch.Tensor, h_all: torch.Tensor) -> torch.Tensor:
        """[R, N] scores of each of R rows against every one of N, a row at a time (the
        MLP reads each pair's product: there is no matrix-product shortcut)."""
        return torch.stack([self(row.expand_as(h_all), h_all) for row in h_src])
