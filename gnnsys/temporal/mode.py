"""Temporal mode plug-in (Sven): memory-based temporal GNN link prediction, 1 or K workers.

Data-parallel over a global chronological batch: worker r takes slice r of every batch,
fetches the memory rows it needs from their owners, computes its share of the loss
(sum over its events / global batch size, so the loop's gradient all-reduce sums and the
replicated model takes exactly the single-process step), and after the step writes the
new memory and mail of its true src/dst back to their owners. Per batch (TGL semantics):

    fetch rows (one per unique vertex) -> update memory from pending mail -> embed roots
    -> loss -> [loop: backward, gradient all-reduce, optimizer step] -> write back

Memory is state, not a parameter: it is written after the step with the values the
forward computed, and reset at the start of every epoch; validation continues from the
training memory and the test from the validation memory of the selected epoch (TGN's
protocol), which is why the memory is part of the mode's state.
"""
from __future__ import annotations

import time
from functools import cached_property

import numpy as np
import torch
from torch.nn import functional as F

from samplers.temporal import batch_number, pair_partners, pair_recency, shard

from ..mode import Mode
from ..prefetch import prefetched
from ..runlog import progress
from .batch import BatchPlanner, DeviceBatch, PreparedBatch, negative_layout, to_device
from .exchange import MemoryExchange
from .memory import MemoryStore, merge_states
from .metrics import link_metrics, ranking_metrics, strategy_metrics
from .models import ARCHS, build_model, dropout_draw_shape, row_layout


# Training a worker's batch of fewer than ~800 events, waking a second OpenMP thread for each
# of its small ops costs more than it saves (`bench_temporal_step.py --compare threads`;
# BENCHMARKS.md, "Small temporal batches train on one torch thread"). So
# small batches train on one torch thread, and the batch planner's thread has the other
# core. Evaluation (no backward, (2 + negatives) roots per event) keeps every thread.
# `temporal.train_torch_threads` overrides the rule (other machines cross over elsewhere).
ONE_TORCH_THREAD_BELOW_EVENTS = 800


class TemporalMode(Mode):
    task = "link"
    data_kind = "temporal"
    predicts = "events"
    metric = "ap"
    grad_op = "sum"              # each shard's loss is already divided by the global batch
    final_splits = ("test",)     # from the memory the selected epoch's validation left
    # 2: pair history's events since the pair met (its features' width), the mixed
    # strategy's idle-source column, dropout drawn per global batch
    training_version = 2
    # the queries (or nodes to embed) one forward takes on a rank: its memory grows with
    # them (neighbours, memory rows, attention), so a query file's size must not set it
    query_chunk = 4096
    # node features are not stored as a feature store's float16 rows
    supports = {"model.arch": ARCHS, "model.residual": (False,), "train.compile": (False, True),
                "dataset.feature_dtype": ("float32",), "train.precision": ("fp32",)}
    reductions = {"rows_sent": "sum", "bytes_sent": "sum", "rows_naive": "sum",
                  "bytes_naive": "sum", "occurrences": "sum", "unique": "sum",
                  "exchange_s": "max", "train_s": "max",
                  "events_per_s": "sum"}       # each rank's share of the events, per second
    charts = {"exchange_rows": ("exchange rows", "rows", ["rows_naive", "rows_sent"]),
              "exchange_bytes": ("exchange bytes", "bytes", ["bytes_naive", "bytes_sent"])}

    @staticmethod
    def prepare(config, graph=None) -> tuple:
        """Driver side: the event stream and every vertex's owner, shipped to the workers."""
        from ..datasets import load_run_graph
        from .data import prepare_events
        from .placement import vertex_ownership
        graph = graph if graph is not None else load_run_graph(config)
        events = prepare_events(graph, config.temporal.edge_feat_dim)
        return events, vertex_ownership(config, events)

    def __init__(self, ctx, config, events, owner: np.ndarray):
        super().__init__(ctx, config)
        self.events = events
        self.layout = row_layout(config, events)
        owned = np.flatnonzero(owner == ctx.rank)
        # memory, mailbox, the exchange and every batch tensor live on the training device;
        # only planning (batches, neighbour sampling, who owns what) stays on the host
        self.device = ctx.device
        self.store = MemoryStore(owned, events.num_nodes, self.layout, events.node_feat,
                                 device=self.device)
        self.edge_feat = None if events.edge_feat is None else events.edge_feat.to(self.device)
        self.exchange = MemoryExchange(ctx.comm, owner, self.store, config.temporal.exchange)
        self.planner = BatchPlanner.for_run(config, events, ctx.rank, ctx.world_size,
                                            dropout=dropout_draw_shape(config, self.layout))
        self.batches_per_epoch = len(self.planner.batches("train"))
        small = config.sampler.batch_size // ctx.world_size < ONE_TORCH_THREAD_BELOW_EVENTS
        # TrainingLoop.train_epoch sets it; None = the pool as it is
        self.training_torch_threads = config.temporal.train_torch_threads or \
            (1 if small else None)
        self.train_s = 0.0
        self.occurrences = self.unique = 0       # over the run, for the final redundancy
        self.last_traffic = None                 # the last training epoch's exchange

    def build_model(self):
        self.model = build_model(self.config, self.events).to(self.device)
        return self.model

    # ----------------------------------------------------------------------- training
    def train_batches(self, epoch: int):
        self.exchange.reset_stats()              # the previous evaluation's traffic
        self.store.reset()
        self.ctx.comm.barrier()
        self.model.train()
        self.epoch = epoch                       # validation draws this epoch's negatives
        start = time.perf_counter()
        for batch in prefetched(self.planner.epoch("train", epoch, 1), self.config.sampler.prefetch):
            loss, memory, memory_ts, moved, _ = self._forward(batch, train=True)
            yield loss, len(batch.src), batch.global_size
            self._write_back(batch, moved, memory.detach(), memory_ts)
        self.train_s = time.perf_counter() - start

    def epoch_stats(self) -> dict:
        s = self.last_traffic = self.exchange.reset_stats()
        self.occurrences += s.occurrences
        self.unique += s.unique
        train_events = self.events.train[1] - self.events.train[0]
        return {**s.as_dict(), "train_s": round(self.train_s, 4),
                "events_per_s": round(train_events / max(self.train_s, 1e-9)
                                      / self.ctx.world_size, 1)}

    def _embed(self, batch: PreparedBatch, train: bool, writes_back: bool = True):
        """(embeddings of the roots, new memory and its time of the written roots, the
        moved batch) of this worker's shard."""
        _, rows, inverse = self.exchange.fetch(batch.needed, writes_back)
        f = self.layout.unpack_read(rows)
        moved = to_device(batch, inverse, self.device)
        neighbors = moved.neighbors
        if neighbors is not None:
            neighbors["edge"] = None if self.edge_feat is None else \
                self.edge_feat[neighbors["event"]]
        with torch.set_grad_enabled(train):
            h, memory, memory_ts = self.model.forward_roots(f, moved.root_index, moved.root_time,
                                                            neighbors,
                                                            num_written=2 * len(batch.src),
                                                            dropout_draws=moved.dropout_draws)
        return h, memory, memory_ts, moved

    def _forward(self, batch: PreparedBatch, train: bool, writes_back: bool = True):
        """(loss, new memory and its time of the written roots, the moved batch,
        (pos, neg) logits) of this worker's shard."""
        h, memory, memory_ts, moved = self._embed(batch, train, writes_back)
        loss, pos, neg = self._link_scores(batch, moved, h, train)
        return loss, memory, memory_ts, moved, (pos, neg)

    def _link_scores(self, batch: PreparedBatch, moved: DeviceBatch, h: torch.Tensor,
                     train: bool):
        """(loss, pos logits [b], neg logits [b, n_neg]) from the roots' embeddings `h`."""
        b, n_neg, m = len(batch.src), batch.negatives.shape[1], batch.num_own_sources
        with torch.set_grad_enabled(train):
            h_src, h_dst = h[:b], h[b:2 * b]
            h_neg = h[2 * b:2 * b + b * n_neg].reshape(b, n_neg, h.shape[1])
            # each negative's source: the positive's, or its own (historical / inductive pairs)
            h_neg_src = h_src.unsqueeze(1).expand(-1, n_neg - m, -1)
            if m:
                h_neg_src = torch.cat([h_neg_src, h[2 * b + b * n_neg:].reshape(b, m, -1)], 1)
            pair = self.model.encode_pairs(moved.pairs)
            pair_pos, pair_neg = (None, None) if pair is None else \
                (pair[:b], pair[b:].reshape(b, n_neg, pair.shape[1]))
            pos = self.model.score(h_src, h_dst, pair_pos)
            neg = self.model.score(h_neg_src, h_neg, pair_neg)
            if not train and moved.same_as_positive is not None:
                # a negative that is the positive pair itself scores exactly as the positive
                # (a tie), not within float noise of it that moves with the batch's shape
                neg = torch.where(moved.same_as_positive, pos.unsqueeze(1), neg)
            loss = (F.softplus(-pos).sum() + F.softplus(neg).sum()) / batch.global_size
        return loss, pos.detach(), neg.detach()

    def _write_back(self, batch: PreparedBatch, moved: DeviceBatch, memory: torch.Tensor,
                    memory_ts: torch.Tensor) -> None:
        """memory / memory_ts: new state of the src occurrences, then the dst ones."""
        b = len(batch.src)
        s_src, s_dst = memory[:b], memory[b:]
        parts_src, parts_dst = [s_src, s_dst], [s_dst, s_src]
        if self.edge_feat is not None:
            e = self.edge_feat[moved.events]
            parts_src.append(e)
            parts_dst.append(e)
        mail = torch.cat([torch.cat(parts_src, 1), torch.cat(parts_dst, 1)])
        # key = 2 * event + role orders a vertex's occurrences by (time, event, role)
        key = np.concatenate([2.0 * batch.events, 2.0 * batch.events + 1])
        # the mails' time: the event time of src then dst, i.e. the first 2b root times
        self.exchange.write_back(batch.written, key, memory, memory_ts, mail,
                                 moved.root_time[:2 * b])

    # ----------------------------------------------------------------------- evaluation
    def split_outputs(self, splits: tuple) -> dict:
        """Each phase in order: validation continues from the memory training left, the
        test from the memory the selected epoch's validation left."""
        return {phase: self._eval_phase(phase) for phase in splits}

    def score(self, split: str, outputs: dict) -> dict:
        """AP / MRR of the configured negatives (`temporal.eval_negative_strategy`; val_ap
        selects the epoch), and for the test also AP and AUC under every strategy
        (`test_ap_neg_random`, `test_auc_neg_historical`, ...: each its first column)."""
        pos, ev = outputs["pos"], outputs["events"]
        strategy = self.config.temporal.eval_negative_strategy
        layout = negative_layout(strategy, self._num_eval_negatives(), split == "test")
        first, count = layout[strategy]
        neg = outputs["neg"][:, first:first + count]
        batch = batch_number(ev, getattr(self.events, split)[0], self.config.sampler.batch_size)
        out = link_metrics(pos, neg, split, batch=batch)
        if split == "test":
            new = self.events.new_node_event[ev]
            # inductive: events with an endpoint never seen in training (new nodes)
            out.update(link_metrics(pos[new], neg[new], "test", suffix="_inductive",
                                    batch=batch[new]))
            for name, (column, _) in layout.items():
                out.update(strategy_metrics(pos, outputs["neg"][:, column], name))
            if "rank_all" in outputs:
                out.update(ranking_metrics(outputs["rank_all"]))
        return out

    def _num_eval_negatives(self) -> int:
        return max(1, self.config.temporal.eval_negatives)

    def final_metrics(self) -> dict:
        self.exchange.reset_stats()              # the test phase's traffic
        return {**self._traffic_summary(), "exchange": self.config.temporal.exchange,
                "ownership": self.config.temporal.ownership}

    def _traffic_summary(self) -> dict:
        """The last training epoch's exchange over all workers, and the run's redundancy."""
        s = self.last_traffic
        mine = (self.occurrences, self.unique) + ((s.rows_sent, s.bytes_sent, s.bytes_recv)
                                                  if s is not None else (0, 0, 0))
        ranks = np.array(self.ctx.comm.all_gather_object(mine), dtype=np.float64)
        per_worker = ranks[:, 3] + ranks[:, 4]
        return {"redundancy": round(ranks[:, 0].sum() / max(ranks[:, 1].sum(), 1), 4),
                "rows_sent": int(ranks[:, 2].sum()), "bytes_sent": int(ranks[:, 3].sum()),
                "worker_bytes_max": int(per_worker.max()),
                "worker_bytes_mean": float(per_worker.mean())}

    @torch.no_grad()
    def _eval_phase(self, phase: str) -> dict:
        """This worker's positive and negative logits of the phase, and their events."""
        self.model.eval()
        epoch = self.epoch if phase == "val" else self.config.train.epochs  # seeds negatives
        bar = progress(total=len(self.planner.batches(phase)), desc=phase, unit="batch",
                       enabled=self.config.train.progress and self.ctx.is_main)
        positives, negatives, events, ranks = [], [], [], []
        rank_all = phase == "test" and self.config.temporal.rank_all
        # the test scores every strategy's negatives in its one pass (negatives never reach
        # the memory, so the extra columns change no other score)
        for batch in prefetched(self.planner.epoch(phase, epoch, self._num_eval_negatives(),
                                                   all_strategies=phase == "test"),
                                self.config.sampler.prefetch):
            # every candidate as of the batch's start: read before the batch's own fetch
            candidates = self._candidate_embeddings(batch) if rank_all else None
            h, memory, memory_ts, moved = self._embed(batch, train=False)
            _, pos, neg = self._link_scores(batch, moved, h, train=False)
            if rank_all:
                ranks.append(self._ranks_against_all(batch, h[:len(batch.src)], candidates))
            self._write_back(batch, moved, memory, memory_ts)
            positives.append(pos)
            negatives.append(neg)
            events.append(batch.events)
            bar.update(1)
        bar.close()
        # the phase's logits leave the device once
        out = {"pos": torch.cat(positives).cpu().numpy() if positives else np.zeros(0),
               "neg": torch.cat(negatives).cpu().numpy() if negatives else np.zeros((0, 1)),
               "events": np.concatenate(events) if events else np.zeros(0, dtype=np.int64)}
        if rank_all:
            out["rank_all"] = torch.cat(ranks).cpu().numpy() if ranks else np.zeros(0)
        return out

    # ----------------------------------------------------------------------- one-vs-all
    def _candidate_embeddings(self, batch: PreparedBatch) -> torch.Tensor:
        """[C, D]: what the link scorer reads of every ranking candidate
        (`events.rank_candidates`) as of the global batch's first event time: the memory
        the batch starts from and the neighbours strictly before that time. Once per
        batch, not per event (TGB's batched evaluation); every rank computes all of them
        at the same time, so any worker count ranks alike."""
        lo, _ = self.planner.batches("test")[batch.index]
        nodes = self.events.rank_candidates
        query = self.planner.query_batch(nodes, nodes, np.full(len(nodes), self.events.t[lo]),
                                         self.config.train.epochs)
        return self._embed(query, train=False, writes_back=False)[0][:len(nodes)]

    def _ranks_against_all(self, batch: PreparedBatch, h_src: torch.Tensor,
                           candidates: torch.Tensor) -> torch.Tensor:
        """float64 [b]: each positive's rank among every candidate destination, all scored
        alike: the source as the evaluation embeds it (at its event's time), each candidate
        (the true destination too) by `_candidate_embeddings`, the pair history of
        (source, candidate) strictly before the event. 1 + candidates scoring higher + half
        the others scoring equal; the true destination is not its own competitor."""
        column = self._candidate_column
        met = None
        if self.model.pair_encoder is not None:
            rows, partner, count, last = pair_partners(self.events.csr, batch.src, batch.time)
            keep = column[partner] >= 0
            rows, partner, count, last = rows[keep], partner[keep], count[keep], last[keep]
            gap, since = pair_recency(self.events.csr, batch.src[rows], partner,
                                      batch.time[rows], count, last)
            met = tuple(torch.from_numpy(a).to(self.device) for a in (
                rows, column[partner], *(x.astype(np.float32)
                                         for x in (count, gap, since[:, 0], since[:, 1]))))
        scores = self.model.score_all(h_src, candidates, met)
        at = torch.from_numpy(column[batch.dst]).to(self.device)
        pos = scores.gather(1, at[:, None])
        higher = (scores > pos).sum(1)
        equal = (scores == pos).sum(1) - 1
        return 1.0 + higher.double() + 0.5 * equal.double()

    @cached_property
    def _candidate_column(self) -> np.ndarray:
        """int64 [N]: each node's column among the ranking candidates, -1 if not one."""
        column = np.full(self.events.num_nodes, -1, dtype=np.int64)
        column[self.events.rank_candidates] = np.arange(len(self.events.rank_candidates))
        return column

    # ----------------------------------------------------------------------- queries
    @torch.no_grad()
    def score_queries(self, src: np.ndarray, dst: np.ndarray, t: np.ndarray) -> dict:
        """This rank's share of the query events' logits ({"query": index, "score"}):
        node rows src, dst at dataset times t, each scored as evaluation scores a test
        event (`_replay`)."""
        times = self._shifted(t)
        queries, scores = [], []
        for mine in self._replay(times):
            batch = self.planner.query_batch(src[mine], dst[mine], times[mine],
                                             self.config.train.epochs)
            queries.append(mine)
            scores.append(self._forward(batch, train=False, writes_back=False)[4][0])
        # the scores leave the device once
        return {"query": np.concatenate(queries), "score": torch.cat(scores).float().cpu().numpy()}

    @torch.no_grad()
    def embed_nodes(self, nodes: np.ndarray, t: float) -> dict:
        """This rank's share of the embeddings the link scorer reads of node rows `nodes`
        as of dataset time `t` ({"query": index into nodes, "embedding"}), replayed as
        `_replay` says."""
        times = np.full(len(nodes), self._shifted(t))
        queries, embeddings = [], []
        for mine in self._replay(times):
            batch = self.planner.query_batch(nodes[mine], nodes[mine], times[mine],
                                             self.config.train.epochs)
            queries.append(mine)
            embeddings.append(self._embed(batch, train=False, writes_back=False)[0][:len(mine)])
        return {"query": np.concatenate(queries),
                "embedding": torch.cat(embeddings).float().cpu().numpy()}

    def _shifted(self, t):
        """Dataset times as the event stream holds them (seconds after its first event)."""
        return np.asarray(t, dtype=np.float64) - self.events.t0

    def _replay(self, times: np.ndarray):
        """Replays the test stream from the selected snapshot's memory (validation's end)
        as the final evaluation does, and yields this rank's share of the queries due
        before each test batch runs (then those due after the stream), at most
        `query_chunk` at a time: a query file's size bounds no batch. A query at time t
        is due at the batch holding the first event at or after t: it sees every earlier
        batch and no event of its own, as a test event does, so a test event's own
        (src, dst, t) scores as the evaluation scored it. Collective: every rank replays
        the same batches and meets every due batch (its share may be empty)."""
        self.model.eval()
        lo, hi = self.events.test
        num_batches = len(self.planner.batches("test"))
        first = np.searchsorted(self.events.t[lo:hi], times, side="left")
        due = np.minimum(first // self.config.sampler.batch_size, num_batches)
        order = np.argsort(due, kind="stable")
        bounds = np.searchsorted(due[order], np.arange(num_batches + 2))
        last = int(due.max(initial=-1))
        stream = prefetched(self.planner.epoch("test", self.config.train.epochs,
                                               max(1, self.config.temporal.eval_negatives)),
                            self.config.sampler.prefetch)
        bar = progress(total=last, desc="replay", unit="batch",
                       enabled=self.config.train.progress and self.ctx.is_main)
        step = self.query_chunk * self.ctx.world_size    # every rank cuts the same pieces
        try:
            for k in range(last + 1):
                queued = order[bounds[k]:bounds[k + 1]]
                for piece in range(0, len(queued), step):
                    a, b = shard(0, len(queued[piece:piece + step]), self.ctx.rank,
                                 self.ctx.world_size)
                    yield queued[piece + a:piece + b]
                if k < last:
                    batch = next(stream)
                    _, memory, memory_ts, moved, _ = self._forward(batch, train=False)
                    self._write_back(batch, moved, memory, memory_ts)
                    bar.update(1)
        finally:
            stream.close()
            bar.close()

    # ----------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """Every vertex's memory and mail (gathered from the owners; collective)."""
        return {"memory": merge_states(self.ctx.comm.all_gather_object(self.store.state()))}

    def load_state_dict(self, state: dict) -> None:
        self.store.load_state(state["memory"])

    def describe(self) -> dict:
        return {"rank": self.ctx.rank, "owned_vertices": int(len(self.store.owned))}

    def split_ids(self) -> dict:
        if not self.ctx.is_main:          # every rank holds the whole event stream
            return {}
        return {name: np.arange(*getattr(self.events, name))
                for name in ("train", "val", "test")}
