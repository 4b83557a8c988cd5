"""Placement policy of the GPU fused sampler: which feature rows and adjacency lists live where.

Pure numpy (no numba.cuda, no torch), so the policy is testable anywhere. From a hotness
ranking (VIP access probability or degree; hotter first) and a byte budget per tier it
decides, for one GPU's view of one machine:

- features: the hottest local rows on this GPU ("device"), the next ones in the shards of
  the other GPUs of the machine ("peer0", "peer1", ...: read through peer access), the
  rest in pinned host memory read in place ("host"); local rows past every budget, and
  rows the partition does not hold at all (row_of == -1), are misses that the distributed
  store fetches. The result is the per-node location table the fused kernel reads: one
  int64 word per global node, `tier << TIER_SHIFT | row within that tier`, -1 = miss.
- adjacency: the whole CSR `indices` on the device when it fits the budget; otherwise the
  lists of the hottest vertices are replicated on the device (HyDRA's high-degree
  replication, ../shared/ALGORITHMS.md 2.3 (c)) and the rest is read from pinned host memory.
  `indptr` is always replicated on the device (small, and every hop reads it).

The tier order (device, host, peers) is the kernel's tier-id order; the fill order
(device, then peers, then host) follows speed: NVLink peer reads beat PCIe host reads.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TIER_SHIFT = 48                       # location word = tier << 48 | row: rows < 2**48
ROW_MASK = (1 << TIER_SHIFT) - 1
DEVICE_TIER = 0
HOST_TIER = 1
FIRST_PEER_TIER = 2
MISS = -1                             # location of a row no local tier holds


def tier_name(tier: int) -> str:
    if tier == DEVICE_TIER:
        return "device"
    if tier == HOST_TIER:
        return "host"
    return f"peer{tier - FIRST_PEER_TIER}"


@dataclass(frozen=True)
class TierBudgets:
    """Bytes each tier may hold. `host_bytes=None`: pinned host memory holds every local
    row the GPU tiers do not (the usual case); 0 leaves them to the remote store."""
    device_bytes: int
    peer_bytes: tuple = ()            # one entry per peer GPU shard
    host_bytes: int | None = None

    @classmethod
    def from_device_fraction(cls, num_local_rows: int, row_bytes: int,
                             device_fraction: float, num_peers: int = 0,
                             host_bytes: int | None = None) -> "TierBudgets":
        """`cache.device_fraction` of the local rows on this GPU; with peers, the same
        share again on each peer shard (each GPU of the machine spends the same budget)."""
        if not 0.0 <= device_fraction <= 1.0:
            raise ValueError(f"device_fraction must lie in [0, 1], got {device_fraction}")
        per_gpu = int(device_fraction * num_local_rows) * row_bytes
        return cls(device_bytes=per_gpu, peer_bytes=(per_gpu,) * num_peers,
                   host_bytes=host_bytes)


@dataclass
class FeaturePlacement:
    """Where each global node's feature row lives, and which table rows fill each tier.

    location: int64 [N]; tier << TIER_SHIFT | row, or MISS.
    tier_rows: per tier id (device, host, peer0, ...): int64 rows of the source feature
        table, in tier-row order (tier row r holds source row tier_rows[t][r]).
    row_bytes: bytes of one feature row.
    """
    location: np.ndarray
    tier_rows: list
    row_bytes: int

    @property
    def num_tiers(self) -> int:
        return len(self.tier_rows)

    @property
    def num_peers(self) -> int:
        return self.num_tiers - FIRST_PEER_TIER

    @property
    def num_misses(self) -> int:
        return int(np.count_nonzero(self.location == MISS))

    def bytes_per_tier(self) -> dict:
        """{'device': bytes, 'host': bytes, 'peer0': bytes, ...}"""
        return {tier_name(t): int(rows.size) * self.row_bytes
                for t, rows in enumerate(self.tier_rows)}

    def report(self) -> str:
        """One line per tier: rows and MiB; then the nodes left to the remote store."""
        lines = [f"{tier_name(t):>7}: {rows.size:>12,} rows "
                 f"{rows.size * self.row_bytes / 2**20:>10.1f} MiB"
                 for t, rows in enumerate(self.tier_rows)]
        lines.append(f"{'miss':>7}: {self.num_misses:>12,} nodes (fetched remotely)")
        return "\n".join(lines)


def hotness_order(hotness: np.ndarray) -> np.ndarray:
    """Node ids, hottest first; ties by node id so a placement is reproducible."""
    hotness = np.asarray(hotness)
    return np.lexsort((np.arange(hotness.size), -hotness.astype(np.float64)))


def place_features(num_nodes: int, hotness: np.ndarray, row_bytes: int,
                   budgets: TierBudgets, row_of: np.ndarray | None = None) -> FeaturePlacement:
    """Fill device, then peer shards, then host with the hottest local rows.

    hotness: [N] score per global node (VIP probability, degree, ...); higher = hotter.
    row_of: None (every node's row is its id) or int64 [N] global id -> source row, -1
        for nodes whose row this machine does not hold (always a miss).
    """
    hotness = np.asarray(hotness)
    if hotness.shape != (num_nodes,):
        raise ValueError(f"place_features: hotness must have shape ({num_nodes},), "
                         f"got {hotness.shape}")
    if row_bytes < 1:
        raise ValueError(f"place_features: row_bytes must be >= 1, got {row_bytes}")
    budgets_in_bytes = [budgets.device_bytes, *budgets.peer_bytes]
    if any(b < 0 for b in budgets_in_bytes) or (budgets.host_bytes or 0) < 0:
        raise ValueError(f"place_features: tier budgets must be >= 0 bytes, got {budgets}")
    if row_of is None:
        source_row = np.arange(num_nodes, dtype=np.int64)
    else:
        source_row = np.asarray(row_of, dtype=np.int64)
        if source_row.shape != (num_nodes,):
            raise ValueError(f"place_features: row_of must have shape ({num_nodes},), "
                             f"got {source_row.shape}")
    order = hotness_order(hotness)
    local_in_order = order[source_row[order] >= 0]

    # Rows per tier in fill order: device, peer0, peer1, ..., host.
    fill_order = [DEVICE_TIER] + [FIRST_PEER_TIER + k for k in range(len(budgets.peer_bytes))]
    capacities = [b // row_bytes for b in budgets_in_bytes]
    remaining = local_in_order.size - min(sum(capacities), local_in_order.size)
    fill_order.append(HOST_TIER)
    capacities.append(remaining if budgets.host_bytes is None
                      else min(remaining, budgets.host_bytes // row_bytes))

    location = np.full(num_nodes, MISS, dtype=np.int64)
    tier_rows = [np.empty(0, dtype=np.int64)] * (FIRST_PEER_TIER + len(budgets.peer_bytes))
    begin = 0
    for tier, capacity in zip(fill_order, capacities):
        nodes = local_in_order[begin:begin + capacity]
        begin += nodes.size
        location[nodes] = (tier << TIER_SHIFT) | np.arange(nodes.size, dtype=np.int64)
        tier_rows[tier] = source_row[nodes]
    return FeaturePlacement(location=location, tier_rows=tier_rows, row_bytes=int(row_bytes))


@dataclass
class AdjacencyPlacement:
    """Where each vertex's neighbour list is read from.

    hot_start: int64 [N]; start of the vertex's list in `hot_indices` (on the device), or
        -1: read it from the full host copy at indptr[v].
    hot_indices: the replicated lists, concatenated (all of `indices` when it fits).
    all_on_device: True when hot_indices is the whole CSR (no host copy needed).
    """
    hot_start: np.ndarray
    hot_indices: np.ndarray
    all_on_device: bool

    @property
    def num_hot(self) -> int:
        return int(np.count_nonzero(self.hot_start >= 0))

    def bytes_per_tier(self, indices: np.ndarray) -> dict:
        device = self.hot_indices.nbytes + self.hot_start.nbytes
        return {"device": int(device), "host": 0 if self.all_on_device else int(indices.nbytes)}


def place_adjacency(indptr: np.ndarray, indices: np.ndarray, device_bytes: int | None,
                    hotness: np.ndarray | None = None) -> AdjacencyPlacement:
    """All of `indices` on the device if it fits `device_bytes` (None = no limit); else
    the lists of the hottest vertices (default hotness: degree) while they fit.
    The per-vertex table itself (8 bytes a vertex) is not charged to the budget."""
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices)
    num_nodes = indptr.size - 1
    if device_bytes is None or indices.nbytes <= device_bytes:
        return AdjacencyPlacement(hot_start=indptr[:-1].copy(), hot_indices=indices,
                                  all_on_device=True)
    degree = np.diff(indptr)
    if hotness is not None and np.shape(hotness) != (num_nodes,):
        raise ValueError(f"place_adjacency: hotness must have shape ({num_nodes},), "
                         f"got {np.shape(hotness)}")
    order = hotness_order(degree if hotness is None else hotness)
    list_bytes = degree[order] * indices.itemsize
    fits = int(np.searchsorted(np.cumsum(list_bytes), device_bytes, side="right"))
    hot = order[:fits]
    hot_start = np.full(num_nodes, -1, dtype=np.int64)
    starts = np.zeros(hot.size, dtype=np.int64)
    np.cumsum(degree[hot][:-1], out=starts[1:])
    hot_start[hot] = starts
    hot_degree = degree[hot]
    total = int(hot_degree.sum())
    # Position in `indices` of every replicated entry: list start + offset in the list.
    offset_in_list = np.arange(total, dtype=np.int64) - np.repeat(starts, hot_degree)
    hot_indices = indices[np.repeat(indptr[hot], hot_degree) + offset_in_list]
    return AdjacencyPlacement(hot_start=hot_start, hot_indices=hot_indices,
                              all_on_device=False)
