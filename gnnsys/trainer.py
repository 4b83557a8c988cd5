"""`Trainer(config).fit()`: the one entry point the CLI, the Python API and Ray jobs share.

It validates the config and hands it to the one training loop (`gnnsys.training.fit`),
which runs the mode's plug-in on 1 or `cluster.workers` workers.
"""
from __future__ import annotations

import os

from .config import Config, from_dict, load_config, validate


class Trainer:
    """Train a GNN as `config` describes.

    Example::

        import gnnsys
        cfg = gnnsys.load_config("configs/quickstart.yaml", overrides=["train.epochs=2"])
        metrics = gnnsys.Trainer(cfg).fit()
        print(metrics["test_acc"])
    """

    def __init__(self, config: Config | dict | str | os.PathLike):
        if isinstance(config, Config):
            self.config = validate(config)
        elif isinstance(config, dict):
            self.config = from_dict(config)
        else:
            self.config = load_config(config)

    def fit(self) -> dict:
        from .training import fit
        return fit(self.config)
