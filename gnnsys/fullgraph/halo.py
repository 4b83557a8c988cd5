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
- forward aggregation scores beta_u of each sent row (../shared/ALGORITHMS.md 4.3.4).

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

# the edge weights a full-graph model aggregates with (its `aggregation`): GCN's
# normalisation, SAGE's mean
AGGREGATIONS = ("gcn", "sage")


# ----------------------------------------------------------------------------- weights
CHUNK_EDGES = 1 << 23      # edges per streamed chunk: bounds the int64 temporaries (~300 MB)


@dataclass
class AggregationWeights:
    """Global degrees that fix every edge weight of the full-graph aggregation.

    GCN: self-loops removed then added, weight 1/sqrt(d_out(u) d_in(v)).
    SAGE: self-loops removed, weight 1/d_in(v) (the mean); the root term is separate."""
    arch: str
    d_in: np.ndarray           # float64 [N]
    d_out: np.ndarray          # float64 [N]

    def weight(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        if self.arch == "gcn":
            return (1.0 / np.sqrt(self.d_out[src] * self.d_in[dst])).astype(np.float32)
        return (1.0 / self.d_in[dst]).astype(np.float32)


def _edge_chunks(graph: Graph, chunk_edges: int | None = None):
    """(src, dst) int64 chunks of the CSR's edges with self-loops dropped, in row order."""
    indptr, n = graph.indptr, graph.num_nodes
    chunk_edges = chunk_edges or CHUNK_EDGES
    row = 0
    while row < n:
        end = int(np.searchsorted(indptr, indptr[row] + chunk_edges, side="right")) - 1
        end = min(max(end, row + 1), n)
        dst = np.repeat(np.arange(row, end, dtype=np.int64), np.diff(indptr[row:end + 1]))
        src = np.asarray(graph.indices[indptr[row]:indptr[end]], dtype=np.int64)
        keep = src != dst
        yield src[keep], dst[keep]
        row = end


def aggregation_weights(graph: Graph, arch: str) -> AggregationWeights:
    """The degrees behind the full-graph aggregation weights (one streamed pass); `arch`:
    the aggregation, one of AGGREGATIONS."""
    if arch not in AGGREGATIONS:
        raise ValueError(f"the full-graph aggregation is one of {AGGREGATIONS} (a model.arch's "
                         f"`aggregation`), got '{arch}'")
    n = graph.num_nodes
    d_in, d_out = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for src, dst in _edge_chunks(graph):
        d_in += np.bincount(dst, minlength=n)
        d_out += np.bincount(src, minlength=n)
    if arch == "gcn":                         # the added self-loop counts on both sides
        d_in, d_out = d_in + 1, d_out + 1
    else:
        d_in = np.maximum(d_in, 1)            # an isolated node aggregates nothing
    return AggregationWeights(arch, d_in.astype(np.float64), d_out.astype(np.float64))


def _partition_edges(graph: Graph, parts: np.ndarray, rank: int, weights: AggregationWeights):
    """Stream the edges once; keep those into `rank` and those leaving it.

    Returns ((src, dst, weight) of edges whose destination is mine, self-loops included for
    GCN; (src, dst_part, weight) of edges from my nodes into other partitions)."""
    into, out = [], []
    for src, dst in _edge_chunks(graph):
        src_part, dst_part = parts[src], parts[dst]
        mine = dst_part == rank
        into.append((src[mine], dst[mine]))
        leaving = (src_part == rank) & ~mine
        out.append((src[leaving], dst[leaving], dst_part[leaving]))
    if weights.arch == "gcn":
        loops = np.flatnonzero(parts == rank)
        into.append((loops, loops))
    src = np.concatenate([c[0] for c in into])
    dst = np.concatenate([c[1] for c in into])
    out_src = np.concatenate([c[0] for c in out])
    out_dst = np.concatenate([c[1] for c in out])
    out_part = np.concatenate([c[2] for c in out])
    return ((src, dst, weights.weight(src, dst)),
            (out_src, out_part, weights.weight(out_src, out_dst)))


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

    def to(self, device) -> "SparseOperator":
        return SparseOperator(self.forward.to(device), self.transpose.to(device))

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

    def to(self, device) -> "HaloPlan":
        """Move the aggregation operators to `device` (index lists stay numpy)."""
        for name in ("central", "marginal_local", "marginal_halo"):
            setattr(self, name, getattr(self, name).to(device))
        return self

    def summary(self) -> dict:
        return {"inner": self.num_inner, "central": self.num_central,
                "marginal": self.num_marginal, "halo": self.num_halo,
                "send_rows": int(sum(len(s) for s in self.send_idx))}


def inner_plan(parts: np.ndarray, rank: int, world_size: int) -> HaloPlan:
    """Partition `rank`'s rows alone, for a model that reads no neighbour's rows: no
    halo, nothing sent, empty aggregation operators."""
    inner_gid = np.flatnonzero(np.asarray(parts) == rank)
    n = len(inner_gid)
    empty = SparseOperator.from_scipy(sp.csr_matrix((n, n), dtype=np.float32))
    none = np.zeros(0, np.int64)
    return HaloPlan(rank=rank, world_size=world_size, inner_gid=inner_gid, halo_gid=none,
                    halo_owner=none, num_central=n, send_idx=[none] * world_size,
                    recv_ranges=[(0, 0)] * world_size,
                    send_scores=[np.zeros(0)] * world_size, central=empty,
                    marginal_local=SparseOperator.from_scipy(sp.csr_matrix((0, n))),
                    marginal_halo=SparseOperator.from_scipy(sp.csr_matrix((0, 0))))


def build_halo_plan(graph: Graph, parts: np.ndarray, rank: int, world_size: int,
                    arch: str, weights: AggregationWeights | None = None) -> HaloPlan:
    """Derive partition `rank`'s plan from the global vertex partition `parts` [N].

    Memory is O(E/K + cut) beyond the graph: the edges are streamed in chunks."""
    parts = np.asarray(parts, dtype=np.int64)
    n = graph.num_nodes
    if parts.shape != (n,) or (n and (parts.min() < 0 or parts.max() >= world_size)):
        raise ValueError(f"partition vector must have {n} entries in [0, {world_size}); "
                         f"got shape {parts.shape}")
    weights = weights or aggregation_weights(graph, arch)
    (src, dst, weight), (out_src, out_part, out_weight) = _partition_edges(
        graph, parts, rank, weights)

    # which in-edges of my nodes cross from another partition
    remote = parts[src] != rank
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

    del src, dst, weight, rows, cols
    # what I send: my nodes with an out-edge into partition p, in p's halo slot order;
    # the summed weights of those edges are the receivers' aggregation scores
    keys, inverse = np.unique(out_part * n + out_src, return_inverse=True)
    scores = np.bincount(inverse, weights=out_weight.astype(np.float64))
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
