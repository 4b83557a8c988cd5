"""Partition bookkeeping for full-graph training: 1-hop halos, node classes, index lists.

For partition k of a vertex partition, `build_halo_plan` derives everything a worker
needs to run message passing on its share of the graph:

- local ids in the order [central | marginal | halo]: central nodes have only local
  in-neighbours, marginal nodes have at least one remote one, halo slots hold copies of
  the remote in-neighbours (ordered by owner, then global id);
- `send_idx[p]`: my inner rows that partition p keeps as halo (in p's slot order), and
  `recv_ranges[p]`: the halo slots p fills;
- the aggregation operator split into a central part and a marginal part (local and halo
  columns), with edge weights from *global* degrees so that partition-local aggregation
  equals full-graph aggregation (GCN: 1/sqrt(d_out(u) d_in(v)) with self-loops; SAGE:
  mean over in-neighbours);
- forward aggregation scores beta_u of each sent row (ALGORITHMS.md 4.3.4).

Every worker holds the whole graph and derives its own plan, so index lists agree
across workers without being exchanged. Depends on numpy/scipy/torch and gnnsys.graph.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from gnnsys.graph import Graph

ARCHS = ("gcn", "sage")


# ----------------------------------------------------------------------------- weights
@dataclass
class WeightedEdges:
    """The aggregation operator of the whole graph as weighted (src -> dst) edges."""
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray         # float32


def aggregation_edges(graph: Graph, arch: str) -> WeightedEdges:
    """Edges and weights of the full-graph aggregation, from global degrees.

    GCN: self-loops removed then added, weight 1/sqrt(d_out(u) d_in(v)).
    SAGE: self-loops removed, weight 1/d_in(v) (the mean); the root term is separate."""
    if arch not in ARCHS:
        raise ValueError(f"full-graph mode supports model.arch in {ARCHS}, got '{arch}'")
    n = graph.num_nodes
    dst = np.repeat(np.arange(n, dtype=np.int64), graph.degree())
    src = graph.indices.astype(np.int64)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    if arch == "gcn":
        loops = np.arange(n, dtype=np.int64)
        src, dst = np.concatenate([src, loops]), np.concatenate([dst, loops])
        d_in = np.bincount(dst, minlength=n).astype(np.float64)
        d_out = np.bincount(src, minlength=n).astype(np.float64)
        weight = 1.0 / np.sqrt(d_out[src] * d_in[dst])
    else:
        d_in = np.maximum(np.bincount(dst, minlength=n), 1).astype(np.float64)
        weight = 1.0 / d_in[dst]
    return WeightedEdges(src, dst, weight.astype(np.float32))


# ----------------------------------------------------------------------------- operators
def _torch_csr(matrix: sp.csr_matrix) -> torch.Tensor:
    matrix = matrix.tocsr()
    matrix.sort_indices()
    with warnings.catch_warnings():   # "sparse CSR support is in beta": known, wanted
        warnings.simplefilter("ignore")
        return torch.sparse_csr_tensor(
            torch.from_numpy(matrix.indptr.astype(np.int64)),
            torch.from_numpy(matrix.indices.astype(np.int64)),
            torch.from_numpy(matrix.data.astype(np.float32)),
            size=matrix.shape, check_invariants=False)


@dataclass
class SparseOperator:
    """A sparse matrix and its transpose (for backward), both torch CSR."""
    forward: torch.Tensor
    transpose: torch.Tensor

    @classmethod
    def from_scipy(cls, matrix) -> "SparseOperator":
        matrix = sp.csr_matrix(matrix, dtype=np.float32)
        return cls(_torch_csr(matrix), _torch_csr(matrix.T.tocsr()))

    @property
    def shape(self):
        return tuple(self.forward.shape)

    @property
    def nnz(self) -> int:
        return int(self.forward.values().numel())


@dataclass
class HaloPlan:
    """One worker's view of the partitioned graph (see the module docstring)."""
    rank: int
    world_size: int
    inner_gid: np.ndarray            # global ids of local rows [central | marginal]
    halo_gid: np.ndarray             # global ids of halo slots
    halo_owner: np.ndarray           # owning partition of each halo slot
    num_central: int
    send_idx: list                   # [peer] -> int64 local inner rows to send
    recv_ranges: list                # [peer] -> (start, end) halo slots filled by peer
    send_scores: list                # [peer] -> float64 forward beta of each sent row
    central: SparseOperator          # [central, inner]
    marginal_local: SparseOperator   # [marginal, inner]
    marginal_halo: SparseOperator    # [marginal, halo]

    @property
    def num_inner(self) -> int:
        return len(self.inner_gid)

    @property
    def num_marginal(self) -> int:
        return self.num_inner - self.num_central

    @property
    def num_halo(self) -> int:
        return len(self.halo_gid)

    def recv_count(self, peer: int) -> int:
        start, end = self.recv_ranges[peer]
        return end - start

    def local_index(self, global_ids: np.ndarray) -> np.ndarray:
        """Local rows of the given global ids that this partition owns (others dropped)."""
        position = np.searchsorted(self._sorted_gid, global_ids)
        position = np.minimum(position, len(self._sorted_gid) - 1)
        owned = self._sorted_gid[position] == global_ids if len(self._sorted_gid) else \
            np.zeros(len(global_ids), bool)
        return self._sorted_order[position[owned]]

    def __post_init__(self):
        self._sorted_order = np.argsort(self.inner_gid, kind="stable")
        self._sorted_gid = self.inner_gid[self._sorted_order]

    def summary(self) -> dict:
        return {"inner": self.num_inner, "central": self.num_central,
                "marginal": self.num_marginal, "halo": self.num_halo,
                "send_rows": int(sum(len(s) for s in self.send_idx))}


def build_halo_plan(graph: Graph, parts: np.ndarray, rank: int, world_size: int,
                    arch: str, edges: WeightedEdges | None = None) -> HaloPlan:
    """Derive partition `rank`'s plan from the global vertex partition `parts` [N]."""
    parts = np.asarray(parts, dtype=np.int64)
    n = graph.num_nodes
    if parts.shape != (n,) or (n and (parts.min() < 0 or parts.max() >= world_size)):
        raise ValueError(f"partition vector must have {n} entries in [0, {world_size}); "
                         f"got shape {parts.shape}")
    edges = edges or aggregation_edges(graph, arch)
    src_part, dst_part = parts[edges.src], parts[edges.dst]

    # edges into my nodes, and which of them cross from another partition
    mine = dst_part == rank
    src, dst, weight = edges.src[mine], edges.dst[mine], edges.weight[mine]
    remote = src_part[mine] != rank
    inner = np.flatnonzero(parts == rank)
    is_marginal = np.zeros(n, bool)
    is_marginal[dst[remote]] = True
    central_gid = inner[~is_marginal[inner]]
    marginal_gid = inner[is_marginal[inner]]
    inner_gid = np.concatenate([central_gid, marginal_gid])
    halo_candidates = np.unique(src[remote])
    halo_order = np.lexsort((halo_candidates, parts[halo_candidates]))
    halo_gid = halo_candidates[halo_order]
    halo_owner = parts[halo_gid]

    # global id -> local column in [inner | halo]
    local = np.full(n, -1, dtype=np.int64)
    local[inner_gid] = np.arange(len(inner_gid))
    local[halo_gid] = len(inner_gid) + np.arange(len(halo_gid))
    rows, cols = local[dst], local[src]
    n_inner, n_central, n_halo = len(inner_gid), len(central_gid), len(halo_gid)
    full = sp.csr_matrix((weight, (rows, cols)), shape=(n_inner, n_inner + n_halo))
    central = full[:n_central, :n_inner]
    if full[:n_central, n_inner:].nnz:
        raise AssertionError("a central node has a halo in-neighbour; the node classes are wrong")
    marginal = full[n_central:]

    # what I send: my nodes with an out-edge into partition p, in p's halo slot order
    out_cut = (src_part == rank) & (dst_part != rank)
    key = dst_part[out_cut] * n + edges.src[out_cut]
    keys, inverse = np.unique(key, return_inverse=True)
    scores = np.bincount(inverse, weights=edges.weight[out_cut].astype(np.float64))
    key_peer, key_gid = keys // n, keys % n
    send_idx, send_scores, recv_ranges = [], [], []
    owner_bounds = np.searchsorted(halo_owner, np.arange(world_size + 1))
    for peer in range(world_size):
        sel = key_peer == peer
        send_idx.append(local[key_gid[sel]])
        send_scores.append(scores[sel])
        recv_ranges.append((int(owner_bounds[peer]), int(owner_bounds[peer + 1])))
    return HaloPlan(
        rank=rank, world_size=world_size, inner_gid=inner_gid, halo_gid=halo_gid,
        halo_owner=halo_owner, num_central=n_central, send_idx=send_idx,
        recv_ranges=recv_ranges, send_scores=send_scores,
        central=SparseOperator.from_scipy(central),
        marginal_local=SparseOperator.from_scipy(marginal[:, :n_inner]),
        marginal_halo=SparseOperator.from_scipy(marginal[:, n_inner:]))


# ----------------------------------------------------------------------------- partition
def partition_vertices(graph: Graph, num_parts: int, method: str = "metis",
                       seed: int = 0) -> np.ndarray:
    """Vertex -> partition [N] int64, from the shared partitioners (METIS, random, Fennel
    stream) of the `partition` package, which balance training nodes across parts."""
    if num_parts == 1:
        return np.zeros(graph.num_nodes, dtype=np.int64)
    from partition.build import assign_parts
    return np.asarray(assign_parts(graph, method, num_parts, seed=seed), dtype=np.int64)
