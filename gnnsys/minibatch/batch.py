"""The minibatch mode's batch type: what its sampler hands to a model (temporal mode has
its own batches, gnnsys/temporal/batch.py; full-graph mode trains on its whole partition).

A `MiniBatch` is a stack of bipartite `Block`s (PyG-style `edge_index` with source and
target local ids) plus the input features and the seed labels. Blocks are ordered the
way the model applies them: `blocks[0]` consumes the input features, `blocks[-1]`
produces the seed outputs. Targets of a block are a prefix of its sources (the seeds
come first in `n_id`), so `x[:block.num_dst]` are the target rows.

Where the sampler aggregated the first layer's sampled sources itself (`x_agg`: SAGE's
mean or GCN's normalised sum, samplers/_aggregate.py), `x` and `n_id` stop at the first
layer's targets and `blocks[0]` has no edges: the model reads the aggregate from `x_agg`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ..sparse_features import csr_tensor, is_sparse


@dataclass
class Block:
    edge_index: torch.Tensor          # [2, E] int64: row 0 source local id, row 1 target
    num_src: int
    num_dst: int

    @property
    def size(self) -> tuple[int, int]:
        return (self.num_src, self.num_dst)

    def to(self, device, non_blocking: bool = False) -> "Block":
        return replace(self, edge_index=self.edge_index.to(device, non_blocking=non_blocking))


@dataclass
class MiniBatch:
    n_id: torch.Tensor                # [num_input] int64 global ids, seeds first
    x: torch.Tensor                   # [num_input, F] input features (dense, or sparse CSR)
    y: torch.Tensor | None            # [num_seeds] labels (None at inference)
    blocks: list = field(default_factory=list)
    missing: torch.Tensor | None = None   # positions in x that a remote fetch must fill
    x_agg: torch.Tensor | None = None     # [blocks[0].num_dst, F] the first layer's aggregate

    @property
    def num_seeds(self) -> int:
        return self.blocks[-1].num_dst if self.blocks else len(self.n_id)

    def to(self, device, non_blocking: bool = False) -> "MiniBatch":
        move = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)
        return replace(self, n_id=move(self.n_id), x=move(self.x), y=move(self.y),
                       blocks=[b.to(device, non_blocking) for b in self.blocks],
                       missing=move(self.missing), x_agg=move(self.x_agg))

    @classmethod
    def from_sampled(cls, sub, labels=None, copy_x: bool = True) -> "MiniBatch":
        """Wrap a `samplers.SampledSubgraph` without moving it: host arrays become CPU
        tensors, the GPU sampler's device arrays (`sample(on_device=True)`) CUDA tensors
        over the same memory. `labels` (numpy or a tensor; keep a tensor on the batch's
        device to avoid a copy per batch) gives y. `copy_x` detaches x from the sampler's
        reusable buffer (needed when batches are prepared ahead of the model step)."""
        n_id = sampled_tensor(sub.n_id).long()
        blocks = []
        for h in reversed(range(sub.num_hops)):
            num_dst, num_src = int(sub.hop_sizes[h]), int(sub.hop_sizes[h + 1])
            if sub.x_agg is not None and h == sub.num_hops - 1:     # aggregated by the sampler
                blocks.append(Block(edge_index=torch.empty(2, 0, dtype=torch.long,
                                                           device=n_id.device),
                                    num_src=num_dst, num_dst=num_dst))
                continue
            indptr = sampled_tensor(sub.block_indptr[h])
            sources = sampled_tensor(sub.block_indices[h]).long()
            # Target of every pick: block row i repeated (indptr[i+1] - indptr[i]) times.
            targets = torch.repeat_interleave(torch.diff(indptr), output_size=len(sources))
            blocks.append(Block(edge_index=torch.stack([sources, targets]),
                                num_src=num_src, num_dst=num_dst))
        x = x_agg = None
        if sub.x_agg is not None:
            x_agg = sampled_tensor(sub.x_agg)
            x_agg = x_agg.clone() if copy_x else x_agg
        if is_sparse(sub.x):                  # fresh arrays of the sampler's: no copy needed
            x = csr_tensor(sub.x)
        elif sub.x is not None:
            x = sampled_tensor(sub.x)
            x = x.clone() if copy_x else x
        y = None
        if labels is not None:
            labels = torch.as_tensor(labels).to(n_id.device)
            y = labels[n_id[:sub.num_seeds]].long()
        missing = torch.from_numpy(np.asarray(sub.missing, dtype=np.int64))
        return cls(n_id=n_id, x=x, y=y, blocks=blocks, missing=missing, x_agg=x_agg)


def sampled_tensor(array) -> torch.Tensor:
    """A sampler output as a tensor, without a copy: numpy -> CPU tensor, a numba device
    array -> CUDA tensor (through __cuda_array_interface__). numba's CUDA simulator (tests)
    has device arrays but no CUDA torch: there the array is copied to the host."""
    if isinstance(array, np.ndarray):
        return torch.from_numpy(array)
    if torch.cuda.is_available():
        return torch.as_tensor(array)        # on the GPU the array lives on
    return torch.from_numpy(array.copy_to_host())
