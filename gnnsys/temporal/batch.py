"""Per-worker batch preparation: a worker's shard of a global chronological batch, its
negative destinations and sampled temporal neighbours, and the vertex ids it must fetch.

Preparation touches only the replicated event stream and T-CSR, never memory, so it can
run ahead of training in a background thread (`gnnsys.prefetch.prefetched`) without breaking the rule that
batch t+1 reads memory only after batch t has written it back.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from samplers.temporal import (NEGATIVE_STRATEGIES, NegativeSampler, SampledNeighbors,
                               StrategyNegativeSampler, build_pair_index,
                               chronological_batches, pair_history, pair_recency,
                               sample_neighbors, shard)

from ..mode_choices import MODE_CHOICES

PHASES = {"train": 0, "val": 1, "test": 2}


def negative_layout(strategy: str, num_negatives: int, all_strategies: bool = False
                    ) -> dict[str, tuple[int, int]]:
    """Strategy -> (first column, columns) of an evaluation batch's negatives: the
    configured `strategy` draws `num_negatives` columns and, with `all_strategies` (the
    final test), every other strategy one more. Columns that keep the positive's source
    (random) come first, so `PreparedBatch.negative_src` covers the last ones only."""
    blocks = [(strategy, num_negatives)]
    if all_strategies:
        blocks += [(s, 1) for s in NEGATIVE_STRATEGIES if s != strategy]
    blocks.sort(key=lambda block: block[0] != "random")       # stable
    layout, at = {}, 0
    for name, count in blocks:
        layout[name] = (at, count)
        at += count
    return layout


@dataclass
class PreparedBatch:
    index: int                       # position of the global batch in its phase
    global_size: int                 # events in the global batch (the loss denominator)
    events: np.ndarray               # int64 [b] event ids of this worker's shard
    src: np.ndarray
    dst: np.ndarray
    time: np.ndarray                 # float64 [b]
    negatives: np.ndarray            # int64 [b, n_neg] negative destinations
    neighbors: SampledNeighbors | None   # for the roots (src, dst, negatives), if the model attends
    # temporal.pair_history: per scored pair (src, dst) then (src, negative) row-major, how
    # often the two met before the event, the gap since they last did and how many events
    # each end (source, destination) had since then (all 0 if never)
    pair_count: np.ndarray | None = None     # int64 [b * (1 + n_neg)]
    pair_gap: np.ndarray | None = None       # float64 seconds [b * (1 + n_neg)]
    pair_since: np.ndarray | None = None     # int64 [b * (1 + n_neg), 2]
    # int64 [b, m]: the own sources of the last m negative columns (historical / inductive
    # negatives are whole pairs); the first n_neg - m columns pair with the positive's src
    negative_src: np.ndarray | None = None
    offset: int = 0                  # position of the shard's first event in the global batch
    # float32 [R, slots, heads]: training's attention dropout draws (`dropout_draws`)
    dropout_draws: np.ndarray | None = None

    @property
    def num_own_sources(self) -> int:
        return 0 if self.negative_src is None else self.negative_src.shape[1]

    @property
    def num_roots(self) -> int:
        return len(self.src) * (2 + self.negatives.shape[1] + self.num_own_sources)

    @property
    def roots(self) -> np.ndarray:
        """src, dst, negatives row-major, then the negatives' own sources row-major: root r
        of event i at r = i, b+i, 2b+i*n+j, 2b+b*n+i*m+j."""
        parts = [self.src, self.dst, self.negatives.reshape(-1)]
        if self.negative_src is not None:
            parts.append(self.negative_src.reshape(-1))
        return np.concatenate(parts)

    @property
    def root_time(self) -> np.ndarray:
        return np.concatenate([self.time, self.time, np.repeat(self.time, self.negatives.shape[1]),
                               np.repeat(self.time, self.num_own_sources)])

    @property
    def negative_sources(self) -> np.ndarray:
        """int64 [b, n_neg]: the source each negative destination is scored with."""
        n, m = self.negatives.shape[1], self.num_own_sources
        own = [] if self.negative_src is None else [self.negative_src]
        return np.concatenate([np.repeat(self.src[:, None], n - m, 1), *own], 1)

    @property
    def needed(self) -> np.ndarray:
        """Every vertex occurrence whose memory the step reads (roots, then neighbours)."""
        if self.neighbors is None:
            return self.roots
        return np.concatenate([self.roots, self.neighbors.nodes[self.neighbors.mask]])

    @property
    def written(self) -> np.ndarray:
        return np.concatenate([self.src, self.dst])

    @cached_property
    def slot_tables(self) -> dict:
        """The filled neighbour slots as `to_device` ships them (host arrays): slot,
        indptr, event, ridx, tidx (int64) and root_tau, neighbor_tau (float64 seconds after
        the batch's first event). The planner fills it in its thread, off the step."""
        n = self.neighbors
        slot = np.flatnonzero(n.mask)        # row-major, the order of `needed`'s slots
        base = self.time[0] if len(self.time) else 0.0
        neighbor_time, tidx = np.unique(n.times.reshape(-1)[slot], return_inverse=True)
        b = len(self.src)
        ridx = np.concatenate([np.arange(b), np.arange(b),
                               np.repeat(np.arange(b), self.negatives.shape[1]),
                               np.repeat(np.arange(b), self.num_own_sources)])
        return dict(slot=slot, indptr=np.concatenate([[0], np.cumsum(n.mask.sum(1))]),
                    event=n.events.reshape(-1)[slot], ridx=ridx, tidx=tidx.reshape(-1),
                    root_tau=self.time - base, neighbor_tau=neighbor_time - base)


@dataclass
class DeviceBatch:
    """What one step reads besides the memory rows, on the training device."""
    root_index: torch.Tensor         # int64 [R] row of each root in the fetched rows
    root_time: torch.Tensor          # float64 [R] query time of each root (seconds)
    events: torch.Tensor             # int64 [b] event ids of the shard (the mails' features)
    neighbors: dict | None           # TGN: the filled neighbour slots, see `to_device`
    # (count, gap, source's since, destination's since) float32 [b * (1 + n_neg)] each
    pairs: tuple | None = None
    dropout_draws: torch.Tensor | None = None    # float32 [R, slots, heads], training only
    # bool [b, n_neg]: negatives that are the positive pair itself (None if there are none)
    same_as_positive: torch.Tensor | None = None


def to_device(batch: PreparedBatch, inverse: np.ndarray, device) -> DeviceBatch:
    """Move a batch to `device` as two copies, one int64 and one float64 (split into views
    there), given `inverse` (needed == fetched ids[inverse]) from the exchange.

    Only the filled neighbour slots travel, so the model never computes an empty one:
    neighbors = dict(mask [R, k] bool, indptr [R + 1] each root's run of filled slots,
    slot [V] flat position r * k + j of each filled slot, row [V] its vertex's fetched row,
    event [V] its event id, and the times the time encoding needs as two tables:
    root_tau [b] each event's time and neighbor_tau [E] each distinct neighbour time, both
    float64 seconds after the batch's first event, with ridx [R] / tidx [V] pointing roots /
    slots into them (`slot_gaps` gives each slot's gap to its root). Taken on the host in
    float64, so they keep whole seconds however large the absolute times are."""
    roots = batch.num_roots
    root_time = batch.root_time
    ints, floats = [inverse[:roots], batch.events], [root_time]
    n = batch.neighbors
    if n is not None:
        k = n.nodes.shape[1]
        t = batch.slot_tables
        ints += [t["slot"], inverse[roots:], t["event"], t["indptr"], t["ridx"], t["tidx"]]
        floats += [t["root_tau"], t["neighbor_tau"]]
    at_pairs = len(floats)
    if batch.pair_count is not None:
        floats += [batch.pair_count.astype(np.float64), batch.pair_gap,
                   *batch.pair_since.T.astype(np.float64)]
    draws = batch.dropout_draws
    if draws is not None:                    # float32 -> float64 -> float32 is exact
        floats.append(draws.reshape(-1))
    same = (batch.negatives == batch.dst[:, None]) & \
        (batch.negative_sources == batch.src[:, None])
    if same.any():
        ints.append(np.flatnonzero(same))
    int_parts = torch.from_numpy(np.concatenate(ints).astype(np.int64, copy=False)) \
        .to(device).split([len(a) for a in ints])
    float_parts = torch.from_numpy(np.concatenate(floats)).to(device) \
        .split([len(a) for a in floats])
    neighbors = None
    if n is not None:
        slot, row, event, indptr, ridx, tidx = int_parts[2:8]
        mask = torch.zeros(roots * k, dtype=torch.bool, device=slot.device)
        mask = mask.index_fill_(0, slot, True).view(roots, k)
        neighbors = dict(mask=mask, indptr=indptr, slot=slot, row=row, event=event, ridx=ridx,
                         tidx=tidx, root_tau=float_parts[1], neighbor_tau=float_parts[2])
    pairs = None
    if batch.pair_count is not None:
        pairs = tuple(part.float() for part in float_parts[at_pairs:at_pairs + 4])
    same_as_positive = None
    if same.any():
        same_as_positive = torch.zeros(same.size, dtype=torch.bool, device=int_parts[-1].device)
        same_as_positive = same_as_positive.index_fill_(0, int_parts[-1], True).view(same.shape)
    return DeviceBatch(root_index=int_parts[0], root_time=float_parts[0], events=int_parts[1],
                       neighbors=neighbors, pairs=pairs, same_as_positive=same_as_positive,
                       dropout_draws=None if draws is None else
                       float_parts[-1].float().view(draws.shape))


def dropout_draws(batch: PreparedBatch, seed: int, epoch: int, slots: int, heads: int
                  ) -> np.ndarray:
    """float32 [roots, slots, heads] uniform draws in [0, 1) for the attention dropout of
    the shard's roots (`PreparedBatch.roots` order) in a training step. Drawn for the whole
    global batch from (seed, epoch, batch) and sliced, as the negatives are, so that any
    worker count drops exactly the single-process entries; torch's generator would give
    each worker masks of its own, the same ones on every worker."""
    b, n, m = len(batch.src), batch.negatives.shape[1], batch.num_own_sources
    rng = np.random.default_rng([seed, PHASES["train"], epoch, batch.index, 11])
    u = rng.random((batch.global_size, 2 + n + m, slots, heads), dtype=np.float32)
    u = u[batch.offset:batch.offset + b]
    # roots: every src, every dst, then each event's negatives, then each one's own sources
    return np.concatenate([u[:, 0], u[:, 1], u[:, 2:2 + n].reshape(b * n, slots, heads),
                           u[:, 2 + n:].reshape(b * m, slots, heads)])


def slot_gaps(neighbors: dict) -> torch.Tensor:
    """float64 seconds from each filled slot's event to its root's query time."""
    k = neighbors["mask"].shape[1]
    root = neighbors["ridx"][torch.div(neighbors["slot"], k, rounding_mode="floor")]
    return neighbors["root_tau"][root] - neighbors["neighbor_tau"][neighbors["tidx"]]


TRAIN_NEGATIVE_STRATEGIES = MODE_CHOICES["temporal.train_negative_strategy"]


def uses_neighbors(arch: str) -> bool:
    """Whether the model attends over sampled temporal neighbours (TGN), not memory alone:
    whether its batches carry them."""
    return arch == "tgn"


class BatchPlanner:
    """Builds the PreparedBatch of every (phase, batch) for one worker, deterministically."""

    def __init__(self, events, batch_size: int, rank: int, world_size: int, seed: int,
                 num_neighbors: int, strategy: str, uses_neighbors: bool,
                 pair_history: bool = False, eval_strategy: str = "random",
                 train_strategy: str = "random", dropout: tuple[int, int] | None = None):
        self.events, self.batch_size = events, batch_size
        self.rank, self.world_size = rank, world_size
        self.seed, self.num_neighbors, self.strategy = seed, num_neighbors, strategy
        self.uses_neighbors = uses_neighbors
        self.pairs = build_pair_index(events.src, events.dst, events.t, events.num_nodes) \
            if pair_history else None
        self.train_negatives = NegativeSampler(events.train_negatives, seed)
        # historical training negatives come from the training events alone (no pair,
        # source or destination of a later split)
        hi = events.train[1]
        self.train_historical = None if train_strategy == "random" else \
            StrategyNegativeSampler(events.src[:hi], events.dst[:hi], events.t[:hi],
                                    events.num_nodes, events.train_negatives, hi, seed)
        self.eval_strategy = eval_strategy
        self.dropout = dropout               # (slots, heads) of the training dropout draws
        self.eval_negatives = StrategyNegativeSampler(events.src, events.dst, events.t,
                                                      events.num_nodes, events.negatives,
                                                      events.train[1], seed)

    @classmethod
    def for_run(cls, config, events, rank: int = 0, world_size: int = 1,
                neighbors: bool = True, pair_history: bool = True,
                dropout: tuple[int, int] | None = None) -> "BatchPlanner":
        """The planner a run of `config` uses on `rank`. `neighbors` / `pair_history`
        False leave out what the caller never reads even where the config's model does
        (EdgeBank reads neither, a placement simulation no pair history); `dropout`
        (slots, heads) has training batches carry their dropout draws (the model's
        `dropout_draw_shape`)."""
        tc = config.temporal
        return cls(events, config.sampler.batch_size, rank, world_size, config.train.seed,
                   tc.num_neighbors, tc.neighbor_strategy,
                   neighbors and uses_neighbors(config.model.arch),
                   pair_history and tc.pair_history, tc.eval_negative_strategy,
                   tc.train_negative_strategy, dropout)

    def batches(self, phase: str) -> list[tuple[int, int]]:
        lo, hi = getattr(self.events, phase)
        return chronological_batches(lo, hi, self.batch_size)

    def batch(self, phase: str, epoch: int, index: int, lo: int, hi: int,
              num_negatives: int, all_strategies: bool = False) -> PreparedBatch:
        """Worker's shard of global batch `index` = events [lo, hi) of `phase`. Training
        draws `num_negatives` random destinations seen in training (and, with the `mixed`
        training strategy, the destination of another event of the batch, one historical
        pair of the training events and its source with a random destination); evaluation
        draws by `eval_strategy` (`negative_layout`'s columns, every strategy with
        `all_strategies`), validation anew each epoch, the test the same draws for any
        `epoch`, so every model and EdgeBank meet the same test negatives."""
        # negatives are drawn for the whole global batch and sliced, so any worker count
        # sees exactly the single-process negatives
        negatives, own_src = self.negatives(phase, epoch, index, lo, hi, num_negatives,
                                            all_strategies)
        a, b = shard(lo, hi, self.rank, self.world_size)
        ev = self.events
        batch = PreparedBatch(index=index, global_size=hi - lo, offset=a - lo,
                              events=np.arange(a, b, dtype=np.int64), src=ev.src[a:b],
                              dst=ev.dst[a:b], time=ev.t[a:b],
                              negatives=negatives[a - lo:b - lo], neighbors=None,
                              negative_src=None if own_src is None else own_src[a - lo:b - lo])
        if phase == "train" and self.dropout is not None:
            batch.dropout_draws = dropout_draws(batch, self.seed, epoch, *self.dropout)
        return self._sampled(batch, phase, epoch)

    def negatives(self, phase: str, epoch: int, index: int, lo: int, hi: int,
                  num_negatives: int, all_strategies: bool = False
                  ) -> tuple[np.ndarray, np.ndarray | None]:
        """(negative destinations [hi - lo, n], the own sources of the last m columns
        [hi - lo, m] or None) of the whole global batch `index` = events [lo, hi)."""
        if phase == "train":
            stream = (PHASES[phase], epoch, index)
            negatives = self.train_negatives.sample((hi - lo, num_negatives), stream=stream)
            if self.train_historical is None:
                return negatives, None
            # three more columns: a destination busy in the batch, a whole pair seen before
            # the batch but not within it, and that pair's source with a random destination
            busy = self._busy_destinations(lo, hi, negatives[:, 0], stream)
            src, dst = self.train_historical.sample("historical", lo, hi, 1, stream)
            # that pair's source, mostly idle now, also meets a random destination: else the
            # scorer learns that an idle source's partners are unlikely, not that the source
            # is, and ranks a returning source's latest partner below pages it never met
            idle = self.train_negatives.sample((hi - lo, 1), stream=(*stream, 9))
            return np.concatenate([negatives, busy, dst, idle], 1), np.concatenate([src, src], 1)
        stream = (PHASES[phase], epoch if phase == "val" else 0, index)
        drawn = [self.eval_negatives.sample(name, lo, hi, count, stream)
                 for name, (_, count) in negative_layout(self.eval_strategy, num_negatives,
                                                         all_strategies).items()]
        sources = np.concatenate([s for s, _ in drawn], 1)
        own = int((sources[0] >= 0).sum())           # random columns (-1) come first
        return np.concatenate([d for _, d in drawn], 1), \
            (sources[:, sources.shape[1] - own:] if own else None)

    def _busy_destinations(self, lo, hi, fallback: np.ndarray, stream: tuple) -> np.ndarray:
        """[hi - lo, 1]: for each event of the global batch [lo, hi), the destination of a
        random event of the batch that is not its own destination (`fallback` where three
        draws found none): one busy right now, the competitor that ranking against every
        node meets and a uniform draw rarely is."""
        rng = np.random.default_rng([self.seed, *[int(s) for s in stream], 7])
        dst = self.events.dst[lo:hi]
        pick = dst[rng.integers(0, hi - lo, hi - lo)]
        for _ in range(3):
            clash = np.flatnonzero(pick == dst)
            pick[clash] = dst[rng.integers(0, hi - lo, len(clash))]
        return np.where(pick == dst, fallback, pick)[:, None]

    def query_batch(self, src: np.ndarray, dst: np.ndarray, time: np.ndarray,
                    epoch: int) -> PreparedBatch:
        """Query events (src, dst at float64 times since the first event) as the test
        phase of `epoch` prepares its events (same neighbours for the same (vertex,
        time)), without negatives; its `events` are placeholders: nothing is written back."""
        b = len(src)
        batch = PreparedBatch(index=-1, global_size=max(b, 1), events=np.zeros(b, np.int64),
                              src=src, dst=dst, time=time,
                              negatives=np.zeros((b, 0), dtype=np.int64), neighbors=None)
        return self._sampled(batch, "test", epoch)

    def _sampled(self, batch: PreparedBatch, phase: str, epoch: int) -> PreparedBatch:
        """`batch` with the neighbours and pair history its roots need."""
        num_negatives = batch.negatives.shape[1]
        if self.uses_neighbors:
            seed = (self.seed * 1_000_003 + PHASES[phase]) * 1_000_003 + epoch
            batch.neighbors = sample_neighbors(self.events.csr, batch.roots, batch.root_time,
                                               self.num_neighbors, self.strategy, seed=seed)
        if self.pairs is not None:
            b, n = len(batch.src), num_negatives
            time = batch.root_time[b:b + b * (1 + n)]   # dst's, then each negative's
            src = np.concatenate([batch.src, batch.negative_sources.reshape(-1)])
            dst = batch.roots[b:b + b * (1 + n)]
            count, last = pair_history(self.pairs, src, dst, time)
            batch.pair_count = count
            batch.pair_gap, batch.pair_since = pair_recency(self.events.csr, src, dst, time,
                                                            count, last)
        if batch.neighbors is not None:
            batch.slot_tables                       # noqa: B018 (computed here, off the step)
        return batch

    def epoch(self, phase: str, epoch: int, num_negatives: int, all_strategies: bool = False):
        for index, (lo, hi) in enumerate(self.batches(phase)):
            yield self.batch(phase, epoch, index, lo, hi, num_negatives, all_strategies)
