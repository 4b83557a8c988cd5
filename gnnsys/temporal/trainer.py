"""Driver side of a temporal run: load and prepare the event stream, choose vertex owners,
start the workers (in-process for one, Ray actors for more) and return rank 0's metrics."""
from __future__ import annotations

from ..distributed import launch
from ..datasets import load_run_graph
from .data import prepare_events
from .placement import vertex_ownership
from .worker import run_worker


def fit(config, graph=None) -> dict:
    """Train as `config` says; `graph` (a TemporalGraph) skips the dataset registry."""
    if graph is None:
        graph = load_run_graph(config)
    events = prepare_events(graph, config.temporal.edge_feat_dim)
    owner = vertex_ownership(config, events)
    return launch(run_worker, config, events, owner)[0]
