"""Fetch feature rows of remote vertices from their owners: one exchange per batch.

Every rank calls `fetch` the same number of times, in the same order (one call per
batch; ranks with nothing to ask still take part, since they may have to answer).
A call is two all-to-alls on the fetch group (SALIENT++'s counts -> ids -> rows):
the requested ids go to their owners with their counts, and the rows come back in the
same order, so the reply needs no counts round of its own. Sparse (CSR) rows travel as
their nonzeros: the reply is each row's length (int32, the indptr) and then its
(column, value) pairs (int32 + float32), so a row costs 4 + 8 * nnz bytes, not 4 * F.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from partition.format import PartitionBook


class RemoteFetcher:
    """Ask owners for rows; answer peers' asks from this worker's own rows."""

    def __init__(self, comm, book: PartitionBook, part: int, local_rows: np.ndarray):
        self.comm, self.book, self.part = comm, book, part
        self.local_rows = local_rows
        self.lo, self.hi = book.range(part)
        self.rows_served = 0       # rows this worker sent to peers
        self.row_bytes_recv = 0    # feature bytes (rows, or lengths + nonzeros) from peers

    def fetch(self, ids: np.ndarray):
        """Rows [len(ids), F] of `ids` (global ids none of which this worker owns): an
        ndarray, or a CSR matrix when this worker's rows are CSR."""
        ids = np.asarray(ids, dtype=np.int64)
        owners = self.book.owner(ids)
        if ids.size and np.any(owners == self.part):
            raise ValueError(f"worker {self.part} asked to fetch rows it owns itself; "
                             "the feature store's row map is inconsistent")
        order = np.argsort(owners, kind="stable")
        bounds = np.searchsorted(owners[order], np.arange(self.book.num_parts + 1))
        sorted_ids = ids[order]
        send = [torch.from_numpy(sorted_ids[bounds[r]:bounds[r + 1]])
                for r in range(self.book.num_parts)]
        asked = self.comm.all_to_all(send)
        dim, dtype = self.local_rows.shape[1], self.local_rows.dtype
        replies, sparse = [], sp.issparse(self.local_rows)
        for r, want in enumerate(asked):
            local = want.numpy() - self.lo
            if local.size and (local.min() < 0 or local.max() >= self.hi - self.lo):
                raise ValueError(f"worker {r} asked worker {self.part} for ids outside its "
                                 f"range [{self.lo}, {self.hi}); the partitions differ")
            rows = self.local_rows[local]
            replies.append(rows if sparse else torch.from_numpy(np.ascontiguousarray(rows)))
        self.rows_served += sum(len(a) for r, a in enumerate(asked) if r != self.part)
        if sparse:
            sorted_rows = self._exchange_sparse(replies, [len(t) for t in send], dim)
            back = np.empty_like(order)
            back[order] = np.arange(order.size)      # row i of ids is sorted row back[i]
            return sorted_rows[back]
        got = self.comm.all_to_all(replies, recv_counts=[len(t) for t in send])
        self.row_bytes_recv += sum(t.numel() * t.element_size()
                                   for r, t in enumerate(got) if r != self.part)
        rows = np.empty((ids.size, dim), dtype=dtype)
        if ids.size:
            rows[order] = torch.cat(got).numpy()
        return rows

    def _exchange_sparse(self, replies: list, num_asked: list, dim: int) -> sp.csr_matrix:
        """Send each peer its CSR rows as lengths, then (column, value bits) int32 pairs;
        returns the rows received, in owner order, as one CSR matrix."""
        lengths = self.comm.all_to_all(
            [torch.from_numpy(np.diff(r.indptr).astype(np.int32)) for r in replies],
            recv_counts=num_asked)
        pairs = self.comm.all_to_all(
            [torch.from_numpy(np.stack([r.indices.astype(np.int32),
                                        r.data.astype(np.float32).view(np.int32)], 1))
             for r in replies],
            recv_counts=[int(n.sum()) for n in lengths])
        self.row_bytes_recv += sum(t.numel() * t.element_size()
                                   for received in (lengths, pairs)
                                   for r, t in enumerate(received) if r != self.part)
        length = torch.cat(lengths).numpy()
        indptr = np.zeros(length.size + 1, dtype=np.int64)
        np.cumsum(length, out=indptr[1:])
        pair = torch.cat(pairs).numpy()
        return sp.csr_matrix((np.ascontiguousarray(pair[:, 1]).view(np.float32),
                              np.ascontiguousarray(pair[:, 0]), indptr),
                             shape=(length.size, dim))
