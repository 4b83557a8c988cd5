"""Loaders for the offline `.npz` bundles of real graphs (see shared/data/MANIFEST.md).

Static bundles become a `Graph` (CSR, dense float32 features, int64 labels, one split);
temporal bundles become a `TemporalGraph`. The files are looked up, in order, under
<data root>/bundles/{static,temporal}/, $GNNSYS_SHARED_DATA/{static,temporal}/ and the
`shared/data` directory beside the repository checkout.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from gnnsys.datasets.errors import DatasetError, read_npz
from gnnsys.datasets.splits import stratified_split
from gnnsys.graph import Graph
from gnnsys.temporal_graph import TemporalGraph

SHARED_DATA_ENV = "GNNSYS_SHARED_DATA"
# The repository lives at <dir>/main and the shared data at <dir>/shared/data (CI clones
# the repository with shared beside it).
CHECKOUT_SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
REFETCH = "copy {} again from the project's shared/data"

# flickr_amgcn ships no validation nodes; this many are carved out of the nodes that are in
# neither the train nor the test set, so the standard train/test sets stay intact.
FLICKR_VAL_SIZE = 500


def bundle_search_dirs(root: Path) -> list[Path]:
    """Directories that may hold the bundles' static/ and temporal/ folders, in search order."""
    dirs = [root / "bundles"]
    if os.environ.get(SHARED_DATA_ENV):
        dirs.append(Path(os.environ[SHARED_DATA_ENV]))
    dirs.append(CHECKOUT_SHARED_DATA)
    return dirs


def find_bundle(relative_file: str, root: Path) -> Path | None:
    for base in bundle_search_dirs(root):
        if (base / relative_file).is_file():
            return base / relative_file
    return None


def require_bundle(name: str, relative_file: str, root: Path) -> Path:
    path = find_bundle(relative_file, root)
    if path is None:
        places = "\n  ".join(str(d / relative_file) for d in bundle_search_dirs(root))
        raise DatasetError(
            f"dataset '{name}': bundle file {relative_file} not found; looked in\n  {places}\n"
            f"Copy {Path(relative_file).name} (from the project's shared/data/"
            f"{relative_file}) to {root / 'bundles' / relative_file}, or set "
            f"${SHARED_DATA_ENV} to the directory that holds static/ and temporal/.")
    return path


# ----------------------------------------------------------------------------- static
def load_static_bundle(name: str, entry: dict, root: Path, split: int = 0,
                       params: dict | None = None) -> Graph:
    """Graph of a static bundle; `split` picks one of its standard splits (or seeds a random one)."""
    params = dict(params or {})
    path = require_bundle(name, entry["file"], root)
    arrays = read_npz(path, REFETCH.format(entry["file"]))
    num_nodes = int(arrays["num_nodes"])
    labels = arrays["y"].astype(np.int64)
    graph = Graph.from_edge_index(arrays["edge_index"], num_nodes, y=labels,
                                  num_classes=int(arrays["num_classes"]), name=name,
                                  metric=entry.get("metric", "accuracy"))
    graph.x, feature_note = _static_features(arrays, graph)
    split_note = _assign_split(graph, arrays, name, split, entry, params)
    graph.meta = {"source": "bundle", "file": str(path), "split": split,
                  "split_kind": split_note, "features": feature_note}
    return graph


def _static_features(arrays: dict, graph: Graph):
    if "x" in arrays:
        return np.ascontiguousarray(arrays["x"], dtype=np.float32), "dense"
    if "x_shape" in arrays:
        x = sp.csr_matrix((arrays["x_data"], arrays["x_indices"], arrays["x_indptr"]),
                          shape=tuple(int(s) for s in arrays["x_shape"]))
        return np.asarray(x.toarray(), dtype=np.float32), "sparse->dense"
    return structural_features(graph.indptr, graph.indices), "structural (no source features)"


def structural_features(indptr: np.ndarray, indices: np.ndarray, num_buckets: int = 16,
                        num_projections: int = 32, seed: int = 0) -> np.ndarray:
    """Deterministic features from structure alone, for graphs that ship none (github).

    Columns: log(1 + degree); a one-hot of the log2-degree bucket (num_buckets columns,
    the last bucket holds everything larger); and the neighbourhood mean of a fixed
    Gaussian random projection (num_projections columns), which lets a GNN tell apart
    nodes with different neighbours the way node-id embeddings would, without a table.
    """
    num_nodes = indptr.size - 1
    degree = np.diff(indptr).astype(np.float64)
    log_degree = np.log1p(degree)[:, None]
    bucket = np.minimum(np.floor(np.log2(np.maximum(degree, 1))).astype(np.int64),
                        num_buckets - 1)
    one_hot = np.zeros((num_nodes, num_buckets))
    one_hot[np.arange(num_nodes), bucket] = 1.0
    projection = np.random.default_rng(seed).standard_normal((num_nodes, num_projections))
    adjacency = sp.csr_matrix((np.ones(indices.size), indices, indptr),
                              shape=(num_nodes, num_nodes))
    neighbour_mean = (adjacency @ projection) / np.maximum(degree, 1)[:, None]
    return np.hstack([log_degree, one_hot, neighbour_mean]).astype(np.float32)


def _assign_split(graph: Graph, arrays: dict, name: str, split: int, entry: dict,
                  params: dict) -> str:
    labelled = graph.y >= 0
    if "train_mask" in arrays:
        if params:
            raise DatasetError(f"dataset '{name}' ships standard splits (pick one with "
                               f"split=); {', '.join(params)} only apply to datasets without")
        masks = [arrays[f"{part}_mask"] for part in ("train", "val", "test")]
        num_splits = 1 if masks[0].ndim == 1 else masks[0].shape[0]
        if not 0 <= split < num_splits:
            raise DatasetError(f"dataset '{name}' has {num_splits} standard split(s) "
                               f"(0..{num_splits - 1}); split={split} is out of range")
        if masks[0].ndim == 2:
            masks = [m[split] for m in masks]
        # Unlabelled nodes (-1) never enter a split, even if a mask marks them.
        graph.train_idx, graph.val_idx, graph.test_idx = (
            np.flatnonzero(m & labelled).astype(np.int64) for m in masks)
        if graph.val_idx.size == 0 and entry.get("carve_val_from_unused"):
            graph.val_idx = _carve_val(graph, labelled, seed=split)
            return "standard, val carved from unused nodes"
        return "standard"
    train_fraction = float(params.get("train_fraction", entry.get("train_fraction", 0.6)))
    val_fraction = float(params.get("val_fraction", entry.get("val_fraction", 0.2)))
    seed = int(entry.get("split_seed", 0)) + split
    graph.train_idx, graph.val_idx, graph.test_idx = stratified_split(
        graph.y, train_fraction, val_fraction, seed=seed)
    return f"stratified random {train_fraction:g}/{val_fraction:g}, seed {seed}"


def _carve_val(graph: Graph, labelled: np.ndarray, seed: int) -> np.ndarray:
    unused = labelled.copy()
    unused[graph.train_idx] = False
    unused[graph.test_idx] = False
    pool = np.flatnonzero(unused)
    chosen = np.random.default_rng(seed).choice(pool, size=min(FLICKR_VAL_SIZE, pool.size),
                                                replace=False)
    return np.sort(chosen).astype(np.int64)


# ----------------------------------------------------------------------------- temporal
def load_temporal_bundle(name: str, entry: dict, root: Path, split: int = 0,
                         params: dict | None = None) -> TemporalGraph:
    """TemporalGraph of a temporal bundle, with the bundle's chronological split thresholds."""
    if split != 0:
        raise DatasetError(f"dataset '{name}' has one chronological split; split={split} "
                           "is out of range (use 0)")
    path = require_bundle(name, entry["file"], root)
    arrays = read_npz(path, REFETCH.format(entry["file"]))
    bipartite = bool(arrays["bipartite"])
    edge_feat = arrays.get("edge_feat")
    return TemporalGraph(
        src=arrays["src"], dst=arrays["dst"], t=arrays["t"],
        num_nodes=int(arrays["num_nodes"]),
        edge_feat=None if edge_feat is None else edge_feat.astype(np.float32),
        bipartite=bipartite,
        num_src_nodes=int(arrays["num_src_nodes"]) if bipartite else None,
        val_time=float(arrays["split_val_t"]), test_time=float(arrays["split_test_t"]),
        name=name, metric=entry.get("metric", "ap"),
        edge_label=arrays.get("label"),
        node_label=None if "node_label" not in arrays else arrays["node_label"].astype(np.int64),
        meta={"source": "bundle", "file": str(path)})


# ----------------------------------------------------------------------------- registry hooks
RANDOM_SPLIT_PARAMS = ("train_fraction", "val_fraction")


def load(name: str, entry: dict, root: Path, split: int = 0, params: dict | None = None):
    """Registry entry point: a static bundle gives a Graph, a temporal one a TemporalGraph."""
    params = dict(params or {})
    unknown = sorted(set(params) - set(RANDOM_SPLIT_PARAMS))
    if unknown:
        raise DatasetError(f"dataset '{name}': unknown params {', '.join(unknown)}; bundles "
                           f"accept only {', '.join(RANDOM_SPLIT_PARAMS)} (for the random "
                           "split of datasets that ship none)")
    if entry["file"].startswith("temporal/"):
        if params:
            raise DatasetError(f"dataset '{name}' is temporal and takes no params "
                               f"(got {', '.join(params)})")
        return load_temporal_bundle(name, entry, root, split, params)
    return load_static_bundle(name, entry, root, split, params)


def locate(name: str, entry: dict, root: Path):
    path = find_bundle(entry["file"], root)
    return (True, path) if path else (False, root / "bundles" / entry["file"])
