"""Global-id -> local-id map of one sampled batch: open addressing, reused across hops.

This is how the fused sampler deduplicates nodes across hops and relabels sampled
edges to local ids (position in `n_id`). Numba kernels plus a small owner class;
depends on numpy/numba only.

Layout: one int64 array of 2 * capacity words, slot s = (tagged key, local id) side by
side so a probe and its hit cost one cache line. The tagged key is (generation << 32) |
global id; a slot whose generation is not the current batch's counts as empty, so the
table is never cleared between batches (bumping the generation empties it in O(1)).
Global ids must therefore fit in 32 bits. Growth is driven by actual entries: when a
shard passes MAX_LOAD the table doubles and the hop carries on; the size persists, so
after the first batches the table simply fits the frontier.

Two ways to relabel a hop, both giving every new node the local id a left-to-right scan
gives it ("discovery order"), so the choice never changes a batch:
- serial (`relabel_hop_serial`, one shard): one probe per candidate, with the slots of
  later candidates hashed once and prefetched. For an 870k-candidate hop it costs 11 ms
  of CPU, against 35 ms (2 shards) or 43 ms (4 shards) spread over threads for the
  parallel one, so below 8 threads serial wins (and cannot stall on a descheduled
  thread); fused_cpu.py keeps the second core busy gathering meanwhile.
- sharded (`relabel_hop_sharded`, for many threads): the table is split into shards by
  hash bits, one thread per shard:
    1. per shard, scan the hop's candidates in order and insert the ones it owns; mark
       the first occurrence of each new key, count first occurrences per chunk;
    2. an exclusive scan over chunk counts gives each chunk its first new local id;
    3. per chunk, hand out local ids to first occurrences in order (and write n_id);
    4. fill in later repeats of keys that were new in this hop.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from samplers._intrinsics import prefetch
from samplers.rng import GOLDEN

EMPTY_SLOT_VALUE = -1
MAX_GENERATION = (1 << 31) - 1
MAX_GLOBAL_ID = (1 << 32) - 1
# Candidates per chunk in steps 1-4: big enough that per-chunk bookkeeping is noise,
# small enough to spread a hop over threads evenly.
RELABEL_CHUNK = 8192
# Candidates whose hash slot is requested ahead of the probe (covers DRAM latency);
# a power of two, as it indexes a ring of precomputed slots.
KEYS_AHEAD = 16


@njit(inline="always", cache=True)
def _home_slot(key, hash_shift, shard_bits):
    """(shard, first slot to probe). Fibonacci hashing: the top bits of key * 2**64/phi
    index the whole table (one multiply), and the slot's high bits name its shard."""
    slot = np.int64((np.uint64(key) * GOLDEN) >> np.uint64(hash_shift))
    return slot >> shard_bits, slot


@njit(inline="always", cache=True)
def _find_or_insert(table, key, tag, slot, shard_bits):
    """Linear probing that wraps inside the slot's shard. Returns (slot, inserted?)."""
    slot_mask = (np.int64(1) << shard_bits) - 1
    shard_base = slot & ~slot_mask
    tagged = tag | key
    while True:
        word = table[2 * slot]
        if word == tagged:
            return slot, False
        if (word >> 32) != (tag >> 32):
            table[2 * slot] = tagged
            table[2 * slot + 1] = EMPTY_SLOT_VALUE
            return slot, True
        slot = shard_base | ((slot + 1) & slot_mask)


@njit(nogil=True, cache=True)
def insert_seeds(table, tag, hash_shift, shard_bits, shard_fill, seeds, n_id):
    """n_id[:B] = seeds; each distinct seed maps to its first position (a repeated seed
    keeps its own slot in n_id, but edges to that node point at the first one)."""
    for i in range(seeds.size):
        key = seeds[i]
        n_id[i] = key
        shard, slot = _home_slot(key, hash_shift, shard_bits)
        slot, inserted = _find_or_insert(table, key, tag, slot, shard_bits)
        if inserted:
            table[2 * slot + 1] = i
            shard_fill[shard] += 1


@njit(nogil=True, cache=True)
def relabel_hop_serial(table, tag, hash_shift, shard_bits, shard_fill, fill_limit,
                       candidates, begin, num_candidates, next_id, n_id, local_ids):
    """One-thread relabel of candidates[begin:M]: one probe per candidate. Returns
    (candidates done, next free local id); stops early if a shard passes fill_limit
    (every id handed out so far stays valid: grow, then continue from there)."""
    # Slots of the next KEYS_AHEAD candidates: hashed once, prefetched, used later.
    ahead = np.empty(KEYS_AHEAD, dtype=np.int64)
    for i in range(begin, min(begin + KEYS_AHEAD, num_candidates)):
        _, ahead[i % KEYS_AHEAD] = _home_slot(candidates[i], hash_shift, shard_bits)
        prefetch(table, 2 * ahead[i % KEYS_AHEAD])
    for i in range(begin, num_candidates):
        slot = ahead[i % KEYS_AHEAD]
        if i + KEYS_AHEAD < num_candidates:
            _, later = _home_slot(candidates[i + KEYS_AHEAD], hash_shift, shard_bits)
            ahead[i % KEYS_AHEAD] = later
            prefetch(table, 2 * later)
        key = candidates[i]
        slot, inserted = _find_or_insert(table, key, tag, slot, shard_bits)
        if inserted:
            table[2 * slot + 1] = next_id
            n_id[next_id] = key
            local_ids[i] = next_id
            next_id += 1
            shard = slot >> shard_bits
            shard_fill[shard] += 1
            if shard_fill[shard] > fill_limit:
                return i + 1, next_id
        else:
            local_ids[i] = table[2 * slot + 1]
    return num_candidates, next_id


@njit(parallel=True, nogil=True, cache=True)
def relabel_hop_sharded(table, tag, hash_shift, shard_bits, shard_fill, fill_limit,
                        candidates, num_candidates, first_new_id, n_id, local_ids, codes):
    """Map candidates[:M] (global ids, in discovery order) to local ids in local_ids[:M];
    new nodes get first_new_id, first_new_id + 1, ... and are written to n_id.
    `codes` is scratch of length >= M. Returns the number of new nodes, or -1 if a shard
    went past fill_limit entries (then nothing was relabelled: grow and call again)."""
    num_shards = shard_fill.size
    num_chunks = (num_candidates + RELABEL_CHUNK - 1) // RELABEL_CHUNK
    firsts_per_shard_chunk = np.zeros((num_shards, max(num_chunks, 1)), dtype=np.int64)
    overflowed = np.zeros(num_shards, dtype=np.int64)
    # Step 1. codes[i] >= 0: final local id (node known before this hop);
    # codes[i] < 0: -(2 * slot + is_first_occurrence) - 1, resolved in steps 3 and 4.
    for shard in prange(num_shards):
        fill = shard_fill[shard]
        ahead = np.empty(KEYS_AHEAD, dtype=np.int64)
        for i in range(min(KEYS_AHEAD, num_candidates)):
            _, ahead[i] = _home_slot(candidates[i], hash_shift, shard_bits)
        for i in range(num_candidates):
            slot = ahead[i % KEYS_AHEAD]
            if i + KEYS_AHEAD < num_candidates:
                later_shard, later = _home_slot(candidates[i + KEYS_AHEAD], hash_shift,
                                                shard_bits)
                ahead[i % KEYS_AHEAD] = later
                if later_shard == shard:
                    prefetch(table, 2 * later)
            if slot >> shard_bits != shard:
                continue
            slot, inserted = _find_or_insert(table, candidates[i], tag, slot, shard_bits)
            if inserted:
                codes[i] = -(2 * slot + 1) - 1
                firsts_per_shard_chunk[shard, i // RELABEL_CHUNK] += 1
                fill += 1
                if fill > fill_limit:
                    overflowed[shard] = 1
                    break
            else:
                known = table[2 * slot + 1]
                codes[i] = known if known >= 0 else -(2 * slot) - 1
        shard_fill[shard] = fill
    if overflowed.sum() > 0:
        return -1

    # Step 2: exclusive scan over chunks (few hundred at most: serial is fine).
    chunk_start = np.empty(num_chunks + 1, dtype=np.int64)
    chunk_start[0] = first_new_id
    for c in range(num_chunks):
        chunk_start[c + 1] = chunk_start[c] + firsts_per_shard_chunk[:, c].sum()

    # Step 3: first occurrences take the next local ids of their chunk, in order.
    for c in prange(num_chunks):
        next_id = chunk_start[c]
        chunk_end = min((c + 1) * RELABEL_CHUNK, num_candidates)
        for i in range(c * RELABEL_CHUNK, chunk_end):
            if i + KEYS_AHEAD < chunk_end and codes[i + KEYS_AHEAD] < 0:
                prefetch(table, 2 * ((-codes[i + KEYS_AHEAD] - 1) >> 1))
            code = codes[i]
            if code >= 0:
                local_ids[i] = code
                continue
            packed = -code - 1
            if packed & 1:
                table[2 * (packed >> 1) + 1] = next_id
                n_id[next_id] = candidates[i]
                local_ids[i] = next_id
                next_id += 1

    # Step 4: repeats of nodes that were new in this hop read the id step 3 assigned.
    for c in prange(num_chunks):
        chunk_end = min((c + 1) * RELABEL_CHUNK, num_candidates)
        for i in range(c * RELABEL_CHUNK, chunk_end):
            if i + KEYS_AHEAD < chunk_end and codes[i + KEYS_AHEAD] < 0:
                prefetch(table, 2 * ((-codes[i + KEYS_AHEAD] - 1) >> 1))
            code = codes[i]
            if code < 0 and ((-code - 1) & 1) == 0:
                local_ids[i] = table[2 * ((-code - 1) >> 1) + 1]
    return chunk_start[num_chunks] - first_new_id


@njit(nogil=True, cache=True)
def _rehash(old, new, tag, hash_shift, shard_bits, shard_fill):
    """Move this generation's entries that already have a local id into `new`; entries
    of an interrupted relabel_hop (local id still EMPTY_SLOT_VALUE) are dropped."""
    shard_fill[:] = 0
    for slot in range(old.size // 2):
        word = old[2 * slot]
        if (word >> 32) == (tag >> 32) and old[2 * slot + 1] != EMPTY_SLOT_VALUE:
            key = word & 0xFFFFFFFF
            shard, home = _home_slot(key, hash_shift, shard_bits)
            new_slot, _ = _find_or_insert(new, key, tag, home, shard_bits)
            new[2 * new_slot + 1] = old[2 * slot + 1]
            shard_fill[shard] += 1


class NodeMap:
    """Owns the table, its generation counter and its growth; one per sampler.
    num_shards == 1 relabels serially, more shards relabel one shard per thread."""

    # Highest fill (entries / slots) of a shard: linear probing stays short below it.
    MAX_LOAD = 0.6

    def __init__(self, num_shards: int, initial_capacity: int = 1 << 16):
        if num_shards < 1 or num_shards & (num_shards - 1):
            raise ValueError(f"NodeMap num_shards must be a power of two, got {num_shards}")
        self.num_shards = num_shards
        self.generation = 0
        self.shard_fill = np.zeros(num_shards, dtype=np.int64)
        self._allocate(initial_capacity)

    def _allocate(self, capacity: int) -> None:
        per_shard = max(capacity, 1) / self.num_shards
        self.shard_bits = max(4, int(np.ceil(np.log2(per_shard))))
        self.shard_size = 1 << self.shard_bits
        # Slot index = top log2(capacity) bits of the 64-bit Fibonacci hash.
        self.hash_shift = 64 - (self.shard_bits + self.num_shards.bit_length() - 1)
        self.table = np.zeros(2 * self.shard_size * self.num_shards, dtype=np.int64)

    @property
    def capacity(self) -> int:
        return self.shard_size * self.num_shards

    @property
    def tag(self) -> np.int64:
        return np.int64(self.generation << 32)

    @property
    def fill_limit(self) -> int:
        return int(self.MAX_LOAD * self.shard_size)

    def start_batch(self, num_seeds: int) -> None:
        """Empty the map (new generation) with room for the seeds in any one shard."""
        self.generation += 1
        if self.generation > MAX_GENERATION:
            self.table.fill(0)
            self.generation = 1
        self.shard_fill[:] = 0
        if num_seeds > self.fill_limit:
            self._allocate(int(num_seeds / self.MAX_LOAD + 1) * self.num_shards)

    def grow(self) -> None:
        """Double the capacity, keeping entries that have a local id."""
        old = self.table
        self._allocate(2 * self.capacity)
        _rehash(old, self.table, self.tag, self.hash_shift, self.shard_bits,
                self.shard_fill)

    def insert_seeds(self, seeds: np.ndarray, n_id: np.ndarray) -> None:
        insert_seeds(self.table, self.tag, self.hash_shift, self.shard_bits,
                     self.shard_fill, seeds, n_id)

    def relabel_hop(self, candidates, num_candidates, first_new_id, n_id, local_ids,
                    codes) -> int:
        """Relabel candidates[:num_candidates] into local_ids; returns the number of new
        nodes (appended to n_id from first_new_id). `codes`: sharded-mode scratch."""
        if self.num_shards == 1:
            done, next_id = 0, first_new_id
            while True:
                done, next_id = relabel_hop_serial(
                    self.table, self.tag, self.hash_shift, self.shard_bits, self.shard_fill,
                    self.fill_limit, candidates, done, num_candidates, next_id, n_id,
                    local_ids)
                if done == num_candidates:
                    return int(next_id - first_new_id)
                self.grow()
        while True:
            num_new = relabel_hop_sharded(
                self.table, self.tag, self.hash_shift, self.shard_bits, self.shard_fill,
                self.fill_limit, candidates, num_candidates, first_new_id, n_id, local_ids,
                codes)
            if num_new >= 0:
                return int(num_new)
            self.grow()
