"""Vertex ownership for a temporal run: range / hash, or balanced from the access counts
of a simulated training epoch (the same batches, negatives and neighbours the workers will
use, so the simulation predicts the exchange exactly)."""
from __future__ import annotations

import numpy as np

from partition.temporal import AccessCounter, make_ownership, traffic_per_worker
from .batch import BatchPlanner
from .worker import build_model


def simulate_access(config, events, num_workers: int) -> AccessCounter:
    """A[g, v]: batches of one training epoch in which worker g fetches / writes back v."""
    model, _ = build_model(config, events)
    counter = AccessCounter(events.num_nodes, num_workers)
    for rank in range(num_workers):
        planner = BatchPlanner(events, config.sampler.batch_size, rank, num_workers,
                               config.train.seed, config.temporal.num_neighbors,
                               config.temporal.neighbor_strategy, model.uses_neighbors)
        for batch in planner.epoch("train", 0, 1):
            counter.add(rank, np.unique(batch.needed), np.unique(batch.written))
    return counter


def access_weights(config, events, counter: AccessCounter) -> np.ndarray:
    """Bytes per access: a fetch moves an 8-byte id and a read row, a write-back a write row."""
    _, layout = build_model(config, events)
    return counter.weights(read_row_bytes=8 + 4 * layout.read_width,
                           write_row_bytes=4 * layout.write_width)


def vertex_ownership(config, events, num_workers: int | None = None) -> np.ndarray:
    num_workers = num_workers or config.cluster.workers
    kind = config.temporal.ownership
    access = None
    if kind == "balanced" and num_workers > 1:
        access = access_weights(config, events, simulate_access(config, events, num_workers))
    return make_ownership(kind, events.num_nodes, num_workers, access)


def predicted_traffic(config, events, owner: np.ndarray, num_workers: int) -> np.ndarray:
    """Per-worker bytes (sent + received) of one dedup training epoch under `owner`."""
    weights = access_weights(config, events, simulate_access(config, events, num_workers))
    return traffic_per_worker(weights, owner)
