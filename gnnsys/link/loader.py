"""Batches of training edges for link prediction, sampled ahead in a background thread.

A batch takes `batch_size` positive pairs (u, v) of the training graph and one negative
(u, w) per positive, w drawn by `link.negatives`. Every endpoint of the batch seeds one
call of the fused sampler (each node once), so the positives' and the negatives' nodes
share one sampled neighbourhood and one gather (and the first layer's aggregate, where
the model lets the sampler make it). The sampler reads the training graph only: held-out
edges never reach message passing.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from ..minibatch.batch import MiniBatch
from ..minibatch.loader import batch_seed
from ..prefetch import prefetched
from samplers.temporal import shard


@dataclass
class LinkBatch:
    batch: MiniBatch          # the sampled neighbourhood of every endpoint (seeds sorted)
    pos: torch.Tensor         # [2, B] seed positions of the positive pairs' ends
    neg: torch.Tensor         # [2, B] seed positions of the negative pairs' ends
    global_count: int         # positive pairs of the whole batch, every rank's slice together

    @property
    def num_pairs(self) -> int:
        return self.pos.shape[1]

    def to(self, device) -> "LinkBatch":
        return replace(self, batch=self.batch.to(device), pos=self.pos.to(device),
                       neg=self.neg.to(device))


def negative_destinations(how: str, count: int, degree: np.ndarray, rng) -> np.ndarray:
    """`count` negative destinations: "uniform" over the nodes, or "degree" in proportion
    to each node's training degree (nodes with no training edge are never drawn)."""
    if how == "uniform":
        return rng.integers(0, len(degree), count)
    cumulative = np.cumsum(degree, dtype=np.float64)
    return np.searchsorted(cumulative, rng.random(count) * cumulative[-1], side="right")


class EdgeLoader:
    """Iterate `LinkBatch`es over the positive pairs `pairs` ([2, P] node ids).

    `degree` is the training graph's (what "degree" negatives follow). With K workers
    every rank draws the same global batch of `batch_size` positives and their negatives
    (the same seeds) and takes its contiguous slice, so K ranks train on what one
    process would (`LinkBatch.global_count`: the pairs of the whole batch)."""

    def __init__(self, sampler, pairs: np.ndarray, degree: np.ndarray, batch_size: int,
                 negatives: str = "uniform", prefetch: int = 2, seed: int = 0,
                 rank: int = 0, world_size: int = 1, epoch_pairs: int = 0, device=None):
        self.sampler, self.pairs = sampler, np.asarray(pairs, dtype=np.int64)
        self.degree, self.batch_size, self.negatives = degree, batch_size, negatives
        self.prefetch, self.seed = prefetch, seed
        self.rank, self.world_size = rank, world_size
        count = self.pairs.shape[1]
        self.epoch_pairs = min(epoch_pairs, count) if epoch_pairs else count
        self.device = torch.device(device or "cpu")
        need = prefetch + 2
        if getattr(sampler, "num_buffers", need) < need:
            raise ValueError(f"the sampler has {sampler.num_buffers} output buffers but "
                             f"prefetch={prefetch} needs {need}")

    def __len__(self) -> int:
        return -(-self.epoch_pairs // self.batch_size)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The indices into `pairs` of the positives epoch `epoch` trains on, in order."""
        order = np.random.default_rng([self.seed, epoch]).permutation(self.pairs.shape[1])
        return order[:self.epoch_pairs]

    def _chunks(self, epoch: int):
        order = self.epoch_order(epoch)
        for i in range(len(self)):
            yield self.pairs[:, order[i * self.batch_size:(i + 1) * self.batch_size]]

    def make(self, chunk: np.ndarray, seed: int) -> LinkBatch:
        """This rank's slice of the batch of positive pairs `chunk` with its negatives
        (drawn for the whole batch), sampled with `seed`."""
        total = chunk.shape[1]
        fake = negative_destinations(self.negatives, total, self.degree,
                                     np.random.default_rng(seed))
        lo, hi = shard(0, total, self.rank, self.world_size)
        chunk, fake = chunk[:, lo:hi], fake[lo:hi]
        seeds, where = np.unique(np.concatenate([chunk[0], chunk[1], fake]),
                                 return_inverse=True)
        sub = self.sampler.sample(seeds, seed)
        where = torch.from_numpy(where.reshape(3, hi - lo))
        batch = MiniBatch.from_sampled(sub, None, copy_x=False)
        return LinkBatch(batch, where[:2], torch.stack([where[0], where[2]]),
                         total).to(self.device)

    def epoch(self, epoch: int = 0):
        """The batches of one epoch (reproducible for a seed and epoch), `prefetch` ahead."""
        batches = (self.make(chunk, batch_seed(self.seed, epoch, i))
                   for i, chunk in enumerate(self._chunks(epoch)))
        return prefetched(batches, self.prefetch)
