"""Full-graph mode plug-in (AdaQP): one rank's set-up, training step and evaluation.

Every rank takes the vertex partition from the shared partition cache (rank 0 builds or
opens it, everyone receives), builds its halo plan (its rows alone for a model that reads
no neighbour's rows: `FullGraphModel.aggregation`), and per epoch does one full-graph
step with quantised boundary exchange; the loss is divided by the global number of
training nodes, so the loop's gradient all-reduce sums. Evaluation is in full precision.
Adaptive mode re-solves the bit-widths every `assign_every` epochs from the statistics
traced during the previous cycle (the first cycle runs at the largest width). Features,
model and aggregation operators live on `ctx.device`.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ConfigError
from ..mode import NodeClassificationMode
from ..models.registry import archs, model_class
from ..partition_cache import ASSIGNMENT_SETTINGS
from ..sparse_features import as_csr, csr_tensor, feature_bytes, is_sparse
from ..step_memory import check_step_fits, shapes_only
from .assign import AdaptiveAssigner, profile_links, profile_range
from .exchange import BitAssignment, HaloExchanger, backward_key, forward_key
from .halo import aggregation_weights, build_halo_plan, inner_plan
from .model import NORMS
from .quantize import message_size
from .timing import EpochTimers

# Per-epoch seconds reported in the log, as (log key, timer name); `step_s` is the
# full-graph step's own (forward, backward and their exchanges), inside the loop's epoch_s
TIME_KEYS = (("comm_s", "comm"), ("quant_s", "quant"), ("central_s", "central"),
             ("marginal_s", "marginal"), ("wait_s", "wait"), ("step_s", "epoch"))


class LocalData:
    """This rank's features, labels and split rows, in the plan's local order."""

    def __init__(self, graph, plan, device=None):
        device = torch.device(device or "cpu")
        if is_sparse(graph.x):    # stays CSR: the first layer projects it (sparse x dense)
            rows = as_csr(graph.x[plan.inner_gid])
            x = csr_tensor(rows)
        else:
            rows = np.ascontiguousarray(graph.x[plan.inner_gid], np.float32)
            x = torch.from_numpy(rows)
        self.feature_bytes = feature_bytes(rows)
        self.x = x.to(device)
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


class FullGraphMode(NodeClassificationMode):
    grad_op = "sum"              # each rank's loss is its share of the global mean
    batches_per_epoch = 1
    collectives_in_backward = True   # the halo exchange's backward: no gradient overlap
    eval_splits = final_splits = ("val", "test")   # one full-graph pass scores both
    # float16 features are a feature-store format: this mode computes on float32 rows it
    # holds once
    supports = {"model.arch": archs("fullgraph"), "model.norm": NORMS, "model.residual": (False,),
                "train.compile": (False,), "dataset.feature_dtype": ("float32",),
                "train.precision": ("fp32",)}
    partition_keys = ASSIGNMENT_SETTINGS     # it reads the vertex -> part assignment only
    # phase times are each rank's own: the slowest rank's is the epoch's
    reductions = {"assign_solve_s": "max", "assign": "max", "bits": "sum",
                  "bytes_sent": "sum", "bytes_by_bits": "sum",
                  **{key: "max" for key, _ in TIME_KEYS}}
    charts = {"message_bytes": ("message bytes by bit width", "bytes",
                                ["bytes_sent", "bytes_by_bits.*"]),
              "phase_time": ("seconds per epoch by phase (the slowest rank's)", "seconds",
                             [key for key, _ in TIME_KEYS if key != "step_s"])}

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        model = model_class("fullgraph", config.model.arch)
        model.check_config(config)
        q = config.fullgraph.quantization
        if model.aggregation is None and q.mode != "none":
            raise ConfigError(f"config key 'fullgraph.quantization.mode' is {q.mode!r} but "
                              f"model.arch {config.model.arch} exchanges no rows (each worker "
                              "computes its own); set fullgraph.quantization.mode: none")
        c = config.cluster
        if c.launcher == "threads" and c.workers > 1 and config.train.device != "cpu" \
                and (config.train.device == "cuda" or torch.cuda.is_available()):
            # Found on an H200: torch runs the backward passes of every thread's model on
            # one CUDA thread per device, and the first worker there to wait for its
            # peers' boundary gradients blocks the others for good.
            raise ConfigError("full-graph mode with cluster.workers > 1 on a GPU needs a "
                              "process per worker: set cluster.launcher: ray (or "
                              "train.device: cpu for the threads launcher)")

    @staticmethod
    def prepare(config, graph=None) -> tuple:
        return () if graph is None else (graph,)

    def __init__(self, ctx, config, graph=None):
        from ..datasets import load_run_graph
        super().__init__(ctx, config)
        graph = graph if graph is not None else load_run_graph(config)
        self.graph, self.comm = graph, ctx.comm
        fg, q = config.fullgraph, config.fullgraph.quantization
        self.plan = build_plan(ctx, config, graph).to(ctx.device)
        self.data = LocalData(graph, self.plan, ctx.device)
        if self.data.global_count["train"] == 0:
            raise ValueError(f"dataset '{graph.name}' has no labelled training nodes")
        self.dataset_metric = graph.metric
        self.timers = EpochTimers()
        quantizing = q.mode != "none" and ctx.world_size > 1
        assignment = BitAssignment(q.uniform_bits if q.mode == "uniform" else max(q.bits)) \
            if quantizing else None
        self.exchanger = HaloExchanger(self.plan, self.comm, self.timers, assignment=assignment,
                                       overlap=fg.overlap, seed=config.train.seed,
                                       device=ctx.device)
        self.assigner = None
        self.info = {"partition": self.plan.summary(), "feature_bytes": self.data.feature_bytes}
        if quantizing and q.mode == "adaptive":
            key_dims = _message_widths(config.model.layers, graph.num_features,
                                       config.model.hidden, graph.num_classes,
                                       is_sparse(graph.x))
            start = time.perf_counter()
            links = profile_links(self.comm, *_profile_range(self.exchanger, key_dims, q.bits),
                                  points=q.profile_points)
            self.info["profile_s"] = time.perf_counter() - start
            self.info["links"] = {f"{i}->{j}": [c.alpha_ms_per_mb, c.beta_ms]
                                  for (i, j), c in links.items()}
            self.assigner = AdaptiveAssigner(self.exchanger, self.comm, key_dims, q, links)
            self.exchanger.tracer = self.assigner.tracer
        self.stats: dict = {}

    def build_model(self):
        m, g = self.config.model, self.graph

        def build():
            return model_class("fullgraph", m.arch).from_config(
                self.config, g.num_features, g.num_classes, g.num_nodes)
        rows = len(self.plan.inner_gid)
        shapes = shapes_only(build)
        check_step_fits(shapes, shapes.step_elements(rows),
                        f"{m.layers} layers output this worker's {rows} rows, "
                        f"model.hidden={m.hidden} wide",
                        "model.hidden, or spread the graph over more cluster.workers")
        self.model = build().set_rows(self.plan, g)
        return self.model.to(self.ctx.device)

    # ------------------------------------------------------------------ training
    def train_batches(self, epoch: int):
        self.timers.pop()                     # evaluation time is not part of the breakdown
        self.exchanger.take_bytes_by_bits()   # nor is its traffic
        self.stats = self.reassign_if_due(epoch)
        self.model.train()
        start = time.perf_counter()
        logits = self.model(self.data.x, self.exchanger, quantized=True)
        train, count = self.data.split["train"], self.data.global_count["train"]
        loss = F.cross_entropy(logits[train], self.data.y[train], reduction="sum") / count
        yield loss, len(train), count
        self.timers.add("epoch", time.perf_counter() - start)

    def reassign_if_due(self, epoch: int) -> dict:
        """Adaptive mode: re-solve the bit-widths every `assign_every` epochs from the
        statistics traced since the last solve; returns what to log."""
        q = self.config.fullgraph.quantization
        if self.assigner is None or epoch == 0 or epoch % q.assign_every:
            return {"assign_solve_s": 0.0}
        start = time.perf_counter()
        self.exchanger.assignment, infos = self.assigner.reassign()
        return {"assign_solve_s": time.perf_counter() - start,
                "assign": {k: {"status": v.get("status"), "solve_s": v.get("solve_s"),
                               "modelled_round_ms": v.get("modelled_round_ms")}
                           for k, v in infos.items()},
                "bits": self.exchanger.assignment.histogram()}

    def epoch_stats(self) -> dict:
        seconds = self.timers.pop()
        by_bits = self.exchanger.take_bytes_by_bits()
        stats = {**self.stats, "bytes_sent": sum(by_bits.values()), "bytes_by_bits": by_bits,
                 **{key: round(seconds.get(name, 0.0), 6) for key, name in TIME_KEYS}}
        return stats

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def split_outputs(self, splits: tuple, layers: int | None = None) -> dict:
        """One full-graph pass in full precision (no quantisation): each split's logits,
        labels and node ids of this rank's rows ("all": every row it owns)."""
        self.model.eval()
        logits = self.model(self.data.x, self.exchanger, quantized=False, layers=layers)
        every = torch.arange(len(self.plan.inner_gid), device=logits.device)
        rows = {name: every if name == "all" else self.data.split[name] for name in splits}
        return {name: {"logits": logits[r], "labels": self.data.y[r],
                       "node_id": torch.from_numpy(self.plan.inner_gid)[r.cpu()]}
                for name, r in rows.items()}

    def final_metrics(self) -> dict:
        return {"partition": self.comm.all_gather_object(self.plan.summary())}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        assignment = self.exchanger.assignment
        return {"assignment": assignment.state_dict() if assignment is not None else None}

    def load_state_dict(self, state: dict) -> None:
        if state.get("assignment") is not None and self.exchanger.assignment is not None:
            self.exchanger.assignment = BitAssignment.from_state_dict(state["assignment"])

    def describe(self) -> dict:
        return self.info

    def split_ids(self) -> dict:
        return {name: self.plan.inner_gid[rows.cpu().numpy()]
                for name, rows in self.data.split.items()}


# ----------------------------------------------------------------------------- set-up
def build_plan(ctx, config, graph):
    """This rank's halo plan over the vertex partition of the shared partition cache."""
    from ..partition_cache import fullgraph_parts
    parts_wanted = config.partition.num_parts
    if parts_wanted not in (None, ctx.world_size):
        raise ValueError(f"full-graph mode needs one partition per worker: partition.num_parts "
                         f"is {parts_wanted} but cluster.workers is {ctx.world_size}")
    parts = None
    if ctx.is_main:
        parts = fullgraph_parts(config, graph, progress=config.train.progress)
    parts = ctx.comm.broadcast_object(parts, src=0)
    aggregation = model_class("fullgraph", config.model.arch).aggregation
    if aggregation is None:                  # the model reads no neighbour's rows
        return inner_plan(parts, ctx.rank, ctx.world_size)
    weights = aggregation_weights(graph, aggregation)
    return build_halo_plan(graph, parts, ctx.rank, ctx.world_size, aggregation, weights)


def _message_widths(layers: int, in_dim: int, hidden: int, out_dim: int,
                    sparse_input: bool) -> dict:
    """Message key -> row width: layer l's input width; no backward for the input layer,
    unless its input is sparse: then it sends its rows projected to its output width,
    and their gradients come back (FullGraphGNN.forward)."""
    if sparse_input:
        first = hidden if layers > 1 else out_dim
        widths = {forward_key(0): first, backward_key(0): first}
    else:
        widths = {forward_key(0): in_dim}
    for layer in range(1, layers):
        widths[forward_key(layer)] = hidden
        widths[backward_key(layer)] = hidden
    return widths


def _profile_range(exchanger, key_dims, bits) -> tuple[int, int]:
    sizes = [message_size(np.full(exchanger.outgoing_rows(key, peer), b), dim)
             for key, dim in key_dims.items() for peer in range(exchanger.world_size)
             for b in (min(bits), max(bits)) if exchanger.outgoing_rows(key, peer)]
    return profile_range(min(sizes), max(sizes)) if sizes else (1, 8)
