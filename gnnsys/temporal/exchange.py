"""Moving memory rows between workers and their owners: Sven's deduplicated exchange and
the naive per-occurrence baseline, behind one interface so both run the same training code.

    ids, rows, inverse = exchange.fetch(needed)   # rows[inverse] = per-occurrence rows
    ...forward / backward...
    exchange.write_back(vertex, key, memory, mem_ts, mail, mail_ts)

- `dedup` (Sven): the worker asks each owner once per unique vertex (one all-to-all of ids,
  one of rows) and writes back one row per unique vertex, the latest by (time, event).
- `naive` (TGL's MFG): one row per occurrence both ways; the owner still keeps the latest,
  so the final state is identical and only the traffic differs.

Read-after-write: every `fetch` must be followed by its `write_back` before the next
`fetch`, so batch t+1 never reads rows that batch t has not yet written to their owners
(prefetching samples ahead, never memory).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .memory import MemoryStore, latest_per_vertex

EXCHANGES = ("dedup", "naive")


@dataclass
class ExchangeStats:
    """Traffic of the memory exchange alone (gradients are counted elsewhere)."""
    rows_sent: int = 0
    bytes_sent: int = 0
    rows_recv: int = 0
    bytes_recv: int = 0
    rows_naive: int = 0       # rows a naive exchange (one per occurrence) would have sent
    bytes_naive: int = 0
    occurrences: int = 0      # vertex occurrences the batches needed (what naive moves)
    unique: int = 0           # unique vertices per batch, summed (what dedup moves)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return dict(rows_sent=self.rows_sent, bytes_sent=self.bytes_sent,
                    rows_naive=self.rows_naive, bytes_naive=self.bytes_naive,
                    occurrences=self.occurrences, unique=self.unique,
                    exchange_s=round(self.seconds, 4))


class MemoryExchange:
    def __init__(self, comm, owner: np.ndarray, store: MemoryStore, mode: str = "dedup"):
        if mode not in EXCHANGES:
            raise ValueError(f"temporal.exchange {mode!r} is unknown; use one of "
                             f"{', '.join(EXCHANGES)}")
        self.comm, self.owner, self.store, self.mode = comm, owner, store, mode
        self.stats = ExchangeStats()
        self._awaiting_write_back = False

    def reset_stats(self) -> ExchangeStats:
        old, self.stats = self.stats, ExchangeStats()
        return old

    # ----------------------------------------------------------------------- helpers
    def _by_owner(self, ids: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """Stable grouping of ids by owner: (order, per-owner ids)."""
        owners = self.owner[ids]
        order = np.argsort(owners, kind="stable")
        counts = np.bincount(owners, minlength=self.comm.world_size)
        return order, np.split(ids[order], np.cumsum(counts)[:-1])

    def _all_to_all(self, send: list[torch.Tensor]) -> list[torch.Tensor]:
        before = (self.comm.stats.rows_sent, self.comm.stats.bytes_sent,
                  self.comm.stats.rows_recv, self.comm.stats.bytes_recv,
                  self.comm.stats.wait_s)
        recv = self.comm.all_to_all(send)
        s = self.comm.stats
        self.stats.rows_sent += s.rows_sent - before[0]
        self.stats.bytes_sent += s.bytes_sent - before[1]
        self.stats.rows_recv += s.rows_recv - before[2]
        self.stats.bytes_recv += s.bytes_recv - before[3]
        self.stats.seconds += s.wait_s - before[4]
        return recv

    def _naive(self, occurrences: int, row_bytes: int, rows_each: int = 2) -> None:
        if self.comm.world_size > 1:
            self.stats.rows_naive += rows_each * occurrences
            self.stats.bytes_naive += occurrences * row_bytes

    # ----------------------------------------------------------------------- fetch
    def fetch(self, needed: np.ndarray) -> tuple[np.ndarray, torch.Tensor, np.ndarray]:
        """Rows for the vertices in `needed` (with repeats): (unique ids, their rows,
        inverse) with needed == ids[inverse]."""
        if self._awaiting_write_back:
            raise RuntimeError("fetch called before the previous batch's write_back: batch t+1 "
                               "would read memory that batch t has not written yet")
        self._awaiting_write_back = True
        needed = np.asarray(needed, dtype=np.int64)
        ids, first, inverse = np.unique(needed, return_index=True, return_inverse=True)
        self.stats.occurrences += len(needed)
        self.stats.unique += len(ids)
        remote = int(np.count_nonzero(self.owner[needed] != self.comm.rank))
        request = ids if self.mode == "dedup" else needed
        order, per_owner = self._by_owner(request)
        asked = self._all_to_all([torch.from_numpy(p) for p in per_owner])
        replies = self._all_to_all([self.store.read(a.numpy()) for a in asked])
        rows = torch.empty((len(request), self.store.layout.read_width))
        rows[torch.from_numpy(order)] = torch.cat(replies)
        # naive: each remote occurrence is an id out and a row back (counted at the asker)
        self._naive(remote, needed.itemsize + rows.shape[1] * rows.element_size())
        if self.mode == "naive":
            rows = rows[torch.from_numpy(first)]   # occurrences of a vertex hold equal rows
        return ids, rows, inverse

    # ----------------------------------------------------------------------- write-back
    def write_back(self, vertex: np.ndarray, key: np.ndarray, memory: torch.Tensor,
                   mem_ts: torch.Tensor, mail: torch.Tensor, mail_ts: torch.Tensor) -> None:
        """Send updated state of the batch's true src/dst occurrences to their owners."""
        vertex = np.asarray(vertex, dtype=np.int64)
        key = np.asarray(key, dtype=np.float64)
        remote = int(np.count_nonzero(self.owner[vertex] != self.comm.rank))
        if self.mode == "dedup":
            keep = latest_per_vertex(vertex, key)
            vertex, key = vertex[keep], key[keep]
            k = torch.from_numpy(keep)
            memory, mem_ts, mail, mail_ts = memory[k], mem_ts[k], mail[k], mail_ts[k]
        rows = self.store.layout.pack_write(torch.from_numpy(vertex.astype(np.float64)),
                                            torch.from_numpy(key), memory.detach(), mem_ts,
                                            mail.detach(), mail_ts)
        order, per_owner = self._by_owner(vertex)
        rows = rows[torch.from_numpy(order)]
        self._naive(remote, rows.shape[1] * rows.element_size(), rows_each=1)
        counts = [len(p) for p in per_owner]
        received = self._all_to_all(list(rows.split(counts)))
        self.store.apply_writes(torch.cat(received))
        self._awaiting_write_back = False
