"""One worker's temporal training loop (also the single-process loop: world size 1).

Data-parallel over a global chronological batch: worker r takes slice r of every batch,
fetches the memory rows it needs from their owners, computes its share of the loss
(sum over its events / global batch size), all-reduces gradients with a sum, so the
replicated model takes exactly the single-process step, and writes the new memory and
mail of its true src/dst back to their owners. Per batch (TGL semantics):

    fetch rows (one per unique vertex) -> update memory from pending mail -> embed roots
    -> loss, backward, gradient all-reduce, optimizer step -> write back memory + 'last' mail

Memory is state, not a parameter: it is written after the step with the values the
forward computed, and reset at the start of every epoch; validation and test continue
from the memory the previous phase left (TGN's protocol).
"""
from __future__ import annotations

import threading
import time

import numpy as np
import torch
from torch.nn import functional as F

from ..runlog import RunDir, progress
from ..prefetch import prefetched
from .batch import BatchPlanner, PreparedBatch
from .exchange import MemoryExchange
from .memory import MemoryStore, RowLayout, merge_states
from .metrics import link_metrics
from .models import TemporalLinkModel


_SEEDED_INIT = threading.Lock()


def build_model(config, events) -> tuple[TemporalLinkModel, RowLayout]:
    tc, arch = config.temporal, config.model.arch
    mail_dim = 2 * tc.memory_dim + events.edge_dim
    mailbox = tc.mailbox_size or (10 if arch == "apan" else 1)
    layout = RowLayout(memory_dim=tc.memory_dim, mail_dim=mail_dim, mailbox_size=mailbox,
                       node_feat_dim=events.node_feat_dim)
    model = TemporalLinkModel(arch, tc.memory_dim, mail_dim, events.edge_dim, tc.time_dim,
                              tc.embedding_dim, config.model.heads, config.model.dropout,
                              node_feat_dim=events.node_feat_dim, time_scale=events.time_scale)
    return model, layout


class TemporalWorker:
    def __init__(self, ctx, config, events, owner: np.ndarray):
        self.ctx, self.config, self.events = ctx, config, events
        with _SEEDED_INIT:   # workers may share a process (threads); seeding is global
            torch.manual_seed(config.train.seed)
            self.model, self.layout = build_model(config, events)
        # replicas start from rank 0's parameters, as DDP does, whatever each rank's RNG did
        self.model.load_state_dict(ctx.comm.broadcast_object(self.model.state_dict()))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.train.lr,
                                          weight_decay=config.train.weight_decay)
        owned = np.flatnonzero(owner == ctx.rank)
        self.store = MemoryStore(owned, events.num_nodes, self.layout, events.node_feat)
        self.exchange = MemoryExchange(ctx.comm, owner, self.store, config.temporal.exchange)
        self.planner = BatchPlanner(events, config.sampler.batch_size, ctx.rank, ctx.world_size,
                                    config.train.seed, config.temporal.num_neighbors,
                                    config.temporal.neighbor_strategy,
                                    self.model.uses_neighbors)
        self.run = RunDir(config.run.dir, writer=ctx.is_main)

    # ----------------------------------------------------------------------- one batch
    def step(self, batch: PreparedBatch, train: bool):
        _, rows, inverse = self.exchange.fetch(batch.needed)
        f = self.layout.unpack_read(rows)
        inv = torch.from_numpy(inverse)
        b, n_neg = len(batch.src), batch.negatives.shape[1]
        roots = len(batch.src) * (2 + n_neg)
        root_time = torch.tensor(batch.root_time)
        with torch.set_grad_enabled(train):
            neighbors = self._neighbors(batch, inv[roots:], root_time) \
                if self.model.uses_neighbors else None
            h, memory, memory_ts = self.model.forward_roots(f, inv, roots, root_time,
                                                            neighbors, num_written=2 * b)
            h_src, h_dst = h[:b], h[b:2 * b]
            h_neg = h[2 * b:].reshape(b, n_neg, h.shape[1])
            pos = self.model.score(h_src, h_dst)
            neg = self.model.score(h_src.unsqueeze(1).expand(-1, n_neg, -1), h_neg)
            loss = (F.softplus(-pos).sum() + F.softplus(neg).sum()) / batch.global_size
        if train:
            self.optimizer.zero_grad(set_to_none=False)
            loss.backward()
            self._sync_gradients()
            self.optimizer.step()
        self._write_back(batch, memory.detach(), memory_ts)
        return float(loss.detach()), pos.detach().numpy(), neg.detach().numpy()

    def _neighbors(self, batch: PreparedBatch, nbr_inverse: torch.Tensor,
                   root_time: torch.Tensor) -> dict:
        n = batch.neighbors
        mask = torch.from_numpy(n.mask)
        index = torch.zeros(mask.shape, dtype=torch.long)
        index[mask] = nbr_inverse
        dt = (root_time.unsqueeze(1) - torch.from_numpy(n.times)).clamp(min=0) * mask
        edge = None
        if self.events.edge_feat is not None:
            edge = self.events.edge_feat[torch.from_numpy(n.events).clamp(min=0)]
            edge = edge * mask.unsqueeze(-1)
        return dict(index=index, mask=mask, dt=dt, edge=edge)   # dt stays float64 seconds

    def _write_back(self, batch: PreparedBatch, memory: torch.Tensor,
                    memory_ts: torch.Tensor) -> None:
        """memory / memory_ts: new state of the src occurrences, then the dst ones."""
        b = len(batch.src)
        s_src, s_dst = memory[:b], memory[b:]
        parts_src, parts_dst = [s_src, s_dst], [s_dst, s_src]
        if self.events.edge_feat is not None:
            e = self.events.edge_feat[torch.from_numpy(batch.events)]
            parts_src.append(e)
            parts_dst.append(e)
        mail = torch.cat([torch.cat(parts_src, 1), torch.cat(parts_dst, 1)])
        event_time = torch.tensor(batch.time)     # a copy: Ray hands out read-only arrays
        # key = 2 * event + role orders a vertex's occurrences by (time, event, role)
        key = np.concatenate([2.0 * batch.events, 2.0 * batch.events + 1])
        self.exchange.write_back(batch.written, key, memory, memory_ts, mail,
                                 torch.cat([event_time, event_time]))

    def _sync_gradients(self) -> None:
        if self.ctx.world_size == 1:
            return
        params = [p for p in self.model.parameters() if p.requires_grad]
        # one message; float64 (time encoder) and float32 parameters share it as float64
        flat = torch.cat([p.grad.reshape(-1).double() for p in params])
        self.ctx.comm.all_reduce(flat, "sum")   # each shard's loss is already / global size
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    # ----------------------------------------------------------------------- phases
    def run_phase(self, phase: str, epoch: int) -> dict:
        train = phase == "train"
        self.model.train(train)
        num_negatives = 1 if train else max(1, self.config.temporal.eval_negatives)
        total = len(self.planner.batches(phase))
        bar = progress(total=total, desc=f"epoch {epoch} {phase}",
                       enabled=self.config.train.progress and self.ctx.is_main)
        loss_sum, positives, negatives, events = 0.0, [], [], []
        batches = prefetched(self.planner.epoch(phase, epoch, num_negatives),
                             self.config.sampler.prefetch)
        for batch in batches:
            loss, pos, neg = self.step(batch, train)
            loss_sum += loss
            if not train:
                positives.append(pos)
                negatives.append(neg)
                events.append(batch.events)
            bar.update(1)
        bar.close()
        if train:
            loss_total = torch.tensor([loss_sum], dtype=torch.float64)
            self.ctx.comm.all_reduce(loss_total, "sum")
            return {"loss": float(loss_total) / max(total, 1)}
        return self._eval_metrics(phase, positives, negatives, events)

    def _eval_metrics(self, phase, positives, negatives, events) -> dict:
        mine = (np.concatenate(positives) if positives else np.zeros(0),
                np.concatenate(negatives) if negatives else np.zeros((0, 1)),
                np.concatenate(events) if events else np.zeros(0, dtype=np.int64))
        gathered = self.ctx.comm.all_gather_object(mine)
        pos = np.concatenate([g[0] for g in gathered])
        neg = np.concatenate([g[1] for g in gathered])
        ev = np.concatenate([g[2] for g in gathered])
        out = link_metrics(pos, neg, phase)
        if phase == "test":
            new = self.events.new_node_event[ev]
            # inductive: events with an endpoint never seen in training (new nodes)
            out.update(link_metrics(pos[new], neg[new], "test", suffix="_inductive"))
        return out

    def _traffic(self, seconds: float) -> dict:
        """This epoch's exchange traffic summed over workers, plus per-worker max/mean."""
        s = self.exchange.reset_stats()
        mine = [s.rows_sent, s.bytes_sent, s.bytes_sent + s.bytes_recv, s.occurrences, s.unique,
                s.seconds]
        rows = self.ctx.comm.all_gather_object(mine)
        per_worker = np.array([r[2] for r in rows], dtype=np.float64)
        occ, uniq = sum(r[3] for r in rows), sum(r[4] for r in rows)
        return {"rows_sent": int(sum(r[0] for r in rows)),
                "bytes_sent": int(sum(r[1] for r in rows)),
                "worker_bytes_max": int(per_worker.max()),
                "worker_bytes_mean": float(per_worker.mean()),
                "redundancy": round(occ / max(uniq, 1), 4),
                "exchange_s": round(max(r[5] for r in rows), 4),
                "epoch_s": round(seconds, 3)}

    # ----------------------------------------------------------------------- checkpoints
    def _checkpoint(self, epoch: int) -> None:
        states = self.ctx.comm.all_gather_object(self.store.state())
        if self.ctx.is_main:
            self.run.save_checkpoint({"epoch": epoch, "model": self.model.state_dict(),
                                      "optimizer": self.optimizer.state_dict(),
                                      "memory": merge_states(states),
                                      "arch": self.config.model.arch})

    def _resume(self) -> int:
        """Epochs already done (0 when starting fresh)."""
        if not self.config.run.resume:
            return 0
        state = self.run.load_checkpoint() if self.ctx.is_main else None
        state = self.ctx.comm.broadcast_object(state)
        if state is None:
            return 0
        if state.get("arch") != self.config.model.arch:
            raise RuntimeError(f"the checkpoint in {self.config.run.dir} is for model "
                               f"{state.get('arch')!r}, not {self.config.model.arch!r}; use "
                               "another run.dir or run.resume: false")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.store.load_state(state["memory"])
        self.run.truncate_metrics_after(state["epoch"])
        return int(state["epoch"]) + 1

    # ----------------------------------------------------------------------- fit
    def fit(self) -> dict:
        config = self.config
        self.run.save_config(config)
        start = self._resume()
        record: dict = {}
        for epoch in range(start, config.train.epochs):
            self.store.reset()
            self.ctx.comm.barrier()
            t0 = time.perf_counter()
            record = {"epoch": epoch, **self.run_phase("train", epoch)}
            train_s = time.perf_counter() - t0
            record.update(self._traffic(train_s))
            record["events_per_s"] = round((self.events.train[1] - self.events.train[0])
                                           / max(train_s, 1e-9), 1)
            # validation continues from the training memory (TGN protocol)
            if (epoch + 1) % config.train.eval_every == 0 or epoch + 1 == config.train.epochs:
                record.update(self.run_phase("val", epoch))
            self.exchange.reset_stats()
            self.run.log(record)
            if config.run.checkpoint_every and ((epoch + 1) % config.run.checkpoint_every == 0
                                                or epoch + 1 == config.train.epochs):
                self._checkpoint(epoch)
        if "val_ap" not in record:   # resumed after the last epoch: memory is in the checkpoint
            record = {k: v for k, v in (self.run.read_metrics() or [{}])[-1].items()
                      if k != "time"}
        test = self.run_phase("test", config.train.epochs)
        self.exchange.reset_stats()
        self.run.log({"epoch": config.train.epochs - 1, "phase": "test", **test})
        return {**record, **test, "workers": self.ctx.world_size,
                "exchange": config.temporal.exchange, "ownership": config.temporal.ownership}


def run_worker(ctx, config, events, owner) -> dict:
    """launch() entry: train on this worker; every rank returns the same metrics."""
    return TemporalWorker(ctx, config, events, owner).fit()
