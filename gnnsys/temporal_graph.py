"""The continuous-time interaction graph that the temporal training mode consumes.

A `TemporalGraph` is a list of timestamped events (src -> dst at t), sorted by time, with
optional per-event and per-node features and the chronological train/val/test thresholds
of the TGN/DyGLib protocol. Plain numpy, like `gnnsys.graph.Graph`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

# The TGN/DyGLib chronological split: 70% of events train, 15% val, 15% test.
DEFAULT_SPLIT_QUANTILES = (0.70, 0.85)


@dataclass
class TemporalGraph:
    """Events sorted by time plus the chronological split thresholds.

    src, dst: int32/int64 [E]; t: int64 or float64 [E], ascending.
    edge_feat: float32 [E, d] or None; node_feat: float32 [N, d] or None.
    bipartite graphs keep sources in 0..num_src_nodes-1 and destinations after them.
    Split: train t <= val_time, val val_time < t <= test_time, test t > test_time.
    edge_label: per-event label (e.g. Wikipedia bans) or None; node_label: per-node class or None.
    """

    src: np.ndarray
    dst: np.ndarray
    t: np.ndarray
    num_nodes: int
    edge_feat: np.ndarray | None = None
    node_feat: np.ndarray | None = None
    bipartite: bool = False
    num_src_nodes: int | None = None
    val_time: float | None = None
    test_time: float | None = None
    name: str = "temporal"
    metric: str = "ap"
    kind: ClassVar[str] = "temporal"    # the data kind (gnnsys.datasets.registry.KINDS)
    edge_label: np.ndarray | None = None
    node_label: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.src, self.dst, self.t = map(np.asarray, (self.src, self.dst, self.t))
        num_events = self.src.size
        if self.dst.size != num_events or self.t.size != num_events:
            raise ValueError(f"TemporalGraph '{self.name}': src, dst and t must have the same "
                             f"length, got {self.src.size}, {self.dst.size}, {self.t.size}")
        if num_events and np.any(np.diff(self.t) < 0):
            raise ValueError(f"TemporalGraph '{self.name}': t must be sorted ascending; sort "
                             "the events with a stable argsort of t first")
        if num_events and max(int(self.src.max()), int(self.dst.max())) >= self.num_nodes:
            raise ValueError(f"TemporalGraph '{self.name}': node ids reach "
                             f"{max(int(self.src.max()), int(self.dst.max()))} but num_nodes "
                             f"is {self.num_nodes}")
        for key in ("edge_feat", "edge_label"):
            arr = getattr(self, key)
            if arr is not None and len(arr) != num_events:
                raise ValueError(f"TemporalGraph '{self.name}': {key} has {len(arr)} rows "
                                 f"for {num_events} events")
        for key in ("node_feat", "node_label"):
            arr = getattr(self, key)
            if arr is not None and len(arr) != self.num_nodes:
                raise ValueError(f"TemporalGraph '{self.name}': {key} has {len(arr)} rows "
                                 f"for {self.num_nodes} nodes")
        if self.bipartite and self.num_src_nodes is None:
            raise ValueError(f"TemporalGraph '{self.name}': a bipartite graph needs "
                             "num_src_nodes")
        if (self.val_time is None or self.test_time is None) and num_events:
            val_time, test_time = np.quantile(self.t, DEFAULT_SPLIT_QUANTILES)
            self.val_time = float(val_time) if self.val_time is None else self.val_time
            self.test_time = float(test_time) if self.test_time is None else self.test_time

    @property
    def num_events(self) -> int:
        return int(self.src.size)

    @property
    def edge_feat_dim(self) -> int:
        return 0 if self.edge_feat is None else int(self.edge_feat.shape[1])

    def split_masks(self):
        """(train, val, test) boolean masks over the events, by the time thresholds."""
        train = self.t <= self.val_time
        test = self.t > self.test_time
        val = ~train & ~test
        return train, val, test

    def __repr__(self) -> str:
        train, val, test = (int(m.sum()) for m in self.split_masks())
        kind = f"bipartite {self.num_src_nodes:,}+{self.num_nodes - self.num_src_nodes:,}" \
            if self.bipartite else "general"
        return (f"TemporalGraph({self.name}: nodes={self.num_nodes:,} ({kind}), "
                f"events={self.num_events:,}, edge_feat={self.edge_feat_dim}, "
                f"train={train:,}, val={val:,}, test={test:,})")


def exact_time(t) -> str:
    """A time as written, to the last digit (`2218290`, `0.25`, `1e+308`), not rounded
    to 6 digits as `:g` would (`2.21829e+06`)."""
    t = t.item() if isinstance(t, np.generic) else t
    if isinstance(t, float) and t.is_integer() and abs(t) < 2 ** 53:
        return str(int(t))
    return repr(t)
