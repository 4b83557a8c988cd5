"""What link mode trains and scores on: the training graph (the dataset's nodes and
features, its training edges only), the training positive pairs, and each held-out
split's positives, negatives and MRR ranking negatives."""
from __future__ import annotations

import numpy as np

from ..graph import Graph


class LinkData:
    def __init__(self, config, graph=None):
        from ..datasets import load_run_graph
        from ..datasets.edges import symmetric_csr
        from ..datasets.splits import random_edge_split
        full = graph if graph is not None else load_run_graph(config)
        c = config.link
        split = full.edge_split
        if split is None:
            split = random_edge_split(full.indptr, full.indices, full.num_nodes, c.val,
                                      c.test, seed=c.split_seed)
            self.known_edges = (full.indptr, full.indices)   # top-k leaves these out
        else:                                    # shipped: the graph is the training one
            held = np.concatenate([split.val_pos, split.test_pos], axis=1)
            self.known_edges = symmetric_csr(np.r_[np.repeat(np.arange(full.num_nodes),
                                                             full.degree()), held[0]],
                                             np.r_[full.indices, held[1]], full.num_nodes)
        self.shipped_split = full.edge_split is not None
        self.graph = Graph(indptr=split.indptr, indices=split.indices, x=full.x,
                           name=full.name)
        rows = np.repeat(np.arange(full.num_nodes), self.graph.degree())
        upper = rows < split.indices
        self.train_pairs = np.stack([rows[upper], split.indices[upper].astype(np.int64)])
        self._held_out = {"val": (split.val_pos, split.val_neg),
                          "test": (split.test_pos, split.test_neg)}
        self._eval_negatives, self._split_seed = c.eval_negatives, c.split_seed
        self._ranking = {}

    def held_out(self, split: str) -> tuple:
        """(positives [2, P], negatives [2, Q], ranking destinations [P, M]) of `split`:
        the ranking ones fixed per split and `link.split_seed`, drawn once."""
        pos, neg = self._held_out[split]
        if split not in self._ranking:
            rng = np.random.default_rng([self._split_seed, ("val", "test").index(split)])
            self._ranking[split] = rng.integers(0, self.graph.num_nodes,
                                                (pos.shape[1], self._eval_negatives))
        return pos, neg, self._ranking[split]

    def split_keys(self) -> dict:
        """Each split's positive pairs as keys src * N + dst (the start record's digests)."""
        n = self.graph.num_nodes
        pairs = {"train": self.train_pairs, "val": self._held_out["val"][0],
                 "test": self._held_out["test"][0]}
        return {name: p[0] * n + p[1] for name, p in pairs.items()}

    def describe(self) -> dict:
        return {"nodes": self.graph.num_nodes, "shipped_split": self.shipped_split,
                "train_edges": self.train_pairs.shape[1],
                "val_edges": self._held_out["val"][0].shape[1],
                "test_edges": self._held_out["test"][0].shape[1]}
