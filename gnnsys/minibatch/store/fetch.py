"""Fetch feature rows of remote vertices from their owners: one exchange per batch.

Every rank calls `fetch` the same number of times, in the same order (one call per
batch; ranks with nothing to ask still take part, since they may have to answer).
A call is two all-to-alls on the fetch group (SALIENT++'s counts -> ids -> rows):
the requested ids go to their owners with their counts, and the rows come back in the
same order, so the reply needs no counts round of its own.
"""
from __future__ import annotations

import numpy as np
import torch

from partition.format import PartitionBook


class RemoteFetcher:
    """Ask owners for rows; answer peers' asks from this worker's own rows."""

    def __init__(self, comm, book: PartitionBook, part: int, local_rows: np.ndarray):
        self.comm, self.book, self.part = comm, book, part
        self.local_rows = local_rows
        self.lo, self.hi = book.range(part)
        self.rows_served = 0       # rows this worker sent to peers

    def fetch(self, ids: np.ndarray) -> np.ndarray:
        """Rows [len(ids), F] of `ids` (global ids none of which this worker owns)."""
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
        replies = []
        for r, want in enumerate(asked):
            local = want.numpy() - self.lo
            if local.size and (local.min() < 0 or local.max() >= self.hi - self.lo):
                raise ValueError(f"worker {r} asked worker {self.part} for ids outside its "
                                 f"range [{self.lo}, {self.hi}); the partitions differ")
            replies.append(torch.from_numpy(np.ascontiguousarray(self.local_rows[local])))
        got = self.comm.all_to_all(replies, recv_counts=[len(t) for t in send])
        rows = np.empty((ids.size, dim), dtype=dtype)
        if ids.size:
            rows[order] = torch.cat(got).numpy()
        self.rows_served += sum(len(a) for r, a in enumerate(asked) if r != self.part)
        return rows
