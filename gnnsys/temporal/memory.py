"""Owner-partitioned temporal state: each worker stores memory, memory timestamp, mailbox
(a ring of `mailbox_size` mails with their timestamps) and static node features of the
vertices it owns, and packs / applies the rows the exchange moves.

Rows are float32 so one `all_to_all` moves them; float64 timestamps and ids ride along
bit-exactly as two float32 words each (a `view`, not a cast), so Unix times keep their
seconds and the single-process and distributed runs see identical values.

    read row  = [memory M | mailbox m*D | mem_ts 2 | mail_ts 2m | node_feat F]
    write row = [vertex 2 | key 2 | memory M | mem_ts 2 | mail D | mail_ts 2]

A write row carries `key` = 2 * event id + role (0 src, 1 dst): the owner keeps the row
with the largest key per vertex, i.e. the latest event by time then event order, so the
result does not depend on which worker's rows arrive first.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

NO_MAIL = -1.0   # mail timestamp of an empty mailbox slot (times are >= 0, relative to t0)


def f64_to_words(x: torch.Tensor) -> torch.Tensor:
    """[n] float64 -> [n, 2] float32 carrying the same bits."""
    flat = torch.empty(x.numel(), dtype=torch.float64)   # fresh: stride 1, even when empty
    flat.copy_(x.reshape(-1))
    return flat.view(torch.float32).reshape(-1, 2)


def words_to_f64(w: torch.Tensor) -> torch.Tensor:
    # a fresh copy: a column slice of a row buffer may have odd strides or offsets
    return torch.empty(w.shape, dtype=torch.float32).copy_(w).view(torch.float64).reshape(-1)


@dataclass(frozen=True)
class RowLayout:
    memory_dim: int
    mail_dim: int
    mailbox_size: int
    node_feat_dim: int = 0

    @property
    def read_width(self) -> int:
        m = self.mailbox_size
        return self.memory_dim + m * self.mail_dim + 2 + 2 * m + self.node_feat_dim

    @property
    def write_width(self) -> int:
        return 4 + self.memory_dim + 2 + self.mail_dim + 2

    def unpack_read(self, rows: torch.Tensor) -> dict:
        """Split read rows into named fields (views where possible)."""
        m, d, M = self.mailbox_size, self.mail_dim, self.memory_dim
        n = len(rows)
        o = 0
        memory = rows[:, o:o + M]; o += M
        mailbox = rows[:, o:o + m * d].reshape(n, m, d); o += m * d
        mem_ts = words_to_f64(rows[:, o:o + 2]); o += 2
        mail_ts = words_to_f64(rows[:, o:o + 2 * m].reshape(n * m, 2)).reshape(n, m); o += 2 * m
        feat = rows[:, o:o + self.node_feat_dim] if self.node_feat_dim else None
        return dict(memory=memory, mailbox=mailbox, mem_ts=mem_ts, mail_ts=mail_ts,
                    node_feat=feat)

    def pack_write(self, vertex, key, memory, mem_ts, mail, mail_ts) -> torch.Tensor:
        return torch.cat([f64_to_words(vertex), f64_to_words(key), memory.float(),
                          f64_to_words(mem_ts), mail.float(), f64_to_words(mail_ts)], dim=1)

    def unpack_write(self, rows: torch.Tensor) -> dict:
        M, d = self.memory_dim, self.mail_dim
        o = 4 + M
        return dict(vertex=words_to_f64(rows[:, 0:2]).long(), key=words_to_f64(rows[:, 2:4]),
                    memory=rows[:, 4:o], mem_ts=words_to_f64(rows[:, o:o + 2]),
                    mail=rows[:, o + 2:o + 2 + d], mail_ts=words_to_f64(rows[:, o + 2 + d:]))


def latest_per_vertex(vertex: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Positions of the occurrence with the largest key for each distinct vertex (sorted by
    vertex). Deterministic, unlike a scatter whose surviving write is unspecified."""
    if len(vertex) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((key, vertex))
    last = np.ones(len(order), dtype=bool)
    last[:-1] = vertex[order[1:]] != vertex[order[:-1]]
    return order[last]


class MemoryStore:
    """The state rows of the vertices one worker owns (global id -> local slot)."""

    def __init__(self, owned: np.ndarray, num_nodes: int, layout: RowLayout,
                 node_feat: np.ndarray | None = None):
        self.owned = np.asarray(owned, dtype=np.int64)
        self.layout = layout
        self.local = np.full(num_nodes, -1, dtype=np.int64)
        self.local[self.owned] = np.arange(len(self.owned))
        n, m = len(self.owned), layout.mailbox_size
        self.memory = torch.zeros(n, layout.memory_dim)
        self.mem_ts = torch.zeros(n, dtype=torch.float64)
        self.mailbox = torch.zeros(n, m, layout.mail_dim)
        self.mail_ts = torch.full((n, m), NO_MAIL, dtype=torch.float64)
        self.next_slot = torch.zeros(n, dtype=torch.long)
        self.node_feat = None
        if layout.node_feat_dim:
            self.node_feat = torch.as_tensor(np.asarray(node_feat, dtype=np.float32)[self.owned])

    def reset(self) -> None:
        """Start of an epoch: no memory, no mail (TGN resets memory every epoch)."""
        self.memory.zero_()
        self.mem_ts.zero_()
        self.mailbox.zero_()
        self.mail_ts.fill_(NO_MAIL)
        self.next_slot.zero_()

    def _slots(self, vertex: np.ndarray) -> torch.Tensor:
        slots = self.local[vertex]
        if len(slots) and slots.min() < 0:
            bad = vertex[slots < 0][:5]
            raise RuntimeError(f"vertices {bad.tolist()} were sent to a worker that does not own "
                               "them; every worker must use the same ownership array")
        return torch.from_numpy(slots)

    def read(self, vertex: np.ndarray) -> torch.Tensor:
        s = self._slots(np.asarray(vertex, dtype=np.int64))
        n, m = len(s), self.layout.mailbox_size
        parts = [self.memory[s], self.mailbox[s].reshape(n, m * self.layout.mail_dim),
                 f64_to_words(self.mem_ts[s]),
                 f64_to_words(self.mail_ts[s].reshape(-1)).reshape(n, 2 * m)]
        if self.node_feat is not None:
            parts.append(self.node_feat[s])
        return torch.cat(parts, dim=1)

    def apply_writes(self, rows: torch.Tensor) -> None:
        """Apply write rows (any order, duplicates allowed): the latest per vertex wins;
        its mail goes into the vertex's next mailbox slot."""
        w = self.layout.unpack_write(rows)
        keep = latest_per_vertex(w["vertex"].numpy(), w["key"].numpy())
        keep_t = torch.from_numpy(keep)
        s = self._slots(w["vertex"].numpy()[keep])
        self.memory[s] = w["memory"][keep_t]
        self.mem_ts[s] = w["mem_ts"][keep_t]
        slot = self.next_slot[s]
        self.mailbox[s, slot] = w["mail"][keep_t]
        self.mail_ts[s, slot] = w["mail_ts"][keep_t]
        self.next_slot[s] = (slot + 1) % self.layout.mailbox_size

    def state(self) -> dict:
        """Owned rows by global id, for checkpoints (merged across workers by the caller)."""
        return dict(vertex=self.owned.copy(), memory=self.memory.clone(),
                    mem_ts=self.mem_ts.clone(), mailbox=self.mailbox.clone(),
                    mail_ts=self.mail_ts.clone(), next_slot=self.next_slot.clone())

    def load_state(self, state: dict) -> None:
        """Take this worker's rows from a global state (any previous ownership)."""
        pos = np.full(len(self.local), -1, dtype=np.int64)
        pos[np.asarray(state["vertex"])] = np.arange(len(state["vertex"]))
        src = pos[self.owned]
        if len(src) and src.min() < 0:
            raise RuntimeError("the checkpointed memory does not cover every vertex; it was "
                               "written for another dataset; start without run.resume")
        src = torch.from_numpy(src)
        for name in ("memory", "mem_ts", "mailbox", "mail_ts", "next_slot"):
            getattr(self, name).copy_(state[name][src])


def merge_states(states: list[dict]) -> dict:
    """Concatenate per-worker `state()`s into one global state sorted by vertex id."""
    vertex = np.concatenate([s["vertex"] for s in states])
    order = torch.from_numpy(np.argsort(vertex, kind="stable"))
    merged = {"vertex": torch.from_numpy(vertex[order.numpy()])}
    for name in ("memory", "mem_ts", "mailbox", "mail_ts", "next_slot"):
        merged[name] = torch.cat([s[name] for s in states])[order]
    return merged
