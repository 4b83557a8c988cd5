"""Minibatch mode plug-in (the models of `gnnsys.models.registry` on sampled
neighbourhoods), 1 or K workers.

One worker trains on the whole graph in memory. K workers follow SALIENT++: the driver
makes sure the partitions exist (`gnnsys.partition_cache`), then each worker

- opens its part (memory-mapped, checksums verified) and the full topology;
- builds its `FeatureStore`: own rows in VIP order + the cache the policy picks;
- draws seeds from its own part's training nodes only, with the same number of batches on
  every rank (ceil(total seeds / (K * batch))) so the gradient all-reduces pair;
- samples + gathers with the fused kernel (the GPU one when `sampler.device` picks a GPU,
  with the cache and the hottest local rows in GPU memory) and fetches the missing rows in
  the loader thread, on its own process group, while the previous batch trains;
- evaluates with exact layer-wise inference over its own rows (halo exchange) and gathers
  the predictions, so metrics equal single-machine ones.

The epoch loop, gradient sync, checkpoints and model selection are `gnnsys.training`'s.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import ConfigError
from ..mode import NodeClassificationMode
from ..models import build_model
from ..models.registry import archs, model_class
from ..partition_cache import ALL_SETTINGS
from ..runlog import progress
from ..sparse_features import feature_bytes
from .inference import HaloGraph, halo_inference
from .loader import NodeLoader, fused_sampler, store_sampler


class MinibatchMode(NodeClassificationMode):
    grad_op = "mean"             # each rank's loss is the mean over its own batch
    supports = {"model.arch": archs("minibatch"), "train.compile": (False,)}
    partition_keys = ALL_SETTINGS    # VIP row order follows the sampler, stored rows the features
    reductions = {"batch_wait_s": "max", "fetch_s": "max", "local_rows": "sum",
                  "cache_hits": "sum", "remote_rows": "sum", "rows_served": "sum",
                  "remote_feature_bytes": "sum", "batches": "sum"}
    charts = {"feature_rows": ("feature rows", "rows", ["remote_rows", "cache_hits", "local_rows"])}

    @classmethod
    def check_config(cls, config) -> None:
        super().check_config(config)
        check_sampled_model(config)

    @staticmethod
    def prepare(config, graph=None) -> tuple:
        """Driver side: K workers need the partitions on disk (built once, here)."""
        if config.cluster.workers == 1:
            return () if graph is None else (None, graph)
        from ..partition_cache import ensure_partitions, num_parts
        if num_parts(config) != config.cluster.workers:
            raise ValueError(f"partition.num_parts={config.partition.num_parts} but "
                             f"cluster.workers={config.cluster.workers}; each worker owns one "
                             "part, so leave num_parts unset or equal to workers")
        return (str(ensure_partitions(config, graph, progress=config.train.progress).path),)

    def __init__(self, ctx, config, parts_path: str | None = None, graph=None):
        super().__init__(ctx, config)
        self.data = PartData(ctx, config, parts_path) if parts_path else \
            GraphData(ctx, config, graph)
        self.dataset_metric = self.data.metric
        self.batches_per_epoch = len(self.data.loader)
        self.wait_s, self.step_checked = 0.0, False

    def build_model(self):
        from ..step_memory import check_step_fits, shapes_only

        def build():
            return build_model(self.config, self.data.in_dim, self.data.num_classes,
                               len(self.data.degree))
        # the parameters alone, before they are allocated; the first batch adds its layers
        check_step_fits(shapes_only(build), 0, "", "model.hidden or model.layers")
        self.model = build().set_degree(self.data.degree)
        self.model.set_adjacency(self.data.adjacency)
        return self.model.to(self.ctx.device)

    def train_batches(self, epoch: int, loader=None):
        """(loss, seeds, seeds) per batch of the epoch; `loader`: batches of another
        loader of the same graph instead (scripts/bench_epoch.py compares samplers)."""
        ready = time.perf_counter()
        for batch in (loader or self.data.loader).epoch(epoch):
            self.wait_s += time.perf_counter() - ready   # sampling + fetch not done in time
            if not self.step_checked:
                self.check_step_fits(batch)
            logits = self.model(batch.x, batch.blocks, batch.n_id, batch.x_agg)
            yield F.cross_entropy(logits, batch.y), batch.num_seeds, batch.num_seeds
            ready = time.perf_counter()

    def check_step_fits(self, batch) -> None:
        """Once, on the first batch: what the model's step holds beside its parameters."""
        check_batch_step_fits(self.model, self.model, batch, self.config)
        self.step_checked = True

    def epoch_stats(self) -> dict:
        stats = {"batch_wait_s": round(self.wait_s, 4), **self.data.epoch_stats()}
        self.wait_s = 0.0
        return stats

    def split_outputs(self, splits: tuple, layers: int | None = None) -> dict:
        """Exact layer-wise inference once; each split's logits and labels of own rows."""
        show = self.config.train.progress and self.ctx.is_main
        bar = (lambda it, desc: progress(it, desc=desc, enabled=show, unit="batch"))
        logits = self.data.predict(self.model, bar, layers)
        return {split: self.data.outputs(logits, split) for split in splits}

    def predict_rows(self, rows: np.ndarray, layers: int | None = None) -> dict:
        """One worker: the logits (or first `layers` layers' output) and labels of dataset
        rows `rows`, in their order, inferred over their neighbourhood alone."""
        d = self.data
        logits = self.model.inference_of(d.graph, rows, self.config.sampler.eval_batch_size,
                                         self.ctx.device, layers=layers)
        return {"rows": rows, "logits": logits, "labels": torch.from_numpy(d.labels[rows])}

    def describe(self) -> dict:
        return self.data.describe()

    def split_ids(self) -> dict:
        d = self.data
        return {name: d.node_ids[ids - d.lo] for name, ids in d.splits.items()}


def check_sampled_model(config) -> None:
    """What a minibatch model over sampled blocks needs of `config` (minibatch mode's, and
    link mode's encoder): a fanout per layer, a hidden->hidden layer for model.residual,
    and the model's own rules."""
    m, fanouts = config.model, config.sampler.fanouts
    if m.layers != len(fanouts):
        raise ConfigError(f"config key 'model.layers' is {m.layers} but "
                          f"'sampler.fanouts' has {len(fanouts)} hops; they must match")
    if m.residual and m.layers < 3:
        raise ConfigError("config key 'model.residual' is true but it needs a "
                          f"hidden->hidden layer (model.layers >= 3; got {m.layers} "
                          "layers); drop it or add a layer")
    model_class("minibatch", m.arch).check_config(config)


def check_batch_step_fits(model, sampled_model, batch, config) -> None:
    """What one step of `model` over `batch` holds beside the parameters: the layers'
    outputs and messages of `sampled_model` (`MinibatchModel.step_elements`; link mode's
    encoder inside its LinkModel); a step that cannot fit is refused before it runs."""
    from ..step_memory import check_step_fits
    edges = sum(block.edge_index.shape[1] for block in batch.blocks)
    check_step_fits(model, sampled_model.step_elements(batch),
                    f"the first batch's {len(batch.blocks)} layers output "
                    f"{' + '.join(str(b.num_dst) for b in batch.blocks)} rows and "
                    f"{edges} sampled edges, model.hidden={config.model.hidden} wide",
                    "model.hidden, sampler.batch_size or sampler.fanouts")


class PartedData:
    """What evaluation needs of a worker's data: its own rows [lo, hi), split ids, and
    the dataset's id of each own row (`node_ids`: a part's rows are relabelled)."""

    def outputs(self, logits_own: torch.Tensor, split: str) -> dict:
        """This worker's logits, labels and dataset node ids of the split ("all": every own
        row); the loop gathers every part's, so metrics equal single-machine ones (accuracy
        and ROC-AUC are not averages of parts)."""
        ids = np.arange(self.lo, self.hi) if split == "all" else self.splits[split]
        return {"logits": logits_own[torch.from_numpy(ids - self.lo)],
                "labels": torch.from_numpy(self.labels[ids]),
                "node_id": torch.from_numpy(self.node_ids[ids - self.lo])}


class GraphData(PartedData):
    """One worker: the whole graph in memory (one part), the sampler over its features."""

    def __init__(self, ctx, config, graph=None):
        from ..datasets import load_run_graph
        graph = graph if graph is not None else load_run_graph(config)
        s = config.sampler
        self.graph, self.config, self.ctx = graph, config, ctx
        self.metric, self.num_classes = graph.metric, graph.num_classes
        self.in_dim, self.degree = graph.num_features, graph.degree()
        self.labels, self.lo, self.hi = np.asarray(graph.y, dtype=np.int64), 0, graph.num_nodes
        self.node_ids = np.arange(graph.num_nodes)
        self.splits = {name: np.asarray(getattr(graph, f"{name}_idx"), dtype=np.int64)
                       for name in ("train", "val", "test")}
        self.sampler = fused_sampler(config, graph.indptr, graph.indices, graph.x,
                                     threads=s.threads)
        self.loader = NodeLoader(self.sampler, graph.train_idx, self.labels, s.batch_size,
                                 shuffle=True, drop_last=s.drop_last, prefetch=s.prefetch,
                                 seed=config.train.seed, device=ctx.device)

    def adjacency(self) -> tuple:
        """(indptr, indices, dataset id of each row or None): ids are the dataset's."""
        return self.graph.indptr, self.graph.indices, None

    def predict(self, model, bar, layers=None) -> torch.Tensor:
        return model.inference(self.graph, self.config.sampler.eval_batch_size,
                               self.ctx.device, progress=bar, layers=layers)

    def epoch_stats(self) -> dict:
        return {}

    def describe(self) -> dict:
        return {**_sampler_info(self.sampler), "nodes": self.graph.num_nodes,
                "feature_bytes": feature_bytes(self.graph.x)}


class PartData(PartedData):
    """One of K workers: its part of the features plus the cache, the full topology."""

    def __init__(self, ctx, config, parts_path: str):
        from partition.format import PartitionSet
        from .store.feature_store import FeatureStore
        self.ctx, self.config = ctx, config
        rank, s, c = ctx.rank, config.sampler, config.cache
        self.parts = PartitionSet(parts_path)
        self.parts.verify(parts=[rank])             # sizes + sha256 of this worker's files
        self.book = self.parts.book
        self.lo, self.hi = self.book.range(rank)
        indptr, indices = self.parts.full_csr()
        manifest = self.parts.manifest
        self.metric, self.num_classes = manifest.get("metric", "accuracy"), manifest["num_classes"]
        self.store = FeatureStore.open(
            self.parts, rank, ctx.fetch_comm, indptr=indptr, indices=indices,
            policy=c.policy, replication=c.replication, fanouts=list(s.fanouts),
            batch_size=s.batch_size, device_fraction=c.device_fraction)
        self.in_dim, self.degree = self.store.table.shape[1], np.diff(indptr)
        self.labels = np.full(self.book.num_nodes, -1, dtype=np.int64)
        self.labels[self.lo:self.hi] = np.asarray(self.parts.array(rank, "y"), dtype=np.int64)
        self.node_ids = np.asarray(self.parts.array(rank, "orig_ids"), dtype=np.int64)
        self.splits = {name: self._own_split(name) for name in ("train", "val", "test")}
        total_train = sum(ctx.comm.all_gather_object(len(self.splits["train"])))
        num_batches = max(1, -(-total_train // (ctx.world_size * s.batch_size)))
        self.sampler = store_sampler(config, indptr, indices, self.store)
        self.loader = NodeLoader(self.sampler, self.splits["train"], self.labels, s.batch_size,
                                 shuffle=True, prefetch=s.prefetch,
                                 seed=config.train.seed * 7919 + rank,
                                 num_batches=num_batches, transform=self.store.fill_missing,
                                 device=ctx.device)
        self.halo = HaloGraph(indptr, indices, self.lo, self.hi)
        self.indptr, self.indices = indptr, indices

    def adjacency(self) -> tuple:
        """(indptr, indices, dataset id of each row): the parts' rows are relabelled."""
        ids = [self.parts.array(k, "orig_ids") for k in range(self.parts.num_parts)]
        return self.indptr, self.indices, np.concatenate(ids).astype(np.int64)

    def _own_split(self, name: str) -> np.ndarray:
        ids = self.parts.array(self.ctx.rank, f"{name}_idx")
        return np.empty(0, np.int64) if ids is None else np.asarray(ids, dtype=np.int64)

    def predict(self, model, bar, layers=None) -> torch.Tensor:
        """Logits (or the first `layers` layers' output) of this worker's own rows."""
        x_own = self.store.table[:self.store.num_local]
        return halo_inference(model, self.halo, x_own, self.ctx.fetch_comm, self.book,
                              self.ctx.rank, self.config.sampler.eval_batch_size,
                              self.ctx.device, progress=bar, layers=layers)

    def epoch_stats(self) -> dict:
        return self.store.take_stats()

    def describe(self) -> dict:
        return {"rank": self.ctx.rank, **self.store.describe(), **_sampler_info(self.sampler),
                "fill_bytes_recv": self.store.fill_traffic.bytes_recv}


def _sampler_info(sampler) -> dict:
    """Which kernel samples and (GPU) the feature bytes per memory tier, for the log."""
    placement = getattr(sampler, "placement", None)
    return {"sampler": "cpu"} if placement is None else \
        {"sampler": "cuda", "feature_tier_bytes": placement.bytes_per_tier()}
