"""The sampler's output: one sampled multi-hop neighbourhood with its gathered features.

Plain numpy, no torch: `gnnsys.minibatch.batch.MiniBatch.from_sampled` wraps it for the model.

Layout (SALIENT/PyG convention):
- `n_id` lists global node ids: the seeds first (in seed order, repeats kept as given),
  then each hop's newly discovered nodes in discovery order. Local id = position in n_id.
- `hop_sizes[h]` = number of nodes known after hop h (hop_sizes[0] = number of seeds), so
  the nodes of hop h's targets are n_id[:hop_sizes[h]] and its sources n_id[:hop_sizes[h+1]].
- `block_indptr[h]`, `block_indices[h]`: CSR of hop h (h = 0 is the hop out of the seeds).
  Row i (a target, local id i < hop_sizes[h]) lists the local ids of its sampled sources.
- `x`: feature rows of every node in n_id, in n_id order. Usually a view into a buffer the
  sampler reuses across batches: copy it if you keep it past the next batch.
- `missing`: positions in n_id whose rows no local tier holds (the distributed store
  fetches them); empty on a single machine.
- `x_agg` (a sampler built with aggregate="mean" or "gcn"): [hop_sizes[-2], F] float32,
  row i the aggregate of the feature rows of the last hop's sampled sources of target i
  (samplers/_aggregate.py: the first layer's neighbour mean, zero where it has none, or
  its GCN-normalised sum with the self loop). The last hop's sources are then not
  relabelled: `block_indices[-1]` lists their *global* ids, no node is added by the last
  hop (hop_sizes[-1] == hop_sizes[-2]), and n_id and x hold the last hop's targets only.
  Reused across batches like x.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SampledSubgraph:
    n_id: np.ndarray
    hop_sizes: list
    block_indptr: list
    block_indices: list
    x: np.ndarray | None = None
    missing: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    x_agg: np.ndarray | None = None

    @property
    def num_seeds(self) -> int:
        return int(self.hop_sizes[0])

    @property
    def num_hops(self) -> int:
        return len(self.block_indptr)

    @property
    def num_sampled_edges(self) -> int:
        return int(sum(len(ix) for ix in self.block_indices))
