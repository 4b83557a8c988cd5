"""Datasets read through PyTorch Geometric: Planetoid (static) and JODIE (temporal).

Both use PyG's standard on-disk layout, <data root>/planetoid/<Name>/raw/... and
<data root>/jodie/<name>/raw/<name>.csv. PyG downloads whenever a raw file is missing, so
the raw files are checked first and a missing one raises DatasetError instead: no
download is ever attempted. The `*_to_*` functions convert PyG's in-memory objects.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from gnnsys.datasets.errors import DatasetError
from gnnsys.graph import Graph
from gnnsys.temporal_graph import TemporalGraph

PLANETOID_RAW = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
PLANETOID_URL = "https://github.com/kimiyoung/planetoid/tree/master/data"
JODIE_URL = "http://snap.stanford.edu/jodie/{}.csv"


# ----------------------------------------------------------------------------- planetoid
def planetoid_dir(entry: dict, root: Path) -> Path:
    return root / "planetoid" / entry["pyg_name"]


def planetoid_raw_files(entry: dict, root: Path) -> list[Path]:
    raw = planetoid_dir(entry, root) / "raw"
    return [raw / f"ind.{entry['pyg_name'].lower()}.{part}" for part in PLANETOID_RAW]


def load_planetoid(name: str, entry: dict, root: Path, split: int = 0) -> Graph:
    if split != 0:
        raise DatasetError(f"dataset '{name}' has 1 standard split (the public Planetoid "
                           f"split); split={split} is out of range (use 0)")
    _require_files(name, planetoid_raw_files(entry, root),
                   f"the Planetoid raw files from {PLANETOID_URL}")
    from torch_geometric.datasets import Planetoid

    dataset = Planetoid(str(root / "planetoid"), entry["pyg_name"])
    graph = planetoid_to_graph(dataset[0], name, dataset.num_classes,
                               metric=entry.get("metric", "accuracy"))
    graph.meta["location"] = str(planetoid_dir(entry, root))
    return graph


def planetoid_to_graph(data, name: str, num_classes: int, metric: str = "accuracy") -> Graph:
    """Graph from a PyG `Data` with x, y, edge_index and train/val/test masks."""
    num_nodes = int(data.num_nodes)
    labels = data.y.numpy().astype(np.int64)
    graph = Graph.from_edge_index(
        data.edge_index.numpy(), num_nodes,
        x=np.ascontiguousarray(data.x.numpy(), dtype=np.float32), y=labels,
        num_classes=int(num_classes), name=name, metric=metric,
        meta={"source": "planetoid", "split_kind": "standard"})
    for part in ("train", "val", "test"):
        mask = getattr(data, f"{part}_mask").numpy()
        setattr(graph, f"{part}_idx", np.flatnonzero(mask & (labels >= 0)).astype(np.int64))
    return graph


# ----------------------------------------------------------------------------- jodie
def jodie_dir(entry: dict, root: Path) -> Path:
    return root / "jodie" / entry["pyg_name"]


def jodie_raw_file(entry: dict, root: Path) -> Path:
    return jodie_dir(entry, root) / "raw" / f"{entry['pyg_name']}.csv"


def load_jodie(name: str, entry: dict, root: Path, split: int = 0) -> TemporalGraph:
    if split != 0:
        raise DatasetError(f"dataset '{name}' has one chronological split; split={split} "
                           "is out of range (use 0)")
    _require_files(name, [jodie_raw_file(entry, root)],
                   f"the JODIE csv from {JODIE_URL.format(entry['pyg_name'])}")
    from torch_geometric.datasets import JODIEDataset

    dataset = JODIEDataset(str(root / "jodie"), entry["pyg_name"])
    graph = jodie_to_temporal(dataset[0], name, metric=entry.get("metric", "ap"))
    graph.meta["location"] = str(jodie_dir(entry, root))
    return graph


def jodie_to_temporal(data, name: str, metric: str = "ap") -> TemporalGraph:
    """TemporalGraph from PyG's `TemporalData` (src users, dst items already offset).

    The split thresholds are the 70%/85% time quantiles, as in TGN.
    """
    src, dst, t = data.src.numpy(), data.dst.numpy(), data.t.numpy()
    order = np.argsort(t, kind="stable")        # the csv files are sorted; make sure
    msg = data.msg.numpy()
    edge_feat = msg[order].astype(np.float32) if msg.ndim == 2 and msg.shape[1] else None
    num_src_nodes = int(src.max()) + 1 if src.size else 0
    return TemporalGraph(
        src=src[order].astype(np.int64), dst=dst[order].astype(np.int64),
        t=t[order].astype(np.int64),
        num_nodes=max(int(dst.max()) + 1 if dst.size else 0, num_src_nodes),
        edge_feat=edge_feat, bipartite=True, num_src_nodes=num_src_nodes, name=name,
        metric=metric, edge_label=data.y.numpy()[order].astype(np.int64),
        meta={"source": "jodie"})


# ----------------------------------------------------------------------------- shared
def _require_files(name: str, files: list[Path], what: str) -> None:
    missing = [f for f in files if not f.is_file()]
    if missing:
        directory = missing[0].parent
        listing = ", ".join(f.name for f in missing)
        raise DatasetError(
            f"dataset '{name}' is not available offline: missing {listing} in {directory}. "
            f"This machine has no network access, so put {what} there by hand "
            "(or pass root= / set $GNNSYS_DATA to the directory that has them).")


def load(name: str, entry: dict, root: Path, split: int = 0, params: dict | None = None):
    if params:
        raise DatasetError(f"dataset '{name}' takes no params (got {', '.join(params)})")
    if entry["source"] == "planetoid":
        return load_planetoid(name, entry, root, split)
    return load_jodie(name, entry, root, split)


def locate(name: str, entry: dict, root: Path):
    if entry["source"] == "planetoid":
        files = planetoid_raw_files(entry, root)
        return all(f.is_file() for f in files), planetoid_dir(entry, root)
    return jodie_raw_file(entry, root).is_file(), jodie_dir(entry, root)
