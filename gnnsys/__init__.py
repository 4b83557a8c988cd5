"""gnnsys: distributed GNN training (minibatch / temporal / full-graph modes).

    import gnnsys
    metrics = gnnsys.Trainer(gnnsys.load_config("configs/quickstart.yaml")).fit()
"""
import os

# The trainer runs two thread pools at once (numba's sampler threads in the batch-prep
# thread, torch's for the model); OpenMP threads that spin between loops steal the cores
# the other pool needs. Must be set before torch/numba load OpenMP; a user's value wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .config import Config, ConfigError, load_config  # noqa: E402
from .graph import Graph  # noqa: E402
from .minibatch.batch import Block, MiniBatch  # noqa: E402
from .trainer import Trainer  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Config", "ConfigError", "Graph", "Block", "MiniBatch", "Trainer", "load_config"]
