"""Datasets read through PyTorch Geometric: Planetoid (static) and JODIE (temporal).

Both use PyG's standard on-disk layout, <data root>/planetoid/<Name>/raw/... and
<data root>/jodie/<name>/raw/<name>.csv. PyG downloads whenever a raw file is missing, so
the raw files are checked first and a missing one raises DatasetError instead: no
download is ever attempted. The `*_to_*` functions convert PyG's in-memory objects.
"""
from __future__ import annotations

from pathlib import Path

from gnnsys.errors import DatasetError
from gnnsys.graph import Graph
from gnnsys.interop.pyg import from_pyg, from_pyg_temporal
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
    from unittest import mock
    from torch_geometric.io import planetoid as planetoid_io

    # PyG's reader, minus its processed cache (a pickle PyG may load with code) and with
    # the raw pickles read by an unpickler that only builds arrays, sparse matrices, dicts
    with mock.patch.object(planetoid_io, "pickle", _ArrayPickle):
        data = planetoid_io.read_planetoid_data(str(planetoid_dir(entry, root) / "raw"),
                                                entry["pyg_name"])
    graph = planetoid_to_graph(data, name, int(data.y.max()) + 1,
                               metric=entry.get("metric", "accuracy"))
    graph.meta = {"source": "planetoid", "split_kind": "standard",
                  "location": str(planetoid_dir(entry, root))}
    return graph


planetoid_to_graph = from_pyg        # PyG's Data: x, y, edge_index, split masks


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
    import pandas as pd
    import torch
    from torch_geometric.data import TemporalData

    # PyG's JODIE processing (user ids, then item ids after them), from the csv directly:
    # PyG would keep and later load a processed pickle
    path = jodie_raw_file(entry, root)
    try:
        df = pd.read_csv(path, skiprows=1, header=None)
        columns = [torch.from_numpy(df.iloc[:, k].to_numpy()).long() for k in range(4)]
    except (ValueError, IndexError, pd.errors.ParserError) as err:
        raise DatasetError(f"dataset '{name}': {path} is not a JODIE csv ({err})") from None
    src, dst, t, y = columns
    data = TemporalData(src=src, dst=dst + int(src.max()) + 1, t=t, y=y,
                        msg=torch.from_numpy(df.iloc[:, 4:].to_numpy()).float())
    graph = jodie_to_temporal(data, name, metric=entry.get("metric", "ap"))
    graph.meta = {"source": "jodie", "location": str(jodie_dir(entry, root))}
    return graph


jodie_to_temporal = from_pyg_temporal   # users then items (offset), 70%/85% time split


# ----------------------------------------------------------------------------- shared
class _ArrayPickle:
    """`pickle` as Planetoid's reader uses it, restricted to the classes its files hold:
    a crafted file cannot name (and so cannot call) anything else."""

    ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
               ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar"), ("scipy.sparse.csr", "csr_matrix"),
               ("scipy.sparse._csr", "csr_matrix"), ("collections", "defaultdict"),
               ("builtins", "list"), ("builtins", "set")}

    @classmethod
    def load(cls, file, encoding="ASCII"):
        import pickle

        class Unpickler(pickle.Unpickler):
            def find_class(self, module, name):
                if (module, name) not in cls.ALLOWED:
                    raise DatasetError(f"{getattr(file, 'path', file)} holds {module}.{name}, "
                                       "which a Planetoid file never does; refusing to load it")
                return super().find_class(module, name)
        return Unpickler(file, encoding=encoding).load()



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
