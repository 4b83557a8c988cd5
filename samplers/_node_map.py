"""Global-id -> local-id map of one sampled batch: an array indexed by global id.

This is how the fused sampler deduplicates nodes across hops and relabels sampled
edges to local ids (position in `n_id`). Numba kernels plus a small owner class;
depends on numpy/numba only.

Layout: one int64 word per node of the graph, (generation << 32) | local id. A word
whose generation is not the current batch's counts as absent, so the map is never
cleared between batches (bumping the generation empties it in O(1)). Looking a node up
is one read at a known address (prefetched KEYS_AHEAD candidates ahead): no hashing,
no probing, no growth. It costs 8 bytes per node, as much as the CSR's indptr. Against
the open-addressing hash table sized to the batch that it replaced, the relabel phase of
`scripts/bench_sampler.py` (phases in sequence, synthetic-products) fell by a third
(BENCHMARKS.md, "CPU speed: sampler, batch wait, huge pages").

Two ways to relabel a hop, both giving every new node the local id a left-to-right scan
gives it ("discovery order"), so the choice never changes a batch:
- serial (`relabel_hop_serial`, one thread): one read per candidate. fused_cpu.py keeps
  the second core busy gathering meanwhile.
- sharded (`relabel_hop_sharded`, for many threads): nodes are split into shards by
  their low id bits, one thread per shard:
    1. per shard, scan the hop's candidates in order and mark the ones it owns that are
       new (local id PENDING); mark the first occurrence of each, count first
       occurrences per chunk;
    2. an exclusive scan over chunk counts gives each chunk its first new local id;
    3. per chunk, hand out local ids to first occurrences in order (and write n_id);
    4. fill in later repeats of nodes that were new in this hop.
  Every shard scans every candidate, so it pays off only with many threads.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from samplers._intrinsics import prefetch

MAX_GENERATION = (1 << 31) - 1
LOCAL_ID_MASK = (1 << 32) - 1
# A node new in this hop whose local id step 3 has not handed out yet (sharded relabel).
PENDING = LOCAL_ID_MASK
# Candidates per chunk in steps 1-4: big enough that per-chunk bookkeeping is noise,
# small enough to spread a hop over threads evenly.
RELABEL_CHUNK = 8192
# Candidates whose map word is requested ahead of the read (covers DRAM latency).
KEYS_AHEAD = 16


@njit(nogil=True, cache=True)
def insert_seeds(words, tag, seeds, n_id):
    """n_id[:B] = seeds; each distinct seed maps to its first position (a repeated seed
    keeps its own slot in n_id, but edges to that node point at the first one)."""
    for i in range(seeds.size):
        key = seeds[i]
        n_id[i] = key
        if (words[key] >> 32) != (tag >> 32):
            words[key] = tag | i


@njit(nogil=True, cache=True)
def relabel_hop_serial(words, tag, candidates, num_candidates, next_id, n_id, local_ids):
    """One-thread relabel of candidates[:num_candidates]; returns the next free local id."""
    generation = tag >> 32
    for i in range(min(KEYS_AHEAD, num_candidates)):
        prefetch(words, candidates[i])
    for i in range(num_candidates):
        if i + KEYS_AHEAD < num_candidates:
            prefetch(words, candidates[i + KEYS_AHEAD])
        key = candidates[i]
        word = words[key]
        if (word >> 32) == generation:
            local_ids[i] = word & LOCAL_ID_MASK
        else:
            words[key] = tag | next_id
            n_id[next_id] = key
            local_ids[i] = next_id
            next_id += 1
    return next_id


@njit(parallel=True, nogil=True, cache=True)
def relabel_hop_sharded(words, tag, num_shards, candidates, num_candidates, first_new_id,
                        n_id, local_ids, codes):
    """Map candidates[:M] (global ids, in discovery order) to local ids in local_ids[:M];
    new nodes get first_new_id, first_new_id + 1, ... and are written to n_id.
    `codes` is scratch of length >= M. Returns the number of new nodes."""
    generation = tag >> 32
    shard_mask = num_shards - 1
    num_chunks = (num_candidates + RELABEL_CHUNK - 1) // RELABEL_CHUNK
    firsts_per_shard_chunk = np.zeros((num_shards, max(num_chunks, 1)), dtype=np.int64)
    # Step 1. codes[i] >= 0: final local id (node known before this hop);
    # -1: first occurrence of a node new in this hop; -2: a later repeat of one.
    for shard in prange(num_shards):
        for i in range(num_candidates):
            if i + KEYS_AHEAD < num_candidates and \
                    (candidates[i + KEYS_AHEAD] & shard_mask) == shard:
                prefetch(words, candidates[i + KEYS_AHEAD])
            key = candidates[i]
            if (key & shard_mask) != shard:
                continue
            word = words[key]
            if (word >> 32) != generation:
                words[key] = tag | PENDING
                codes[i] = -1
                firsts_per_shard_chunk[shard, i // RELABEL_CHUNK] += 1
            else:
                known = word & LOCAL_ID_MASK
                codes[i] = known if known != PENDING else -2

    # Step 2: exclusive scan over chunks (few hundred at most: serial is fine).
    chunk_start = np.empty(num_chunks + 1, dtype=np.int64)
    chunk_start[0] = first_new_id
    for c in range(num_chunks):
        chunk_start[c + 1] = chunk_start[c] + firsts_per_shard_chunk[:, c].sum()

    # Step 3: first occurrences take the next local ids of their chunk, in order.
    for c in prange(num_chunks):
        next_id = chunk_start[c]
        for i in range(c * RELABEL_CHUNK, min((c + 1) * RELABEL_CHUNK, num_candidates)):
            code = codes[i]
            if code >= 0:
                local_ids[i] = code
            elif code == -1:
                words[candidates[i]] = tag | next_id
                n_id[next_id] = candidates[i]
                local_ids[i] = next_id
                next_id += 1

    # Step 4: repeats of nodes that were new in this hop read the id step 3 assigned.
    for c in prange(num_chunks):
        chunk_end = min((c + 1) * RELABEL_CHUNK, num_candidates)
        for i in range(c * RELABEL_CHUNK, chunk_end):
            if i + KEYS_AHEAD < chunk_end and codes[i + KEYS_AHEAD] == -2:
                prefetch(words, candidates[i + KEYS_AHEAD])
            if codes[i] == -2:
                local_ids[i] = words[candidates[i]] & LOCAL_ID_MASK
    return chunk_start[num_chunks] - first_new_id


class NodeMap:
    """Owns the map's words and its generation counter; one per sampler.
    num_shards == 1 relabels serially, more shards relabel one shard per thread."""

    def __init__(self, num_nodes: int, num_shards: int = 1):
        if num_shards < 1 or num_shards & (num_shards - 1):
            raise ValueError(f"NodeMap num_shards must be a power of two, got {num_shards}")
        self.num_shards = num_shards
        self.generation = 0
        self.words = np.zeros(max(int(num_nodes), 1), dtype=np.int64)

    @property
    def tag(self) -> np.int64:
        return np.int64(self.generation << 32)

    def start_batch(self) -> None:
        """Empty the map (a new generation)."""
        self.generation += 1
        if self.generation > MAX_GENERATION:
            self.words.fill(0)
            self.generation = 1

    def insert_seeds(self, seeds: np.ndarray, n_id: np.ndarray) -> None:
        insert_seeds(self.words, self.tag, seeds, n_id)

    def relabel_hop(self, candidates, num_candidates, first_new_id, n_id, local_ids,
                    codes) -> int:
        """Relabel candidates[:num_candidates] into local_ids; returns the number of new
        nodes (appended to n_id from first_new_id). `codes`: sharded-mode scratch."""
        if self.num_shards == 1:
            return int(relabel_hop_serial(self.words, self.tag, candidates, num_candidates,
                                          first_new_id, n_id, local_ids) - first_new_id)
        return int(relabel_hop_sharded(self.words, self.tag, self.num_shards, candidates,
                                       num_candidates, first_new_id, n_id, local_ids, codes))
