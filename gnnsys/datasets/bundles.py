"""Loaders of `.npz` bundles (a user's own, or the project's real graphs, shared/data/MANIFEST.md).

The format is docs/DATA.md: the entry's data `kind` decides how it is read, a static bundle
(a `Graph`: CSR, float32 features (dense, or CSR as the bundle stores them), int64 labels,
one split) or a temporal one (a `TemporalGraph`). A bundle is an .npz file or a directory
of .npy files, one per array. Registry files are looked up, in order, under <data root>/bundles/,
$GNNSYS_SHARED_DATA/ and the `shared/data` directory beside the repository checkout.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from gnnsys.datasets.npz import read_npz
from gnnsys.datasets.splits import EdgeSplit, stratified_split
from gnnsys.errors import DatasetError
from gnnsys.graph import Graph
from gnnsys.sparse_features import as_csr
from gnnsys.temporal_graph import TemporalGraph

SHARED_DATA_ENV = "GNNSYS_SHARED_DATA"
# The repository lives at <dir>/main and the shared data at <dir>/shared/data (CI clones
# the repository with shared beside it).
CHECKOUT_SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SCHEMA = "docs/DATA.md"
FIX = f"the bundle format is in {SCHEMA}"
# The arrays each kind of bundle must have (the rest are optional, see SCHEMA).
REQUIRED = {"static": ("edge_index", "y"), "temporal": ("src", "dst", "t")}
# ... but for link prediction (edges are its labels) a static bundle needs no `y`
NOT_REQUIRED_FOR_LINKS = ("y",)
# The modes that train each kind (a hint for a bundle read as the other kind).
TRAINED_BY = {"static": "minibatch, fullgraph or link", "temporal": "temporal"}
# The held-out edges a link bundle ships (its edge_index then being the training graph).
EDGE_SPLIT_ARRAYS = ("val_pos", "test_pos", "val_neg", "test_neg")

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
        if (base / relative_file).exists():     # an absolute `file` is taken as it is
            return base / relative_file
    return None


def require_bundle(name: str, relative_file: str, root: Path) -> Path:
    path = find_bundle(relative_file, root)
    if path is None:
        places = "\n  ".join(str(d / relative_file) for d in bundle_search_dirs(root))
        raise DatasetError(
            f"dataset '{name}': bundle file {relative_file} not found; looked in\n  {places}\n"
            f"Put the file at {root / 'bundles' / relative_file}, or set ${SHARED_DATA_ENV} "
            "to the directory that holds it (the project's own bundles are in its shared/data).")
    return path


def path_entry(path: str, task: str, kind: str) -> dict:
    """A registry entry for `dataset.path`: the user's own bundle, checked to exist."""
    file = Path(path).expanduser().absolute()
    if not file.exists():
        raise DatasetError(f"dataset.path {path}: no such file or directory ({file}); give "
                           f"your bundle's .npz file or .npy directory ({FIX})")
    return {"source": "bundle", "file": str(file), "task": task, "kind": kind,
            "metric": "ap" if task == "link" else "accuracy"}


def read_bundle(path: Path, kind: str, task: str = "node") -> dict:
    """The bundle's arrays, refused in one line (file, key, schema) if they are not of
    `kind` (and, static, of `task`)."""
    arrays = read_npz(path, FIX)
    _refuse_heterogeneous(path, arrays)
    missing = [key for key in REQUIRED[kind] if key not in arrays
               and not (task == "link" and key in NOT_REQUIRED_FOR_LINKS)]
    if missing:
        other = next(k for k in REQUIRED if k != kind)
        hint = (f"; it holds a {other} bundle ({', '.join(REQUIRED[other])}): train it "
                f"with mode: {TRAINED_BY[other]}"
                if all(key in arrays for key in REQUIRED[other]) else "")
        raise DatasetError(f"{path} has no array '{missing[0]}', which a {kind} bundle "
                           f"needs{hint}; {FIX}")
    for key, ndim in (("edge_index", 2), ("y", 1), ("x", 2), ("src", 1), ("dst", 1), ("t", 1),
                      ("edge_feat", 2)):
        if key in arrays and arrays[key].ndim != ndim:
            raise DatasetError(f"{path}: array '{key}' has shape {arrays[key].shape}; "
                               f"expected {ndim} dimension(s); {FIX}")
    for key in INTEGER_ARRAYS:
        if key in arrays and not _integral(arrays[key]):
            raise DatasetError(f"{path}: array '{key}' holds {arrays[key].dtype} values that "
                               "are not whole numbers; node ids and labels are integers "
                               f"(nothing is rounded); {FIX}")
    if "edge_index" in arrays and arrays["edge_index"].shape[0] != 2:
        raise DatasetError(f"{path}: array 'edge_index' has shape {arrays['edge_index'].shape};"
                           f" expected (2, num_edges); {FIX}")
    return arrays


def _refuse_heterogeneous(path: Path, arrays: dict) -> None:
    """A bundle of typed nodes and relations (`edge_index__S__R__D`, shared/data/hetero)
    would otherwise read as a static bundle missing its `edge_index`: say what it is."""
    relations = [key.split("__", 1)[1] for key in arrays if key.startswith("edge_index__")]
    if relations:
        types = [key.split("__", 1)[1] for key in arrays if key.startswith("num_nodes__")]
        raise DatasetError(
            f"{path} is a heterogeneous bundle (node types {', '.join(types) or '?'}; "
            f"{len(relations)} relations such as {relations[0]}), and gnnsys trains "
            "homogeneous graphs only, heterogeneous ones not yet: convert it to one node "
            f"type's graph first ({SCHEMA}, \"Heterogeneous bundles\")")


def node_ids(path: Path) -> np.ndarray | None:
    """The bundle's `node_ids` (the user's id of each node), read alone, or None."""
    path = Path(path)
    if path.is_dir():
        file = path / "node_ids.npy"
        return exact_ids(np.load(file, allow_pickle=False)) if file.exists() else None
    with np.load(path, allow_pickle=False) as data:
        return exact_ids(data["node_ids"]) if "node_ids" in data.files else None


def exact_ids(ids: np.ndarray) -> np.ndarray:
    """Integer node ids as int64, or as uint64 where one passes int64's range (never
    wrapped to a negative number)."""
    if ids.dtype.kind == "u" and len(ids) and ids.max() > np.iinfo(np.int64).max:
        return ids.astype(np.uint64)
    return ids.astype(np.int64)


def _check_node_ids(arrays: dict, num_nodes: int) -> None:
    """`node_ids`, if present: one distinct integer per node."""
    if "node_ids" not in arrays:
        return
    ids = arrays["node_ids"]
    if ids.shape != (num_nodes,) or ids.dtype.kind not in "iu":
        raise ValueError(f"array 'node_ids' has shape {ids.shape} and dtype {ids.dtype}; "
                         f"expected ({num_nodes},) integers, each node's own id")
    ordered = np.sort(ids)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if len(repeated):
        raise ValueError(f"array 'node_ids' gives id {repeated[0]} to more than one node; "
                         "each node needs an id of its own")


# ids and labels: read as int64, so a float array must hold whole numbers only
INTEGER_ARRAYS = ("edge_index", "y", "src", "dst", "node_ids", "node_label", "num_nodes",
                  "num_classes", "num_src_nodes")


def _integral(values: np.ndarray) -> bool:
    if values.dtype.kind in "iub":
        return True
    if values.dtype.kind != "f":
        return False
    chunk = 1 << 22
    flat = values.reshape(-1)
    return all(np.all(np.isfinite(part) & (part == np.round(part)))
               for part in (np.asarray(flat[i:i + chunk]) for i in range(0, flat.size, chunk)))


def _built(path: Path, make):
    """`make()`, with a bundle whose arrays disagree (lengths, ids) named as the file's fault."""
    try:
        return make()
    except DatasetError:
        raise
    except (ValueError, IndexError) as err:
        raise DatasetError(f"{path}: {err}; {FIX}") from None


# ----------------------------------------------------------------------------- static
def load_static_bundle(name: str, entry: dict, path: Path, arrays: dict, split: int = 0,
                       params: dict | None = None) -> Graph:
    """Graph of a static bundle; `split` picks one of its standard splits (or seeds a random one)."""
    labels = arrays["y"].astype(np.int64) if "y" in arrays else None
    if "num_nodes" in arrays:
        num_nodes = int(arrays["num_nodes"])
    elif labels is not None:
        num_nodes = labels.size
    else:
        raise DatasetError(f"{path} has neither 'y' nor 'num_nodes'; a bundle without labels "
                           f"says how many nodes it has in 'num_nodes'; {FIX}")
    num_classes = int(arrays["num_classes"]) if "num_classes" in arrays else \
        0 if labels is None else int(labels.max()) + 1
    graph = Graph.from_edge_index(arrays["edge_index"], num_nodes, y=labels,
                                  num_classes=num_classes, name=name,
                                  metric=entry.get("metric", "accuracy"))
    _check_node_ids(arrays, num_nodes)
    graph.x, feature_note = _static_features(arrays, graph)
    graph.edge_split = _edge_split(arrays, graph)
    split_note = "none (no labels)" if labels is None else \
        _assign_split(graph, arrays, name, split, entry, dict(params or {}))
    graph.meta = {"source": "bundle", "file": str(path), "split": split,
                  "split_kind": split_note, "features": feature_note}
    if graph.x.shape[0] != num_nodes:
        raise ValueError(f"array 'x' has {graph.x.shape[0]} rows for {num_nodes} nodes")
    return graph


def _edge_split(arrays: dict, graph: Graph):
    """The held-out edges a link bundle ships (all four arrays, [2, P] node ids), as an
    `EdgeSplit` over the bundle's graph, or None."""
    shipped = [key for key in EDGE_SPLIT_ARRAYS if key in arrays]
    if not shipped:
        return None
    if len(shipped) < len(EDGE_SPLIT_ARRAYS):
        lacking = next(k for k in EDGE_SPLIT_ARRAYS if k not in arrays)
        raise ValueError(f"it ships '{shipped[0]}' but not '{lacking}': a link split is "
                         f"all of {', '.join(EDGE_SPLIT_ARRAYS)}")
    pairs = {}
    for key in EDGE_SPLIT_ARRAYS:
        p = np.asarray(arrays[key])
        if p.ndim != 2 or p.shape[0] != 2 or not _integral(p):
            raise ValueError(f"array '{key}' has shape {p.shape} ({p.dtype}); expected "
                             "(2, pairs) integer node ids")
        p = p.astype(np.int64)
        if p.size and (p.min() < 0 or p.max() >= graph.num_nodes):
            raise ValueError(f"array '{key}' names node {p.min() if p.min() < 0 else p.max()},"
                             f" outside 0..{graph.num_nodes - 1}")
        pairs[key] = p
    return EdgeSplit(graph.indptr, graph.indices, **pairs)


def _static_features(arrays: dict, graph: Graph):
    if "x" in arrays:
        return np.ascontiguousarray(arrays["x"], dtype=np.float32), "dense"
    if "x_shape" in arrays:
        # Kept CSR: a bag-of-words matrix is a fraction of a percent nonzero.
        try:
            x = sp.csr_matrix((arrays["x_data"], arrays["x_indices"], arrays["x_indptr"]),
                              shape=tuple(int(s) for s in arrays["x_shape"]))
            x.check_format(full_check=True)  # column ids in range, before any kernel reads them
        except ValueError as err:
            raise ValueError(f"CSR features x_indptr/x_indices/x_data/x_shape disagree "
                             f"({err})") from None
        return as_csr(x), "sparse"
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
        parts = ("train", "val", "test")
        masks = [np.asarray(arrays[f"{part}_mask"], dtype=bool) for part in parts]
        for part, mask in zip(parts, masks):
            if mask.shape[-1] != labelled.size or mask.ndim not in (1, 2):
                raise ValueError(f"array '{part}_mask' has shape {mask.shape}; expected "
                                 f"({labelled.size},) or (num_splits, {labelled.size})")
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
def load_temporal_bundle(name: str, entry: dict, path: Path, arrays: dict,
                         split: int = 0) -> TemporalGraph:
    """TemporalGraph of a temporal bundle, split at its thresholds (default: 70%/85% of t)."""
    if split != 0:
        raise DatasetError(f"dataset '{name}' has one chronological split; split={split} "
                           "is out of range (use 0)")
    src, dst = arrays["src"].astype(np.int64), arrays["dst"].astype(np.int64)
    bipartite = bool(arrays.get("bipartite", False))
    graph = TemporalGraph(
        src=src, dst=dst, t=arrays["t"],
        num_nodes=int(arrays["num_nodes"]) if "num_nodes" in arrays else
        int(max(src.max(initial=-1), dst.max(initial=-1))) + 1,
        edge_feat=arrays["edge_feat"].astype(np.float32) if "edge_feat" in arrays else None,
        bipartite=bipartite, num_src_nodes=int(arrays["num_src_nodes"]) if bipartite else None,
        val_time=float(arrays["split_val_t"]) if "split_val_t" in arrays else None,
        test_time=float(arrays["split_test_t"]) if "split_test_t" in arrays else None,
        name=name, metric=entry.get("metric", "ap"), edge_label=arrays.get("label"),
        node_label=arrays["node_label"].astype(np.int64) if "node_label" in arrays else None,
        meta={"source": "bundle", "file": str(path)})
    _check_node_ids(arrays, graph.num_nodes)
    if bipartite:
        split = graph.num_src_nodes
        wrong = np.flatnonzero((src >= split) | (dst < split))
        if len(wrong):
            raise ValueError(f"'bipartite' is set, so sources are 0..{split - 1} and "
                             f"destinations {split}.. (num_src_nodes), but event {wrong[0]} "
                             f"goes {src[wrong[0]]} -> {dst[wrong[0]]} ({len(wrong)} such "
                             "events); fix the ids or drop 'bipartite'")
    return graph


# ----------------------------------------------------------------------------- registry hooks
RANDOM_SPLIT_PARAMS = ("train_fraction", "val_fraction")


def load(name: str, entry: dict, root: Path, split: int = 0, params: dict | None = None):
    """Registry entry point: the entry's kind decides what it is (a Graph, or a TemporalGraph)."""
    params = dict(params or {})
    unknown = sorted(set(params) - set(RANDOM_SPLIT_PARAMS))
    if unknown:
        raise DatasetError(f"dataset '{name}': unknown params {', '.join(unknown)}; bundles "
                           f"accept only {', '.join(RANDOM_SPLIT_PARAMS)} (for the random "
                           "split of datasets that ship none)")
    temporal = entry["kind"] == "temporal"
    if temporal and params:
        raise DatasetError(f"dataset '{name}' is temporal and takes no params "
                           f"(got {', '.join(params)})")
    path = require_bundle(name, entry["file"], root)
    arrays = read_bundle(path, entry["kind"], entry["task"])
    if temporal:
        return _built(path, lambda: load_temporal_bundle(name, entry, path, arrays, split))
    return _built(path, lambda: load_static_bundle(name, entry, path, arrays, split, params))


def locate(name: str, entry: dict, root: Path):
    path = find_bundle(entry["file"], root)
    return (True, path) if path else (False, root / "bundles" / entry["file"])
