"""The static graph container shared by every training mode.

A `Graph` is CSR adjacency plus optional node features, labels and split indices, all
numpy arrays so that numba kernels read them without copies and large arrays can be
memory-mapped from disk. Row `v` of the CSR lists the vertices whose messages flow into
`v` (its in-neighbours); for the symmetric graphs most datasets are, that is simply the
neighbour list. Saving writes one `.npy` per array plus `meta.json` (no pickle).

Depends on numpy, scipy (and `common.files` for atomic writes); no torch.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

from common.files import atomic_directory, save_array

_ARRAYS = ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx")
FORMAT_VERSION = 1


@dataclass
class Graph:
    """CSR graph with features, labels and a train/val/test split.

    indptr:  int64 [N+1]; indices: int32 (int64 when N >= 2**31) [E].
    x: float32/float16 [N, F] (a dense array, or a scipy CSR matrix for sparse
       bag-of-words features, gnnsys.sparse_features) or None; y: int64 [N] (-1 = unlabelled) or None.
    train_idx/val_idx/test_idx: int64 node ids.
    """

    indptr: np.ndarray
    indices: np.ndarray
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    train_idx: np.ndarray | None = None
    val_idx: np.ndarray | None = None
    test_idx: np.ndarray | None = None
    num_classes: int = 0
    name: str = "graph"
    # Task metric: "accuracy" for multi-class, "roc_auc" for binary tasks reported that way.
    metric: str = "accuracy"
    meta: dict = field(default_factory=dict)
    # the held-out edges of a link dataset that ships its split (datasets.splits.EdgeSplit;
    # the CSR is then its training graph), else None: link mode splits the edges itself
    edge_split: object | None = None
    kind: ClassVar[str] = "static"      # the data kind (gnnsys.datasets.registry.KINDS)

    def __post_init__(self):
        self.indptr = np.asarray(self.indptr)
        self.indices = np.asarray(self.indices)
        if self.indptr.ndim != 1 or self.indptr.size < 1:
            raise ValueError("Graph.indptr must be a 1-D array of length num_nodes + 1")
        if self.indptr.dtype != np.int64:
            self.indptr = self.indptr.astype(np.int64)
        if self.indices.dtype not in (np.int32, np.int64):
            self.indices = self.indices.astype(index_dtype(self.num_nodes))
        if int(self.indptr[-1]) != self.indices.size:
            raise ValueError(
                f"Graph '{self.name}': indptr[-1]={int(self.indptr[-1])} but "
                f"indices has {self.indices.size} entries; the CSR is inconsistent")
        for key in ("x", "y"):
            arr = getattr(self, key)
            if arr is not None and arr.shape[0] != self.num_nodes:
                raise ValueError(f"Graph '{self.name}': {key} has {arr.shape[0]} rows "
                                 f"but the graph has {self.num_nodes} nodes")

    # ---------------------------------------------------------------- shape
    @property
    def num_nodes(self) -> int:
        return self.indptr.size - 1

    @property
    def num_edges(self) -> int:
        return self.indices.size

    @property
    def num_features(self) -> int:
        return 0 if self.x is None else int(self.x.shape[1])

    def degree(self) -> np.ndarray:
        return np.diff(self.indptr)

    def split(self, name: str) -> np.ndarray:
        idx = {"train": self.train_idx, "val": self.val_idx, "test": self.test_idx}[name]
        if idx is None:
            raise ValueError(f"Graph '{self.name}' has no '{name}' split")
        return idx

    def __repr__(self) -> str:
        parts = [f"nodes={self.num_nodes:,}", f"edges={self.num_edges:,}",
                 f"features={self.num_features}", f"classes={self.num_classes}"]
        for s in ("train", "val", "test"):
            idx = getattr(self, f"{s}_idx")
            if idx is not None:
                parts.append(f"{s}={len(idx):,}")
        return f"Graph({self.name}: {', '.join(parts)})"

    # ---------------------------------------------------------------- build
    @classmethod
    def from_edge_index(cls, edge_index, num_nodes: int, **kwargs) -> "Graph":
        """Build from a [2, E] (src, dst) array: row dst of the CSR lists src."""
        src, dst = np.asarray(edge_index[0]), np.asarray(edge_index[1])
        indptr, indices = csr_from_edges(src, dst, num_nodes)
        return cls(indptr=indptr, indices=indices, **kwargs)

    def edge_index(self) -> np.ndarray:
        """[2, E] int64 (src, dst) with dst = CSR row."""
        dst = np.repeat(np.arange(self.num_nodes, dtype=np.int64), self.degree())
        return np.stack([self.indices.astype(np.int64), dst])

    # ---------------------------------------------------------------- io
    def save(self, path: str | os.PathLike) -> Path:
        """Write the graph as a directory of .npy files, atomically (temp dir + rename)."""
        path = Path(path)
        with atomic_directory(path) as tmp:
            present = []
            for key, arr in self._arrays_to_save():
                if arr is not None:
                    save_array(tmp / f"{key}.npy", arr)
                    present.append(key)
            meta = {"format_version": FORMAT_VERSION, "name": self.name,
                    "num_nodes": self.num_nodes, "num_edges": self.num_edges,
                    "num_classes": int(self.num_classes), "metric": self.metric,
                    "arrays": present, "meta": self.meta}
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        return path

    def _arrays_to_save(self):
        """(file name, array) pairs; CSR features as their three arrays (x_indptr, ...)."""
        for key in _ARRAYS:
            arr = getattr(self, key)
            if key == "x" and sp.issparse(arr):
                yield from (("x_indptr", arr.indptr), ("x_indices", arr.indices),
                            ("x_data", arr.data), ("x_shape", np.array(arr.shape)))
            else:
                yield key, arr

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool = True) -> "Graph":
        """Load a graph saved by `save`; arrays are memory-mapped unless mmap=False."""
        path = Path(path)
        meta_file = path / "meta.json"
        if not meta_file.exists():
            raise FileNotFoundError(f"{path} is not a saved gnnsys graph (no meta.json)")
        meta = json.loads(meta_file.read_text())
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{path}: graph format version {meta.get('format_version')} "
                             f"is not supported (expected {FORMAT_VERSION}); delete it to rebuild")
        arrays = {}
        for key in meta["arrays"]:
            arrays[key] = np.load(path / f"{key}.npy", mmap_mode="r" if mmap else None,
                                  allow_pickle=False)
        if "x_shape" in arrays:
            arrays["x"] = sp.csr_matrix(
                (arrays.pop("x_data"), arrays.pop("x_indices"), arrays.pop("x_indptr")),
                shape=tuple(int(n) for n in arrays.pop("x_shape")))
        g = cls(**arrays, num_classes=meta["num_classes"], name=meta["name"],
                metric=meta.get("metric", "accuracy"), meta=meta.get("meta", {}))
        if g.num_nodes != meta["num_nodes"] or g.num_edges != meta["num_edges"]:
            raise ValueError(f"{path}: arrays do not match meta.json "
                             f"(nodes {g.num_nodes} vs {meta['num_nodes']}, edges "
                             f"{g.num_edges} vs {meta['num_edges']}); the directory is corrupt")
        return g


def index_dtype(num_nodes: int):
    """int32 column indices where the ids fit, else int64."""
    return np.int32 if num_nodes < 2**31 - 1 else np.int64


def csr_from_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int):
    """CSR (indptr int64, indices int32/int64) with row = dst, columns sorted within a row."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_nodes):
        raise ValueError(f"edge ids must lie in [0, {num_nodes}); got "
                         f"[{min(src.min(), dst.min())}, {max(src.max(), dst.max())}]")
    order = np.lexsort((src, dst))
    counts = np.bincount(dst, minlength=num_nodes)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = src[order].astype(index_dtype(num_nodes))
    return indptr, indices
