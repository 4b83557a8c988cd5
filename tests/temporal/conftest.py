"""Temporal-mode test helpers: tiny learnable event graphs, small configs, and K workers
as threads of one process (gnnsys.distributed.local: the real Communicator's accounting)."""
from __future__ import annotations

import numpy as np
import pytest

from gnnsys.distributed.local import ThreadGroup
from gnnsys.temporal_graph import TemporalGraph


def make_tiny_graph(num_nodes: int = 60, num_events: int = 1200, edge_dim: int = 0,
                    node_dim: int = 0, seed: int = 0,
                    name: str = "tiny-temporal") -> TemporalGraph:
    """Destinations come from a small 'hot' set that drifts every 150 events, so recent
    activity (memory, recent neighbours) predicts links; times have ties (several events
    per second) to exercise the latest-by-(time, event) rule."""
    rng = np.random.default_rng(seed)
    window = np.arange(num_events) // 150
    hot = rng.integers(0, num_nodes, size=(window.max() + 1, 6))
    src = rng.integers(0, num_nodes, size=num_events)
    dst = hot[window, rng.integers(0, 6, size=num_events)]
    same = src == dst
    src[same] = (src[same] + 1) % num_nodes
    t = np.sort(rng.integers(0, num_events // 2, size=num_events)).astype(np.int64)
    edge_feat = rng.normal(size=(num_events, edge_dim)).astype(np.float32) if edge_dim else None
    node_feat = rng.normal(size=(num_nodes, node_dim)).astype(np.float32) if node_dim else None
    return TemporalGraph(src=src, dst=dst, t=t, num_nodes=num_nodes, edge_feat=edge_feat,
                         node_feat=node_feat, name=name)


@pytest.fixture
def tiny_graph():
    return make_tiny_graph()


@pytest.fixture
def graph_factory():
    return make_tiny_graph


@pytest.fixture
def tiny_config(tmp_path):
    """Factory of small, fast temporal configs; keyword sections override, e.g.
    tiny_config(model={'arch': 'jodie'}, run={'dir': ...})."""
    return lambda **sections: _tiny_config(tmp_path, **sections)


def _tiny_config(tmp_path, **sections):
    from gnnsys.config import from_dict
    data = {"mode": "temporal",
            "model": {"arch": "tgn", "heads": 2, "dropout": 0.0},
            "sampler": {"batch_size": 100, "prefetch": 1, "threads": 1},
            "train": {"epochs": 1, "lr": 0.003, "progress": False, "seed": 0},
            "run": {"dir": str(tmp_path / "run")},
            "temporal": {"memory_dim": 16, "time_dim": 8, "embedding_dim": 16,
                         "num_neighbors": 5, "eval_negatives": 4}}
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return from_dict(data)


# ----------------------------------------------------------------------------- in-process workers
def run_threaded(fn, world_size: int, *args) -> list:
    """fn(ctx, *args) on `world_size` thread workers; their results in rank order."""
    return ThreadGroup(world_size).run_workers(fn, *args)


@pytest.fixture
def threaded_workers():
    return run_threaded


def checkpoint_state(run_dir):
    """The model and the memory of a run's last checkpoint."""
    import torch
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)["current"]
    return {"model": state["model"], "memory": state["mode"]["memory"]}
