"""Temporal-mode test helpers: tiny learnable event graphs, small configs, and K workers
as threads of one process (gnnsys.distributed.local: the real Communicator's accounting)."""
from __future__ import annotations

import dataclasses

import pytest

from gnnsys.distributed import launch
from gnnsys.testing import tiny_temporal_graph


# a small learnable event stream (shared with scripts/gpu_check.py)
make_tiny_graph = tiny_temporal_graph


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
def run_threaded(fn, world_size: int, config, *args) -> list:
    """fn(ctx, config, *args) on `world_size` workers run as threads (the launcher's
    cluster.launcher: threads); their results in rank order."""
    cluster = dataclasses.replace(config.cluster, workers=world_size, launcher="threads")
    return launch(fn, dataclasses.replace(config, cluster=cluster), *args)


@pytest.fixture
def threaded_workers():
    return run_threaded


def checkpoint_state(run_dir):
    """The model and the memory of a run's last checkpoint."""
    import torch
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)["current"]
    return {"model": state["model"], "memory": state["mode"]["memory"]}
