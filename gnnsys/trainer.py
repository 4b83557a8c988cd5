"""`Trainer(config).fit()`: the one entry point the CLI, the Python API and Ray jobs share.

It validates the config and hands it to the one training loop (`gnnsys.training.fit`),
which runs the mode's plug-in on 1 or `cluster.workers` workers, on the config's dataset
or on `data`: a PyG `Data` / `TemporalData`, a `dgl.DGLGraph` or a gnnsys graph.
"""
from __future__ import annotations

import copy
import dataclasses
import os

from .config import Config, from_dict, load_config, validate
from .result import RunResult


class Trainer:
    """Train a GNN as `config` describes.

    Example::

        import gnnsys
        cfg = gnnsys.load_config("configs/quickstart.yaml", overrides=["train.epochs=2"])
        metrics = gnnsys.Trainer(cfg).fit()
        print(metrics["test_acc"])
        gnnsys.Trainer(cfg, data=torch_geometric_data).fit()   # your own graph, no files
        gnnsys.Trainer(cfg, model_class=MyGNN).fit()           # your own model class

    `model_class`, a `gnnsys.models.base.MinibatchModel` subclass defined in an importable
    module, replaces `model.arch` with its import path ("module:Class"), which the run's
    saved config records: `load_run`, `gnnsys predict` and Ray workers import it by that.
    """

    def __init__(self, config: Config | dict | str | os.PathLike, data=None,
                 model_class: type | None = None):
        if model_class is not None:
            config = with_model_class(config, model_class)
        if isinstance(config, Config):
            self.config = validate(config)
        elif isinstance(config, dict):
            self.config = from_dict(config)
        else:
            self.config = load_config(config)
        self.data = data

    def fit(self) -> RunResult:
        """Train; the final metrics (a dict) with the run's config, directory and model."""
        from .training import fit
        graph = None
        if self.data is not None:
            from .datasets import load_run_graph
            from .interop import as_graph
            # Checked for the mode (and normalised) as a loaded dataset is.
            graph = load_run_graph(self.config, as_graph(self.data))
        return RunResult(fit(self.config, graph=graph), self.config, self.config.run.dir,
                         graph=graph)


def with_model_class(config, cls):
    """`config` (a Config, a dict or a YAML path) with model.arch naming `cls` by its
    import path; the caller's config is left as it was."""
    from .models.own import class_path
    path = class_path(cls)
    if isinstance(config, Config):
        return dataclasses.replace(config, model=dataclasses.replace(config.model, arch=path))
    if isinstance(config, dict):
        config = copy.deepcopy(config)
        config["model"] = {**(config.get("model") or {}), "arch": path}
        return config
    return with_model_class(load_config(config), cls)
