"""GPU fused sampler (HyDRA-like): sampling, relabelling and tiered feature gather on the GPU.

`GpuFusedSampler` has the CPU `FusedSampler`'s call shape and returns the same batch:
same random streams, same Floyd draws, same discovery order, same repeated-seed rule,
same zero rows + `missing` list for rows no local tier holds (see samplers/fused_cpu.py
for the semantics, samplers/gpu_kernels.py for how the kernels keep them on the GPU).

    >>> sampler = GpuFusedSampler(indptr, indices, [15, 10, 5], features=x,
    ...                           budgets=TierBudgets(device_bytes=4 << 30))
    >>> sub = sampler.sample(seeds, seed=step)             # numpy SampledSubgraph
    >>> sub = sampler.sample(seeds, seed=step, on_device=True)

Where the data lives (samplers/gpu_tiers.py decides, samplers/gpu_memory.py allocates):
- `indptr` on the device; `indices` on the device when `adjacency_device_bytes` is None
  or large enough, else the hottest vertices' lists on the device and the whole CSR in
  pinned host memory read in place.
- feature rows in tiers: device, pinned host (zero-copy), peer-GPU shards (peer access);
  `budgets` (bytes per tier, filled hottest-first by `hotness`, default degree) or a
  ready `placement`. Without either, every row with a local copy goes on the device.
- One pointer table per tier and a location word per node drive the row copy inside
  the kernel that discovers the node (no separate index_select pass).

Output: `sample(seeds, seed)` returns numpy arrays (n_id, blocks fresh; x a view into a
ring of `num_buffers` pinned host buffers, valid for the next num_buffers - 1 calls, as
on the CPU). `on_device=True` skips the copy back: n_id, block_indptr, block_indices
and x are numba device arrays (torch.as_tensor(a, device="cuda") wraps them without a
copy through __cuda_array_interface__), views into a device ring with the same
lifetime; `missing` stays a numpy array, since the remote fetch is planned on the host.

Depends on numpy and numba.cuda (the `gpu` extra); never on gnnsys or torch.
"""
from __future__ import annotations

import time
import warnings

import numpy as np
from numba import cuda

from samplers import gpu_kernels as kernels
from samplers._aggregate import AGGREGATES
from samplers._inputs import checked_csr, checked_fanouts, checked_row_of, checked_seeds
from samplers.gpu_memory import (DeviceWorkspace, build_tier_tables, check_device_memory,
                                 copyable, host_table)
from samplers.gpu_tiers import (HOST_TIER, MISS, TIER_SHIFT, FeaturePlacement, TierBudgets,
                                place_adjacency, place_features, tier_name)
from samplers.types import SampledSubgraph

DEVICES = ("auto", "cpu", "cuda")        # sampler.device and train.device
# Below this load the linear probes of the batch hash table stay short.
MAX_TABLE_LOAD = 0.5


def cuda_gpu_available() -> bool:
    """A real CUDA GPU is usable (the simulator does not count: it is for tests)."""
    return (not kernels.IN_SIMULATOR) and cuda.is_available()


def resolve_device(device: str) -> str:
    """`sampler.device` with 'auto' resolved: 'cuda' when a CUDA GPU is present, else 'cpu'."""
    if device == "auto":
        return "cuda" if cuda_gpu_available() else "cpu"
    return device


def make_sampler(device: str, indptr, indices, fanouts, features=None, row_of=None,
                 num_threads: int | None = None, aggregate: str | None = None,
                 **gpu_options):
    """The sampler for `sampler.device`: 'cpu' -> FusedSampler, 'cuda' -> GpuFusedSampler,
    'auto' -> the GPU one when a CUDA GPU is present, else the CPU one. `gpu_options`
    (budgets, hotness, adjacency_device_bytes, peer_devices, ...) go to the GPU one;
    `aggregate` (the first layer's mean in the kernel) to either."""
    device = resolve_device(device)
    if device == "cpu":
        from samplers.fused_cpu import FusedSampler
        return FusedSampler(indptr, indices, fanouts, features=features, row_of=row_of,
                            num_threads=num_threads,
                            num_buffers=gpu_options.get("num_buffers", 4),
                            aggregate=aggregate)
    if device == "cuda":
        if not cuda.is_available():
            raise RuntimeError("sampler.device is 'cuda' but numba finds no CUDA GPU "
                               "(numba.cuda.is_available() is False); install the gpu "
                               "extra on a GPU machine, or set sampler.device to auto or cpu")
        return GpuFusedSampler(indptr, indices, fanouts, features=features, row_of=row_of,
                               aggregate=aggregate, **gpu_options)
    raise ValueError(f"sampler.device is {device!r}; allowed: {', '.join(DEVICES)}")


def _blocks(items: int, per_block: int) -> int:
    return max(1, -(-items // per_block))


def _per_item(items: int) -> tuple:
    """Launch configuration of a thread-per-item kernel. Small launches get a small block
    (whole warps): no idle threads to schedule, which matters most in the simulator."""
    threads = min(kernels.ELEMENTWISE_THREADS, 32 * _blocks(items, 32))
    return _blocks(items, threads), threads


class GpuFusedSampler:
    """Uniform multi-hop neighbour sampler + tiered feature gather, on one GPU.

    indptr int64 [N+1] / indices int32|int64 [E]: CSR, row v = in-neighbours of v.
    fanouts: picks per target per hop, seed-outward; -1 = all neighbours.
    features: [R, F] float32/float16 or None; row_of: None (row = node id) or int64 [N]
        node -> feature row, -1 = no local copy (zero row, listed in `missing`).
    budgets: TierBudgets for the feature tiers (filled hottest-first by `hotness`, [N],
        default in-degree); placement: a ready FeaturePlacement instead (its rows index
        `features`); neither: every local row on the device.
    adjacency_device_bytes: device budget for `indices` (None = all of it on the device);
        over budget, the lists of the hottest vertices (same `hotness`) are replicated.
    peer_devices: GPU ids holding the peer shards (None = allocate them on this GPU).
    lanes: threads per target / per copied row (32 = a warp); groups_per_block: targets
        per thread block.
    aggregate: None, "mean" or "gcn": the last hop's picks are aggregated per target
        into `x_agg` (kernels.sample_and_aggregate) instead of being relabelled and
        gathered, as FusedSampler's `aggregate` does; float32 rows, none missing.
    """
    device_resident = True        # sample(on_device=True) hands out its device buffers

    def __init__(self, indptr, indices, fanouts, features=None, row_of=None, *,
                 budgets: TierBudgets | None = None, hotness=None,
                 placement: FeaturePlacement | None = None,
                 adjacency_device_bytes: int | None = None, peer_devices=None,
                 lanes: int = 32, groups_per_block: int = 4, num_buffers: int = 4,
                 aggregate: str | None = None):
        indptr, indices = checked_csr(indptr, indices, "GpuFusedSampler")
        self.num_nodes = indptr.size - 1
        self.fanouts = checked_fanouts(fanouts, "GpuFusedSampler")
        if lanes < 1 or groups_per_block < 1 or num_buffers < 1:
            raise ValueError(f"GpuFusedSampler: lanes ({lanes}), groups_per_block "
                             f"({groups_per_block}) and num_buffers ({num_buffers}) "
                             f"must be >= 1")
        self.lanes, self.groups_per_block, self.num_buffers = lanes, groups_per_block, num_buffers

        self.adjacency = place_adjacency(indptr, indices, adjacency_device_bytes, hotness)
        check_device_memory(indptr.nbytes + self.adjacency.hot_start.nbytes
                            + self.adjacency.hot_indices.nbytes, "the graph structure")
        self._indptr = cuda.to_device(indptr)
        self._hot_start = cuda.to_device(self.adjacency.hot_start)
        self._hot_indices = cuda.to_device(self.adjacency.hot_indices if
                                           self.adjacency.hot_indices.size else indices[:1])
        self._host_indices = (self._hot_indices if self.adjacency.all_on_device
                              else host_table(indices))

        self.placement = self._place_features(features, row_of, budgets, hotness,
                                              placement, indptr)
        self._init_feature_tiers(features, peer_devices)
        self.aggregate = self._checked_aggregate(aggregate, features)
        self._workspace = DeviceWorkspace()
        self._host_x_ring = [None] * num_buffers
        self._table_capacity = 0
        self._calls = 0
        self.last_timings: dict = {}

    # ------------------------------------------------------------------ set-up
    def _place_features(self, features, row_of, budgets, hotness, placement, indptr):
        if features is None:
            if row_of is not None or budgets is not None or placement is not None:
                raise ValueError("GpuFusedSampler: row_of/budgets/placement given without "
                                 "features")
            return None
        if not hasattr(features, "ndim") or features.ndim != 2:
            raise ValueError("GpuFusedSampler: features must be a 2-D array [rows, dim]")
        if features.dtype not in (np.float32, np.float16):
            raise ValueError(f"GpuFusedSampler: features must be float32 or float16, got "
                             f"{features.dtype}; convert with features.astype(np.float32)")
        row_of = checked_row_of(row_of, self.num_nodes, features.shape[0], "GpuFusedSampler")
        row_bytes = features.shape[1] * features.itemsize
        if placement is not None:
            if budgets is not None:
                raise ValueError("GpuFusedSampler: give budgets or placement, not both")
            if placement.location.shape != (self.num_nodes,):
                raise ValueError(f"GpuFusedSampler: placement.location must have shape "
                                 f"({self.num_nodes},), got {placement.location.shape}")
            return placement
        if hotness is None:
            hotness = np.diff(indptr)
        if budgets is None:
            budgets = TierBudgets(device_bytes=row_bytes * self.num_nodes, host_bytes=0)
        return place_features(self.num_nodes, hotness, row_bytes, budgets, row_of)

    def _init_feature_tiers(self, features, peer_devices):
        if self.placement is None:
            # No gather: the kernels still take (unused) arrays of the right kinds.
            self._location = cuda.to_device(np.full(1, MISS, dtype=np.int64))
            self._tiers = (cuda.to_device(np.zeros((1, 1), dtype=np.float32)),)
            self._x_dtype, self._width = np.dtype(np.float32), 1
            self.can_miss = False
            return
        local_tiers = self.placement.bytes_per_tier()
        check_device_memory(self.placement.location.nbytes + local_tiers["device"]
                            + (0 if peer_devices else
                               sum(v for k, v in local_tiers.items() if k.startswith("peer"))),
                            "the feature tiers")
        self._location = cuda.to_device(self.placement.location)
        self._tiers = build_tier_tables(features, self.placement.tier_rows, HOST_TIER,
                                        peer_devices)
        self.features_dtype = np.dtype(features.dtype)
        self._x_dtype, self._width = copyable(features[:0]).dtype, features.shape[1]
        self.can_miss = self.placement.num_misses > 0

    def _checked_aggregate(self, aggregate, features):
        if aggregate is not None and aggregate not in AGGREGATES:
            raise ValueError(f"GpuFusedSampler: aggregate must be None, 'mean' or 'gcn', "
                             f"got {aggregate!r}")
        if aggregate and (self.placement is None or features.dtype != np.float32
                          or self.can_miss):
            raise ValueError(f"GpuFusedSampler: aggregate={aggregate!r} needs float32 "
                             "features with every row held by a tier (no misses): it reads "
                             "the last hop's rows directly")
        return aggregate

    def memory_report(self) -> dict:
        """Bytes per tier: {'features': {tier: bytes}, 'adjacency': {'device', 'host'},
        'workspace_device': bytes of the reusable batch buffers}."""
        nbytes = lambda a: int(a.size * a.dtype.itemsize)
        adjacency_device = nbytes(self._indptr) + nbytes(self._hot_start)
        adjacency_device += nbytes(self._hot_indices)
        report = {"adjacency": {"device": adjacency_device,
                                "host": 0 if self.adjacency.all_on_device
                                else nbytes(self._host_indices)},
                  "workspace_device": self._workspace.nbytes()}
        if self.placement is not None:
            report["features"] = self.placement.bytes_per_tier()
        return report

    def locality(self, sub: SampledSubgraph) -> dict:
        """Where one batch's data came from (host-side count, for benchmarks and logs):
        feature rows per tier (+ 'miss') and neighbour-list reads served by the device
        replica vs pinned host memory: HyDRA's local-hit fractions."""
        n_id = sub.n_id if isinstance(sub.n_id, np.ndarray) else sub.n_id.copy_to_host()
        report = {}
        if self.placement is not None:
            location = self.placement.location[n_id]
            held = location != MISS
            tiers = np.bincount(location[held] >> TIER_SHIFT, minlength=self.placement.num_tiers)
            report["feature_rows"] = {tier_name(t): int(c) for t, c in enumerate(tiers)}
            report["feature_rows"]["miss"] = int(np.count_nonzero(~held))
        hot = self.adjacency.hot_start >= 0
        device_reads = host_reads = 0
        for block_indptr in sub.block_indptr:
            if not isinstance(block_indptr, np.ndarray):
                block_indptr = block_indptr.copy_to_host()
            picks = np.diff(block_indptr)
            targets_hot = hot[n_id[:picks.size]]
            device_reads += int(picks[targets_hot].sum())
            host_reads += int(picks[~targets_hot].sum())
        report["adjacency_reads"] = {"device": device_reads, "host": host_reads}
        return report

    # ------------------------------------------------------------------ sampling
    def sample(self, seeds, seed: int, on_device: bool = False) -> SampledSubgraph:
        """Sample around `seeds` (global ids; repeats allowed) with batch seed `seed`."""
        seeds = checked_seeds(seeds, self.num_nodes, "GpuFusedSampler")
        started = time.perf_counter()
        try:
            with warnings.catch_warnings():
                if kernels.IN_SIMULATOR:
                    # The simulator runs the uint64 hash arithmetic on numpy scalars, which
                    # warn on the (intended, modulo 2**64) wrap-around.
                    warnings.filterwarnings("ignore", "overflow encountered",
                                            RuntimeWarning)
                result = self._sample(seeds, int(seed), on_device)
        finally:
            self._calls += 1
        self.last_timings = {"total": time.perf_counter() - started}
        return result

    def _sample(self, seeds: np.ndarray, batch_seed: int, on_device: bool) -> SampledSubgraph:
        ws, ring = self._workspace, self._calls % self.num_buffers
        gather = self.placement is not None
        lanes, groups = self.lanes, self.groups_per_block
        num_known = seeds.size
        batch_seed = np.uint64(batch_seed & 0xFFFFFFFFFFFFFFFF)

        n_id = ws.get(f"n_id{ring}", num_known, np.int64)
        x = ws.get(f"x{ring}", num_known, self._x_dtype, width=self._width)
        is_missing = ws.get("is_missing", num_known, np.uint8)
        keys, local_ids, first_pick = self._fresh_table(2 * max(num_known, 1))
        d_seeds = ws.get("seeds", num_known, np.int64)
        if num_known:
            d_seeds[:num_known].copy_to_device(seeds)
        seed_slots = ws.get("seed_slots", num_known, np.int64)
        if num_known:
            kernels.insert_seeds[_per_item(num_known)](
                d_seeds[:num_known], n_id, keys, np.int64(keys.size - 1), first_pick,
                seed_slots)
            kernels.publish_seeds_and_gather[_blocks(num_known, groups), (lanes, groups)](
                seed_slots, num_known, n_id, first_pick, local_ids, self._location,
                self._tiers, x, is_missing, gather)

        hop_sizes, block_indptrs, block_indices = [num_known], [], []
        x_agg = None
        for hop, fanout in enumerate(self.fanouts):
            num_targets = num_known
            counts = ws.get("counts", num_targets, np.int64)
            indptr_out = ws.get(f"block_indptr{ring}_{hop}", num_targets + 1, np.int64)
            if num_targets:
                kernels.count_picks[_per_item(num_targets)](
                    n_id, num_targets, np.int64(fanout), self._indptr, counts)
            num_picks = self._exclusive_scan(counts, num_targets, indptr_out)
            if self.aggregate and hop == len(self.fanouts) - 1:
                x_agg, sources = self._sample_and_aggregate(hop, ring, num_targets,
                                                            num_picks, n_id, indptr_out,
                                                            batch_seed)
                hop_sizes.append(num_known)
                block_indptrs.append(indptr_out[:num_targets + 1])
                block_indices.append(sources)
                break

            keys, local_ids, first_pick = self._table_for(num_known + num_picks)
            picks = ws.get("picks", num_picks, np.int64)
            picked_nodes = ws.get("picked_nodes", num_picks, np.int64)
            picked_slots = ws.get("picked_slots", num_picks, np.int64)
            is_new = ws.get("is_new", num_picks, np.uint8)
            new_rank = ws.get("new_rank", num_picks + 1, np.int64)
            indices_out = ws.get(f"block_indices{ring}_{hop}", num_picks, np.int32)
            num_new = 0
            if num_picks:
                kernels.sample_hop[_blocks(num_targets, groups), (lanes, groups)](
                    n_id, num_targets, self._indptr, self._hot_start, self._hot_indices,
                    self._host_indices, indptr_out, batch_seed, np.uint64(hop), picks,
                    picked_nodes, picked_slots, keys, local_ids, first_pick,
                    np.int64(keys.size - 1))
                kernels.mark_first_occurrences[_per_item(num_picks)](
                    picked_slots, num_picks, local_ids, first_pick, is_new)
                num_new = self._exclusive_scan(is_new, num_picks, new_rank)
                n_id = ws.get(f"n_id{ring}", num_known + num_new, np.int64, keep=num_known)
                x = ws.get(f"x{ring}", num_known + num_new, self._x_dtype,
                           width=self._width, keep=num_known if gather else 0)
                is_missing = ws.get("is_missing", num_known + num_new, np.uint8,
                                    keep=num_known)
                kernels.assign_and_gather[_blocks(_blocks(num_picks, lanes), groups),
                                          (lanes, groups)](
                    picked_nodes, picked_slots, new_rank, num_picks, num_known, local_ids,
                    n_id, self._location, self._tiers, x, is_missing, gather)
                kernels.relabel_picks[_per_item(num_picks)](
                    picked_slots, num_picks, local_ids, indices_out)
            num_known += num_new
            hop_sizes.append(num_known)
            block_indptrs.append(indptr_out[:num_targets + 1])
            block_indices.append(indices_out[:num_picks])

        missing = np.empty(0, dtype=np.int64)
        if gather and self.can_miss and num_known:
            missing = np.flatnonzero(is_missing[:num_known].copy_to_host()).astype(np.int64)
        if on_device:
            x_out = x[:num_known].view(self.features_dtype) if gather else None
            return SampledSubgraph(n_id=n_id[:num_known], hop_sizes=hop_sizes,
                                   block_indptr=block_indptrs, block_indices=block_indices,
                                   x=x_out, missing=missing, x_agg=x_agg)
        x_host = None
        if gather:
            x_host = self._host_x_buffer(ring, num_known)
            if num_known:
                x[:num_known].copy_to_host(x_host)
            x_host = x_host.view(self.features_dtype)
        return SampledSubgraph(
            n_id=n_id[:num_known].copy_to_host() if num_known else np.empty(0, np.int64),
            hop_sizes=hop_sizes,
            block_indptr=[a.copy_to_host() for a in block_indptrs],
            block_indices=[a.copy_to_host() if a.size else np.empty(0, a.dtype)
                           for a in block_indices],
            x=x_host, missing=missing,
            x_agg=None if x_agg is None else x_agg.copy_to_host())

    def _sample_and_aggregate(self, hop, ring, num_targets, num_picks, n_id, block_indptr,
                              batch_seed):
        """The last hop aggregated in the kernel: (x_agg [targets, F], the picks' global
        ids), device views into this ring slot's buffers."""
        ws = self._workspace
        x_agg = ws.get(f"x_agg{ring}", num_targets, np.float32, width=self._width)
        sources = ws.get(f"block_sources{ring}", num_picks, np.int64)
        picks = ws.get("picks", num_picks, np.int64)
        if num_targets:
            kernels.sample_and_aggregate[_blocks(num_targets, self.groups_per_block),
                                         (self.lanes, self.groups_per_block)](
                n_id, num_targets, self._indptr, self._hot_start, self._hot_indices,
                self._host_indices, block_indptr, batch_seed, np.uint64(hop), picks,
                sources, self._location, self._tiers, self.aggregate == "gcn", x_agg)
        return x_agg[:num_targets], sources[:num_picks]

    # ------------------------------------------------------------------ helpers
    def _exclusive_scan(self, values, n: int, out) -> int:
        """out[0..n] = exclusive prefix sums of values[:n]; returns the total (one small
        device-to-host copy: the host sizes the next launches with it)."""
        chunk = max(1, -(-n // (4 * kernels.SCAN_THREADS)))
        num_chunks = -(-n // chunk)
        chunk_sums = self._workspace.get("scan_chunk_sums", num_chunks + 1, np.int64)
        if n:
            kernels.scan_chunk_sums[_per_item(num_chunks)](
                values, n, chunk, chunk_sums)
            kernels.scan_chunk_totals[1, kernels.SCAN_THREADS](chunk_sums, num_chunks)
        kernels.scan_write[_per_item(num_chunks)](
            values, n, chunk, chunk_sums, out)
        return int(out[n:n + 1].copy_to_host()[0])

    def _fresh_table(self, min_capacity: int):
        """The batch hash table, emptied; grown to a power of two >= min_capacity."""
        capacity = max(self._table_capacity, 1 << max(4, (min_capacity - 1).bit_length()))
        if capacity != self._table_capacity:
            self._table_capacity = capacity
            self._table = tuple(cuda.device_array(capacity, dtype=np.int64) for _ in range(3))
        keys, local_ids, first_pick = self._table
        kernels.clear_table[_per_item(capacity)](keys, local_ids, first_pick)
        return self._table

    def _table_for(self, num_entries: int):
        """The table, grown (entries moved over) if num_entries would pass MAX_TABLE_LOAD."""
        if num_entries <= MAX_TABLE_LOAD * self._table_capacity:
            return self._table
        old_keys, old_local_ids, _ = self._table
        self._table_capacity = 0
        keys, local_ids, first_pick = self._fresh_table(int(num_entries / MAX_TABLE_LOAD) + 1)
        kernels.rehash_table[_per_item(old_keys.size)](
            old_keys, old_local_ids, keys, local_ids, np.int64(keys.size - 1))
        return self._table

    def _host_x_buffer(self, ring: int, rows: int) -> np.ndarray:
        """Pinned host buffer [:rows] of this ring slot (fast device-to-host copies)."""
        buffer = self._host_x_ring[ring]
        if buffer is None or buffer.shape[0] < rows:
            old_rows = 0 if buffer is None else buffer.shape[0]
            buffer = cuda.pinned_array((max(rows + rows // 4, 2 * old_rows, 16), self._width),
                                       dtype=self._x_dtype)
            self._host_x_ring[ring] = buffer
        return buffer[:rows]
