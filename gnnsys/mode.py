"""The mode contract: what `gnnsys.training.TrainingLoop` calls on every worker. A mode
subclasses `Mode`, is named in `MODES`, and is built on every rank as
`cls(ctx, config, *cls.prepare(config, graph))`; the optimizer, gradient sync, gathering
predictions, model selection, checkpoints and the run log are the loop's business."""
from __future__ import annotations

import importlib
from operator import attrgetter
from typing import Iterator

import torch

from .errors import ConfigError
from .metrics import METRIC_KEY, evaluate
from .models.registry import is_class_path, model_class

# mode name -> "module:class" of its plug-in (imported on use: each mode pulls its own deps)
MODES = {"minibatch": "gnnsys.minibatch.mode:MinibatchMode",
         "temporal": "gnnsys.temporal.mode:TemporalMode",
         "fullgraph": "gnnsys.fullgraph.mode:FullGraphMode",
         "link": "gnnsys.link.mode:LinkMode"}

# How a per-rank epoch value combines into the logged one (`Mode.reductions`): "max" for
# seconds (the slowest rank sets the pace), "sum" for counts and bytes, "mean" where a
# total would mislead; a mapping combines entry by entry, text is rank 0's.
REDUCTIONS = ("max", "sum", "mean")


def mode_class(name: str) -> type[Mode]:
    module, cls = MODES[name].split(":")
    return getattr(importlib.import_module(module), cls)


class Mode:
    """One training mode on one rank. Subclasses set the class attributes and implement
    build_model, train_batches, split_outputs and score; the rest have working defaults."""

    task: str = "node"                     # what it predicts: node (a class) | link
    data_kind: str = "static"              # the graph it trains on: static | temporal
    metric: str                            # acc | auc | ap: val_<metric> selects the best epoch
    grad_op: str = "mean"                  # gradients all-reduce by mean or sum over ranks
    collectives_in_backward: bool = False  # backward runs collectives of its own (full-graph's
                                           # halo exchange): gradients sync after it, not during
    batches_per_epoch: int                 # training steps per epoch (set by __init__)
    # torch intra-op threads of the training steps; None = the pool as it is (a mode of
    # small ops may ask for fewer: waking a thread can cost more than it saves)
    training_torch_threads: int | None = None
    # what a finished run predicts (`RunResult.predict` / `embeddings`): "nodes" (a split or
    # node ids; embeddings by a layer's output, on the run's graph or another of its widths)
    # | "events" (query events src, dst, t and embeddings as of a time, on the stream it
    # trained on: its state is of those nodes) | "pairs" (node pairs' scores, each node's
    # best partners, node embeddings: a static link run)
    predicts: str = "nodes"
    eval_splits: tuple = ("val",)          # scored after each epoch that evaluates
    final_splits: tuple = ("train", "val", "test")   # scored for the selected model
    supports: dict = {}                    # config key -> the values this mode trains with
    # the settings (gnnsys.partition_cache.partition_settings keys) the partitions it reads from
    # disk are built by, a stale one refused naming the first changed; None: it reads none
    partition_keys: tuple | None = None
    reductions: dict = {}                  # epoch_stats() key -> one of REDUCTIONS
    # `gnnsys report`'s charts of those keys: file stem -> (title, y label, keys), drawn
    # beside the loop's (report.CHARTS); "name.*" draws each entry of the mapping `name`
    charts: dict = {}
    # bumped when a change makes this mode's older snapshots load differently, or a run
    # resumed across it train its later epochs otherwise than its first; every snapshot
    # carries it (`stamped`), one from before snapshots did counts as 1
    training_version: int = 1

    @classmethod
    def check_config(cls, config) -> None:
        """Raise ConfigError where `config` asks for what this mode does not train."""
        for key, values in cls.supports.items():
            value = attrgetter(key)(config)
            if key == "model.arch" and is_class_path(value):
                model_class(config.mode, value)     # a class of the user's own: checked there
            elif value not in values:
                raise ConfigError(f"config key '{key}' is {value!r} but mode '{config.mode}' "
                                  f"supports: {', '.join(map(str, values))}")

    @staticmethod
    def prepare(config, graph=None) -> tuple:
        """Driver-side work done once before the workers start (partitions, the event
        stream); returns the extra arguments of every rank's constructor."""
        return ()

    def __init__(self, ctx, config):
        self.ctx, self.config = ctx, config

    def build_model(self) -> torch.nn.Module:
        """The module to train, on ctx.device, built freshly (the loop seeds); no collectives."""
        raise NotImplementedError

    def train_batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, int, float]]:
        """Per step yield (loss, examples, normaliser); the loop runs backward, the gradient
        all-reduce and the optimizer step, then resumes the generator."""
        raise NotImplementedError

    def epoch_stats(self) -> dict:
        """This rank's counters of the epoch for the log; each key declared in `reductions`."""
        return {}

    def split_outputs(self, splits: tuple) -> dict:
        """{split: {name: tensor or array}}: this rank's share of each split's outputs, in
        one pass where the mode can; the loop gathers them from every rank (rows in rank
        order, concatenated: `gather_outputs`) and hands each split's to `score`. A node
        classification mode also answers split "all" (every node) and gives `node_id`."""
        raise NotImplementedError

    def score(self, split: str, outputs: dict) -> dict:
        """The metrics of one split from every rank's outputs, e.g. {'val_acc': 0.8}."""
        raise NotImplementedError

    def score_queries(self, src, dst, t) -> dict:
        """Link modes: this rank's share of the logits of query events src -> dst at
        dataset times t (node rows; `RunResult.predict(queries=...)`), as
        {"query": index into the queries, "score"}; the caller gathers every rank's."""
        raise NotImplementedError(f"{type(self).__name__} scores no query events")

    def embed_nodes(self, nodes, t: float) -> dict:
        """Temporal modes: this rank's share of the vectors of node rows `nodes` as of
        dataset time `t` (`RunResult.embeddings(at=...)`), as {"query", "embedding"}."""
        raise NotImplementedError(f"{type(self).__name__} embeds no nodes as of a time")

    def final_metrics(self) -> dict:
        """Anything else the final record should hold (after the final splits are scored)."""
        return {}

    def state_dict(self) -> dict:
        """Mode state beyond the model (temporal memory, AdaQP bit-widths); may gather."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned."""

    def stamped(self, snapshot: dict) -> dict:
        """`snapshot` ({"model", "mode"}) marked with the training version that made it."""
        return {**snapshot, "training_version": self.training_version}

    def version_mismatch(self, snapshot: dict) -> str | None:
        """Why `snapshot` comes from a gnnsys that trained this mode otherwise (a phrase
        for an error message), or None if it is this version's."""
        was = int(snapshot.get("training_version", 1))
        if was == self.training_version:
            return None
        return (f"{'an older' if was < self.training_version else 'a newer'} gnnsys "
                f"(its {self.config.mode} training version {was}, this one's "
                f"{self.training_version})")

    def describe(self) -> dict:
        """This rank's set-up, logged once in the start record."""
        return {}

    def split_ids(self) -> dict:
        """The dataset ids of the train / val / test items this rank holds (nodes: the rows
        it owns; temporal: event rows, from rank 0 only), as int arrays; the start record
        logs each split's size and a digest, so one can tell which data a run used."""
        return {}


class NodeClassificationMode(Mode):
    """A mode that predicts a class per node: scored by the dataset's metric
    (`dataset_metric`, accuracy or roc_auc) on each split's logits and labels."""

    dataset_metric: str = "accuracy"

    @property
    def metric(self) -> str:
        return METRIC_KEY[self.dataset_metric]

    def split_outputs(self, splits: tuple, layers: int | None = None) -> dict:
        """As `Mode.split_outputs`; `layers`: "logits" holds the output of the model's first
        that many layers instead (node embeddings, `RunResult.embeddings`)."""
        raise NotImplementedError

    def predict_rows(self, rows, layers: int | None = None) -> dict | None:
        """One worker: as `split_outputs`, for dataset rows `rows` alone, in their order
        ({"rows", "logits", "labels"}), inferred over their neighbourhood; None where the
        mode cannot (then every node is inferred and the rows picked)."""
        return None

    def score(self, split: str, outputs: dict) -> dict:
        return {f"{split}_{self.metric}": evaluate(self.dataset_metric, outputs["logits"],
                                                   outputs["labels"])}
