"""One rank of distributed full-graph training (AdaQP): set-up, epoch loop, evaluation.

`train_worker(ctx, config, graph=None)` runs on every rank (launched by
`gnnsys.distributed.launch`): partition the graph (rank 0 decides, everyone receives),
build this rank's halo plan, then per epoch do one full-graph step with quantised
boundary exchange, all-reduce the gradients (SUM: the loss is already divided by the
global number of training nodes), evaluate in full precision and log one metrics line
on rank 0. Adaptive mode re-solves the bit-widths every `assign_every` epochs from the
statistics traced during the previous cycle (the first cycle runs at the largest width).
Features, model and aggregation operators live on `ctx.device` (CPU with gloo in this
repo's tests; the CUDA path follows the same code but has not been run on a GPU).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..datasets import load_run_graph
from ..metrics import METRIC_KEY, roc_auc
from ..runlog import RunDir, progress
from .assign import AdaptiveAssigner, profile_links, profile_range
from .exchange import BitAssignment, HaloExchanger, backward_key, forward_key
from .halo import aggregation_weights, build_halo_plan, cached_partition
from .model import FullGraphGNN
from .quantize import message_size
from .timing import EpochTimers

# Partitions of graphs this big (products: METIS takes minutes) are cached on disk.
CACHE_PARTS_FROM_EDGES = 1 << 24

# Per-epoch seconds reported in the log, as (log key, timer name).
TIME_KEYS = (("time_comm", "comm"), ("time_quant", "quant"), ("time_central", "central"),
             ("time_marginal", "marginal"), ("time_wait", "wait"), ("time_reduce", "reduce"),
             ("time_epoch", "epoch"))


class LocalData:
    """This rank's features, labels and split rows, in the plan's local order."""

    def __init__(self, graph, plan, device=None):
        device = torch.device(device or "cpu")
        self.x = torch.from_numpy(np.ascontiguousarray(graph.x[plan.inner_gid],
                                                       dtype=np.float32)).to(device)
        self.y = torch.from_numpy(np.asarray(graph.y, dtype=np.int64)[plan.inner_gid]).to(device)
        labelled = np.asarray(graph.y) >= 0
        self.split = {}
        self.global_count = {}
        for name in ("train", "val", "test"):
            ids = getattr(graph, f"{name}_idx")
            ids = np.zeros(0, np.int64) if ids is None else np.asarray(ids, np.int64)
            ids = ids[labelled[ids]]           # e.g. CiteSeer's unlabelled test-range nodes
            self.split[name] = torch.from_numpy(plan.local_index(ids)).to(device)
            self.global_count[name] = len(ids)


@dataclass
class Session:
    """One rank's training state after set-up (what `train_worker` loops over)."""
    graph: object
    plan: object
    data: LocalData
    model: FullGraphGNN
    optimizer: torch.optim.Optimizer
    timers: EpochTimers
    exchanger: HaloExchanger
    assigner: AdaptiveAssigner | None
    setup: dict                    # partition summary, link profile: logged once


def setup(ctx, config, graph=None) -> Session:
    """Partition, halo plan, local data, model, optimiser, exchanger and (adaptive) the
    link profile and assigner; every rank calls it (it issues collectives)."""
    torch.manual_seed(config.train.seed)
    np.random.seed(config.train.seed)
    graph = graph if graph is not None else load_run_graph(config)
    comm, fg, q = ctx.comm, config.fullgraph, config.fullgraph.quantization
    plan = _build_plan(ctx, config, graph).to(ctx.device)
    data = LocalData(graph, plan, ctx.device)
    if data.global_count["train"] == 0:
        raise ValueError(f"dataset '{graph.name}' has no labelled training nodes")
    torch.manual_seed(config.train.seed)   # identical initial replicas on every rank
    model = FullGraphGNN(config.model.arch, graph.num_features, config.model.hidden,
                         graph.num_classes, config.model.layers, config.model.dropout,
                         config.model.norm).to(ctx.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.train.lr,
                                 weight_decay=config.train.weight_decay)
    timers = EpochTimers()
    quantizing = q.mode != "none" and ctx.world_size > 1
    assignment = BitAssignment(q.uniform_bits if q.mode == "uniform" else max(q.bits)) \
        if quantizing else None
    exchanger = HaloExchanger(plan, comm, timers, assignment=assignment, overlap=fg.overlap,
                              seed=config.train.seed, device=ctx.device)
    key_dims = _message_widths(model, graph.num_features, config.model.hidden)
    assigner, info = None, {"partition": plan.summary()}
    if quantizing and q.mode == "adaptive":
        start = time.perf_counter()
        links = profile_links(comm, *_profile_range(exchanger, key_dims, q.bits),
                              points=q.profile_points)
        info["profile_s"] = time.perf_counter() - start
        info["links"] = {f"{i}->{j}": [c.alpha_ms_per_mb, c.beta_ms] for (i, j), c in links.items()}
        assigner = AdaptiveAssigner(exchanger, comm, key_dims, q, links)
        exchanger.tracer = assigner.tracer
    comm.reset_stats()
    return Session(graph, plan, data, model, optimizer, timers, exchanger, assigner, info)


def reassign_if_due(session: Session, epoch: int, q) -> dict:
    """Adaptive mode: re-solve the bit-widths every `assign_every` epochs from the
    statistics traced since the last solve; returns what to log."""
    if session.assigner is None or epoch == 0 or epoch % q.assign_every:
        return {"assign_solve_s": 0.0}
    start = time.perf_counter()
    session.exchanger.assignment, infos = session.assigner.reassign()
    return {"assign_solve_s": time.perf_counter() - start,
            "assign": {k: {"status": v.get("status"), "solve_s": v.get("solve_s"),
                           "modelled_round_ms": v.get("modelled_round_ms")}
                       for k, v in infos.items()},
            "bits": session.exchanger.assignment.histogram()}


def train_worker(ctx, config, graph=None) -> dict:
    run = RunDir(config.run.dir, writer=ctx.is_main)
    if ctx.attempt == 0 and hasattr(run, "start"):
        run.start(config.run.resume)
    run.save_config(config)
    s = setup(ctx, config, graph)
    graph, plan, data, model, optimizer = s.graph, s.plan, s.data, s.model, s.optimizer
    timers, exchanger = s.timers, s.exchanger
    comm, q = ctx.comm, config.fullgraph.quantization
    show = config.train.progress and ctx.is_main
    metric_key = METRIC_KEY[graph.metric]

    state = _resume(run, config, comm, model, optimizer, exchanger)
    if ctx.is_main and state["epoch"] < 0:
        run.log({"setup": True, "workers": ctx.world_size, **s.setup})
    history = []
    bar = progress(range(state["epoch"] + 1, config.train.epochs),
                   total=config.train.epochs - state["epoch"] - 1, enabled=show,
                   desc=f"fullgraph {config.model.arch} x{ctx.world_size}", unit="epoch")
    try:
        for epoch in bar:
            record = {"epoch": epoch, **reassign_if_due(s, epoch, q)}
            record.update(_train_step(model, optimizer, data, exchanger, comm, timers))
            if (epoch + 1) % config.train.eval_every == 0 or epoch + 1 == config.train.epochs:
                record.update(_evaluate(model, data, exchanger, comm, graph.metric, metric_key))
                val = record[f"val_{metric_key}"]
                state["last_test"] = record[f"test_{metric_key}"]
                if val > state["best_val"]:
                    state.update(best_val=val, best_epoch=epoch,
                                 best_test=record[f"test_{metric_key}"])
            timers.pop()                   # evaluation time is not part of the breakdown
            history.append(record)
            run.log(record)
            bar.set_postfix(loss=f"{record['loss']:.4f}",
                            MB=f"{record['bytes_sent'] / 2 ** 20:.2f}")
            state["epoch"] = epoch
            if config.run.checkpoint_every and (epoch + 1) % config.run.checkpoint_every == 0:
                run.save_checkpoint(_checkpoint(state, model, optimizer, exchanger))
    finally:
        exchanger.close()
    return _final(run, state, history, metric_key, plan, comm)


# ----------------------------------------------------------------------------- set-up
def _build_plan(ctx, config, graph):
    parts_wanted = config.partition.num_parts
    if parts_wanted not in (None, ctx.world_size):
        raise ValueError(f"full-graph mode needs one partition per worker: partition.num_parts "
                         f"is {parts_wanted} but cluster.workers is {ctx.world_size}")
    parts = None
    if ctx.is_main:
        parts = cached_partition(graph, ctx.world_size, config.partition.method,
                                 config.train.seed, _parts_cache(config, graph))
    parts = ctx.comm.broadcast_object(parts, src=0)
    weights = aggregation_weights(graph, config.model.arch)
    return build_halo_plan(graph, parts, ctx.rank, ctx.world_size, config.model.arch, weights)


def _parts_cache(config, graph):
    """Where big graphs' partitions are kept between runs (None: small, just recompute)."""
    if len(graph.indices) < CACHE_PARTS_FROM_EDGES:
        return None
    from ..datasets import data_root
    return data_root(config.dataset.root) / "parts" / "fullgraph"


def _message_widths(model, in_dim: int, hidden: int) -> dict:
    """Message key -> row width: layer l's input width; no backward for the input layer."""
    widths = {forward_key(0): in_dim}
    for layer in range(1, model.num_layers):
        widths[forward_key(layer)] = hidden
        widths[backward_key(layer)] = hidden
    return widths


def _profile_range(exchanger, key_dims, bits) -> tuple[int, int]:
    sizes = [message_size(np.full(exchanger.outgoing_rows(key, peer), b), dim)
             for key, dim in key_dims.items() for peer in range(exchanger.world_size)
             for b in (min(bits), max(bits)) if exchanger.outgoing_rows(key, peer)]
    return profile_range(min(sizes), max(sizes)) if sizes else (1, 8)


# ----------------------------------------------------------------------------- one epoch
def _train_step(model, optimizer, data, exchanger, comm, timers) -> dict:
    model.train()
    before = comm.stats.bytes_sent
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    logits = model(data.x, exchanger, quantized=True)
    train = data.split["train"]
    loss = F.cross_entropy(logits[train], data.y[train], reduction="sum") \
        / data.global_count["train"]
    loss.backward()
    message_bytes = comm.stats.bytes_sent - before
    with timers.measure("reduce"):
        reduce_bytes = _all_reduce_gradients(model, comm)
    optimizer.step()
    timers.add("epoch", time.perf_counter() - start)
    correct = (logits[train].argmax(-1) == data.y[train]).sum().item()
    seconds = timers.pop()
    # one small all-reduce: sums of loss, counts and bytes; times averaged over ranks
    totals = torch.tensor([loss.item(), correct, message_bytes, reduce_bytes]
                          + [seconds.get(name, 0.0) for _, name in TIME_KEYS],
                          dtype=torch.float64, device=data.x.device)
    comm.all_reduce(totals, op="sum")
    record = {"loss": totals[0].item(), "train_acc": totals[1].item() / data.global_count["train"],
              "bytes_sent": int(totals[2]), "bytes_reduce": int(totals[3])}
    for k, (key, _) in enumerate(TIME_KEYS):
        record[key] = round(totals[4 + k].item() / comm.world_size, 6)
    return record


def _all_reduce_gradients(model, comm) -> int:
    """SUM all-reduce of every gradient in one flat buffer; returns bytes sent."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    before = comm.stats.bytes_sent
    comm.all_reduce(flat, op="sum")
    offset = 0
    for p, g in zip(model.parameters(), grads):
        p.grad = flat[offset:offset + g.numel()].view_as(g)
        offset += g.numel()
    return comm.stats.bytes_sent - before


@torch.no_grad()
def _evaluate(model, data, exchanger, comm, metric: str, metric_key: str) -> dict:
    """Validation and test metrics in full precision (no quantisation)."""
    model.eval()
    logits = model(data.x, exchanger, quantized=False)
    return {f"{name}_{metric_key}": _split_metric(logits, data, name, metric, comm)
            for name in ("val", "test")}


def _split_metric(logits, data, name, metric, comm) -> float:
    rows = data.split[name]
    if data.global_count[name] == 0:
        return float("nan")
    if metric == "accuracy":
        correct = torch.tensor([(logits[rows].argmax(-1) == data.y[rows]).sum().item()],
                               dtype=torch.float64, device=logits.device)
        comm.all_reduce(correct, op="sum")
        return correct.item() / data.global_count[name]
    if metric == "roc_auc":
        margin = (logits[rows, 1] - logits[rows, 0]).cpu().numpy()
        parts = comm.all_gather_object((margin, data.y[rows].cpu().numpy()))
        scores = torch.from_numpy(np.concatenate([p[0] for p in parts]))
        labels = torch.from_numpy(np.concatenate([p[1] for p in parts]))
        return roc_auc(scores, labels)
    raise ValueError(f"unknown metric '{metric}'; use accuracy or roc_auc")


# ----------------------------------------------------------------------------- state
def _checkpoint(state, model, optimizer, exchanger) -> dict:
    assignment = exchanger.assignment
    return {**state, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "assignment": assignment.state_dict() if assignment is not None else None}


def _resume(run, config, comm, model, optimizer, exchanger) -> dict:
    state = {"epoch": -1, "best_val": float("-inf"), "best_epoch": -1, "best_test": float("nan"),
             "last_test": float("nan")}
    if not config.run.resume:
        return state
    # rank 0 reads, everyone receives: the run dir need not be shared between machines
    ckpt = comm.broadcast_object(run.load_checkpoint() if comm.rank == 0 else None, src=0)
    if ckpt is None:
        return state
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    if ckpt.get("assignment") is not None and exchanger.assignment is not None:
        exchanger.assignment = BitAssignment.from_state_dict(ckpt["assignment"])
    state.update({k: ckpt[k] for k in state if k in ckpt})
    run.truncate_metrics_after(ckpt["epoch"])
    return state


def _final(run, state, history, metric_key, plan, comm) -> dict:
    """Test metric of the best-validation epoch, plus traffic and time averages."""
    result = {"epochs": state["epoch"] + 1, "best_epoch": state["best_epoch"],
              f"val_{metric_key}": state["best_val"], f"test_{metric_key}": state["best_test"],
              # the last evaluation too: quantisation acts late in training, after the
              # first (8-bit) cycle, and the best-validation epoch can come before that
              f"test_{metric_key}_last": state["last_test"]}
    if history:
        result["bytes_per_epoch"] = float(np.mean([r["bytes_sent"] for r in history]))
        result["bytes_last_epoch"] = history[-1]["bytes_sent"]
        result["bytes_reduce_per_epoch"] = float(np.mean([r["bytes_reduce"] for r in history]))
        for key, _ in TIME_KEYS:
            result[key] = float(np.mean([r[key] for r in history]))
        result["assign_solve_s"] = float(sum(r["assign_solve_s"] for r in history))
        result["final_loss"] = history[-1]["loss"]
    result["partition"] = comm.all_gather_object(plan.summary())
    run.log({"final": True, **result})
    return result
