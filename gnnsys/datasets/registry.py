"""The dataset registry: reads `datasets.yaml` (extended by $GNNSYS_DATASETS_YAML's file,
whose entries win on a shared name), lists its entries and dispatches loading.

`load_dataset(name)` looks the name up, checks the entry, and hands it to the loader of its
`source` (synthetic generator, offline bundle, Planetoid, OGB, JODIE). Loaders of the
downloadable sources only check that the expected files are in place: nothing here ever
touches the network, so a missing dataset fails at once with the files to put where.
"""
from __future__ import annotations

import difflib
import functools
import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from gnnsys.errors import DatasetError
from gnnsys.yaml_numbers import read_yaml

DATA_ENV = "GNNSYS_DATA"
DEFAULT_DATA_ROOT = Path("~/.cache/gnnsys")
REGISTRY_ENV = "GNNSYS_DATASETS_YAML"
REGISTRY_FILE = Path(__file__).resolve().parents[2] / "datasets.yaml"

SOURCES = ("synthetic", "bundle", "planetoid", "ogb", "jodie")
# A task is what is predicted (a node's class, whether a link exists); a data kind is what
# the graph is (a static graph, a temporal event stream). Loaders and modes decide by the kind.
TASKS = ("node", "link")
KINDS = ("static", "temporal")
# An entry or config without a kind: the kind gnnsys trains that task on.
DEFAULT_KIND = {"node": "static", "link": "temporal"}
# The names older registries and run configs give as `task`: each meant a task and a kind.
LEGACY_TASKS = {"node_classification": ("node", "static"), "link_prediction": ("link", "temporal")}
METRICS = ("accuracy", "roc_auc", "ap")
# Fields each source's entries must carry besides source/task/metric.
REQUIRED_FIELDS = {"synthetic": ("params",), "bundle": ("file",), "planetoid": ("pyg_name",),
                   "ogb": ("ogb_name",), "jodie": ("pyg_name",)}


@dataclass(frozen=True)
class DatasetInfo:
    """One registry entry as `list_datasets` reports it."""

    name: str
    source: str
    task: str            # node | link
    kind: str            # static | temporal
    metric: str
    description: str
    available: bool      # loadable now, without a network (synthetic: always)
    location: str        # where its files are or must go (synthetic: the cache directory)


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The data directory: explicit root > $GNNSYS_DATA > ~/.cache/gnnsys (not created here)."""
    chosen = root if root is not None else os.environ.get(DATA_ENV) or DEFAULT_DATA_ROOT
    return Path(chosen).expanduser()


# A non-editable install has no checkout beside the package: setup.cfg installs the
# registry as a data file under <prefix>/share/gnnsys instead.
INSTALLED_REGISTRY_FILE = Path(sys.prefix) / "share" / "gnnsys" / "datasets.yaml"


def registry_paths() -> list[Path]:
    """The built-in registry, then $GNNSYS_DATASETS_YAML's (its entries win on a shared name)."""
    builtin = REGISTRY_FILE if REGISTRY_FILE.is_file() else INSTALLED_REGISTRY_FILE
    return [builtin] + ([Path(os.environ[REGISTRY_ENV])] if os.environ.get(REGISTRY_ENV) else [])


def registry() -> dict:
    """name -> entry of the registry files (validated; re-read when a file changes)."""
    entries = {}
    for path, fix in zip(registry_paths(), ("it is the top-level datasets.yaml of the gnnsys "
                                            "checkout", f"${REGISTRY_ENV} names it")):
        if not path.is_file():
            raise DatasetError(f"dataset registry {path} not found; {fix}")
        entries.update(_read_registry(str(path), path.stat().st_mtime_ns))
    return entries


@functools.lru_cache(maxsize=4)
def _read_registry(path: str, _mtime_ns: int) -> dict:
    try:
        entries = read_yaml(Path(path).read_text()) or {}
    except yaml.YAMLError as err:
        raise DatasetError(f"dataset registry {path} is not valid YAML: {err}") from None
    if not isinstance(entries, dict):
        raise DatasetError(f"dataset registry {path}: the top level must map names to entries")
    return {name: _checked_entry(path, name, entry) for name, entry in entries.items()}


def task_and_kind(task: str | None, kind: str | None = None) -> tuple:
    """(task, kind) of a `task` as an entry or config writes it: an older name
    (node_classification, link_prediction) gives both; otherwise the kind, if not given,
    is the task's DEFAULT_KIND. Either is None where not given."""
    if task in LEGACY_TASKS:
        task, implied = LEGACY_TASKS[task]
        kind = kind or implied
    return task, kind or DEFAULT_KIND.get(task)


def _checked_entry(path: str, name: str, entry) -> dict:
    """The entry with its task and kind in today's words; one line where a field is wrong."""
    where = f"dataset registry {path}, entry '{name}'"
    if not isinstance(entry, dict):
        raise DatasetError(f"{where}: expected a mapping of fields")
    if entry.get("task") in LEGACY_TASKS or "kind" not in entry:
        task, kind = task_and_kind(entry.get("task"), entry.get("kind"))
        entry = {**entry, "task": task, "kind": kind} if task in TASKS else entry
    for key, allowed in (("source", SOURCES), ("task", TASKS), ("kind", KINDS),
                         ("metric", METRICS)):
        if entry.get(key) not in allowed:
            raise DatasetError(f"{where}: '{key}' is {entry.get(key)!r}; "
                               f"allowed: {', '.join(allowed)}")
    for key in REQUIRED_FIELDS[entry["source"]]:
        if key not in entry:
            raise DatasetError(f"{where}: source '{entry['source']}' needs the field '{key}'")
    return entry


def lookup(name: str) -> dict:
    entries = registry()
    if name not in entries:
        close = difflib.get_close_matches(name, list(entries), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise DatasetError(f"unknown dataset '{name}'.{hint} Run `gnnsys datasets` to list "
                           f"the registered datasets (defined in {' and '.join(map(str, registry_paths()))}).")
    return entries[name]


def _source_module(source: str):
    # Imported on demand: the synthetic generator compiles numba kernels and the PyG/OGB
    # loaders import torch; loading a bundle needs neither.
    import importlib
    module = {"synthetic": "synthetic_source", "bundle": "bundles",
              "planetoid": "pyg_sources", "jodie": "pyg_sources", "ogb": "ogb_source"}[source]
    return importlib.import_module(f"gnnsys.datasets.{module}")


def dataset_entry(name: str, path: str | None = None, task: str | None = None,
                  kind: str | None = None) -> dict:
    """The registry entry of `name`, or of the user's bundle at `path`; `task` and `kind`,
    if given, must be the entry's (the kind decides whether a bundle is read as static
    or temporal; a path's bundle is read as `task`'s kind, default a static node one)."""
    task, kind = task_and_kind(task, kind)
    if path:
        from gnnsys.datasets.bundles import path_entry
        return path_entry(path, task or "node", kind or DEFAULT_KIND[task or "node"])
    entry = lookup(name)
    for key, wanted in (("task", task), ("kind", kind)):
        if wanted and wanted != entry[key]:
            raise DatasetError(f"dataset '{name}' is registered as {entry['task']} "
                               f"prediction on {entry['kind']} data, not {key} {wanted}; "
                               "pick a dataset of that kind or another mode")
    return entry


def load_dataset(name: str, root: str | os.PathLike | None = None, split: int = 0,
                 params: dict | None = None, path: str | None = None, task: str | None = None,
                 kind: str | None = None):
    """Load a dataset as a `Graph` (static) or `TemporalGraph` (temporal).

    root: data directory (see `data_root`); split: which standard split of a multi-split
    dataset (for datasets split at random, the seed offset of the split); params: overrides
    of a synthetic generator's parameters; path: a bundle of one's own (docs/DATA.md), read
    as `kind` (or `task`'s kind), instead of a registry name. Raises DatasetError with the
    fix when it cannot.
    """
    entry = dataset_entry(name, path, task, kind)
    if isinstance(split, bool) or not isinstance(split, int) or split < 0:
        raise DatasetError(f"dataset '{name}': split must be a non-negative integer, "
                           f"got {split!r}")
    if params is not None and not isinstance(params, dict):
        raise DatasetError(f"dataset '{name}': params must be a mapping, got {params!r}")
    module = _source_module(entry["source"])
    return module.load(name, entry, data_root(root), split=split, params=params or {})


def dataset_node_ids(name: str, root: str | os.PathLike | None = None,
                     path: str | None = None, task: str | None = None,
                     kind: str | None = None):
    """The user's id of each node (a bundle's `node_ids`, docs/DATA.md), or None: the
    dataset's node ids are its rows."""
    entry = dataset_entry(name, path, task, kind)
    if entry["source"] != "bundle":
        return None
    from gnnsys.datasets.bundles import node_ids, require_bundle
    return node_ids(require_bundle(name, entry["file"], data_root(root)))


def list_datasets(root: str | os.PathLike | None = None) -> list[DatasetInfo]:
    """Every registry entry with whether it can be loaded now and where its files live."""
    base = data_root(root)
    infos = []
    for name, entry in registry().items():
        available, location = _source_module(entry["source"]).locate(name, entry, base)
        infos.append(DatasetInfo(name=name, source=entry["source"], task=entry["task"],
                                 kind=entry["kind"], metric=entry["metric"],
                                 description=" ".join(str(entry.get("description", "")).split()),
                                 available=available, location=str(location)))
    return infos


def dataset_files(name: str, root: str | os.PathLike | None = None,
                  path: str | None = None) -> str:
    """What the dataset's files on disk hold now (name, bytes, a digest of their content),
    so that what is derived from them (partitions, a checkpoint to resume) can tell when
    they changed, even in place at the same size and time. Generated datasets, and
    graphs handed over in memory under a name the registry does not know: ''."""
    if not path and name not in registry():
        return ""
    if dataset_entry(name, path)["source"] == "synthetic":   # its cache is keyed by its params
        return ""
    path = dataset_location(name, root, path)
    files = [f for f in sorted(path.rglob("*")) if f.is_file()] if path.is_dir() else \
        [path] if path.is_file() else []
    if not files:
        return f"{path.name}: missing"
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.relative_to(path) if path.is_dir() else f.name}\0".encode())
        digest.update(_file_digest(f).encode())
    size = sum(f.stat().st_size for f in files)
    return f"{path.name}: {len(files)} file(s), {size} bytes, sha256 {digest.hexdigest()[:16]}"


def dataset_location(name: str, root: str | os.PathLike | None = None,
                     path: str | None = None) -> Path | None:
    """The file or folder a dataset's files are in (a generated one's: its cache), found or
    not; None for a graph handed over in memory under a name the registry does not know."""
    if not path and name not in registry():
        return None
    entry = dataset_entry(name, path)
    return Path(_source_module(entry["source"]).locate(name, entry, data_root(root))[1])


_digests: dict = {}


def _file_digest(file: Path) -> str:
    """sha256 of a file's content, remembered for this process while its inode, size and
    change times stay the same (a run asks several times)."""
    s = file.stat()
    key = (str(file), s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns)
    if key not in _digests:
        h = hashlib.sha256()
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        _digests[key] = h.hexdigest()
    return _digests[key]
