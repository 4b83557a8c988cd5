"""A finished run in hand: what `Trainer.fit()` returns and `load_run(run_dir)` rebuilds.

    result = gnnsys.Trainer(cfg).fit()        # or gnnsys.load_run("runs/quickstart")
    result["test_acc"]                        # the final metrics, as a dict
    model = result.model                      # the best-validation model, a torch Module
    table = result.predict("all", out="predictions.parquet")   # every node's class scores

The model is rebuilt from the run's config and its weights-only checkpoint (its
best-validation snapshot), on the device asked for, the first time `.model` is read.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import torch

from . import prediction
from .errors import PredictError, RunError


class RunResult(dict):
    """The final metrics of a run (this dict, as `metrics.jsonl`'s final record holds
    them), with its `config`, `run_dir` and best-validation `model`."""

    def __init__(self, metrics: dict, config, run_dir, device="cpu", graph=None,
                 other_data: bool = False):
        super().__init__({k: v for k, v in metrics.items() if k not in ("kind", "time")})
        self.config, self.run_dir, self.device = config, Path(run_dir), torch.device(device)
        self._graph = graph                  # the graph it trained on, if not the config's
        self.other_data = other_data         # config.dataset is not the one it trained on

    @functools.cached_property
    def model(self) -> torch.nn.Module:
        return prediction.load_model(self.config, self.run_dir, self.device, self._graph,
                                     own_data=self._own_data)

    @property
    def _own_data(self) -> bool:
        """Whether the data is the run's own dataset files (checked to be unchanged)."""
        return self._graph is None and not self.other_data

    @property
    def _predicts_events(self) -> bool:
        """Whether the run's mode predicts query events (a temporal run), not nodes."""
        return self._predicts == "events"

    @property
    def _predicts(self) -> str:
        """What the run's mode predicts (`Mode.predicts`): nodes, events or pairs."""
        from .mode import mode_class
        return mode_class(self.config.mode).predicts

    def predict(self, split: str = "all", out=None, workers: int | None = None,
                nodes=None, queries=None, pairs=None) -> dict:
        """Node modes: class scores and the predicted class of every node ("all"), of a
        split's (train / val / test) or of the node ids in `nodes` (in that order), by the
        run's selected model with the exact layer-wise inference evaluation uses, on the
        run's workers (or `workers`: each infers its own part; default one process for a
        run trained on this machine), in the dataset's node order: {"node_id", "pred",
        "scores", "label"} arrays; `nodes` are inferred over their neighbourhood only.
        Temporal: the logit and probability of each query event in `queries` (a file, or
        a mapping, with columns src, dst, t; replayed as the final evaluation ran):
        {"src", "dst", "t", "score", "prob"} in the queries' order.
        Static link: the logit and probability of each node pair in `pairs` (a file, or a
        mapping, with columns src, dst): {"src", "dst", "score", "prob"} in their order.
        Node ids are the dataset's own (a bundle's `node_ids`, else its rows). `out`:
        also written there atomically, as .npz, .parquet or .csv (docs/DATA.md,
        "Predictions")."""
        from .tables import table_format, write_table
        if split not in ("all", "train", "val", "test"):
            raise PredictError(f"split {split!r}: use all, train, val or test")
        if out is not None:
            table_format(out, self.needed_files())   # a bad --out fails before any inference
        if (self._predicts == "pairs") != (pairs is not None):
            raise PredictError("a link run scores node pairs: give pairs (gnnsys predict "
                               "--pairs FILE, columns src, dst; or --topk K --nodes ...)"
                               if pairs is None else "pairs are for link runs; this run's "
                               f"mode is {self.config.mode}")
        temporal = self._predicts_events
        if pairs is not None:
            table = prediction.link_pairs(self, pairs)
        elif temporal != (queries is not None):
            raise PredictError("a temporal run predicts query events: give queries (gnnsys "
                               "predict --queries FILE, columns src, dst, t; docs/DATA.md)"
                               if temporal else "queries are for temporal runs; this run's "
                               f"mode is {self.config.mode}: predict a split or node ids")
        elif temporal:
            table = prediction.score_queries(self, queries, workers)
        else:
            table = prediction.classify(self, split, nodes, workers)
        if out is not None:
            write_table(out, table, self.needed_files())
        return table

    def embeddings(self, at: float | None = None, layer: int | None = None, nodes=None,
                   split: str = "all", out=None, workers: int | None = None) -> dict:
        """Node vectors {"node_id", "embedding"}: for a node run, the output of its first
        `layer` layers (`model.layers`: the class scores) of every node, a split's or
        `nodes`', by the same exact inference as `predict`; for a static link run, the
        vectors its pairs are scored by (or a `layer`'s output), over the training edges;
        for a temporal run, the vector the link scorer reads of every node (or `nodes`) as
        of dataset time `at`."""
        from .tables import table_format, write_table
        temporal = self._predicts_events
        if self._predicts == "pairs":      # the vectors pairs are scored by, by default
            layer = self.config.model.layers if layer is None else layer
        if temporal != (at is not None) or temporal == (layer is not None):
            raise PredictError("a temporal run embeds nodes as of a time: give at (gnnsys "
                               "predict --embeddings-at T)" if temporal else "a node run embeds "
                               "nodes by a layer's output: give layer (gnnsys predict --layer "
                               f"L, 1..{self.config.model.layers})")
        if out is not None:
            table_format(out, self.needed_files())
        if temporal:
            table = prediction.embed_at(self, float(at), nodes, workers)
        elif not 1 <= layer <= self.config.model.layers:
            raise PredictError(f"layer {layer}: the run's model has layers 1.."
                               f"{self.config.model.layers} (model.layers)")
        elif self._predicts == "pairs":
            table = prediction.link_embeddings(self, nodes, layer)
        else:
            got = prediction.classify(self, split, nodes, workers, layers=layer)
            table = {"node_id": got["node_id"], "embedding": got["scores"]}
        if out is not None:
            write_table(out, table, self.needed_files())
        return table

    def topk(self, nodes, k: int, out=None) -> dict:
        """Link runs: for each node id of `nodes` the `k` nodes it scores highest with,
        best first, leaving out itself and the nodes it has an edge to:
        {"node_id", "partner" [n, k], "score" [n, k]} (ids the dataset's own)."""
        from .tables import table_format, write_table
        if self._predicts != "pairs":
            raise PredictError(f"top-k partners are for link runs; this run's mode is "
                               f"{self.config.mode}")
        if nodes is None:
            raise PredictError("top-k partners of which nodes? give them (gnnsys predict "
                               "--topk K --nodes ID ...)")
        if out is not None:
            table_format(out, self.needed_files())
        table = prediction.link_partners(self, nodes, k)
        if out is not None:
            write_table(out, table, self.needed_files())
        return table

    def needed_files(self) -> list:
        """What an output path must not replace beyond any run's own files (runlog.
        check_output): the run's dataset file or folder."""
        from .datasets.registry import dataset_location
        d = self.config.dataset
        return [] if self._graph is not None else \
            [p for p in [dataset_location(d.name, d.root, d.path)] if p is not None]

    def export_pyg(self, path=None) -> dict:
        """The model as torch_geometric.nn's GraphSAGE / GCN / GAT (gnnsys/export.py)."""
        from .export import export_pyg
        return export_pyg(self, path)


def load_run(run_dir, device="cpu", overrides=()) -> RunResult:
    """The result of the finished run in `run_dir` (its config, final metrics, model).
    `overrides`: `dataset.*` settings as `--set` takes them (["dataset.path=new.npz"]):
    the run's model on another graph of the same feature width and classes (node modes,
    whose models are inductive)."""
    from . import runlog
    from .config import load_config
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise RunError(f"{run_dir} holds no gnnsys run (no config.yaml); pass the run.dir "
                       "of a `gnnsys train`")
    training = runlog.lock_holder(run_dir)
    if training is not None:
        raise RunError(f"the run in {run_dir} is still training (pid {training}); predict or "
                       "export it once it has finished")
    final = runlog.final(run_dir)
    if final is None:
        raise RunError(f"the run in {run_dir} has not finished (metrics.jsonl has no final "
                       f"record); finish it: gnnsys train --config {run_dir / 'config.yaml'} "
                       "--resume")
    config = load_config(run_dir / "config.yaml")
    if not overrides:
        return RunResult(final, config, run_dir, device)
    return RunResult(final, other_dataset(config, overrides), run_dir, device, other_data=True)


def other_dataset(config, overrides):
    """The run's config reading the dataset that `overrides` (dataset.* only) name."""
    from .config import from_dict
    from .mode import mode_class
    keys = [item.partition("=")[0].strip() for item in overrides]
    if other := next((k for k in keys if not k.startswith("dataset.")), None):
        raise PredictError(f"--set {other}: predict takes dataset.* settings only (e.g. --set "
                           "dataset.path=new.npz); the model and its settings are the run's")
    if mode_class(config.mode).predicts == "events":
        raise PredictError("a temporal run predicts on the event stream it trained on (its "
                           "memory is of those nodes, as of its last event); drop --set "
                           "dataset.*, and score other events with --queries")
    changed = from_dict(config.to_dict(), overrides)
    if changed.dataset.normalize_features == "standard":
        raise PredictError("dataset.normalize_features=standard scales features by the mean "
                           "and std of the training nodes, which another graph does not "
                           "have: predict on the run's own dataset")
    # K workers partition the new graph in a folder of its own, not the run's partition.dir
    return dataclasses.replace(changed, partition=dataclasses.replace(changed.partition,
                                                                      dir=None))
