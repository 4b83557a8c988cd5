"""The one minibatch type every training mode hands to a model.

A `MiniBatch` is a stack of bipartite `Block`s (PyG-style `edge_index` with source and
target local ids) plus the input features and the seed labels. Blocks are ordered the
way the model applies them: `blocks[0]` consumes the input features, `blocks[-1]`
produces the seed outputs. Targets of a block are a prefix of its sources (the seeds
come first in `n_id`), so `x[:block.num_dst]` are the target rows.

Temporal mode fills the optional `edge_time` / `e_id` of a block; full-graph mode uses a
single block over the whole (partitioned) graph.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch


@dataclass
class Block:
    edge_index: torch.Tensor          # [2, E] int64: row 0 source local id, row 1 target
    num_src: int
    num_dst: int
    e_id: torch.Tensor | None = None  # global edge ids (temporal / edge features)
    edge_time: torch.Tensor | None = None

    @property
    def size(self) -> tuple[int, int]:
        return (self.num_src, self.num_dst)

    def to(self, device, non_blocking: bool = False) -> "Block":
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)
        return replace(self, edge_index=move(self.edge_index), e_id=move(self.e_id),
                       edge_time=move(self.edge_time))


@dataclass
class MiniBatch:
    n_id: torch.Tensor                # [num_input] int64 global ids, seeds first
    x: torch.Tensor                   # [num_input, F] input features
    y: torch.Tensor | None            # [num_seeds] labels (None at inference)
    blocks: list = field(default_factory=list)
    missing: torch.Tensor | None = None   # positions in x that a remote fetch must fill

    @property
    def num_seeds(self) -> int:
        return self.blocks[-1].num_dst if self.blocks else len(self.n_id)

    def to(self, device, non_blocking: bool = False) -> "MiniBatch":
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)
        return replace(self, n_id=move(self.n_id), x=move(self.x), y=move(self.y),
                       blocks=[b.to(device, non_blocking) for b in self.blocks],
                       missing=move(self.missing))

    @classmethod
    def from_sampled(cls, sub, labels: np.ndarray | None = None,
                     copy_x: bool = True) -> "MiniBatch":
        """Wrap a `samplers.SampledSubgraph`; `copy_x` detaches x from the sampler's
        reusable buffer (needed when batches are prepared ahead of the model step)."""
        blocks = []
        for h in reversed(range(sub.num_hops)):
            indptr, indices = sub.block_indptr[h], sub.block_indices[h]
            num_dst, num_src = int(sub.hop_sizes[h]), int(sub.hop_sizes[h + 1])
            dst = np.repeat(np.arange(num_dst, dtype=np.int64), np.diff(indptr))
            edge_index = torch.from_numpy(np.stack([indices.astype(np.int64), dst]))
            blocks.append(Block(edge_index=edge_index, num_src=num_src, num_dst=num_dst))
        x = torch.from_numpy(np.array(sub.x) if copy_x else sub.x) if sub.x is not None else None
        n_id = torch.from_numpy(np.asarray(sub.n_id, dtype=np.int64))
        y = None
        if labels is not None:
            y = torch.from_numpy(np.asarray(labels[sub.n_id[:sub.num_seeds]], dtype=np.int64))
        missing = torch.from_numpy(np.asarray(sub.missing, dtype=np.int64))
        return cls(n_id=n_id, x=x, y=y, blocks=blocks, missing=missing)
