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

Everything here lives on the store's device (the worker's `ctx.device`), so rows go into
the collectives and the model without a host round trip; only `state()` (checkpoints)
returns host copies.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

NO_MAIL = -1.0   # mail timestamp of an empty mailbox slot (times are >= 0, relative to t0)


def f64_to_words(x: torch.Tensor) -> torch.Tensor:
    """[n] float64 -> [n, 2] float32 carrying the same bits (on x's device)."""
    flat = torch.empty(x.numel(), dtype=torch.float64, device=x.device)   # stride 1, even empty
    flat.copy_(x.reshape(-1))
    return flat.view(torch.float32).reshape(-1, 2)


def words_to_f64(w: torch.Tensor) -> torch.Tensor:
    # a fresh copy: a column slice of a row buffer may have odd strides or offsets
    return torch.empty(w.shape, dtype=torch.float32, device=w.device).copy_(w) \
        .view(torch.float64).reshape(-1)


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


def latest_per_vertex(vertex: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """Positions of the occurrence with the largest key for each distinct vertex (sorted by
    vertex), on the tensors' device. Deterministic, unlike a scatter whose surviving write
    is unspecified. Host arrays go in as `torch.from_numpy` views (no copy)."""
    # a lexsort by (vertex, key): stable sort by the minor key, then by the major one
    order = torch.sort(key, stable=True).indices
    order = order[torch.sort(vertex[order], stable=True).indices]
    v = vertex[order]
    last = torch.ones_like(v, dtype=torch.bool)
    last[:-1] = v[1:] != v[:-1]
    return order[last]


STATE_FIELDS = ("memory", "mem_ts", "mailbox", "mail_ts", "next_slot")


class MemoryStore:
    """The state rows of the vertices one worker owns (global id -> local slot), on the
    worker's training device; ids to read arrive there too (from the exchange)."""

    def __init__(self, owned: np.ndarray, num_nodes: int, layout: RowLayout,
                 node_feat: np.ndarray | None = None, device="cpu"):
        self.owned = np.asarray(owned, dtype=np.int64)
        self.layout = layout
        self.device = torch.device(device)
        local = np.full(num_nodes, -1, dtype=np.int64)
        local[self.owned] = np.arange(len(self.owned))
        self.local = torch.from_numpy(local).to(self.device)
        n, m, on = len(self.owned), layout.mailbox_size, dict(device=self.device)
        self.memory = torch.zeros(n, layout.memory_dim, **on)
        self.mem_ts = torch.zeros(n, dtype=torch.float64, **on)
        self.mailbox = torch.zeros(n, m, layout.mail_dim, **on)
        self.mail_ts = torch.full((n, m), NO_MAIL, dtype=torch.float64, **on)
        self.next_slot = torch.zeros(n, dtype=torch.long, **on)
        self.node_feat = None
        if layout.node_feat_dim:
            feat = np.asarray(node_feat, dtype=np.float32)[self.owned]
            self.node_feat = torch.from_numpy(feat).to(self.device)

    def reset(self) -> None:
        """Start of an epoch: no memory, no mail (TGN resets memory every epoch)."""
        self.memory.zero_()
        self.mem_ts.zero_()
        self.mailbox.zero_()
        self.mail_ts.fill_(NO_MAIL)
        self.next_slot.zero_()

    def _slots(self, vertex: torch.Tensor) -> torch.Tensor:
        slots = self.local[vertex]
        if bool((slots < 0).any()):
            bad = vertex[slots < 0][:5]
            raise RuntimeError(f"vertices {bad.tolist()} were sent to a worker that does not own "
                               "them; every worker must use the same ownership array")
        return slots

    def read(self, vertex: torch.Tensor) -> torch.Tensor:
        """Read rows of global ids `vertex` (int64, moved to the store's device if not there)."""
        s = self._slots(torch.as_tensor(vertex, dtype=torch.int64, device=self.device))
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
        keep = latest_per_vertex(w["vertex"], w["key"])
        s = self._slots(w["vertex"][keep])
        self.memory[s] = w["memory"][keep]
        self.mem_ts[s] = w["mem_ts"][keep]
        slot = self.next_slot[s]
        self.mailbox[s, slot] = w["mail"][keep]
        self.mail_ts[s, slot] = w["mail_ts"][keep]
        self.next_slot[s] = (slot + 1) % self.layout.mailbox_size

    def state(self) -> dict:
        """Owned rows by global id, as host copies for checkpoints (merged across workers by
        the caller)."""
        return dict(vertex=self.owned.copy(),
                    **{name: getattr(self, name).to("cpu", copy=True) for name in STATE_FIELDS})

    def load_state(self, state: dict) -> None:
        """Take this worker's rows from a global state (any previous ownership)."""
        pos = np.full(len(self.local), -1, dtype=np.int64)
        pos[np.asarray(state["vertex"])] = np.arange(len(state["vertex"]))
        src = pos[self.owned]
        if len(src) and src.min() < 0:
            raise RuntimeError("the checkpointed memory does not cover every vertex; it was "
                               "written for another dataset; start without run.resume")
        src = torch.from_numpy(src)
        for name in STATE_FIELDS:
            getattr(self, name).copy_(state[name][src])      # host rows onto the device


def merge_states(states: list[dict]) -> dict:
    """Concatenate per-worker `state()`s into one global state sorted by vertex id."""
    vertex = np.concatenate([s["vertex"] for s in states])
    order = torch.from_numpy(np.argsort(vertex, kind="stable"))
    merged = {"vertex": torch.from_numpy(vertex[order.numpy()])}
    for name in STATE_FIELDS:
        merged[name] = torch.cat([s[name] for s in states])[order]
    return merged
