"""`Trainer(config).fit()`: the one entry point the CLI, the Python API and Ray jobs share.

It validates the config, picks the training mode and hands over. Each mode lives in
`gnnsys/modes/<mode>.py` and exposes `fit(config) -> dict` (final metrics). Multi-worker
runs (`cluster.workers > 1`) go through `gnnsys.distributed` from inside the mode.
"""
from __future__ import annotations

import importlib
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
        mode = importlib.import_module(f"gnnsys.{self.config.mode}")
        return mode.fit(self.config)
