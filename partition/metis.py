"""METIS partitioning through pymetis, balancing training nodes, other nodes and edges.

SALIENT++ balances several vertex weights at once (METIS multi-constraint). We use three
constraints: a training-node indicator (each worker gets about the same number of seeds
per epoch, so all ranks run the same number of iterations without idling), an indicator
of the other nodes (equal feature storage), and the degree (equal sampling work and CSR
size). METIS needs a symmetric graph without self loops; `symmetrize` makes one.

Graphs over COARSEN_ABOVE_EDGES edges are first shrunk by size-constrained label
propagation (`coarsen.py`): METIS partitions the weighted cluster graph, whose vertex
weights are the clusters' summed constraints and whose edge weights count the vertex
edges between clusters, and each vertex takes its cluster's part. That keeps METIS's
memory proportional to the cluster graph, not the input.

Depends on numpy, scipy, numba, pymetis and `common.memory` only.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from common.memory import available_memory_bytes

from .coarsen import contract, label_propagation, propagate
from .format import PartitionError

COARSEN_CHOICES = ("auto", "always", "never")
# Above this many directed edges `coarsen="auto"` clusters first. A fixed size, not the
# free memory, so a graph gets the same partition on every machine.
COARSEN_ABOVE_EDGES = 20_000_000
# Clusters hold at most max(COARSE_MIN_SIZE, N / COARSE_CLUSTERS) vertices: enough clusters
# for METIS to balance K parts finely, few enough that it runs in seconds.
COARSE_CLUSTERS = 50_000
COARSE_MIN_SIZE = 2


def symmetrize(indptr: np.ndarray, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR of A + A^T with self loops removed (the undirected graph METIS expects)."""
    n = indptr.size - 1
    adj = sp.csr_matrix((np.ones(indices.size, dtype=np.int8), indices, indptr), shape=(n, n))
    sym = (adj + adj.T).tocsr()
    sym.setdiag(0)
    sym.eliminate_zeros()
    return sym.indptr.astype(np.int64), sym.indices.astype(np.int64)


def is_symmetric(indptr: np.ndarray, indices: np.ndarray) -> bool:
    n = indptr.size - 1
    adj = sp.csr_matrix((np.ones(indices.size, dtype=np.int8), indices, indptr), shape=(n, n))
    return (adj != adj.T).nnz == 0 and adj.diagonal().sum() == 0


# Peak memory of a METIS run per directed edge: the symmetry check, pymetis' int64 copies
# and METIS's coarsening hierarchy. Measured: over 13 GB and still growing after 40 s
# on 124M edges (synthetic-products), so this errs high.
METIS_BYTES_PER_EDGE = 150


def metis_parts(indptr: np.ndarray, indices: np.ndarray, num_parts: int,
                train_idx: np.ndarray | None = None, seed: int = 0,
                imbalance: float = 0.03, check_memory: bool = True,
                coarsen: str = "auto") -> np.ndarray:
    """Part id (int32, in [0, num_parts)) of every vertex.

    imbalance: allowed load imbalance per constraint (0.03 = METIS's default ufactor 30).
    check_memory: refuse up front (PartitionError naming the alternatives) when the METIS
    run would not fit in the memory available now, instead of swapping or being killed.
    coarsen: "auto" (label propagation first above COARSEN_ABOVE_EDGES edges), "always"
    or "never".
    """
    n = indptr.size - 1
    if num_parts < 1:
        raise ValueError(f"num_parts must be >= 1, got {num_parts}")
    if coarsen not in COARSEN_CHOICES:
        raise ValueError(f"coarsen must be one of {', '.join(COARSEN_CHOICES)}, "
                         f"got {coarsen!r}")
    if num_parts == 1:
        return np.zeros(n, dtype=np.int32)
    if not is_symmetric(indptr, indices):
        indptr, indices = symmetrize(indptr, indices)
    is_train = np.zeros(n, dtype=bool)
    if train_idx is not None and len(train_idx):
        is_train[np.asarray(train_idx)] = True
    # METIS rejects all-zero constraints, so the train column is only used when present.
    columns = [is_train, ~is_train] if is_train.any() else [np.ones(n, dtype=bool)]
    # +1 so isolated vertices still carry weight in the degree constraint.
    columns.append(np.diff(indptr) + 1)
    vweights = np.stack(columns, axis=1).astype(np.int64)

    if coarsen == "always" or (coarsen == "auto" and indices.size > COARSEN_ABOVE_EDGES):
        max_size = max(COARSE_MIN_SIZE, -(-n // COARSE_CLUSTERS))
        cluster = label_propagation(indptr, indices, max_size, seed=seed)
        num_clusters = int(cluster.max()) + 1
        c_indptr, c_indices, c_weights = contract(indptr, indices, cluster, num_clusters)
        c_vweights = np.zeros((num_clusters, vweights.shape[1]), dtype=np.int64)
        np.add.at(c_vweights, cluster, vweights)
        c_parts = _run_metis(c_indptr, c_indices, c_vweights, num_parts, seed, imbalance,
                             check_memory, eweights=c_weights)
        return refine(indptr, indices, c_parts[cluster], num_parts, imbalance, seed)
    return _run_metis(indptr, indices, vweights, num_parts, seed, imbalance, check_memory)


def refine(indptr, indices, parts, num_parts, imbalance, seed) -> np.ndarray:
    """Label propagation over the K parts: boundary vertices move to the part holding most
    of their neighbours while it stays under (1 + imbalance) x N / K vertices, and parts
    over that size shed boundary vertices. This undoes some of the cut and imbalance that
    moving whole clusters forces."""
    n = indptr.size - 1
    labels = parts.astype(np.int64)
    sizes = np.zeros(n, dtype=np.int64)
    sizes[:num_parts] = np.bincount(labels, minlength=num_parts)
    cap = int(np.ceil(n / num_parts * (1 + imbalance)))
    order = np.random.default_rng(seed + 1).permutation(n)
    propagate(np.asarray(indptr), np.asarray(indices), order, labels, sizes, cap, 2)
    return labels.astype(np.int32)


def _run_metis(indptr, indices, vweights, num_parts, seed, imbalance, check_memory,
               eweights=None) -> np.ndarray:
    try:
        import pymetis
    except ImportError as err:              # e.g. a GPU image without it
        raise PartitionError("partition.method: metis needs the pymetis package, which is "
                             "not installed here; pip install pymetis, or set "
                             "partition.method: stream (needs nothing more)") from err

    need, have = METIS_BYTES_PER_EDGE * indices.size, available_memory_bytes()
    if check_memory and need > have:
        raise PartitionError(f"METIS on {indices.size:,} edges needs about {need / 2**30:.0f} GiB "
                             f"but {have / 2**30:.0f} GiB are available; use the streaming partitioner "
                             "(partition.method: stream), or coarsen first "
                             "(metis_parts(..., coarsen='always'))")
    idx_t = pymetis.zero_copy_dtype()
    options = pymetis.Options(seed=seed, ufactor=max(1, int(round(imbalance * 1000))))
    result = pymetis.part_graph(
        num_parts, pymetis.CSRAdjacency(indptr.astype(idx_t), indices.astype(idx_t)),
        vweights=vweights.astype(idx_t).ravel(),
        eweights=None if eweights is None else np.asarray(eweights).astype(idx_t),
        options=options)
    return np.asarray(result.vertex_part, dtype=np.int32)
