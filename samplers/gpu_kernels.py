"""numba.cuda kernels of the GPU fused sampler (HyDRA-like; orchestrated by samplers/fused_gpu.py).

One hop of sampling is a short fixed sequence of launches, all on the device:
  count_picks -> exclusive scan (block offsets) -> sample_hop (a group of lanes per
  target: Floyd picks, neighbour ids read from the device or pinned-host adjacency,
  inserted into the batch's hash table) -> mark_first_occurrences -> exclusive scan
  (new-node ranks) -> assign_and_gather (new nodes get local ids in discovery order and
  their feature rows are copied, in the same kernel, from whichever tier holds them)
  -> relabel_picks (block indices = local ids).
The seeds take the same path through insert_seeds and publish_seeds_and_gather.
With the first layer's aggregation in the sampler (aggregate="mean" or "gcn") the last
hop is one launch after its scan: sample_and_aggregate draws the same picks and writes
their aggregate row per target; nothing is inserted, relabelled or gathered.

Why this shape:
- Deterministic output without atomics on the layout: each target owns the slice
  [block_indptr[t], block_indptr[t+1]) of the hop's pick buffer (prefix-summed counts,
  ../shared/ALGORITHMS.md 2.8), and a new node's local id is its rank among first occurrences in
  that buffer (an atomicMin of the pick position per hash slot, then a scan). That is
  exactly the CPU sampler's discovery order, and the random streams are the CPU's
  (common/rng.py: splitmix64 keyed by (batch seed, hop, target position)), so the GPU
  and the CPU kernels return the same batch.
- No warp intrinsics and no block barriers in the per-target kernels: every lane of a
  group runs the (short, O(fanout^2)) Floyd loop redundantly and stores identical
  values, so no lane waits for another; the expensive parts (neighbour loads, hash
  inserts, row copies) are split over the lanes. This also keeps numba's CUDA simulator
  (which has no warp intrinsics and is very slow at barriers) usable for the tests.
- Tiers are one homogeneous tuple of 2-D row tables (device, host, peer0, ...), indexed
  by the tier id stored in the node's location word (samplers/gpu_tiers.py).

Depends on numpy and numba.cuda only. Thread-index values are cast to int64 before any
arithmetic so that no expression mixes signed and unsigned types (numba would widen to
float64).
"""
from __future__ import annotations

import warnings

import numpy as np
from numba import cuda

from samplers._aggregate import build_weights
from common.rng import build_streams
from samplers.gpu_tiers import ROW_MASK, TIER_SHIFT

# Small grids are by design in gnnsys's kernels (a one-block scan, one message per peer,
# a tiny batch): numba's occupancy hint would print on every such launch (it did, 96
# times in one gpu_check run on an H200). One filter for the process, set here since every
# GPU module imports this one. By its text: numba-cuda raises it as its own class, not
# numba.core.errors.NumbaPerformanceWarning (the message starts with a bold escape code).
warnings.filterwarnings("ignore", message=r"(\x1b\[1m)?Grid size \d+ will likely result in GPU "
                                          r"under-utili[sz]ation")

IN_SIMULATOR = cuda.to_device.__module__.startswith("numba.cuda.simulator")


def _share_shared_arrays_in_simulator() -> None:
    """Fix a race in numba's CUDA simulator (0.68): a block's `cuda.shared.array` is made
    on first use by an unlocked check-then-set, so two threads of a block can each get
    their own array and scan_chunk_totals then reads zeros across its barrier (a wrong
    scan total, so a batch short of nodes: 8 of 410 sampler runs under a 1 us GIL switch
    interval; it once failed a CI run). The same keying by call site, under a lock.
    Simulator only."""
    import sys
    import threading
    import traceback
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support
    dynamic, lock = kernelapi.FakeCUDAShared.array, threading.Lock()

    def array(self, shape, dtype):
        if shape == 0:                      # dynamic shared memory: one buffer anyway
            return dynamic(self, shape, dtype)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        call_site = traceback.extract_stack(sys._getframe(1), limit=1)[0][0:2]
        with lock:
            allocation = self._allocations.get(call_site)
            if allocation is None:
                allocation = self._allocations[call_site] = np.empty(shape, dtype)
        return allocation

    kernelapi.FakeCUDAShared.array = array


if IN_SIMULATOR:
    _share_shared_arrays_in_simulator()

# The simulator runs a thread per Python thread and barriers cost milliseconds each, so
# the one kernel with a barrier (scan_chunk_totals) uses a small block there.
SCAN_THREADS = 32 if IN_SIMULATOR else 1024
ELEMENTWISE_THREADS = 256             # threads per block of the thread-per-item kernels
EMPTY_KEY = -1                        # hash slot without a node
NO_LOCAL_ID = -1                      # node inserted in this hop, local id not yet assigned
NO_PICK = np.iinfo(np.int64).max      # first_pick of a slot no pick has claimed

# The CPU sampler's random streams and Floyd sampling (common/rng.py), compiled as
# device functions from the same source: the GPU draws are the CPU draws, bit for bit.
mix64, stream_state, next_u64, uniform_below, floyd_positions = build_streams(
    cuda.jit(device=True))
# The first-layer aggregate's weights: the CPU kernel's (samplers/_aggregate.py).
target_weights, source_weight = build_weights(cuda.jit(device=True))


# ------------------------------------------------------------------ device helpers
@cuda.jit(device=True)
def group_coordinates():
    """(lane, lanes, group): blocks are (lanes, groups per block); one group = one item."""
    lane = np.int64(cuda.threadIdx.x)
    lanes = np.int64(cuda.blockDim.x)
    group = np.int64(cuda.blockIdx.x) * np.int64(cuda.blockDim.y) + np.int64(cuda.threadIdx.y)
    return lane, lanes, group


@cuda.jit(device=True)
def smaller(a, b):
    """min() of two ints: the builtin fails to compile in numba's built-in CUDA target."""
    return a if a < b else b


@cuda.jit(device=True)
def thread_index():
    return np.int64(cuda.blockIdx.x) * np.int64(cuda.blockDim.x) + np.int64(cuda.threadIdx.x)


@cuda.jit(device=True)
def find_or_insert(keys, table_mask, key):
    """Slot of `key` in the open-addressing table (linear probing), inserting it if
    absent. A plain read first: most probes hit a known node and need no atomic."""
    slot = np.int64(mix64(key) & np.uint64(table_mask))
    while True:
        current = keys[slot]
        if current == key:
            return slot
        if current == EMPTY_KEY:
            current = cuda.atomic.cas(keys, slot, EMPTY_KEY, key)
            if current == EMPTY_KEY or current == key:
                return slot
        slot = (slot + 1) & table_mask


@cuda.jit(device=True)
def neighbour(node, k, indptr, hot_start, hot_indices, host_indices):
    """k-th in-neighbour of `node`: from the device replica when the vertex is hot,
    else straight from the pinned host copy (a zero-copy read over PCIe)."""
    start = hot_start[node]
    if start >= 0:
        return np.int64(hot_indices[start + k])
    return np.int64(host_indices[indptr[node] + k])


@cuda.jit(device=True)
def draw_picks(n_id, target, indptr, block_indptr, batch_seed, hop, picks):
    """(node, degree, offset, take) of a hop's target, its Floyd positions (the CPU
    sampler's exact draws) written to picks[offset:offset + take] when it takes fewer
    than all its neighbours. Every lane of the group computes the same picks and stores
    the same values, so each lane can read back the whole list without waiting."""
    node = n_id[target]
    degree = indptr[node + 1] - indptr[node]
    offset = block_indptr[target]
    take = block_indptr[target + 1] - offset
    if take < degree:
        floyd_positions(batch_seed, hop, target, degree, take, picks, offset)
    return node, degree, offset, take


@cuda.jit(device=True)
def picked_neighbour(i, node, degree, offset, take, picks, indptr, hot_start, hot_indices,
                     host_indices):
    """The id of the target's i-th pick (all neighbours in CSR order when it takes them all)."""
    k = i if take == degree else picks[offset + i]
    return neighbour(node, k, indptr, hot_start, hot_indices, host_indices)


@cuda.jit(device=True)
def copy_row(node, destination, location, tiers, x, is_missing, lane, lanes):
    """x[destination] = the node's feature row from its tier, lanes striding the
    columns (coalesced); a node no tier holds gets a zero row and is flagged."""
    where = location[node]
    width = x.shape[1]
    if where < 0:
        for column in range(lane, width, lanes):
            x[destination, column] = 0
        if lane == 0:
            is_missing[destination] = 1
        return
    if lane == 0:
        is_missing[destination] = 0
    rows = tiers[where >> TIER_SHIFT]
    row = where & ROW_MASK
    for column in range(lane, width, lanes):
        x[destination, column] = rows[row, column]


# ------------------------------------------------------------------ hash table
@cuda.jit
def clear_table(keys, local_ids, first_pick):
    slot = thread_index()
    if slot < keys.size:
        keys[slot] = EMPTY_KEY
        local_ids[slot] = NO_LOCAL_ID
        first_pick[slot] = NO_PICK


@cuda.jit
def rehash_table(old_keys, old_local_ids, keys, local_ids, table_mask):
    """Move every entry of a full table into a bigger, cleared one."""
    old_slot = thread_index()
    if old_slot < old_keys.size:
        key = old_keys[old_slot]
        if key != EMPTY_KEY:
            slot = find_or_insert(keys, table_mask, key)
            local_ids[slot] = old_local_ids[old_slot]


# ------------------------------------------------------------------ exclusive scan
# out[0..n] = exclusive prefix sums of values[0..n), out[n] = total. Three launches:
# per-chunk totals, one block scanning the chunk totals, per-chunk rewrite.
@cuda.jit
def scan_chunk_sums(values, n, chunk, chunk_sums):
    c = thread_index()
    begin = c * chunk
    if begin < n:
        total = np.int64(0)
        for i in range(begin, smaller(begin + chunk, n)):
            total += values[i]
        chunk_sums[c] = total


@cuda.jit
def scan_chunk_totals(chunk_sums, num_chunks):
    """In place: chunk_sums[c] = sum of the chunks before c; chunk_sums[num_chunks] = all.
    One block: each thread owns a run of chunks, thread 0 scans the per-thread sums."""
    per_thread_sums = cuda.shared.array(SCAN_THREADS, dtype=np.int64)
    t = np.int64(cuda.threadIdx.x)
    per_thread = (num_chunks + SCAN_THREADS - 1) // SCAN_THREADS
    begin = t * per_thread
    end = smaller(begin + per_thread, num_chunks)
    total = np.int64(0)
    for c in range(begin, end):
        total += chunk_sums[c]
    per_thread_sums[t] = total
    cuda.syncthreads()
    if t == 0:
        running = np.int64(0)
        for i in range(SCAN_THREADS):
            value = per_thread_sums[i]
            per_thread_sums[i] = running
            running += value
        chunk_sums[num_chunks] = running
    cuda.syncthreads()
    running = per_thread_sums[t]
    for c in range(begin, end):
        value = chunk_sums[c]
        chunk_sums[c] = running
        running += value


@cuda.jit
def scan_write(values, n, chunk, chunk_sums, out):
    c = thread_index()
    if n == 0:
        if c == 0:
            out[0] = 0
        return
    begin = c * chunk
    if begin < n:
        running = chunk_sums[c]
        end = smaller(begin + chunk, n)
        for i in range(begin, end):
            out[i] = running
            running += values[i]
        if end == n:
            out[n] = running


# ------------------------------------------------------------------ seeds
@cuda.jit
def insert_seeds(seeds, n_id, keys, table_mask, first_pick, seed_slots):
    """n_id[:B] = seeds; a repeated seed node maps to its first position (atomicMin)."""
    i = thread_index()
    if i < seeds.size:
        node = seeds[i]
        n_id[i] = node
        slot = find_or_insert(keys, table_mask, node)
        cuda.atomic.min(first_pick, slot, i)
        seed_slots[i] = slot


@cuda.jit
def publish_seeds_and_gather(seed_slots, num_seeds, n_id, first_pick, local_ids, location,
                             tiers, x, is_missing, gather):
    """A group per seed position: fix the seed node's local id, copy its feature row."""
    lane, lanes, i = group_coordinates()
    if i < num_seeds:
        slot = seed_slots[i]
        if lane == 0:
            local_ids[slot] = first_pick[slot]    # same value from every repeat
        if gather:
            copy_row(n_id[i], i, location, tiers, x, is_missing, lane, lanes)


# ------------------------------------------------------------------ one hop
@cuda.jit
def count_picks(n_id, num_targets, fanout, indptr, counts):
    """Picks per target: min(degree, fanout); all neighbours when fanout < 0."""
    t = thread_index()
    if t < num_targets:
        node = n_id[t]
        degree = indptr[node + 1] - indptr[node]
        counts[t] = degree if (fanout < 0 or degree <= fanout) else fanout


@cuda.jit
def sample_hop(n_id, num_targets, indptr, hot_start, hot_indices, host_indices,
               block_indptr, batch_seed, hop, picks, picked_nodes, picked_slots,
               keys, local_ids, first_pick, table_mask):
    """A group of lanes per target: choose its neighbour positions (Floyd, inclusive
    range: the CPU sampler's exact draws), read the neighbour ids wherever the
    adjacency lives, insert them into the hash table and claim first occurrences."""
    lane, lanes, target = group_coordinates()
    if target >= num_targets:
        return
    node, degree, offset, take = draw_picks(n_id, target, indptr, block_indptr, batch_seed,
                                            hop, picks)
    for i in range(lane, take, lanes):
        node_id = picked_neighbour(i, node, degree, offset, take, picks, indptr, hot_start,
                                   hot_indices, host_indices)
        picked_nodes[offset + i] = node_id
        slot = find_or_insert(keys, table_mask, node_id)
        picked_slots[offset + i] = slot
        # Claim the first occurrence of a node not known before this hop. The plain read
        # skips the atomic for most repeats (hubs recur thousands of times per hop).
        if local_ids[slot] == NO_LOCAL_ID and first_pick[slot] > offset + i:
            cuda.atomic.min(first_pick, slot, offset + i)


@cuda.jit
def mark_first_occurrences(picked_slots, num_picks, local_ids, first_pick, is_new):
    p = thread_index()
    if p < num_picks:
        slot = picked_slots[p]
        is_new[p] = 1 if (local_ids[slot] == NO_LOCAL_ID and first_pick[slot] == p) else 0


@cuda.jit
def assign_and_gather(picked_nodes, picked_slots, new_rank, num_picks, num_known,
                      local_ids, n_id, location, tiers, x, is_missing, gather):
    """A group per run of `lanes` picks: each first occurrence becomes local id
    num_known + rank, is appended to n_id, and its feature row is copied by the group."""
    lane, lanes, group = group_coordinates()
    begin = group * lanes
    for p in range(begin, smaller(begin + lanes, num_picks)):
        rank = new_rank[p]
        if new_rank[p + 1] == rank:
            continue
        local = num_known + rank
        node = picked_nodes[p]
        if lane == 0:
            local_ids[picked_slots[p]] = local
            n_id[local] = node
        if gather:
            copy_row(node, local, location, tiers, x, is_missing, lane, lanes)


@cuda.jit
def relabel_picks(picked_slots, num_picks, local_ids, block_indices):
    p = thread_index()
    if p < num_picks:
        block_indices[p] = local_ids[picked_slots[p]]


@cuda.jit(device=True)
def read_feature(node, column, location, tiers):
    """One float32 value of a node's feature row, from whichever tier holds it."""
    where = location[node]
    return np.float32(tiers[where >> TIER_SHIFT][where & ROW_MASK, column])


@cuda.jit
def sample_and_aggregate(n_id, num_targets, indptr, hot_start, hot_indices, host_indices,
                         block_indptr, batch_seed, hop, picks, picked_nodes, location, tiers,
                         gcn, x_agg):
    """The last hop with the first layer's aggregation (samplers/_aggregate.py on the
    CPU, same weights, same order of the sums): a group of lanes per target draws
    sample_hop's picks, lists their global ids and writes x_agg[target] = their mean
    (or, `gcn`, their normalised sum plus the self loop), lanes striding the columns.
    Every lane reads every pick's id itself (the same addresses across the group), so
    no lane waits for another. Rows come from any tier; none may be missing."""
    lane, lanes, target = group_coordinates()
    if target >= num_targets:
        return
    node, degree, offset, take = draw_picks(n_id, target, indptr, block_indptr, batch_seed,
                                            hop, picks)
    for i in range(lane, take, lanes):
        picked_nodes[offset + i] = picked_neighbour(i, node, degree, offset, take, picks,
                                                    indptr, hot_start, hot_indices,
                                                    host_indices)
    scale, loop = target_weights(degree, take, gcn)
    for column in range(lane, x_agg.shape[1], lanes):
        total = np.float32(0)
        if gcn:
            total = read_feature(node, column, location, tiers) * loop
        for i in range(take):
            source = picked_neighbour(i, node, degree, offset, take, picks, indptr,
                                      hot_start, hot_indices, host_indices)
            weight = source_weight(scale, indptr[source + 1] - indptr[source], gcn)
            total += read_feature(source, column, location, tiers) * weight
        x_agg[target, column] = total
