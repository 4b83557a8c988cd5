"""Temporal sampling for memory-based temporal GNNs: a time-sorted CSR (TGL's T-CSR),
most-recent / uniform neighbours strictly before each query time, negative destinations,
and chronological batches.

Numpy + numba only; this module knows arrays, not trainers (it never imports gnnsys).

    csr = build_temporal_csr(src, dst, t, num_nodes)
    nbrs = sample_neighbors(csr, nodes, times, k=10, strategy="recent")
    nbrs.nodes[i, :nbrs.count[i]]      # up to k neighbours of nodes[i] with time < times[i]
    count, last = pair_history(build_pair_index(src, dst, t, num_nodes), u, v, times)

Neighbour lists hold both directions of every event (the interaction graph is treated as
undirected, as TGN's neighbour finder does) sorted by (time, event id), so "before t" is one
binary search per query. TGL instead keeps a per-node pointer advanced monotonically; the
binary search costs O(log deg) but needs no shared mutable state, so any batch order, any
worker and a replay all see the same result.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange

PAD = -1  # node / event id of an empty neighbour slot


@dataclass(frozen=True)
class TemporalCSR:
    """Neighbour lists sorted by time: node v's events are positions indptr[v]:indptr[v+1]."""
    indptr: np.ndarray     # int64 [N + 1]
    neighbor: np.ndarray   # int64 [2E] the other endpoint
    time: np.ndarray       # float64 [2E] event time, ascending within each list
    event: np.ndarray      # int64 [2E] event id (index into the event arrays)

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1


@dataclass
class SampledNeighbors:
    """k slots per query, filled from the left in chronological order; the rest are PAD."""
    nodes: np.ndarray      # int64 [Q, k]
    times: np.ndarray      # float64 [Q, k]
    events: np.ndarray     # int64 [Q, k]
    count: np.ndarray      # int64 [Q] valid slots per query

    @property
    def mask(self) -> np.ndarray:
        return self.nodes != PAD


def build_temporal_csr(src: np.ndarray, dst: np.ndarray, t: np.ndarray,
                       num_nodes: int) -> TemporalCSR:
    """T-CSR over both directions of the events (src[i], dst[i], t[i]); event id = i."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    t = np.asarray(t, dtype=np.float64)
    if not (len(src) == len(dst) == len(t)):
        raise ValueError(f"src, dst and t must have one entry per event; got lengths "
                         f"{len(src)}, {len(dst)}, {len(t)}")
    if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_nodes):
        raise ValueError(f"event endpoints must be node ids in [0, {num_nodes}); got "
                         f"[{min(src.min(), dst.min())}, {max(src.max(), dst.max())}]")
    if len(t) > 1 and np.any(np.diff(t) < 0):
        raise ValueError("event times must be sorted ascending (chronological event order)")
    owner = np.concatenate([src, dst])
    other = np.concatenate([dst, src])
    event = np.concatenate([np.arange(len(src)), np.arange(len(src))])
    # events are chronological, so sorting by (owner, event id) gives (time, event id) order
    order = np.lexsort((event, owner))
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=num_nodes), out=indptr[1:])
    return TemporalCSR(indptr=indptr, neighbor=other[order], time=t[event[order]],
                       event=event[order])


# ----------------------------------------------------------------------------- kernels
@njit(inline="always")
def _first_at_or_after(time, lo, hi, t):
    """Smallest position p in [lo, hi) with time[p] >= t (hi if none): the end of 'before t'."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if time[mid] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(inline="always")
def _mix64(z):
    # splitmix64 finaliser: a counter-based random stream, identical under any thread count
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _sample_body(indptr, neighbor, time, event, nodes, times, time_bits, k, uniform, seed,
                   out_nodes, out_times, out_events, out_count):
    for q in prange(len(nodes)):
        v = nodes[q]
        lo = indptr[v]
        end = _first_at_or_after(time, lo, indptr[v + 1], times[q])
        avail = end - lo
        if avail == 0:
            out_count[q] = 0
            continue
        if uniform:
            # k draws with replacement among all earlier events, then put in time order;
            # the stream is keyed by the query (node, time), not its position, so a query
            # draws the same neighbours however the batch is split across workers
            picks = np.empty(k, dtype=np.int64)
            base = _mix64(np.uint64(seed) ^ _mix64(np.uint64(v) * np.uint64(0x9E3779B97F4A7C15)
                                                   + time_bits[q]))
            for j in range(k):
                r = _mix64(base + np.uint64(j + 1) * np.uint64(0x9E3779B97F4A7C15))
                picks[j] = lo + np.int64(r % np.uint64(avail))
            picks.sort()
            for j in range(k):
                p = picks[j]
                out_nodes[q, j] = neighbor[p]
                out_times[q, j] = time[p]
                out_events[q, j] = event[p]
            out_count[q] = k
        else:
            start = max(lo, end - k)
            for j in range(end - start):
                p = start + j
                out_nodes[q, j] = neighbor[p]
                out_times[q, j] = time[p]
                out_events[q, j] = event[p]
            out_count[q] = end - start


# Per-batch queries (a few thousand) finish in tens of microseconds; waking a thread pool
# costs more than that on a busy machine, so only large queries run in parallel.
_sample_serial = njit(nogil=True, cache=True)(_sample_body)
_sample_parallel = njit(parallel=True, nogil=True, cache=True)(_sample_body)
PARALLEL_MIN_QUERIES = 50_000
NEIGHBOR_STRATEGIES = ("recent", "uniform")


def sample_neighbors(csr: TemporalCSR, nodes: np.ndarray, times: np.ndarray, k: int,
                     strategy: str = "recent", seed: int = 0) -> SampledNeighbors:
    """Up to `k` neighbours of each nodes[i] through events strictly before times[i].

    'recent' takes the k latest such events; 'uniform' draws k of them with replacement
    (TGN's uniform sampler), reproducibly from `seed` and the query (node, time)."""
    if strategy not in NEIGHBOR_STRATEGIES:
        raise ValueError(f"neighbour strategy {strategy!r} is not one of {NEIGHBOR_STRATEGIES}")
    if k < 1:
        raise ValueError(f"the number of neighbours k must be >= 1, got {k}")
    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    times = np.ascontiguousarray(times, dtype=np.float64)
    if nodes.shape != times.shape or nodes.ndim != 1:
        raise ValueError(f"nodes and times must be 1-d of equal length; got shapes "
                         f"{nodes.shape} and {times.shape}")
    if len(nodes) and (nodes.min() < 0 or nodes.max() >= csr.num_nodes):
        raise ValueError(f"query nodes must be in [0, {csr.num_nodes}); got "
                         f"[{nodes.min()}, {nodes.max()}]")
    q = len(nodes)
    out = SampledNeighbors(nodes=np.full((q, k), PAD, dtype=np.int64),
                           times=np.zeros((q, k), dtype=np.float64),
                           events=np.full((q, k), PAD, dtype=np.int64),
                           count=np.zeros(q, dtype=np.int64))
    kernel = _sample_parallel if q >= PARALLEL_MIN_QUERIES else _sample_serial
    kernel(csr.indptr, csr.neighbor, csr.time, csr.event, nodes, times,
                   times.view(np.uint64), k,
                   strategy == "uniform", np.uint64(seed % (1 << 63)),
                   out.nodes, out.times, out.events, out.count)
    return out


# ----------------------------------------------------------------------------- pair history
@dataclass(frozen=True)
class PairIndex:
    """Every event once, under the key of its unordered pair, in (key, time) order: how
    often and when a pair met before t is two binary searches, however busy either end."""
    key: np.ndarray        # int64 [E] min(u, v) * num_nodes + max(u, v), ascending
    time: np.ndarray       # float64 [E] ascending within a key
    num_nodes: int


def build_pair_index(src: np.ndarray, dst: np.ndarray, t: np.ndarray,
                     num_nodes: int) -> PairIndex:
    """The PairIndex of chronological events (src[i], dst[i], t[i])."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if num_nodes >= 3_000_000_000:
        raise ValueError(f"pair keys need num_nodes**2 < 2**63; got {num_nodes} nodes")
    key = np.minimum(src, dst) * num_nodes + np.maximum(src, dst)
    order = np.argsort(key, kind="stable")     # stable: time order within a key
    return PairIndex(key=key[order], time=np.asarray(t, dtype=np.float64)[order],
                     num_nodes=int(num_nodes))


@njit(nogil=True, cache=True)
def _pair_history_kernel(keys, times, num_nodes, u, v, t, out_count, out_last):
    for q in range(len(u)):
        k = min(u[q], v[q]) * num_nodes + max(u[q], v[q])
        lo = _first_at_or_after(keys, 0, len(keys), k)
        hi = _first_at_or_after(keys, lo, len(keys), k + 1)
        end = _first_at_or_after(times, lo, hi, t[q])
        out_count[q] = end - lo
        out_last[q] = times[end - 1] if end > lo else -1.0


def pair_history(index: PairIndex, u: np.ndarray, v: np.ndarray,
                 times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(count, last) of the events between u[i] and v[i], either direction, strictly before
    times[i]: how often the pair met and when last (-1 if never). The same "before t" as
    the neighbour sampler, so it tells the model nothing the event stream had not shown."""
    u = np.ascontiguousarray(u, dtype=np.int64)
    v = np.ascontiguousarray(v, dtype=np.int64)
    times = np.ascontiguousarray(times, dtype=np.float64)
    if not (u.shape == v.shape == times.shape) or u.ndim != 1:
        raise ValueError(f"u, v and times must be 1-d of equal length; got shapes "
                         f"{u.shape}, {v.shape} and {times.shape}")
    n = index.num_nodes
    if len(u) and (min(u.min(), v.min()) < 0 or max(u.max(), v.max()) >= n):
        raise ValueError(f"pair endpoints must be node ids in [0, {n}); got "
                         f"[{min(u.min(), v.min())}, {max(u.max(), v.max())}]")
    count = np.zeros(len(u), dtype=np.int64)
    last = np.full(len(u), -1.0)
    _pair_history_kernel(index.key, index.time, np.int64(n), u, v, times, count, last)
    return count, last


@njit(nogil=True, cache=True)
def _events_between_kernel(indptr, time, nodes, after, before, out):
    for q in range(len(nodes)):
        lo, hi = indptr[nodes[q]], indptr[nodes[q] + 1]
        end = _first_at_or_after(time, lo, hi, before[q])
        # first position after `after`: the first at or after the next float up
        start = _first_at_or_after(time, lo, end, np.nextafter(after[q], np.inf))
        out[q] = end - start


def events_between(csr: TemporalCSR, nodes: np.ndarray, after: np.ndarray,
                   before: np.ndarray) -> np.ndarray:
    """int64: how many events of nodes[i] lie strictly between after[i] and before[i]:
    with `after` the pair's last meeting, how far that end has moved on since (0 = the
    pair's meeting was its latest event). A self-loop, listed in both directions, counts
    twice."""
    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    out = np.zeros(len(nodes), dtype=np.int64)
    _events_between_kernel(csr.indptr, csr.time, nodes,
                           np.ascontiguousarray(after, dtype=np.float64),
                           np.ascontiguousarray(before, dtype=np.float64), out)
    return out


def pair_recency(csr: TemporalCSR, u: np.ndarray, v: np.ndarray, times: np.ndarray,
                 count: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(float64 seconds since the pair (u[i], v[i]) last met, int64 [n, 2] events of u[i]
    and of v[i] since then), both 0 for a pair that never met (count 0), from `count` and
    `last` of `pair_history` or `pair_partners`: the link scorer's pair features besides
    the count, derived in this one place for scored pairs and ranked candidates alike."""
    met = np.asarray(count) > 0
    gap = np.where(met, times - last, 0.0)
    since = np.zeros((len(met), 2), dtype=np.int64)
    at = np.flatnonzero(met)                 # only pairs that met have a "since"
    for side, end in enumerate((u, v)):
        since[at, side] = events_between(csr, np.asarray(end)[at], np.asarray(last)[at],
                                         np.asarray(times)[at])
    return gap, since


def pair_partners(csr: TemporalCSR, u: np.ndarray, times: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every vertex u[i] met strictly before times[i], either direction: (row i, partner,
    count, last time) per such pair, each 1-d. For any partner v, count and last equal
    `pair_history(index, u[i], v, times[i])`; a vertex never met is left out (count 0)."""
    rows, partners, counts, lasts = [], [], [], []
    for i, (v, t) in enumerate(zip(np.asarray(u, np.int64).tolist(),
                                   np.asarray(times, np.float64).tolist())):
        a = csr.indptr[v]
        end = a + int(np.searchsorted(csr.time[a:csr.indptr[v + 1]], t, side="left"))
        neighbor, time = csr.neighbor[a:end], csr.time[a:end]
        if (neighbor == v).any():             # a self-loop is listed in both directions
            _, once = np.unique(csr.event[a:end], return_index=True)
            neighbor, time = neighbor[once], time[once]
        if len(neighbor) == 0:
            continue
        partner, first, count = np.unique(neighbor[::-1], return_index=True, return_counts=True)
        rows.append(np.full(len(partner), i, np.int64))
        partners.append(partner)
        counts.append(count)
        lasts.append(time[::-1][first])      # reversed: the first is the latest
    if not rows:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, np.zeros(0)
    return (np.concatenate(rows), np.concatenate(partners), np.concatenate(counts),
            np.concatenate(lasts))


# ----------------------------------------------------------------------------- negatives
class NegativeSampler:
    """Uniform negative destinations from a fixed candidate set (TGN's RandEdgeSampler).

    Draws depend only on (seed, stream), so every worker can draw a global batch's
    negatives and slice its own share: the split is the same as single-process."""

    def __init__(self, candidates: np.ndarray, seed: int = 0):
        self.candidates = np.unique(np.asarray(candidates, dtype=np.int64))
        if len(self.candidates) == 0:
            raise ValueError("negative sampling needs at least one candidate destination")
        self.seed = int(seed)

    def sample(self, size: int | tuple, stream: tuple = ()) -> np.ndarray:
        rng = np.random.default_rng([self.seed, *[int(s) for s in stream]])
        return self.candidates[rng.integers(0, len(self.candidates), size=size)]


NEGATIVE_STRATEGIES = ("random", "historical", "inductive")


class StrategyNegativeSampler:
    """Negatives by strategy, as DyGLib defines them (Poursafaei et al., NeurIPS 2022), for
    the global batch of events [lo, hi): evaluation's, and over the training prefix alone
    the historical pairs of `temporal.train_negative_strategy: mixed`.

    - `random`: the positive's source and a uniform destination from `destinations`
      (TGN's protocol; what an evaluation drew before strategies existed).
    - `historical`: a whole pair (src', dst') that occurred at or before the batch's first
      event time and does not occur within the batch's time span [t[lo], t[hi-1]].
    - `inductive`: such a pair that was first seen after training ended (after
      t[train_end - 1]): never seen in training, seen since, not now.

    Historical / inductive draw distinct pairs per column (without replacement over the
    batch) while there are enough; the rest are random pairs (a source from `sources`, a
    destination from `destinations`) outside the batch's pairs, in random positions, as
    DyGLib fills them. Pairs are directed (src, dst), as DyGLib's edge sets are.

    Each column of each strategy is its own stream of (seed, stream, strategy, column), so
    column j is the same however many columns are drawn, for every model, for EdgeBank, and
    for any worker count (draw the global batch, slice a worker's share)."""

    def __init__(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray, num_nodes: int,
                 destinations: np.ndarray, train_end: int, seed: int = 0):
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        self.t = np.asarray(t, dtype=np.float64)
        self.num_nodes, self.seed = int(num_nodes), int(seed)
        self.key = src * self.num_nodes + dst
        # every distinct pair once, in order of its first occurrence (events are in time order)
        pairs, first = np.unique(self.key, return_index=True)
        order = np.argsort(first, kind="stable")
        self.pair_key, self.pair_first_time = pairs[order], self.t[first[order]]
        # pairs first seen up to training's end form a prefix of that order
        self.train_pairs = int(np.searchsorted(self.pair_first_time, self.t[train_end - 1],
                                               side="right")) if train_end > 0 else 0
        self.sources = np.unique(src)
        self.destinations = np.unique(np.asarray(destinations, dtype=np.int64))
        if len(self.destinations) == 0 or len(self.sources) == 0:
            raise ValueError("negative sampling needs at least one candidate destination")

    def candidates(self, strategy: str, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(pair keys the strategy draws from for batch [lo, hi), the batch span's pair
        keys, sorted). Random draws no pairs: its candidates are empty."""
        if strategy not in NEGATIVE_STRATEGIES:
            raise ValueError(f"negative strategy {strategy!r} is not one of "
                             f"{NEGATIVE_STRATEGIES}")
        start, end = self.t[lo], self.t[hi - 1]
        a = np.searchsorted(self.t, start, side="left")
        b = np.searchsorted(self.t, end, side="right")
        in_batch = np.unique(self.key[a:b])
        if strategy == "random":
            return np.zeros(0, np.int64), in_batch
        upto = int(np.searchsorted(self.pair_first_time, start, side="right"))
        since = self.train_pairs if strategy == "inductive" else 0
        pool = self.pair_key[min(since, upto):upto]
        return pool[~np.isin(pool, in_batch)], in_batch

    def sample(self, strategy: str, lo: int, hi: int, columns: int, stream: tuple = ()
               ) -> tuple[np.ndarray, np.ndarray]:
        """(negative sources, negative destinations), each int64 [hi - lo, columns]."""
        pool, in_batch = self.candidates(strategy, lo, hi)
        size = hi - lo
        code = NEGATIVE_STRATEGIES.index(strategy)
        src = np.empty((size, columns), np.int64)
        dst = np.empty((size, columns), np.int64)
        for j in range(columns):
            rng = np.random.default_rng([self.seed, *[int(s) for s in stream], code, j])
            if strategy == "random":
                src[:, j] = -1                     # the positive's own source
                dst[:, j] = self.destinations[rng.integers(0, len(self.destinations), size)]
                continue
            if len(pool) >= size:
                keys = pool[rng.choice(len(pool), size=size, replace=False)]
            else:
                keys = np.concatenate([pool, self._random_pairs(rng, size - len(pool),
                                                                in_batch)])
                keys = keys[rng.permutation(size)]
            src[:, j], dst[:, j] = np.divmod(keys, self.num_nodes)
        return src, dst

    def _random_pairs(self, rng, size: int, in_batch: np.ndarray) -> np.ndarray:
        """`size` keys of uniform (source, destination) pairs not among `in_batch`
        (redrawn a few times; a graph too small to avoid them keeps the last draw)."""
        keys = np.zeros(size, np.int64)
        todo = np.arange(size)
        for _ in range(64):
            s = self.sources[rng.integers(0, len(self.sources), len(todo))]
            d = self.destinations[rng.integers(0, len(self.destinations), len(todo))]
            keys[todo] = s * self.num_nodes + d
            todo = todo[np.isin(keys[todo], in_batch)]
            if len(todo) == 0:
                break
        return keys


# ----------------------------------------------------------------------------- batching
def chronological_batches(start: int, stop: int, batch_size: int) -> list[tuple[int, int]]:
    """Consecutive event ranges [lo, hi) of at most batch_size events, in time order."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return [(lo, min(lo + batch_size, stop)) for lo in range(start, stop, batch_size)]


def batch_number(events: np.ndarray, start: int, batch_size: int) -> np.ndarray:
    """The chronological batch (from `chronological_batches(start, ...)`) of each event id."""
    return (np.asarray(events) - start) // batch_size


def shard(lo: int, hi: int, rank: int, world_size: int) -> tuple[int, int]:
    """Rank's contiguous slice of the global batch [lo, hi) (Sven: rows[i*B/G:(i+1)*B/G])."""
    n = hi - lo
    return lo + rank * n // world_size, lo + (rank + 1) * n // world_size
