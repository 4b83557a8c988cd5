"""Distributed minibatch training (SALIENT++): one worker per part, VIP-cached features.

`fit_distributed(config)` makes sure the partitions exist (building them once, in the
driver), then launches `cluster.workers` Ray actors. Each worker:

- opens its part (memory-mapped, checksums verified) and the full topology;
- builds its `FeatureStore`: own rows in VIP order + the cache the policy picks;
- draws seeds from its own part's training nodes only ("federated"), with the same
  number of batches on every rank (ceil(total seeds / (K * batch))) so collectives pair;
- samples + gathers with the fused kernel (the GPU one when `sampler.device` picks a
  GPU, with the cache and the hottest local rows in GPU memory) and fetches the missing
  rows in the loader thread, on a separate process group, while the previous batch trains;
- trains a DistributedDataParallel model; gradients are all-reduced through a comm hook
  that counts bytes and time;
- evaluates with exact layer-wise inference over its own rows (halo exchange), then
  gathers predictions so metrics equal single-machine ones;
- logs per epoch, per worker: remote rows, cache hits, bytes, communication wait.
"""
from __future__ import annotations

import copy
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from .loader import NodeLoader, fused_sampler
from ..metrics import METRIC_KEY, evaluate
from ..runlog import RunDir, progress, resume_state
from .store.feature_store import FeatureStore
from ..partitions import ensure_partitions, num_parts
from .inference import HaloGraph, halo_inference
from ..distributed import launch


def fit_distributed(config) -> dict:
    if num_parts(config) != config.cluster.workers:
        raise ValueError(f"partition.num_parts={config.partition.num_parts} but "
                         f"cluster.workers={config.cluster.workers}; each worker owns one "
                         "part, so leave num_parts unset or equal to workers")
    parts = ensure_partitions(config, progress=config.train.progress)
    return launch(train_worker, config, str(parts.path))[0]


def _fail_here(config, ctx, epoch: int) -> bool:
    """The fault-test hook cluster.fail_at = "RANK:EPOCH" (first attempt only)."""
    if not config.cluster.fail_at or ctx.attempt > 0:
        return False
    rank, at_epoch = (int(v) for v in config.cluster.fail_at.split(":"))
    return rank == ctx.rank and at_epoch == epoch


def _timed_allreduce_hook(comm):
    """DDP comm hook: average each gradient bucket through `comm` (counted and timed)."""
    def hook(_state, bucket):
        buffer = bucket.buffer()
        comm.all_reduce(buffer, op="mean")
        future = torch.futures.Future()
        future.set_result(buffer)
        return future
    return hook


def store_sampler(config, indptr, indices, store: FeatureStore):
    """The worker's fused sampler over its store's table (`sampler.device`): on a GPU the
    store's tiers (cache + hottest local rows on the device, see FeatureStore.hotness)."""
    return fused_sampler(config, indptr, indices, store.table, row_of=store.row_of,
                         threads=config.sampler.threads, gpu_tiers=store.gpu_tiers)


def _sampler_info(sampler) -> dict:
    """Which kernel samples, and (GPU) the feature bytes per tier, for the run log."""
    placement = getattr(sampler, "placement", None)
    if placement is None:
        return {"sampler": "cpu"}
    return {"sampler": "cuda", "feature_tier_bytes": placement.bytes_per_tier()}


class _PartWorker:
    """State of one rank's training run."""

    def __init__(self, ctx, config, parts_path: str):
        from partition.format import PartitionSet
        self.ctx, self.config = ctx, config
        rank = ctx.rank
        self.parts = PartitionSet(parts_path)
        self.parts.verify(parts=[rank])             # sizes + sha256 of this worker's files
        self.book = self.parts.book
        self.lo, self.hi = self.book.range(rank)
        indptr, indices = self.parts.full_csr()
        manifest = self.parts.manifest
        self.metric = manifest.get("metric", "accuracy")
        self.key = METRIC_KEY[self.metric]
        self.num_classes = int(manifest["num_classes"])
        s, c = config.sampler, config.cache
        self.store = FeatureStore.open(
            self.parts, rank, ctx.fetch_comm, indptr=indptr, indices=indices,
            policy=c.policy, replication=c.replication, fanouts=list(s.fanouts),
            batch_size=s.batch_size, device_fraction=c.device_fraction)
        y_own = np.asarray(self.parts.array(rank, "y"), dtype=np.int64)
        self.labels = np.full(self.book.num_nodes, -1, dtype=np.int64)
        self.labels[self.lo:self.hi] = y_own
        self.splits = {name: self._own_split(name) for name in ("train", "val", "test")}
        total_train = sum(ctx.comm.all_gather_object(len(self.splits["train"])))
        self.num_batches = max(1, -(-total_train // (ctx.world_size * s.batch_size)))
        sampler = store_sampler(config, indptr, indices, self.store)
        self.sampler_info = _sampler_info(sampler)
        self.loader = NodeLoader(sampler, self.splits["train"], self.labels, s.batch_size,
                                 shuffle=True, prefetch=s.prefetch,
                                 seed=config.train.seed * 7919 + rank,
                                 num_batches=self.num_batches,
                                 transform=self.store.fill_missing)
        self.halo = HaloGraph(indptr, indices, self.lo, self.hi)
        self.degree = np.diff(indptr)

    def _own_split(self, name: str) -> np.ndarray:
        ids = self.parts.array(self.ctx.rank, f"{name}_idx")
        return np.empty(0, np.int64) if ids is None else np.asarray(ids, dtype=np.int64)

    # ------------------------------------------------------------------ evaluation
    def predict(self, model, show: bool) -> torch.Tensor:
        bar = (lambda it, desc: progress(it, desc=desc, enabled=show, unit="batch"))
        x_own = self.store.table[:self.store.num_local]
        logits = halo_inference(model, self.halo, x_own, self.ctx.fetch_comm, self.book,
                                self.ctx.rank, self.config.sampler.eval_batch_size,
                                self.ctx.device, progress=bar)
        # Halo traffic is evaluation's, not the next epoch's training fetch.
        self.eval_traffic = self.ctx.fetch_comm.reset_stats()
        return logits

    def gathered_metric(self, logits_own: torch.Tensor, split: str) -> float:
        """The metric over the split of all parts: predictions are gathered, so it equals
        the single-machine value (accuracy and ROC-AUC are not averages of parts)."""
        ids = self.splits[split]
        mine = (logits_own[torch.from_numpy(ids - self.lo)], torch.from_numpy(self.labels[ids]))
        everyone = self.ctx.comm.all_gather_object(mine)
        logits = torch.cat([l for l, _ in everyone])
        labels = torch.cat([y for _, y in everyone])
        return evaluate(self.metric, logits, labels)


def train_worker(ctx, config, parts_path: str) -> dict:
    from torch.nn.parallel import DistributedDataParallel
    from ..models import build_model

    torch.manual_seed(config.train.seed)      # same initial weights on every rank
    w = _PartWorker(ctx, config, parts_path)
    run = RunDir(config.run.dir, writer=ctx.is_main)
    if ctx.attempt == 0:
        run.start(config.run.resume)
    run.save_config(config)
    show = config.train.progress and ctx.is_main

    model = build_model(config, w.store.table.shape[1], w.num_classes).to(ctx.device)
    if config.model.arch == "gcn":
        model.set_degree(w.degree)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.train.lr,
                                 weight_decay=config.train.weight_decay)
    state = resume_state(run, config, model, optimizer)
    ddp = DistributedDataParallel(model) if ctx.world_size > 1 else model
    if ctx.world_size > 1:
        ddp.register_comm_hook(None, _timed_allreduce_hook(ctx.comm))
    if state["epoch"] < 0:
        run.log({"event": "store", "workers": ctx.comm.all_gather_object(
            {"rank": ctx.rank, **w.store.describe(), **w.sampler_info,
             "fill_bytes_recv": w.store.fill_traffic.bytes_recv})})
    w.store.take_stats()
    ctx.comm.reset_stats()

    for epoch in range(state["epoch"] + 1, config.train.epochs):
        ddp.train()
        t0 = time.perf_counter()
        loss_sum, seen, wait_s, step_s = 0.0, 0, 0.0, 0.0
        bar = progress(total=w.num_batches, enabled=show, unit="batch",
                       desc=f"epoch {epoch + 1}/{config.train.epochs}")
        t_ready = time.perf_counter()
        for i, batch in enumerate(w.loader.epoch(epoch)):
            batch = batch.to(ctx.device)
            t_step = time.perf_counter()
            wait_s += t_step - t_ready           # blocked on sampling + fetch not yet done
            if i == w.num_batches // 2 and _fail_here(config, ctx, epoch):
                os._exit(17)                      # simulate a crashed worker process
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(batch.x, batch.blocks, batch.n_id), batch.y)
            loss.backward()
            optimizer.step()
            step_s += time.perf_counter() - t_step
            loss_sum += loss.item() * batch.num_seeds
            seen += batch.num_seeds
            bar.update()
            t_ready = time.perf_counter()
        bar.close()
        epoch_s = time.perf_counter() - t0
        grad = ctx.comm.reset_stats()
        mine = {"rank": ctx.rank, **w.store.take_stats(), "batch_wait_s": round(wait_s, 4),
                "step_s": round(step_s, 4), "allreduce_s": round(grad.wait_s, 4),
                "allreduce_bytes": grad.bytes_sent, "epoch_s": round(epoch_s, 4),
                "loss_sum": loss_sum, "seeds": seen}
        workers = ctx.comm.all_gather_object(mine)
        record = _epoch_record(epoch, workers)
        if (epoch + 1) % config.train.eval_every == 0 or epoch + 1 == config.train.epochs:
            logits = w.predict(model, show)
            record[f"val_{w.key}"] = w.gathered_metric(logits, "val")
            record["eval_bytes_recv"] = sum(ctx.comm.all_gather_object(
                w.eval_traffic.bytes_recv))
            if record[f"val_{w.key}"] > state["best_val"] or state["best_model"] is None:
                state["best_val"], state["best_epoch"] = record[f"val_{w.key}"], epoch
                state["best_model"] = copy.deepcopy(model.state_dict())
        ctx.comm.reset_stats()                    # evaluation gathers are not training traffic
        run.log(record)
        if show:
            val = record.get(f"val_{w.key}")
            print(f"epoch {epoch + 1}: loss {record['loss']:.4f}, {record['epoch_s']:.1f}s, "
                  f"remote rows {record['remote_rows']:,}, cache hits {record['cache_hits']:,}"
                  + (f", val_{w.key} {val:.4f}" if val is not None else ""), flush=True)
        state["epoch"] = epoch
        if config.run.checkpoint_every and (epoch + 1) % config.run.checkpoint_every == 0:
            run.save_checkpoint({"epoch": epoch, "model": model.state_dict(),
                                 "optimizer": optimizer.state_dict(), **{
                                     k: state[k] for k in ("best_val", "best_epoch",
                                                           "best_model")}})
        ctx.comm.barrier()                        # nobody races ahead of the checkpoint

    if state["best_model"] is not None:
        model.load_state_dict(state["best_model"])
    logits = w.predict(model, show)
    result = {"epochs": state["epoch"] + 1, "best_epoch": state["best_epoch"],
              "workers": ctx.world_size}
    for split in ("train", "val", "test"):
        result[f"{split}_{w.key}"] = w.gathered_metric(logits, split)
    run.log({"final": True, **result})
    return result


def _epoch_record(epoch: int, workers: list[dict]) -> dict:
    """One metrics line: totals over workers plus the per-worker detail."""
    seeds = sum(wk["seeds"] for wk in workers)
    record = {"epoch": epoch, "loss": sum(wk["loss_sum"] for wk in workers) / max(seeds, 1),
              "epoch_s": max(wk["epoch_s"] for wk in workers)}
    for key in ("remote_rows", "cache_hits", "local_rows", "bytes_sent", "bytes_recv",
                "allreduce_bytes"):
        record[key] = sum(wk[key] for wk in workers)
    for key in ("fetch_wait_s", "batch_wait_s", "allreduce_s"):
        record[key] = round(max(wk[key] for wk in workers), 4)
    record["workers"] = [{k: v for k, v in wk.items() if k not in ("loss_sum",)}
                         for wk in workers]
    return record
