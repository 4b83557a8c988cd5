"""Vertex ownership for distributed temporal GNN training (Sven): which worker stores each
vertex's memory, mailbox and features.

Three assignments, all returning an int64 owner array [N]:
- `range_ownership`: contiguous id ranges (Sven's range-based division);
- `hash_ownership`: id mod K;
- `balanced_ownership`: min-max per-worker traffic from access counts of a simulated
  epoch (a Re-FlexBiCut-style heuristic: greedy placement, then a Kernighan-Lin-style
  refinement that moves vertices off the busiest worker while the maximum drops).

Traffic model (rows, or bytes with per-row weights): a worker g that needs vertex v in a
batch while v lives on owner o != g receives v's row and o sends it; write-backs flow the
other way. With A[g, v] = weighted accesses of worker g to v over the epoch,
    cost(g) = sum_{v not owned by g} A[g, v]  +  sum_{v owned by g} sum_{h != g} A[h, v].
Knows arrays only: no dependency on gnnsys.
"""
from __future__ import annotations

import numpy as np
from numba import njit

OWNERSHIPS = ("range", "hash", "balanced")


def range_ownership(num_nodes: int, num_workers: int) -> np.ndarray:
    _check(num_nodes, num_workers)
    return (np.arange(num_nodes, dtype=np.int64) * num_workers) // max(num_nodes, 1)


def hash_ownership(num_nodes: int, num_workers: int) -> np.ndarray:
    _check(num_nodes, num_workers)
    return np.arange(num_nodes, dtype=np.int64) % num_workers


def _check(num_nodes: int, num_workers: int) -> None:
    if num_workers < 1:
        raise ValueError(f"the number of workers must be >= 1, got {num_workers}")
    if num_nodes < 0:
        raise ValueError(f"the number of nodes must be >= 0, got {num_nodes}")


class AccessCounter:
    """Accumulates A[g, v]: how often worker g fetches / writes back vertex v.

    Feed it one call per (batch, worker) with that worker's unique ids; `weights()` turns
    the counts into bytes with the row sizes of the exchange."""

    def __init__(self, num_nodes: int, num_workers: int):
        _check(num_nodes, num_workers)
        self.reads = np.zeros((num_workers, num_nodes), dtype=np.int64)
        self.writes = np.zeros((num_workers, num_nodes), dtype=np.int64)

    def add(self, worker: int, read_ids: np.ndarray, write_ids: np.ndarray) -> None:
        # ids are unique per call (one fetch per unique vertex per batch), so += is exact
        self.reads[worker, read_ids] += 1
        self.writes[worker, write_ids] += 1

    def weights(self, read_row_bytes: float = 1.0, write_row_bytes: float = 1.0) -> np.ndarray:
        return self.reads * float(read_row_bytes) + self.writes * float(write_row_bytes)


def traffic_per_worker(access: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """cost(g) = sent + received traffic of each worker under `owner` (see module doc)."""
    access = np.asarray(access, dtype=np.float64)
    num_workers, num_nodes = access.shape
    if owner.shape != (num_nodes,):
        raise ValueError(f"owner must have one entry per node ({num_nodes}), got {owner.shape}")
    total = access.sum(0)
    local = access[owner, np.arange(num_nodes)]
    remote_in = access.sum(1) - np.bincount(owner, weights=local, minlength=num_workers)
    served = np.bincount(owner, weights=total - local, minlength=num_workers)
    return remote_in + served


def balanced_ownership(access: np.ndarray, initial: np.ndarray | None = None,
                       capacity_slack: float = 0.1, max_passes: int = 20) -> np.ndarray:
    """Owner array minimising max_g cost(g) heuristically, never worse than `initial`.

    Vertices are placed heaviest first on the worker that keeps the maximum cost lowest
    (ties: the worker that accesses the vertex most, which also cuts the total), each
    worker owning at most (1 + capacity_slack) * N / K vertices so memory stays balanced.
    A refinement pass then moves single vertices off the busiest worker while that lowers
    the maximum."""
    access = np.ascontiguousarray(access, dtype=np.float64)
    num_workers, num_nodes = access.shape
    if initial is None:
        initial = range_ownership(num_nodes, num_workers)
    initial = np.asarray(initial, dtype=np.int64)
    if num_workers == 1:
        return np.zeros(num_nodes, dtype=np.int64)
    capacity = int(np.ceil((1.0 + capacity_slack) * num_nodes / num_workers))
    order = np.argsort(-access.sum(0), kind="stable")
    owner = _greedy_place(access, order, capacity)
    _refine(access, owner, capacity, max_passes)
    if traffic_per_worker(access, owner).max() > traffic_per_worker(access, initial).max():
        return initial.copy()
    return owner


@njit(cache=True)
def _greedy_place(access, order, capacity):
    num_workers, num_nodes = access.shape
    cost = np.zeros(num_workers)
    count = np.zeros(num_workers, dtype=np.int64)
    owner = np.zeros(num_nodes, dtype=np.int64)
    for v in order:
        total = 0.0
        for g in range(num_workers):
            total += access[g, v]
        best, best_max, best_local = -1, np.inf, -1.0
        for o in range(num_workers):
            if count[o] >= capacity:
                continue
            worst = 0.0
            for g in range(num_workers):
                c = cost[g] + (total - access[o, v] if g == o else access[g, v])
                worst = max(worst, c)
            if worst < best_max or (worst == best_max and access[o, v] > best_local):
                best, best_max, best_local = o, worst, access[o, v]
        owner[v] = best
        count[best] += 1
        for g in range(num_workers):
            cost[g] += total - access[best, v] if g == best else access[g, v]
    return owner


@njit(cache=True)
def _costs(access, owner):
    num_workers, num_nodes = access.shape
    cost = np.zeros(num_workers)
    for v in range(num_nodes):
        o = owner[v]
        for g in range(num_workers):
            if g != o:
                cost[g] += access[g, v]
                cost[o] += access[g, v]
    return cost


@njit(cache=True)
def _refine(access, owner, capacity, max_passes):
    num_workers, num_nodes = access.shape
    count = np.zeros(num_workers, dtype=np.int64)
    for v in range(num_nodes):
        count[owner[v]] += 1
    cost = _costs(access, owner)
    for _ in range(max_passes):
        moved = 0
        for v in range(num_nodes):
            busiest = np.argmax(cost)
            o = owner[v]
            if access[busiest, v] == 0 and o != busiest:
                continue   # v does not touch the busiest worker: moving it cannot help
            total = 0.0
            for g in range(num_workers):
                total += access[g, v]
            current_max = cost.max()
            best, best_max = o, current_max
            for n in range(num_workers):
                if n == o or count[n] >= capacity:
                    continue
                worst = 0.0
                for g in range(num_workers):
                    c = cost[g]
                    c -= (total - access[o, v]) if g == o else access[g, v]
                    c += (total - access[n, v]) if g == n else access[g, v]
                    worst = max(worst, c)
                if worst < best_max - 1e-9:
                    best, best_max = n, worst
            if best != o:
                for g in range(num_workers):
                    cost[g] -= (total - access[o, v]) if g == o else access[g, v]
                    cost[g] += (total - access[best, v]) if g == best else access[g, v]
                count[o] -= 1
                count[best] += 1
                owner[v] = best
                moved += 1
        if moved == 0:
            break


def make_ownership(kind: str, num_nodes: int, num_workers: int,
                   access: np.ndarray | None = None) -> np.ndarray:
    """Dispatch on the config name; 'balanced' needs the simulated access counts."""
    if kind == "range":
        return range_ownership(num_nodes, num_workers)
    if kind == "hash":
        return hash_ownership(num_nodes, num_workers)
    if kind == "balanced":
        if num_workers == 1:
            return np.zeros(num_nodes, dtype=np.int64)
        if access is None:
            raise ValueError("balanced ownership needs access counts from a simulated epoch")
        return balanced_ownership(access, range_ownership(num_nodes, num_workers))
    raise ValueError(f"vertex ownership {kind!r} is unknown; use one of {', '.join(OWNERSHIPS)}")
