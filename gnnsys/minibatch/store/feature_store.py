"""One worker's feature store: its own rows in VIP order, then the cached remote rows.

    table  = [ local rows (hottest first) | cached remote rows ]
    row_of = global id -> row in table, or -1 (no copy here: fetched from the owner)

Sparse (CSR) features stay CSR: the table is a CSR matrix, the sampler gathers a batch's
nonzeros, peers send rows as their nonzeros (fetch.py), and `fill_missing` merges them
into the CSR batch once.

The fused sampler gathers straight from `table` through `row_of` and lists the rows no
tier holds in `missing`; `fill_missing` fetches those from their owners and scatters
them into the batch, on whatever device the batch's features are (it runs in the loader
thread, so batch i+1's fetch overlaps the training step of batch i).

With a GPU (`sampler.device` auto/cuda), the GPU fused sampler splits `table` into tiers
as SALIENT++ does: `hotness()` ranks the cached remote rows first (cache order, hottest
first), then the local rows in their on-disk VIP order, and `tier_budgets()` gives the
device room for the whole cache plus the first `device_rows` (= cache.device_fraction)
local rows; the other local rows are read in place from pinned host memory.

Counters per epoch (`take_stats`): rows read locally, cache hits, remote rows fetched,
rows served to peers, bytes sent/received and seconds spent in the fetch collectives.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from partition.format import PartitionBook, PartitionSet
from ...sparse_features import (as_csr, csr_tensor, densified, feature_bytes, head_rows,
                                is_sparse, stacked, tensor_csr, with_rows)
from .fetch import RemoteFetcher
from .policy import select_cache


class FeatureStore:
    def __init__(self, book: PartitionBook, part: int, local_x: np.ndarray,
                 cached_ids: np.ndarray, fetcher: RemoteFetcher,
                 device_fraction: float = 0.0, policy: str = "none"):
        self.book, self.part, self.policy = book, part, policy
        self.fetcher = fetcher
        lo, hi = book.range(part)
        n_local, n_cached = hi - lo, len(cached_ids)
        self.num_local, self.num_cached = n_local, n_cached
        self.cached_ids = np.asarray(cached_ids, dtype=np.int64)
        # The cache is filled once, before training, with the same exchange as a batch.
        cached_x = fetcher.fetch(self.cached_ids)
        if is_sparse(local_x):
            self.table = stacked(as_csr(local_x), cached_x)
        else:
            self.table = np.empty((n_local + n_cached, local_x.shape[1]), dtype=local_x.dtype)
            self.table[:n_local] = local_x
            self.table[n_local:] = cached_x
        # Serve peers from the in-memory copy from now on, not from the memory-mapped file.
        fetcher.local_rows = head_rows(self.table, n_local)
        # Keep the one-off fill's traffic out of the first epoch's counters.
        self.fill_traffic = fetcher.comm.reset_stats()
        fetcher.rows_served = fetcher.row_bytes_recv = 0
        self.row_of = np.full(book.num_nodes, -1, dtype=np.int64)
        self.row_of[lo:hi] = np.arange(n_local)
        self.row_of[self.cached_ids] = n_local + np.arange(n_cached)
        self.device_rows = int(n_local * device_fraction)
        self._reset_counters()

    @classmethod
    def open(cls, parts: PartitionSet, part: int, comm, *, indptr, indices, policy: str,
             replication: float, fanouts, batch_size: int, device_fraction: float = 0.0):
        """Build the store of `part`; every rank must call it together (cache fill)."""
        local_x = parts.features(part)
        if local_x is None:
            raise ValueError(f"{parts.path} has no features; minibatch training needs them")
        train = parts.array(part, "train_idx")
        train = np.empty(0, np.int64) if train is None else np.asarray(train)
        cached = select_cache(policy, indptr, indices, parts.book, part, train, fanouts,
                              batch_size, replication)
        local_x = local_x if is_sparse(local_x) else np.asarray(local_x)
        fetcher = RemoteFetcher(comm, parts.book, part, local_x)
        return cls(parts.book, part, local_x, cached, fetcher, device_fraction,
                   policy)

    # ------------------------------------------------------------------ GPU tiers
    def hotness(self) -> np.ndarray:
        """Placement score of every global node for the GPU sampler's feature tiers
        (int64 [N], higher = hotter, 0 = no copy here): cached remote rows above all local
        rows, each group in its own hottest-first order (cache: by the policy's score;
        local: by VIP, the on-disk row order)."""
        # SALIENT++ keeps the whole cache in GPU memory, then gpu_percent of the local rows
        # by VIP: a cached row is a top-VIP remote row, and it is what saves a fetch.
        lo = self.book.range(self.part)[0]
        score = np.zeros(self.book.num_nodes, dtype=np.int64)
        score[lo:lo + self.num_local] = np.arange(self.num_local, 0, -1)
        score[self.cached_ids] = self.num_local + np.arange(self.num_cached, 0, -1)
        return score

    def tier_budgets(self):
        """Device budget for `hotness()`: the cache plus the first `device_rows` local
        rows; every other local row in pinned host memory (samplers.gpu_tiers)."""
        from samplers.gpu_tiers import TierBudgets
        row_bytes = self.table.shape[1] * self.table.dtype.itemsize   # densified on a GPU
        return TierBudgets(device_bytes=(self.num_cached + self.device_rows) * row_bytes)

    def gpu_tiers(self) -> dict:
        """The GPU fused sampler's feature-tier options (gnnsys.minibatch.loader.fused_sampler)."""
        return {"budgets": self.tier_budgets(), "hotness": self.hotness()}

    # ------------------------------------------------------------------ per batch
    def fill_missing(self, batch):
        """Fetch the rows of `batch.missing` from their owners, write them into batch.x
        (on batch.x's device). A collective: every rank calls it once per batch."""
        n_id = batch.n_id.cpu().numpy()
        rows = self.row_of[n_id]
        self.local_reads += int(np.count_nonzero((rows >= 0) & (rows < self.num_local)))
        self.cache_hits += int(np.count_nonzero(rows >= self.num_local))
        missing = (batch.missing.cpu().numpy() if batch.missing is not None
                   else np.empty(0, np.int64))
        t0 = time.perf_counter()
        fetched = self.fetcher.fetch(n_id[missing])
        self.fetch_s += time.perf_counter() - t0
        if missing.size and is_sparse(batch.x):
            batch.x = csr_tensor(with_rows(tensor_csr(batch.x), missing, fetched))
        elif missing.size:
            fetched = densified(fetched)         # the GPU sampler's batches are dense
            device = batch.x.device
            batch.x[torch.from_numpy(missing).to(device)] = \
                torch.from_numpy(fetched).to(device, batch.x.dtype)
        self.remote_rows += int(missing.size)
        self.batches += 1
        return batch

    # ------------------------------------------------------------------ counters
    def _reset_counters(self):
        self.local_reads = self.cache_hits = self.remote_rows = self.batches = 0
        self.fetch_s = 0.0

    def take_stats(self) -> dict:
        """This epoch's counters (then reset): what the cache saved and what crossed."""
        served, received = self.fetcher.rows_served, self.fetcher.row_bytes_recv
        self.fetcher.rows_served = self.fetcher.row_bytes_recv = 0
        # bytes and wait come from the Communicator (the training loop logs them)
        out = {"local_rows": self.local_reads, "cache_hits": self.cache_hits,
               "remote_rows": self.remote_rows, "rows_served": served,
               "remote_feature_bytes": received,
               "fetch_s": round(self.fetch_s, 4), "batches": self.batches}
        self._reset_counters()
        return out

    def describe(self) -> dict:
        return {"policy": self.policy, "local_rows": self.num_local,
                "cached_rows": self.num_cached, "device_rows": self.device_rows,
                "table_bytes": feature_bytes(self.table), "sparse": is_sparse(self.table)}
