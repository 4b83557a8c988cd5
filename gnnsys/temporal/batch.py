"""Per-worker batch preparation: a worker's shard of a global chronological batch, its
negative destinations and sampled temporal neighbours, and the vertex ids it must fetch.

Preparation touches only the replicated event stream and T-CSR, never memory, so it can
run ahead of training in a background thread (`gnnsys.minibatch.loader.prefetched`) without breaking the rule that
batch t+1 reads memory only after batch t has written it back.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from samplers.temporal import (NegativeSampler, SampledNeighbors, chronological_batches,
                               sample_neighbors, shard)

PHASES = {"train": 0, "val": 1, "test": 2}


@dataclass
class PreparedBatch:
    index: int                       # position of the global batch in its phase
    global_size: int                 # events in the global batch (the loss denominator)
    events: np.ndarray               # int64 [b] event ids of this worker's shard
    src: np.ndarray
    dst: np.ndarray
    time: np.ndarray                 # float64 [b]
    negatives: np.ndarray            # int64 [b, n_neg]
    neighbors: SampledNeighbors | None   # for the roots (src, dst, negatives), if the model attends

    @property
    def roots(self) -> np.ndarray:
        """src, dst, then negatives row-major: root r of event i at r = i, b+i, 2b+i*n+j."""
        return np.concatenate([self.src, self.dst, self.negatives.reshape(-1)])

    @property
    def root_time(self) -> np.ndarray:
        n = self.negatives.shape[1]
        return np.concatenate([self.time, self.time, np.repeat(self.time, n)])

    @property
    def needed(self) -> np.ndarray:
        """Every vertex occurrence whose memory the step reads (roots, then neighbours)."""
        if self.neighbors is None:
            return self.roots
        return np.concatenate([self.roots, self.neighbors.nodes[self.neighbors.mask]])

    @property
    def written(self) -> np.ndarray:
        return np.concatenate([self.src, self.dst])


class BatchPlanner:
    """Builds the PreparedBatch of every (phase, batch) for one worker, deterministically."""

    def __init__(self, events, batch_size: int, rank: int, world_size: int, seed: int,
                 num_neighbors: int, strategy: str, uses_neighbors: bool):
        self.events, self.batch_size = events, batch_size
        self.rank, self.world_size = rank, world_size
        self.seed, self.num_neighbors, self.strategy = seed, num_neighbors, strategy
        self.uses_neighbors = uses_neighbors
        self.negative_sampler = NegativeSampler(events.negatives, seed)

    def batches(self, phase: str) -> list[tuple[int, int]]:
        lo, hi = getattr(self.events, phase)
        return chronological_batches(lo, hi, self.batch_size)

    def prepare(self, phase: str, epoch: int, index: int, lo: int, hi: int,
                num_negatives: int) -> PreparedBatch:
        # negatives are drawn for the whole global batch and sliced, so any worker count
        # sees exactly the single-process negatives
        negatives = self.negative_sampler.sample((hi - lo, num_negatives),
                                                 stream=(PHASES[phase], epoch, index))
        a, b = shard(lo, hi, self.rank, self.world_size)
        ev = self.events
        batch = PreparedBatch(index=index, global_size=hi - lo,
                              events=np.arange(a, b, dtype=np.int64), src=ev.src[a:b],
                              dst=ev.dst[a:b], time=ev.t[a:b],
                              negatives=negatives[a - lo:b - lo], neighbors=None)
        if self.uses_neighbors:
            seed = (self.seed * 1_000_003 + PHASES[phase]) * 1_000_003 + epoch
            batch.neighbors = sample_neighbors(ev.csr, batch.roots, batch.root_time,
                                               self.num_neighbors, self.strategy, seed=seed)
        return batch

    def epoch(self, phase: str, epoch: int, num_negatives: int):
        for index, (lo, hi) in enumerate(self.batches(phase)):
            yield self.prepare(phase, epoch, index, lo, hi, num_negatives)
