"""Plain-Python reference of the fused sampler, for tests only: slow, obviously correct.

Follows the specification in samplers/fused_cpu.py and common/rng.py line by line
with Python ints, lists and dicts (no numba), so agreement with the fast kernel checks
the kernel, not a shared helper. Also: `full_expansion` (BFS that takes every
neighbour, no randomness) and `check_invariants` (properties any valid sample has).
"""
from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z: int) -> int:
    z &= MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


class Stream:
    """splitmix64 stream of one (batch seed, hop, target position)."""

    def __init__(self, seed: int, hop: int, position: int):
        self.state = mix64(mix64(mix64(seed & MASK64) ^ hop) ^ position)

    def next(self) -> int:
        self.state = (self.state + GOLDEN) & MASK64
        return mix64(self.state)

    def below(self, bound: int) -> int:
        """Uniform in [0, bound): Lemire multiply-shift on the high 32 bits + rejection."""
        bits = self.next()
        if bound > 1 << 32:
            return bits % bound
        product = (bits >> 32) * bound
        if (product & 0xFFFFFFFF) < bound:
            threshold = ((1 << 32) - bound) % bound
            while (product & 0xFFFFFFFF) < threshold:
                product = (self.next() >> 32) * bound
        return product >> 32


def floyd_positions(degree: int, take: int, stream: Stream) -> list[int]:
    """Robert Floyd's sample of `take` distinct positions of range(degree), draw order."""
    picks: list[int] = []
    for j in range(degree - take, degree):
        t = stream.below(j + 1)
        picks.append(j if t in picks else t)
    return picks


def reference_sample(indptr, indices, fanouts, seeds, seed, features=None, row_of=None):
    """Returns dict(n_id, hop_sizes, block_indptr, block_indices, x, missing)."""
    indptr = [int(v) for v in indptr]
    indices = [int(v) for v in indices]
    n_id = [int(s) for s in seeds]
    local_of: dict[int, int] = {}
    for position, node in enumerate(n_id):
        local_of.setdefault(node, position)          # repeated seed: edges use first slot
    hop_sizes, block_indptr, block_indices = [len(n_id)], [], []
    for hop, fanout in enumerate(fanouts):
        row_ptr, cols = [0], []
        for target in range(hop_sizes[hop]):
            node = n_id[target]
            neighbours = indices[indptr[node]:indptr[node + 1]]
            if fanout < 0 or len(neighbours) <= fanout:
                picked = neighbours
            else:
                stream = Stream(seed, hop, target)
                picked = [neighbours[p] for p in floyd_positions(len(neighbours), fanout, stream)]
            for source in picked:
                if source not in local_of:
                    local_of[source] = len(n_id)
                    n_id.append(source)
                cols.append(local_of[source])
            row_ptr.append(len(cols))
        hop_sizes.append(len(n_id))
        block_indptr.append(np.array(row_ptr, dtype=np.int64))
        block_indices.append(np.array(cols, dtype=np.int64))
    x, missing = None, []
    if features is not None:
        x = np.zeros((len(n_id), features.shape[1]), dtype=features.dtype)
        for position, node in enumerate(n_id):
            row = node if row_of is None else int(row_of[node])
            if row < 0:
                missing.append(position)
            else:
                x[position] = features[row]
    return dict(n_id=np.array(n_id, dtype=np.int64), hop_sizes=hop_sizes,
                block_indptr=block_indptr, block_indices=block_indices, x=x,
                missing=np.array(missing, dtype=np.int64))


def full_expansion(indptr, indices, num_hops, seeds):
    """Every neighbour at every hop (what any fanout >= max degree must give):
    returns (n_id, hop_sizes, per-hop list of per-target local-id lists)."""
    n_id = [int(s) for s in seeds]
    local_of: dict[int, int] = {}
    for position, node in enumerate(n_id):
        local_of.setdefault(node, position)
    hop_sizes, blocks = [len(n_id)], []
    for _ in range(num_hops):
        rows = []
        for target in range(hop_sizes[-1]):
            row = []
            node = n_id[target]
            for source in indices[indptr[node]:indptr[node + 1]]:
                source = int(source)
                if source not in local_of:
                    local_of[source] = len(n_id)
                    n_id.append(source)
                row.append(local_of[source])
            rows.append(row)
        hop_sizes.append(len(n_id))
        blocks.append(rows)
    return n_id, hop_sizes, blocks


def check_invariants(sub, indptr, indices, fanouts, seeds, unique_rows=True):
    """Assert what every valid sample satisfies, independent of the random draws."""
    n_id = np.asarray(sub.n_id)
    seeds = np.asarray(seeds, dtype=np.int64)
    num_seeds = seeds.size
    assert sub.hop_sizes[0] == num_seeds
    assert len(sub.hop_sizes) == len(fanouts) + 1 == len(sub.block_indptr) + 1
    assert list(sub.hop_sizes) == sorted(sub.hop_sizes), "hop_sizes must not shrink"
    assert sub.hop_sizes[-1] == n_id.size
    np.testing.assert_array_equal(n_id[:num_seeds], seeds)
    assert np.unique(n_id[num_seeds:]).size == n_id.size - num_seeds
    assert not np.isin(n_id[num_seeds:], seeds).any(), "a seed was added again"
    first_slot = {}
    for position, node in enumerate(n_id.tolist()):
        first_slot.setdefault(node, position)
    for hop, fanout in enumerate(fanouts):
        block_indptr, block_indices = sub.block_indptr[hop], sub.block_indices[hop]
        num_targets, num_known = sub.hop_sizes[hop], sub.hop_sizes[hop + 1]
        assert block_indptr.shape == (num_targets + 1,) and block_indptr[0] == 0
        assert block_indptr[-1] == block_indices.size
        if block_indices.size:
            assert 0 <= block_indices.min() and block_indices.max() < num_known
        # New nodes of this hop appear exactly in first-seen order of the block.
        seen_new = []
        for local in block_indices.tolist():
            if local >= num_targets and local not in seen_new:
                seen_new.append(local)
        assert seen_new == list(range(num_targets, num_known))
        for target in range(num_targets):
            node = int(n_id[target])
            neighbours = indices[indptr[node]:indptr[node + 1]].astype(np.int64)
            cols = block_indices[block_indptr[target]:block_indptr[target + 1]]
            sources = n_id[cols]
            expected = neighbours.size if fanout < 0 else min(fanout, neighbours.size)
            assert cols.size == expected, (hop, target, cols.size, expected)
            assert np.isin(sources, neighbours).all(), "sampled an edge that does not exist"
            # Edges always point at a node's first slot (matters for repeated seeds).
            assert all(first_slot[int(s)] == int(c) for s, c in zip(sources, cols))
            if unique_rows:
                assert np.unique(sources).size == sources.size, "duplicate source"
            if fanout < 0 or neighbours.size <= fanout:
                np.testing.assert_array_equal(sources, neighbours)
