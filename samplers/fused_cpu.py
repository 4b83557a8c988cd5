"""Fused CPU neighbour sampler: multi-hop sampling, relabelling and feature gather in one call.

The SALIENT recipe (../shared/ALGORITHMS.md 1.6) in numba: Floyd sampling without replacement,
an open-addressing global->local map reused across hops, and the feature rows of every
sampled node written straight into a reusable output buffer, with no intermediate
`index_select`. Knows arrays only: depends on numpy, scipy and numba, never on
gnnsys/torch.

    >>> import numpy as np
    >>> from samplers import FusedSampler
    >>> indptr = np.array([0, 2, 3, 4], dtype=np.int64)     # 0 <- {1, 2}, 1 <- 0, 2 <- 0
    >>> indices = np.array([1, 2, 0, 0], dtype=np.int32)
    >>> feats = np.arange(6, dtype=np.float32).reshape(3, 2)
    >>> sub = FusedSampler(indptr, indices, fanouts=[2], features=feats).sample(
    ...     np.array([0]), seed=0)
    >>> sub.n_id.tolist(), sub.hop_sizes, sub.x.tolist()
    ([0, 1, 2], [1, 3], [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])

Semantics (see samplers/types.py for the layout):
- Hop h samples, for every node known so far (targets = n_id[:hop_sizes[h]]), up to
  fanouts[h] distinct in-neighbours uniformly without replacement (Robert Floyd's
  algorithm, inclusive range); all of them if degree <= fanout or fanout == -1, in CSR
  order. Picks of one target are listed in Floyd's draw order (not sorted).
- Randomness: target at position i of hop h draws from its own splitmix64 stream
  keyed by (seed, h, i) (common/rng.py), so a batch is a pure function of
  (graph, seeds, fanouts, seed), whatever the thread count.
- Discovery order: new nodes of hop h are appended to n_id in the order they first
  appear when reading the hop's sampled lists target by target.
- Repeated seeds: n_id[:B] is `seeds` exactly, so a repeated seed has one slot per
  occurrence and each slot is a target with its own independent sample at every hop.
  When the node shows up as a sampled source (from any target), the edge points at its
  FIRST slot; the later slots therefore only ever appear as targets.
- Features: x[i] = features[row_of[n_id[i]]] (row_of None: features[n_id[i]]); where
  row_of is -1 the row is zero and i is listed in `missing`.
- Sparse features (a scipy CSR matrix): x is a CSR matrix of the sampled rows' nonzeros
  (samplers/_gather_csr.py), in fresh arrays owned by the caller; a missing row is empty.
- Buffer lifetime (dense features): `x` is a view into buffer (call number %
  num_buffers) of a ring the sampler reuses; it stays valid for the next
  num_buffers - 1 calls, then is overwritten. Copy it (MiniBatch.from_sampled(copy_x=True)) to keep it longer. n_id
  and the blocks are fresh arrays owned by the caller.
- One sampler instance serves one thread at a time (its workspaces are shared); use
  one instance per loader thread. The kernels release the GIL.

How a call runs (phases timed in `last_timings`, seconds):
  per hop: sample (count picks, prefix-sum, fill picks: parallel over targets), then
  relabel (node map lookups in discovery order, samplers/_node_map.py); finally gather
  (parallel over rows). Below SHARDED_RELABEL_MIN_THREADS threads the relabel is one
  serial pass, so the other threads gather, meanwhile, the rows of every node known
  before the hop (`overlap_gather`; `last_rows_gathered_beside_relabel` counts them).
  That keeps both cores busy during the serial part and takes about a quarter of the
  rows off the final gather.
  Parallel loops hand out chunks from a shared counter, so a late or descheduled thread
  delays a loop by at most one chunk (samplers/_intrinsics.py).
"""
from __future__ import annotations

import threading
import time

import numba
import numpy as np
import scipy.sparse as sp
from numba import njit, prange

from samplers._aggregate import AGGREGATES, aggregate_rows
from samplers._gather import (NO_MISSING_FLAGS, NO_ROW_MAP, as_bytes, gather_blocks,
                              gather_rows)
from samplers._gather_csr import gather_csr_rows
from samplers._hop_sampling import count_hop, fill_hop
from samplers._inputs import checked_csr, checked_fanouts, checked_row_of, checked_seeds
from samplers._node_map import NodeMap, relabel_hop_serial
from common.rng import seed_to_u64
from samplers.types import SampledSubgraph

# The parallel (sharded) relabel pays off from this many threads on; below it the
# one-pass serial relabel is faster (see samplers/_node_map.py).
SHARDED_RELABEL_MIN_THREADS = 8


@njit(parallel=True, nogil=True, cache=True)
def relabel_beside_gather(words, tag, candidates, num_candidates, next_id, n_id, local_ids,
                          features, row_of, gather_begin, gather_end, out, is_missing,
                          num_workers):
    """The serial relabel of a hop on the calling thread while the other num_workers - 1
    threads gather rows [gather_begin, gather_end) of n_id (all known before the hop, so
    untouched by the relabel, which only appends); the calling thread joins the gather
    once its relabel is done. Returns relabel_hop_serial's next free local id."""
    progress = np.zeros(1, dtype=np.int64)
    counter = np.zeros(1, dtype=np.int64)
    for worker in prange(num_workers):
        if worker == 0:               # numba gives iteration 0 to the calling thread
            progress[0] = relabel_hop_serial(words, tag, candidates, num_candidates, next_id,
                                             n_id, local_ids)
        gather_blocks(features, row_of, n_id, gather_begin, gather_end, out, is_missing,
                      counter)
    return progress[0]


def _grown(array: np.ndarray | None, size: int, dtype, keep: int = 0) -> np.ndarray:
    """`array` if it holds `size` items, else a geometrically larger one (first `keep`
    items copied over) so that workspaces stop reallocating after a few batches."""
    if array is not None and array.size >= size:
        return array
    old_size = 0 if array is None else array.size
    bigger = np.empty(max(size + size // 4, 2 * old_size, 16), dtype=dtype)
    if keep:
        bigger[:keep] = array[:keep]
    return bigger


class FusedSampler:
    """Uniform multi-hop neighbour sampler that also gathers the sampled nodes' features.

    indptr int64 [N+1] / indices int32|int64 [E]: CSR, row v = in-neighbours of v.
    fanouts: picks per target for each hop, seed-outward; -1 = all neighbours.
    features: [R, F] float32/float16 (np.memmap fine), a float32 scipy CSR matrix (x is
    then CSR too), or None (no gather, x is None).
    row_of: None (row = global id) or int64 [N] global id -> features row, -1 = no local
    copy (row left zero, position reported in `missing`).
    num_threads: numba threads for the kernels (default numba.get_num_threads()).
    num_buffers: size of the ring of reusable feature buffers (see module docstring).
    overlap_gather: gather known rows beside the serial relabel (see module docstring);
    off only to time the phases one after another.
    aggregate: None, "mean" or "gcn": the last hop's picks are aggregated per target
    straight from `features` into `x_agg` (samplers/_aggregate.py: SAGE's mean, GCN's
    normalised sum with the self loop) instead of being relabelled and gathered; n_id
    and x then stop at the last hop's targets (samplers/types.py). Dense float32
    features with every row local (no row_of) only.
    After each call, `last_timings` holds seconds per phase (sample, relabel, gather,
    total) and `last_rows_gathered_beside_relabel` the rows gathered during relabels.

    Memory kept between calls: num_buffers feature buffers of about 1.25x the largest
    batch (synthetic-products, fanouts 15/10/5, batch 1024: 565k rows, 4 x 280 MB),
    int64 workspaces of the largest hop's picks, and the node map (16 bytes per slot,
    1.7-3.3 slots per node of the largest batch).
    """

    def __init__(self, indptr, indices, fanouts, features=None, row_of=None,
                 num_threads: int | None = None, num_buffers: int = 4,
                 overlap_gather: bool = True, aggregate: str | None = None):
        self.indptr, self.indices = checked_csr(indptr, indices, "FusedSampler")
        self.num_nodes = self.indptr.size - 1
        self.fanouts = checked_fanouts(fanouts, "FusedSampler")
        self.features, self.row_of = self._check_features(features, row_of)
        self.sparse = sp.issparse(self.features)
        self._feature_bytes = (None if self.features is None or self.sparse
                               else as_bytes(self.features))
        self._row_map = NO_ROW_MAP if self.row_of is None else self.row_of
        if aggregate is not None and aggregate not in AGGREGATES:
            raise ValueError(f"FusedSampler: aggregate must be None, 'mean' or 'gcn', got "
                             f"{aggregate!r}")
        if aggregate and (self._feature_bytes is None or self.features.dtype != np.float32
                          or self.row_of is not None):
            raise ValueError(f"FusedSampler: aggregate={aggregate!r} needs dense float32 "
                             "features with every row local (no row_of): it reads the last "
                             "hop's rows directly")
        self.aggregate = aggregate

        max_threads = numba.config.NUMBA_NUM_THREADS
        self.num_threads = int(num_threads or numba.get_num_threads())
        if not 1 <= self.num_threads <= max_threads:
            raise ValueError(f"FusedSampler: num_threads={num_threads} must lie in "
                             f"[1, {max_threads}] (NUMBA_NUM_THREADS)")
        if num_buffers < 1:
            raise ValueError(f"FusedSampler: num_buffers must be >= 1, got {num_buffers}")
        self.num_buffers = int(num_buffers)
        self.overlap_gather = bool(overlap_gather)

        # Sharded relabel: one shard per thread (rounded up to a power of two).
        shards = (1 if self.num_threads < SHARDED_RELABEL_MIN_THREADS
                  else 1 << (self.num_threads - 1).bit_length())
        self._node_map = NodeMap(self.num_nodes, shards)
        self._n_id = self._row_start = self._row_degree = None
        self._candidates = self._codes = None
        self._is_missing = NO_MISSING_FLAGS
        self._x_ring: list[np.ndarray | None] = [None] * self.num_buffers
        self._agg_ring: list[np.ndarray | None] = [None] * self.num_buffers
        self._calls = 0
        # one call at a time: the work arrays above are reused from call to call
        self._in_use = threading.Lock()
        self.last_timings: dict[str, float] = {}
        self.last_rows_gathered_beside_relabel = 0

    def _check_features(self, features, row_of):
        if features is None:
            if row_of is not None:
                raise ValueError("FusedSampler: row_of given without features")
            return None, None
        if not hasattr(features, "ndim") or features.ndim != 2:
            raise ValueError("FusedSampler: features must be a 2-D array [rows, dim]")
        if sp.issparse(features):
            if features.format != "csr" or features.dtype != np.float32:
                raise ValueError(f"FusedSampler: sparse features must be a float32 CSR "
                                 f"matrix, got {features.format} {features.dtype}; convert "
                                 "with gnnsys.sparse_features.as_csr")
        elif features.dtype not in (np.float32, np.float16):
            raise ValueError(f"FusedSampler: features must be float32 or float16, got "
                             f"{features.dtype}; convert with features.astype(np.float32)")
        elif not features.flags.c_contiguous:
            raise ValueError("FusedSampler: features must be C-contiguous (row-major); "
                             "pass np.ascontiguousarray(features)")
        row_of = checked_row_of(row_of, self.num_nodes, features.shape[0], "FusedSampler")
        return features, row_of

    # ------------------------------------------------------------------ sampling
    def sample(self, seeds, seed: int) -> SampledSubgraph:
        """Sample around `seeds` (global ids; repeats allowed) with batch seed `seed`."""
        seeds = checked_seeds(seeds, self.num_nodes, "FusedSampler")
        if not self._in_use.acquire(blocking=False):
            raise RuntimeError("FusedSampler.sample called while another thread samples with "
                               "the same sampler: its work arrays and output buffers serve "
                               "one stream of batches; give each thread its own sampler")
        previous_threads = numba.get_num_threads()
        numba.set_num_threads(self.num_threads)
        try:
            return self._sample(seeds, seed_to_u64(seed))
        finally:
            numba.set_num_threads(previous_threads)
            self._calls += 1
            self._in_use.release()

    def _sample(self, seeds: np.ndarray, batch_seed: np.uint64) -> SampledSubgraph:
        clock = time.perf_counter
        started = clock()
        spent = {"sample": 0.0, "relabel": 0.0, "gather": 0.0}
        num_known = seeds.size
        self._n_id = _grown(self._n_id, num_known, np.int64)
        self._node_map.start_batch()
        self._node_map.insert_seeds(seeds, self._n_id)
        gathered = 0            # rows n_id[:gathered] are already in this call's buffer
        hop_sizes, block_indptrs, block_indices = [num_known], [], []

        for hop, fanout in enumerate(self.fanouts):
            phase_start = clock()
            num_targets = num_known
            self._row_start = _grown(self._row_start, num_targets, np.int64)
            self._row_degree = _grown(self._row_degree, num_targets, np.int64)
            block_indptr = np.empty(num_targets + 1, dtype=np.int64)
            count_hop(self.indptr, self._n_id, num_targets, fanout, self._row_start,
                      self._row_degree, block_indptr, self.num_threads)
            num_picks = int(block_indptr[num_targets])
            self._candidates = _grown(self._candidates, num_picks, np.int64)
            fill_hop(self.indices, self._row_start, self._row_degree, block_indptr,
                     num_targets, batch_seed, np.uint64(hop), self._candidates,
                     self.num_threads)
            relabel_start = clock()
            spent["sample"] += relabel_start - phase_start
            if self.aggregate and hop == len(self.fanouts) - 1:
                # aggregated after the gather below, from the picks' global ids: no relabel
                hop_sizes.append(num_known)
                block_indptrs.append(block_indptr)
                block_indices.append(self._candidates[:num_picks].copy())
                break

            self._n_id = _grown(self._n_id, num_known + num_picks, np.int64, keep=num_known)
            local_ids = np.empty(num_picks, dtype=np.int32)
            num_new, gathered = self._relabel(num_picks, num_known, local_ids, gathered)
            num_known += num_new
            spent["relabel"] += clock() - relabel_start
            hop_sizes.append(num_known)
            block_indptrs.append(block_indptr)
            block_indices.append(local_ids)

        gather_start = clock()
        self.last_rows_gathered_beside_relabel = gathered
        x, missing = self._finish_gather(gathered, num_known)
        x_agg = None
        if self.aggregate:
            picks = block_indices[-1]
            x_agg = self._ring_buffer(num_known, ring=self._agg_ring, dtype=np.float32)
            aggregate_rows(np.asarray(self.features), picks, block_indptrs[-1], self._n_id,
                           num_known, self.indptr, self.aggregate == "gcn", x_agg,
                           self.num_threads)
        n_id = self._n_id[:num_known].copy()
        finished = clock()
        spent["gather"] = finished - gather_start
        spent["total"] = finished - started
        self.last_timings = spent
        return SampledSubgraph(n_id=n_id, hop_sizes=hop_sizes, block_indptr=block_indptrs,
                               block_indices=block_indices, x=x, missing=missing,
                               x_agg=x_agg)

    def _relabel(self, num_picks: int, num_known: int, local_ids: np.ndarray, gathered: int):
        """Relabel this hop's picks; returns (new nodes, rows of x gathered so far)."""
        node_map = self._node_map
        if node_map.num_shards > 1:
            self._codes = _grown(self._codes, num_picks, np.int64)
            return node_map.relabel_hop(self._candidates, num_picks, num_known, self._n_id,
                                        local_ids, self._codes), gathered
        if self._feature_bytes is not None and self.overlap_gather and gathered < num_known:
            x = self._ring_buffer(num_known, keep=gathered)
            self._is_missing = self._missing_flags(num_known)
            next_id = relabel_beside_gather(
                node_map.words, node_map.tag, self._candidates, num_picks, num_known,
                self._n_id, local_ids, self._feature_bytes, self._row_map, gathered,
                num_known, as_bytes(x), self._is_missing, self.num_threads)
            return int(next_id - num_known), num_known
        return node_map.relabel_hop(self._candidates, num_picks, num_known, self._n_id,
                                    local_ids, None), gathered

    # ------------------------------------------------------------------ features
    def _missing_flags(self, num_rows: int) -> np.ndarray:
        if self.row_of is None:
            return NO_MISSING_FLAGS
        return _grown(self._is_missing, num_rows, np.uint8, keep=self._is_missing.size)

    def _finish_gather(self, gathered: int, num_rows: int):
        """Gather rows [gathered, num_rows) in parallel; returns (x, missing)."""
        no_missing = np.empty(0, dtype=np.int64)
        if self.features is None:
            return None, no_missing
        if self.sparse:
            return self._gather_sparse(num_rows)
        x = self._ring_buffer(num_rows, keep=gathered)
        self._is_missing = self._missing_flags(num_rows)
        gather_rows(self._feature_bytes, self._row_map, self._n_id, gathered, num_rows,
                    as_bytes(x), self._is_missing, self.num_threads)
        if self.row_of is None:
            return x, no_missing
        return x, np.flatnonzero(self._is_missing[:num_rows]).astype(np.int64)

    def _gather_sparse(self, num_rows: int):
        """(CSR x of rows n_id[:num_rows], missing): the rows' nonzeros, fresh arrays."""
        self._is_missing = self._missing_flags(num_rows)
        f = self.features
        indptr, indices, data = gather_csr_rows(f.indptr, f.indices, f.data, self._row_map,
                                                self._n_id, num_rows, self._is_missing)
        x = sp.csr_matrix((data, indices, indptr), shape=(num_rows, f.shape[1]))
        missing = (np.empty(0, dtype=np.int64) if self.row_of is None
                   else np.flatnonzero(self._is_missing[:num_rows]).astype(np.int64))
        return x, missing

    def _ring_buffer(self, num_rows: int, keep: int = 0, ring: list | None = None,
                     dtype=None) -> np.ndarray:
        """View [:num_rows] of this call's buffer of `ring` (default: x's), grown
        geometrically when too small (first `keep` rows carried over). New buffers are
        written once up front so their page faults stay out of later batches."""
        ring = self._x_ring if ring is None else ring
        slot = self._calls % self.num_buffers
        buffer = ring[slot]
        if buffer is None or buffer.shape[0] < num_rows:
            old_rows = 0 if buffer is None else buffer.shape[0]
            rows = max(num_rows + num_rows // 4, 2 * old_rows, 16)
            bigger = np.empty((rows, self.features.shape[1]), dtype=dtype or self.features.dtype)
            bigger.fill(0)
            if keep:
                bigger[:keep] = buffer[:keep]
            ring[slot] = buffer = bigger
        return buffer[:num_rows]
