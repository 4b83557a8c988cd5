"""Minibatch training (GraphSAGE / GCN / GAT on sampled neighbourhoods).

`fit(config)` launches one worker per device (in-process when cluster.workers == 1) and
returns rank 0's final metrics. A worker: load the graph, build the fused sampler over
its feature store, then per epoch train on background-prepared batches, evaluate with
layer-wise full-neighbourhood inference, log a metrics line and write a checkpoint.
"""
from __future__ import annotations

import copy
import time

import numpy as np
import torch
import torch.nn.functional as F

from ..datasets import load_run_graph
from ..distributed import launch
from .loader import NodeLoader, fused_sampler
from ..metrics import METRIC_KEY, evaluate
from ..models import build_model
from ..runlog import RunDir, progress, resume_state


def fit(config) -> dict:
    if config.cluster.workers > 1:
        # Partitioned features + VIP cache + remote fetch (SALIENT++): gnnsys.distributed.
        from .distributed import fit_distributed
        return fit_distributed(config)
    return launch(train_worker, config)[0]


def make_sampler(config, graph, threads: int | None):
    """The fused sampler for `sampler.device` (auto: the GPU kernel when a GPU is present,
    with the hottest rows, by degree, on the device within cache.device_fraction)."""
    return fused_sampler(config, graph.indptr, graph.indices, graph.x, threads=threads)


def train_worker(ctx, config) -> dict:
    torch.manual_seed(config.train.seed)
    np.random.seed(config.train.seed)
    graph = load_run_graph(config)
    run = RunDir(config.run.dir, writer=ctx.is_main)
    if ctx.attempt == 0:
        run.start(config.run.resume)
    run.save_config(config)
    key = METRIC_KEY[graph.metric]
    show = config.train.progress and ctx.is_main

    model = build_model(config, graph.num_features, graph.num_classes)
    model = model.set_degree(graph.degree()).to(ctx.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.train.lr,
                                 weight_decay=config.train.weight_decay)
    state = resume_state(run, config, model, optimizer)
    labels = np.asarray(graph.y, dtype=np.int64)
    sampler = make_sampler(config, graph, config.sampler.threads)
    loader = NodeLoader(sampler, graph.train_idx, labels, config.sampler.batch_size,
                        shuffle=True, drop_last=config.sampler.drop_last,
                        prefetch=config.sampler.prefetch, seed=config.train.seed)

    for epoch in range(state["epoch"] + 1, config.train.epochs):
        model.train()
        t0 = time.perf_counter()
        total_loss, seen = 0.0, 0
        bar = progress(loader.epoch(epoch), total=len(loader), enabled=show,
                       desc=f"epoch {epoch + 1}/{config.train.epochs}", unit="batch")
        for batch in bar:
            batch = batch.to(ctx.device)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(batch.x, batch.blocks, batch.n_id), batch.y)
            loss.backward()
            optimizer.step()
            total_loss += loss.item() * batch.num_seeds
            seen += batch.num_seeds
            bar.set_postfix(loss=f"{loss.item():.4f}")
        epoch_s = time.perf_counter() - t0
        record = {"epoch": epoch, "loss": total_loss / max(seen, 1), "epoch_s": epoch_s,
                  "batches_per_s": len(loader) / max(epoch_s, 1e-9)}
        if (epoch + 1) % config.train.eval_every == 0 or epoch + 1 == config.train.epochs:
            logits = _infer(model, graph, config, ctx.device, show)
            record[f"val_{key}"] = evaluate(graph.metric, logits[graph.val_idx],
                                            torch.from_numpy(labels[graph.val_idx]))
            if record[f"val_{key}"] > state["best_val"] or state["best_model"] is None:
                state["best_val"], state["best_epoch"] = record[f"val_{key}"], epoch
                state["best_model"] = copy.deepcopy(model.state_dict())
        run.log(record)
        if show:
            val = f", val_{key} {record[f'val_{key}']:.4f}" if f"val_{key}" in record else ""
            print(f"epoch {epoch + 1}: loss {record['loss']:.4f}, {epoch_s:.1f}s "
                  f"({record['batches_per_s']:.1f} batches/s){val}", flush=True)
        state["epoch"] = epoch
        if config.run.checkpoint_every and (epoch + 1) % config.run.checkpoint_every == 0:
            run.save_checkpoint({"epoch": epoch, "model": model.state_dict(),
                                 "optimizer": optimizer.state_dict(),
                                 "best_val": state["best_val"], "best_epoch": state["best_epoch"],
                                 "best_model": state["best_model"]})

    return _final_metrics(run, model, state, graph, config, ctx.device, key, show)


def _infer(model, graph, config, device, show) -> torch.Tensor:
    bar = (lambda it, desc: progress(it, desc=desc, enabled=show, unit="batch"))
    return model.inference(graph, config.sampler.eval_batch_size, device, progress=bar)


def _final_metrics(run, model, state, graph, config, device, key, show) -> dict:
    """Test the model of the best validation epoch (the usual model selection)."""
    if state["best_model"] is not None:
        model.load_state_dict(state["best_model"])
    logits = _infer(model, graph, config, device, show)
    labels = torch.from_numpy(np.asarray(graph.y, dtype=np.int64))
    result = {
        "epochs": state["epoch"] + 1,
        "best_epoch": state["best_epoch"],
        f"train_{key}": evaluate(graph.metric, logits[graph.train_idx], labels[graph.train_idx]),
        f"val_{key}": evaluate(graph.metric, logits[graph.val_idx], labels[graph.val_idx]),
        f"test_{key}": evaluate(graph.metric, logits[graph.test_idx], labels[graph.test_idx]),
    }
    run.log({"final": True, **result})
    return result
