"""Sparse (CSR) node features: bag-of-words inputs kept as their nonzeros end to end.

A feature matrix is either a dense float32 ndarray or a `scipy.sparse.csr_matrix`
(float32 values, sorted column indices): the graph, the fused sampler, the feature store,
the wire and full-graph workers all keep a CSR matrix CSR. The model's first layer
multiplies a torch sparse CSR batch by its dense weights (`torch.sparse` through F.linear;
full-graph mode projects before it aggregates); every later layer is dense.
Here: the conversions between numpy/scipy and torch, and the row operations the store and
the layer-wise inference need, each for both representations.
"""
from __future__ import annotations

import logging
import warnings

import numpy as np
import scipy.sparse as sp
import torch

log = logging.getLogger(__name__)


def is_sparse(x) -> bool:
    """A scipy sparse matrix or a torch sparse tensor (CSR or COO)."""
    return sp.issparse(x) or (isinstance(x, torch.Tensor) and x.layout != torch.strided)


def as_csr(x) -> sp.csr_matrix:
    """`x` as the one CSR form features use: float32 values, sorted, no duplicates."""
    x = sp.csr_matrix(x, dtype=np.float32)
    x.sum_duplicates()             # also sorts each row's columns
    return x


def densified(x, why: str = "") -> np.ndarray:
    """Dense float32 rows of `x` (a dense `x` as it is); `why` logs the densification."""
    if not sp.issparse(x):
        return x
    if why:
        log.warning("densifying %dx%d sparse features (%.2f%% nonzero, %d MB dense): %s",
                    x.shape[0], x.shape[1], 100 * x.nnz / max(1, x.shape[0] * x.shape[1]),
                    x.shape[0] * x.shape[1] * 4 >> 20, why)
    return np.asarray(x.toarray(), dtype=np.float32)


def feature_bytes(x) -> int:
    """Bytes the features take in memory (CSR: values + column indices + row pointers)."""
    if sp.issparse(x):
        return int(x.data.nbytes + x.indices.nbytes + x.indptr.nbytes)
    return int(np.asarray(x).nbytes)


def csr_tensor(x: sp.csr_matrix) -> torch.Tensor:
    """A torch sparse CSR tensor over the arrays of `x` (no copy of values or indices)."""
    index = torch.from_numpy(np.ascontiguousarray(x.indices))
    rows = torch.from_numpy(np.ascontiguousarray(x.indptr, dtype=x.indices.dtype))
    with warnings.catch_warnings():       # "sparse CSR support is in beta": once is enough
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(rows, index, torch.from_numpy(x.data), size=x.shape)


def tensor_csr(t: torch.Tensor) -> sp.csr_matrix:
    """The scipy view of a CPU torch sparse CSR tensor (no copy)."""
    return sp.csr_matrix((t.values().numpy(), t.col_indices().numpy(),
                          t.crow_indices().numpy()), shape=tuple(t.shape))


def first_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """Rows [0, n) of a dense or sparse CSR tensor (CSR: a view of the same arrays)."""
    if t.layout == torch.strided:
        return t[:n]
    crow = t.crow_indices()[:n + 1]
    end = int(crow[-1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, t.col_indices()[:end], t.values()[:end],
                                       size=(n, t.shape[1]))


def row_tensor(x, ids) -> torch.Tensor:
    """Rows `ids` of `x` (a dense tensor or a CSR matrix) as a tensor of the same kind."""
    if sp.issparse(x):
        return csr_tensor(x[np.asarray(ids)])
    return x[ids]


def stacked(top, bottom):
    """Rows of `top` then of `bottom` (both CSR matrices, or both dense tensors)."""
    if sp.issparse(top):
        return as_csr(sp.vstack([top, bottom], format="csr"))
    return torch.cat([top, torch.as_tensor(bottom)])


def stacked_rows(top, bottom, ids) -> torch.Tensor:
    """`row_tensor(stacked(top, bottom), ids)` without building the stack, which would be
    a second copy of `top` (layer-wise inference: a worker's own rows, then its halo).
    `ids` name every row of `top` before any row of `bottom`, as ascending ids do."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    in_top = int((ids < top.shape[0]).sum())
    if in_top and int(ids[:in_top].max()) >= top.shape[0]:
        raise ValueError("stacked_rows: ids must list rows of the first part before rows "
                         "of the second")
    from_top, from_bottom = ids[:in_top], ids[in_top:] - top.shape[0]
    if sp.issparse(top):
        return csr_tensor(sp.vstack([top[from_top.numpy()], bottom[from_bottom.numpy()]],
                                    format="csr"))
    out = top.new_empty((len(ids), top.shape[1]))
    torch.index_select(top, 0, from_top, out=out[:in_top])
    torch.index_select(torch.as_tensor(bottom), 0, from_bottom, out=out[in_top:])
    return out


def with_rows(x: sp.csr_matrix, positions: np.ndarray, rows: sp.csr_matrix) -> sp.csr_matrix:
    """`x` with its empty rows at ascending `positions` replaced by `rows`, in one merge."""
    lengths = np.zeros(x.shape[0], dtype=np.int64)
    lengths[positions] = np.diff(rows.indptr)
    indptr = np.zeros(x.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    spread = sp.csr_matrix((rows.data, rows.indices, indptr), shape=x.shape)
    return as_csr(x + spread)            # rows are disjoint: the sum is a merge


def head_rows(x, n: int):
    """Rows [0, n) of a dense array or CSR matrix, as a view of the same memory."""
    if not sp.issparse(x):
        return x[:n]
    end = int(x.indptr[n])
    return sp.csr_matrix((x.data[:end], x.indices[:end], x.indptr[:n + 1]),
                         shape=(n, x.shape[1]), copy=False)
