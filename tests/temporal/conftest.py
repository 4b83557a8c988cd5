"""Temporal-mode test helpers: tiny learnable event graphs, small configs, and K workers
as threads of one process (a fake communicator with the real one's accounting)."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from gnnsys.distributed import Communicator, WorkerContext
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
class _Rendezvous:
    """All ranks deposit a value, then all read everyone's (a collective in one process)."""

    def __init__(self, world_size: int, timeout_s: float = 120.0):
        self.barrier = threading.Barrier(world_size, timeout=timeout_s)
        self.slots = [None] * world_size

    def exchange(self, rank: int, value):
        self.slots[rank] = value
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()        # nobody overwrites a slot before all have read it
        return out


class ThreadCommunicator(Communicator):
    """Communicator for K workers running as threads of this process: the same interface
    and byte/row accounting as the torch.distributed one, without Ray or gloo. Lets the
    tests run the real multi-worker training loop in seconds."""

    def __init__(self, rank: int, world_size: int, rendezvous: _Rendezvous):
        super().__init__(rank, world_size)
        self.rendezvous = rendezvous

    def all_to_all(self, send):
        everything = self.rendezvous.exchange(self.rank, [t.clone() for t in send])
        recv = [everything[r][self.rank] for r in range(self.world_size)]
        row = send[0]
        row_bytes = row.element_size() * (int(np.prod(row.shape[1:])) if row.dim() > 1 else 1)
        sent = sum(len(t) for r, t in enumerate(send) if r != self.rank)
        got = sum(len(t) for r, t in enumerate(recv) if r != self.rank)
        self.stats.rows_sent += sent
        self.stats.rows_recv += got
        self.stats.bytes_sent += sent * row_bytes + 8 * (self.world_size - 1)
        self.stats.bytes_recv += got * row_bytes + 8 * (self.world_size - 1)
        self.stats.calls += 1
        return recv

    def all_reduce(self, tensor, op: str = "sum"):
        stacked = torch.stack(self.rendezvous.exchange(self.rank, tensor.clone()))
        result = {"sum": lambda: stacked.sum(0), "mean": lambda: stacked.sum(0) / self.world_size,
                  "max": lambda: stacked.amax(0), "min": lambda: stacked.amin(0)}[op]()
        nbytes = tensor.numel() * tensor.element_size()
        self.stats.bytes_sent += nbytes
        self.stats.bytes_recv += nbytes
        return tensor.copy_(result)

    def all_gather_object(self, obj):
        return self.rendezvous.exchange(self.rank, obj)

    def broadcast_object(self, obj, src: int = 0):
        return self.rendezvous.exchange(self.rank, obj)[src]

    def barrier(self):
        self.rendezvous.barrier.wait()


def run_threaded(fn, world_size: int, *args) -> list:
    """fn(ctx, *args) on `world_size` thread workers; their results in rank order."""
    rendezvous = _Rendezvous(world_size)
    results, errors = [None] * world_size, []

    def body(rank):
        ctx = WorkerContext(rank, world_size, torch.device("cpu"),
                            ThreadCommunicator(rank, world_size, rendezvous))
        try:
            results[rank] = fn(ctx, *args)
        except BaseException as err:      # a failed rank must not leave the others waiting
            errors.append(err)
            rendezvous.barrier.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


@pytest.fixture
def threaded_workers():
    return run_threaded
