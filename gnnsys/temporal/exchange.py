"""Moving memory rows between workers and their owners: Sven's deduplicated exchange and
the naive per-occurrence baseline, behind one interface so both run the same training code.

    ids, rows, inverse = exchange.fetch(needed)   # rows[inverse] = per-occurrence rows
    ...forward / backward...
    exchange.write_back(vertex, key, memory, mem_ts, mail, mail_ts)

- `dedup` (Sven): the worker asks each owner once per unique vertex (one all-to-all of ids,
  one of rows) and writes back one row per unique vertex, the latest by (time, event).
- `naive` (TGL's MFG): one row per occurrence both ways; the owner still keeps the latest,
  so the final state is identical and only the traffic differs.

Which ids go to which owner is planned on the host (numpy); the ids, the rows and the
write plan then travel as tensors on the store's device (NCCL needs them there).

Read-after-write: every `fetch` must be followed by its `write_back` before the next
`fetch`, so batch t+1 never reads rows that batch t has not yet written to their owners
(prefetching samples ahead, never memory).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..mode_choices import MODE_CHOICES
from .memory import MemoryStore, latest_per_vertex

EXCHANGES = MODE_CHOICES["temporal.exchange"]


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
    def _owner_order(self, ids: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """Stable grouping of ids by owner: (order, rows per owner)."""
        owners = self.owner[ids]
        order = np.argsort(owners, kind="stable")
        return order, np.bincount(owners, minlength=self.comm.world_size).tolist()

    def _all_to_all(self, send: list[torch.Tensor],
                    recv_counts: list[int] | None = None) -> list[torch.Tensor]:
        before = (self.comm.stats.rows_sent, self.comm.stats.bytes_sent,
                  self.comm.stats.rows_recv, self.comm.stats.bytes_recv,
                  self.comm.stats.wait_s)
        recv = self.comm.all_to_all(send, recv_counts)
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
    def fetch(self, needed: np.ndarray, writes_back: bool = True
              ) -> tuple[np.ndarray, torch.Tensor, np.ndarray]:
        """Rows for the vertices in `needed` (with repeats): (unique ids, their rows on the
        store's device, inverse) with needed == ids[inverse]. Planning stays on the host;
        the requested ids cross to the device once. `writes_back=False`: a read that
        writes nothing after it (a prediction query)."""
        if self._awaiting_write_back:
            raise RuntimeError("fetch called before the previous batch's write_back: batch t+1 "
                               "would read memory that batch t has not written yet")
        self._awaiting_write_back = writes_back
        needed = np.asarray(needed, dtype=np.int64)
        ids, first, inverse = np.unique(needed, return_index=True, return_inverse=True)
        self.stats.occurrences += len(needed)
        self.stats.unique += len(ids)
        remote = int(np.count_nonzero(self.owner[needed] != self.comm.rank))
        request = ids if self.mode == "dedup" else needed
        order, counts = self._owner_order(request)
        sent = torch.from_numpy(request[order]).to(self.store.device)
        asked = self._all_to_all(list(sent.split(counts)))
        # each owner replies with one row per id asked: the reply counts are known
        replies = self._all_to_all([self.store.read(a) for a in asked], recv_counts=counts)
        rows = torch.cat(replies)                                  # request[order]'s rows
        # naive: each remote occurrence is an id out and a row back (counted at the asker)
        self._naive(remote, needed.itemsize + rows.shape[1] * rows.element_size())
        position = np.empty(len(request), dtype=np.int64)
        position[order] = np.arange(len(request))                  # request[i] -> its row
        if self.mode == "naive":    # occurrences of a vertex hold equal rows: keep the first
            first_rows = torch.from_numpy(position[first]).to(self.store.device)
            return ids, rows[first_rows], inverse
        return ids[order], rows, position[inverse]

    # ----------------------------------------------------------------------- write-back
    def write_back(self, vertex: np.ndarray, key: np.ndarray, memory: torch.Tensor,
                   mem_ts: torch.Tensor, mail: torch.Tensor, mail_ts: torch.Tensor) -> None:
        """Send updated state of the batch's true src/dst occurrences to their owners.
        vertex / key are host arrays; the state tensors live on the store's device. Which
        rows go where is planned on the host and crosses once, as one index and one
        (vertex, key) tensor."""
        vertex = np.asarray(vertex, dtype=np.int64)
        key = np.asarray(key, dtype=np.float64)
        remote = int(np.count_nonzero(self.owner[vertex] != self.comm.rank))
        pick = np.arange(len(vertex))
        if self.mode == "dedup":
            pick = latest_per_vertex(torch.from_numpy(vertex), torch.from_numpy(key)).numpy()
        order, counts = self._owner_order(vertex[pick])
        pick = pick[order]                                   # grouped by owner
        device = self.store.device
        at = torch.from_numpy(pick).to(device)
        vertex_key = torch.from_numpy(np.stack([vertex[pick].astype(np.float64), key[pick]], 1))
        vertex_key = vertex_key.to(device)
        rows = self.store.layout.pack_write(vertex_key[:, 0], vertex_key[:, 1],
                                            memory.detach()[at], mem_ts[at],
                                            mail.detach()[at], mail_ts[at])
        self._naive(remote, rows.shape[1] * rows.element_size(), rows_each=1)
        received = self._all_to_all(list(rows.split(counts)))
        self.store.apply_writes(torch.cat(received))
        self._awaiting_write_back = False
