"""The one dataset loader of a training run: `load_run_graph(config)` for every mode.

It loads `dataset.name` through the registry, checks that the graph fits the mode (a
static graph with features, labels and a training split for minibatch and full-graph; an
event stream for temporal) and applies `dataset.normalize_features`, then
`dataset.feature_dtype`, to static graphs.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import DatasetError
from ..sparse_features import as_csr, densified, is_sparse
from ..temporal_graph import exact_time
from .registry import load_dataset

NORMALIZATIONS = ("none", "row", "standard")
FEATURE_DTYPES = ("float32", "float16")


def load_run_graph(config, graph=None):
    """The graph the run's mode trains on (`graph`, else the config's dataset), checked and
    (static) feature-normalised."""
    from ..mode import mode_class
    d, kind = config.dataset, mode_class(config.mode).data_kind
    if graph is None:       # a path's file is read as the mode's kind; a named one is checked below
        graph = load_dataset(d.name, root=d.root, split=d.split, params=d.params or None,
                             path=d.path, task=d.task, kind=kind if d.path else None)
    if kind == "temporal":
        if graph.kind != "temporal":
            raise DatasetError(f"dataset {d.name!r} is not a temporal graph (no event stream); "
                               f"mode '{config.mode}' needs one, e.g. wikipedia or collegemsg")
        check_events(d.name, graph)
        check_finite(d.name, graph.edge_feat, "edge feature")
        check_finite(d.name, graph.node_feat, "node feature")
        return graph
    if graph.kind == "temporal":
        raise DatasetError(f"dataset '{d.name}' is temporal; use mode: temporal for it")
    if mode_class(config.mode).task == "link":      # edges are the labels: no y or node split
        if getattr(graph, "x", None) is None or graph.x.shape[1] == 0:
            raise DatasetError(f"dataset '{d.name}' has no node features; {config.mode} "
                               "training reads them (a bundle without x gets structural ones)")
        check_finite(d.name, graph.x, "feature")
        return with_feature_dtype(normalize_features(graph, d.normalize_features),
                                  d.feature_dtype)
    if getattr(graph, "x", None) is None or graph.y is None or graph.train_idx is None:
        raise DatasetError(f"dataset '{d.name}' lacks features, labels or a train split; "
                           f"{config.mode} training needs all three")
    check_labels_and_splits(d.name, graph)
    check_finite(d.name, graph.x, "feature")
    return with_feature_dtype(normalize_features(graph, d.normalize_features), d.feature_dtype)


def check_labels_and_splits(name: str, graph) -> None:
    """Refuse a static graph that would train on nonsense without a word: features of
    no column, labels outside 0..num_classes-1 (-1 = unlabelled), a train split with no
    labelled node, or splits that share nodes (training nodes would be scored)."""
    if graph.x.shape[1] == 0:
        raise DatasetError(f"dataset '{name}': the features have 0 columns; give at least "
                           "one (a bundle without x gets structural features)")
    y, classes = np.asarray(graph.y), int(graph.num_classes)
    bad = np.flatnonzero((y < -1) | (y >= classes))
    if len(bad):
        raise DatasetError(f"dataset '{name}': node {bad[0]} has label {y[bad[0]]}, outside "
                           f"0..{classes - 1} (num_classes {classes}; -1 = unlabelled); "
                           f"{len(bad)} such nodes")
    splits = {s: np.asarray(getattr(graph, f"{s}_idx"), dtype=np.int64)
              for s in ("train", "val", "test")}
    if not np.any(y[splits["train"]] >= 0):
        raise DatasetError(f"dataset '{name}': the train split has no labelled node "
                           f"({len(splits['train'])} nodes, labels -1); nothing to train on")
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        shared = np.intersect1d(splits[a], splits[b])
        if len(shared):
            raise DatasetError(f"dataset '{name}': {len(shared)} nodes are in both the {a} "
                               f"and {b} splits (first: node {shared[0]}); splits must not "
                               "overlap")


def check_events(name: str, graph) -> None:
    """An event stream to train on: some events, node ids from 0, finite times, and
    split times that leave every split some events (else each would surface later as a
    raw error or a bare "empty split")."""
    t = np.asarray(graph.t)
    if not len(t):
        raise DatasetError(f"dataset '{name}' holds no events (src, dst and t are empty); "
                           "a temporal run trains on a time-ordered stream of events")
    for side in ("src", "dst"):
        ids = np.asarray(getattr(graph, side))
        if ids.dtype.kind == "i" and ids.min() < 0:
            bad = np.flatnonzero(ids < 0)
            raise DatasetError(f"dataset '{name}': event {bad[0]} has {side} {ids[bad[0]]}; "
                               f"node ids are rows 0..num_nodes-1 ({len(bad)} events have a "
                               "negative one; a bundle keeps ids of its own in 'node_ids')")
    if t.dtype.kind == "f" and not np.all(np.isfinite(t)):
        bad = np.flatnonzero(~np.isfinite(t))
        raise DatasetError(f"dataset '{name}': event {bad[0]} has time {t[bad[0]]}; every "
                           f"event needs a finite time ({len(bad)} do not)")
    val_t, test_t = graph.val_time, graph.test_time
    if val_t > test_t:
        raise DatasetError(f"dataset '{name}': split_val_t {exact_time(val_t)} is after "
                           f"split_test_t {exact_time(test_t)}, the splits' times are "
                           "inverted (validation is split_val_t < t <= split_test_t): "
                           "swap them")
    for split, count in zip(("train", "validation", "test"), map(np.sum, graph.split_masks())):
        if not count:
            raise DatasetError(
                f"dataset '{name}': no event falls in the {split} split (train t <= "
                f"{exact_time(val_t)} < validation <= {exact_time(test_t)} < test; the "
                f"events' times span {exact_time(t[0])}..{exact_time(t[-1])}); move "
                "split_val_t / split_test_t inside that span")


def check_finite(name: str, rows, what: str, chunk: int = 1 << 16) -> None:
    """Refuse NaN / infinite inputs at load: they would train to chance without a word."""
    if rows is None:
        return
    if is_sparse(rows):                 # only the stored values can be bad
        value_ok = np.isfinite(rows.data)
        bad = np.zeros(rows.shape[0], dtype=bool)
        bad[np.searchsorted(rows.indptr, np.flatnonzero(~value_ok), side="right") - 1] = True
    else:
        bad = _bad_dense_rows(rows, chunk)
    if bad.any():
        raise DatasetError(f"dataset '{name}': {int(bad.sum())} {what} rows hold NaN or "
                           f"infinite values (first: row {int(np.flatnonzero(bad)[0])}); "
                           "clean the data before training")


def _bad_dense_rows(rows, chunk: int) -> np.ndarray:
    bad = []
    for start in range(0, len(rows), chunk):      # chunks: a memory-mapped array stays on disk
        block = np.asarray(rows[start:start + chunk])
        bad.append(~np.isfinite(block).reshape(len(block), -1).all(1))
    return np.concatenate(bad) if bad else np.zeros(0, dtype=bool)


def normalize_features(graph, how: str):
    """`row`: each row sums to 1 (PyG's NormalizeFeatures, usual for bag-of-words inputs);
    `standard`: zero mean, unit variance per column, with training-node statistics.
    Makes an in-memory copy of the features, so leave it `none` for huge graphs. Sparse
    features stay sparse under `row`; `standard` (dense by nature) densifies them."""
    if how == "none":
        return graph
    if how == "row" and is_sparse(graph.x):
        x = as_csr(graph.x).copy()        # the loaded graph is left as it was
        sums = np.asarray(x.sum(1), dtype=np.float32).ravel()
        x.data /= np.repeat(np.maximum(sums, 1e-12), np.diff(x.indptr))
        return dataclasses.replace(graph, x=x)
    x = np.array(densified(graph.x, "dataset.normalize_features=standard shifts every "
                           "entry (use row or none to keep them sparse)"), dtype=np.float32)
    if how == "row":
        x /= np.maximum(x.sum(1, keepdims=True), 1e-12)
    else:
        mean, std = standard_statistics(x, graph.train_idx)
        x = (x - mean) / std
    return dataclasses.replace(graph, x=x)


def standard_statistics(x: np.ndarray, train_idx) -> tuple[np.ndarray, np.ndarray]:
    """`standard` normalisation's per-column mean and std (floored at 1e-6, so a constant
    column stays finite) over the training rows of dense float32 features `x`."""
    train = x[train_idx]
    return train.mean(0), np.maximum(train.std(0), 1e-6)


def prepared_inputs(x, features: dict):
    """Raw float32 features `x` (a torch tensor) prepared as a run prepared its own,
    by the recipe an export records (`features`: {"normalize", "dtype"}, and for
    `standard` the training nodes' "mean" and "std"): what the exported model must be
    fed. README ("Use") spells the same recipe out for readers without gnnsys."""
    if features["normalize"] == "row":
        x = x / x.sum(1, keepdim=True).clamp(min=1e-12)
    if features["normalize"] == "standard":
        x = (x - features["mean"]) / features["std"]
    if features["dtype"] == "float16":
        x = x.half().float()        # the precision the run stored them in
    return x


def with_feature_dtype(graph, dtype: str):
    """Dense features stored as `dtype`. float16 is how SALIENT++ stores them: half the
    memory, half the bytes each batch gathers and each remote row takes on the wire; the
    model computes in float32 (its first layer converts the gathered rows). CSR features
    are stored as their float32 nonzeros whatever this says (bag-of-words values are small
    counts or row-normalised fractions; the indices dominate their size)."""
    if is_sparse(graph.x):
        if dtype != "float32":
            raise DatasetError(f"dataset.feature_dtype={dtype} is for dense features, but "
                               f"'{graph.name}' has sparse (CSR) features, already stored "
                               "as their nonzeros; leave dataset.feature_dtype at float32")
        return graph
    if graph.x.dtype == np.dtype(dtype):
        return graph                    # as stored: a memory-mapped file stays mapped
    with np.errstate(over="ignore"):    # a value float16 cannot hold becomes inf: named below
        x = np.asarray(graph.x).astype(dtype)
    overflowed = _bad_dense_rows(x, 1 << 16)     # the input is finite (check_finite)
    if overflowed.any():
        row = int(np.flatnonzero(overflowed)[0])
        raise DatasetError(f"dataset.feature_dtype={dtype} cannot hold '{graph.name}'s "
                           f"features: row {row} reaches |x| = "
                           f"{float(np.abs(graph.x[row]).max()):.3g}, above {dtype}'s "
                           f"{float(np.finfo(dtype).max):.5g}; "
                           "normalise them (dataset.normalize_features) or use float32")
    return dataclasses.replace(graph, x=x)
