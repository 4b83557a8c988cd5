"""gnnsys: distributed GNN training (minibatch / temporal / full-graph modes).

    import gnnsys
    metrics = gnnsys.Trainer(gnnsys.load_config("configs/quickstart.yaml")).fit()
"""
import os

# The trainer runs two thread pools at once (numba's sampler threads in the batch-prep
# thread, torch's for the model), and Ray workers or other jobs may share the cores;
# OpenMP threads that spin between loops steal the cores the others need (two 2-thread
# TGN runs on 2 cores: each about twice as slow with GOMP_SPINCOUNT=10000 as with PASSIVE).
# On a machine a run has to itself a short spin is faster (BENCHMARKS.md, "OpenMP wait"):
# GOMP_SPINCOUNT=10000 in the shell opts in. Must be set before torch/numba load OpenMP;
# a user's value wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .config import Config, ConfigError, load_config  # noqa: E402
from .graph import Graph  # noqa: E402
from .result import RunResult, load_run  # noqa: E402
from .trainer import Trainer  # noqa: E402


def __getattr__(name):
    # The minibatch mode's batch types load with that mode's package, on first use:
    # importing gnnsys (or gnnsys.config) loads no mode.
    if name in ("Block", "MiniBatch"):
        from .minibatch import batch
        return getattr(batch, name)
    raise AttributeError(f"module 'gnnsys' has no attribute {name!r}")


__version__ = "0.1.0"
__all__ = ["Config", "ConfigError", "Graph", "Block", "MiniBatch", "RunResult", "Trainer",
           "load_config", "load_run"]
