"""gnnsys: distributed GNN training (minibatch / temporal / full-graph modes).

    import gnnsys
    metrics = gnnsys.Trainer(gnnsys.load_config("configs/quickstart.yaml")).fit()
"""
from .config import Config, ConfigError, load_config
from .graph import Graph
from .minibatch import Block, MiniBatch
from .trainer import Trainer

__version__ = "0.1.0"
__all__ = ["Config", "ConfigError", "Graph", "Block", "MiniBatch", "Trainer", "load_config"]
