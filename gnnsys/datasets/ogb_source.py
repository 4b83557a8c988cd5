"""OGB node-property datasets (ogbn-arxiv, ogbn-products, ogbn-papers100M).

Files use ogb's standard layout under <data root>/ogb/<ogbn_name>/ (RELEASE_v1.txt, raw/,
split/<kind>/); a missing one raises DatasetError naming it (nothing is downloaded). Only
the raw csv.gz / npz files are read, with pandas / numpy (no pickle); the ogb package
supplies just its metadata table (master.csv). The first load converts to a gnnsys Graph
saved in <dataset dir>/gnnsys/, which later loads memory-map (ogbn-products' features alone are ~1 GB).
"""
from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import numpy as np

from gnnsys.datasets.cache import is_cached, load_or_build
from gnnsys.datasets.edges import symmetric_csr
from gnnsys.datasets.npz import read_npz
from gnnsys.errors import DatasetError
from gnnsys.graph import Graph, csr_from_edges

OGB_URL = "http://snap.stanford.edu/ogb/data/nodeproppred/{}.zip"
CONVERTED_DIR = "gnnsys"
REEXTRACT = "extract it again from the OGB zip"


def dataset_dir(entry: dict, root: Path) -> Path:
    return root / "ogb" / entry["ogb_name"].replace("-", "_")


def required_files(entry: dict) -> list[str]:
    """Files (relative to the dataset directory) that ogb needs to build without downloading."""
    meta = _master_row(entry["ogb_name"])
    files = [f"RELEASE_v{meta['version']}.txt"]
    if meta["binary"] == "True":
        files += ["raw/data.npz", "raw/node-label.npz"]
    else:
        files += ["raw/edge.csv.gz", "raw/num-node-list.csv.gz", "raw/num-edge-list.csv.gz",
                  "raw/node-feat.csv.gz", "raw/node-label.csv.gz"]
    files += [f"split/{meta['split']}/{part}.csv.gz" for part in ("train", "valid", "test")]
    return files


def _master_row(ogb_name: str) -> dict:
    """ogb's metadata row for the dataset, read without importing ogb (which imports torch)."""
    spec = importlib.util.find_spec("ogb")
    if spec is None or not spec.submodule_search_locations:
        raise DatasetError(f"dataset '{ogb_name}' needs the ogb package: "
                           "pip install gnnsys[ogb]")
    master = Path(list(spec.submodule_search_locations)[0]) / "nodeproppred" / "master.csv"
    with open(master, newline="") as handle:
        rows = list(csv.reader(handle))
    names = rows[0][1:]
    if ogb_name not in names:
        raise DatasetError(f"'{ogb_name}' is not an OGB node-property dataset known to the "
                           f"installed ogb package; known: {', '.join(names)}")
    column = names.index(ogb_name) + 1
    return {row[0]: row[column] for row in rows[1:]}


def _missing_files(entry: dict, root: Path) -> list[str]:
    directory = dataset_dir(entry, root)
    return [f for f in required_files(entry) if not (directory / f).is_file()]


def load(name: str, entry: dict, root: Path, split: int = 0, params: dict | None = None):
    if params:
        raise DatasetError(f"dataset '{name}' takes no params (got {', '.join(params)})")
    if split != 0:
        raise DatasetError(f"dataset '{name}' has 1 standard split; split={split} is out of "
                           "range (use 0)")
    directory = dataset_dir(entry, root)
    if not is_cached(directory / CONVERTED_DIR):
        missing = _missing_files(entry, root)
        if missing:
            zip_name = _master_row(entry["ogb_name"])["download_name"]
            raise DatasetError(
                f"dataset '{name}' is not available offline: missing {', '.join(missing)} "
                f"under {directory}. This machine has no network access: fetch "
                f"{OGB_URL.format(zip_name)} elsewhere and unzip it so that its '{zip_name}' "
                f"folder becomes {directory} (or pass root= / set $GNNSYS_DATA).")
    return load_or_build(directory / CONVERTED_DIR,
                         lambda: _build(name, entry, root))


def _build(name: str, entry: dict, root: Path) -> Graph:
    # The raw files are read directly, never through ogb's NodePropPredDataset: it would
    # torch.load (unpickle) processed/data_processed and split_dict.pt, and a pickle in a
    # directory a config names can run any code.
    meta = _master_row(entry["ogb_name"])
    directory = dataset_dir(entry, root)
    raw = directory / "raw"
    if meta["binary"] == "True":
        data = read_npz(raw / "data.npz", REEXTRACT)
        edge_index, num_nodes = data["edge_index"], int(data["num_nodes_list"][0])
        features = data.get("node_feat")
        labels = read_npz(raw / "node-label.npz", REEXTRACT)["node_label"]
    else:
        edge_index = _read_csv(raw / "edge.csv.gz").T.astype(np.int64)
        num_nodes = int(_read_csv(raw / "num-node-list.csv.gz")[0, 0])
        features = (_read_csv(raw / "node-feat.csv.gz")
                    if meta["has_node_attr"] == "True" else None)
        labels = _read_csv(raw / "node-label.csv.gz")
    if meta["add_inverse_edge"] == "True":          # as ogb does for products
        edge_index = np.concatenate([edge_index, edge_index[::-1]], axis=1)
    split_dir = directory / "split" / meta["split"]
    split_idx = {part: _read_csv(split_dir / f"{part}.csv.gz")[:, 0].astype(np.int64)
                 for part in ("train", "valid", "test")}
    return ogb_to_graph({"edge_index": edge_index, "num_nodes": num_nodes,
                         "node_feat": features}, labels, split_idx, name=name,
                        num_classes=int(meta["num classes"]),
                        symmetrize=bool(entry.get("symmetrize", False)),
                        metric=entry.get("metric", "accuracy"))


def _read_csv(path: Path) -> np.ndarray:
    import pandas as pd
    try:
        return pd.read_csv(path, compression="gzip", header=None).values
    except (OSError, EOFError, ValueError) as err:    # bad gzip, truncated, not a table
        raise DatasetError(f"{path} is not a readable gzip'd csv ({type(err).__name__}: "
                           f"{' '.join(str(err).split())}); {REEXTRACT}") from None


def ogb_to_graph(graph_dict: dict, labels: np.ndarray, split_idx: dict, name: str,
                 num_classes: int, symmetrize: bool, metric: str = "accuracy") -> Graph:
    """Graph from ogb's numpy format: {'edge_index' [2,E], 'node_feat', 'num_nodes'}, labels
    [N,1] (NaN = unlabelled, as in papers100M) and {'train','valid','test'} index arrays.

    symmetrize: add the reverse of every edge and drop duplicates/self loops (arxiv and
    papers100M are directed citation graphs; products is already symmetric).
    """
    num_nodes = int(graph_dict["num_nodes"])
    edge_index = np.asarray(graph_dict["edge_index"])
    if symmetrize:
        indptr, indices = symmetric_csr(edge_index[0], edge_index[1], num_nodes)
    else:
        indptr, indices = csr_from_edges(edge_index[0], edge_index[1], num_nodes)
    labels = np.asarray(labels, dtype=np.float64).reshape(-1)
    y = np.where(np.isnan(labels), -1, labels).astype(np.int64)
    features = graph_dict.get("node_feat")
    x = None if features is None else np.ascontiguousarray(features, dtype=np.float32)
    return Graph(indptr=indptr, indices=indices, x=x, y=y,
                 train_idx=np.asarray(split_idx["train"], dtype=np.int64),
                 val_idx=np.asarray(split_idx["valid"], dtype=np.int64),
                 test_idx=np.asarray(split_idx["test"], dtype=np.int64),
                 num_classes=int(num_classes), name=name, metric=metric,
                 meta={"source": "ogb", "symmetrized": symmetrize,
                       "split_kind": "standard"})


def locate(name: str, entry: dict, root: Path):
    directory = dataset_dir(entry, root)
    if is_cached(directory / CONVERTED_DIR):
        return True, directory
    try:
        return not _missing_files(entry, root), directory
    except DatasetError:        # ogb not installed
        return False, directory
