"""Minibatches for an epoch, prepared in a background thread while the model trains.

As in SALIENT, batch preparation (the fused sample+gather kernel, which releases the
GIL) runs in a worker thread and feeds a bounded queue, so sampling batch i+1 overlaps
the model step on batch i. Input features are not copied out of the sampler's ring of
buffers: the ring holds `prefetch + 2` buffers (the batch in training, the queued ones
and the one being written), so a buffer is reused only after its batch is done.
"""
from __future__ import annotations

import numpy as np
import torch

from ..models.registry import model_class
from ..prefetch import prefetched
from ..sparse_features import densified, is_sparse
from .batch import MiniBatch


def fused_sampler(config, indptr, indices, features, *, row_of=None, threads=None,
                  gpu_tiers=None):
    """The fused sample+gather kernel for `config.sampler.device` over `features` (rows
    of node ids through `row_of`, None = row i is node i), with `sampler.prefetch + 2`
    output buffers. 'auto' picks the GPU kernel (samplers/fused_gpu.py) when a CUDA GPU
    is present. On the GPU path `gpu_tiers()` returns the feature tiers' options
    ({'budgets': TierBudgets, 'hotness': [N] scores}); it is called only there, since the
    hotness is an array over all nodes. Default: `cache.device_fraction` of the rows on
    the device, hottest by degree, the rest in pinned host memory. The GPU kernel gathers
    dense rows: sparse (CSR) features are densified for it, with a logged line. Where
    `first_layer_aggregate` says so, the kernel also aggregates the first layer's sources."""
    from samplers.fused_gpu import make_sampler, resolve_device
    from samplers.gpu_tiers import TierBudgets
    device = resolve_device(config.sampler.device)
    options = {"num_buffers": config.sampler.prefetch + 2}
    options["aggregate"] = first_layer_aggregate(config, features, row_of)
    if device != "cpu" and features is not None:
        features = densified(features, f"sampler.device={device}: the GPU sampler gathers "
                             "dense rows (sampler.device=cpu keeps them sparse)")
        if gpu_tiers is not None:
            options.update(gpu_tiers())
        else:
            row_bytes = features.shape[1] * features.dtype.itemsize
            options["budgets"] = TierBudgets.from_device_fraction(
                features.shape[0], row_bytes, config.cache.device_fraction)
    return make_sampler(device, indptr, indices, list(config.sampler.fanouts),
                        features=features, row_of=row_of, num_threads=threads, **options)


def first_layer_aggregate(config, features, row_of) -> str | None:
    """The aggregation the sampler does for the first layer instead of gathering its
    sources' rows (samplers/_aggregate.py), or None: where the first layer is linear in
    those rows (SAGE's mean, GCN's normalised sum), the rows dense float32 and every one
    local (a worker holding part of the rows fetches the others after sampling, so it
    gathers)."""
    if (features is None or is_sparse(features) or features.dtype != np.float32
            or row_of is not None):
        return None
    return model_class("minibatch", config.model.arch).first_layer_aggregate


def store_sampler(config, indptr, indices, store):
    """A worker's fused sampler over its FeatureStore's table (`sampler.device`): on a GPU
    the store's tiers (cache + hottest local rows on the device, see FeatureStore.hotness)."""
    return fused_sampler(config, indptr, indices, store.table, row_of=store.row_of,
                         threads=config.sampler.threads, gpu_tiers=store.gpu_tiers)


def batch_seed(base: int, epoch: int, index: int) -> int:
    """A distinct, reproducible sampling seed per (run seed, epoch, batch)."""
    return (base * 1_000_003 + epoch) * 1_000_033 + index


class NodeLoader:
    """Iterate `MiniBatch`es over `seeds` with a fused sampler.

    Example::

        sampler = FusedSampler(g.indptr, g.indices, [15, 10], features=g.x, num_buffers=4)
        loader = NodeLoader(sampler, g.train_idx, g.y, batch_size=1024, prefetch=2)
        for batch in loader.epoch(0):
            logits = model(batch.x, batch.blocks)

    Each batch goes through three stages, in the background thread:
    1. sample: the fused sample + gather kernel (on a GPU with `device` a CUDA device, the
       batch stays in the kernel's device buffers: no copy to the host and back);
    2. fetch missing: `transform` (e.g. FeatureStore.fill_missing) writes rows other
       workers hold into the batch, wherever it is, once;
    3. to device: the batch moved to `device` (nothing left to move if sampled there).
    `num_batches` forces an exact batch count per epoch (seeds are cycled or cut), which
    distributed training needs so every rank runs the same number of steps.
    """

    def __init__(self, sampler, seeds, labels=None, batch_size: int = 1024,
                 shuffle: bool = True, drop_last: bool = False, prefetch: int = 2,
                 seed: int = 0, num_batches: int | None = None, transform=None,
                 device=None):
        self.sampler = sampler
        self.seeds = np.asarray(seeds, dtype=np.int64)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.prefetch, self.seed = prefetch, seed
        self.num_batches, self.transform = num_batches, transform
        self.device = torch.device(device or "cpu")
        # The GPU kernel can hand out its device buffers; the CPU one fills host memory.
        self.sample_on_device = (self.device.type == "cuda"
                                 and getattr(sampler, "device_resident", False))
        self.labels = None if labels is None else torch.tensor(
            np.asarray(labels, dtype=np.int64), device=self.device if
            self.sample_on_device else "cpu")
        need = prefetch + 2
        if getattr(sampler, "num_buffers", need) < need:
            raise ValueError(f"the sampler has {sampler.num_buffers} output buffers but "
                             f"prefetch={prefetch} needs {need}; construct it with "
                             f"num_buffers={need}")

    def __len__(self) -> int:
        if self.num_batches is not None:
            return self.num_batches
        n = len(self.seeds)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _chunks(self, epoch: int):
        order = self.seeds
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.seeds)
        if self.num_batches is not None:
            need = self.num_batches * self.batch_size
            if len(order) and len(order) < need:
                order = np.resize(order, need)
        for i in range(len(self)):
            yield order[i * self.batch_size:(i + 1) * self.batch_size]

    def _make(self, epoch: int, i: int, chunk: np.ndarray) -> MiniBatch:
        seed = batch_seed(self.seed, epoch, i)
        sub = (self.sampler.sample(chunk, seed, on_device=True) if self.sample_on_device
               else self.sampler.sample(chunk, seed))
        batch = MiniBatch.from_sampled(sub, self.labels, copy_x=False)
        if self.transform:
            batch = self.transform(batch)
        return batch.to(self.device)

    def epoch(self, epoch: int = 0):
        """The batches of one epoch (reproducible for a given seed and epoch), prepared
        `prefetch` ahead in a background thread."""
        batches = (self._make(epoch, i, chunk) for i, chunk in enumerate(self._chunks(epoch)))
        return prefetched(batches, self.prefetch)
