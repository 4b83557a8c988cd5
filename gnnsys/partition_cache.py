"""The one partition cache of minibatch and full-graph training (`gnnsys partition`).

The directory is `partition.dir`, else `<data root>/parts/<dataset>-s<split>-<method>-<K>-
<digest>`, the digest naming every setting the stored files depend on (the manifest
records them too). A directory is reused when the settings the run's mode reads match
(full-graph reads only the vertex -> part assignment, so any sampler settings do), when it
was built from the run's graph (if the caller has it loaded) and its files have the
recorded sizes; anything else is a one-line error naming the setting and the fix.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from partition.build import build_partitions
from partition.format import PartitionError, PartitionSet, StalePartitions, graph_fingerprint

# What the vertex -> part assignment depends on; the VIP row order inside each part also
# depends on the sampler, the stored features on their normalisation and dtype. A mode
# names those its partitions are read by (`Mode.partition_keys`).
ASSIGNMENT_SETTINGS = ("dataset.name", "dataset.split", "dataset.files", "dataset.params",
                       "partition.method", "partition.num_parts", "partition.seed")
ALL_SETTINGS = ("dataset.name", "dataset.split", "dataset.files", "dataset.params",
                "partition.seed", "dataset.normalize_features", "dataset.feature_dtype",
                "partition.method", "partition.num_parts", "sampler.fanouts",
                "sampler.batch_size")
FIX = "`gnnsys partition --config <run.yaml> --force`"


def num_parts(config) -> int:
    return config.partition.num_parts or config.cluster.workers


def parts_dir(config) -> Path:
    """`partition.dir`, else a directory of the data root named by the settings (a digest of
    all of them: runs with other settings build their own, never reuse a stale one)."""
    if config.partition.dir:
        return Path(config.partition.dir).expanduser()
    d = config.dataset
    from .datasets import data_root
    settings = json.dumps(partition_settings(config), sort_keys=True).encode()
    name = (f"{d.name}-s{d.split}-{config.partition.method}-{num_parts(config)}-"
            f"{hashlib.sha256(settings).hexdigest()[:8]}")
    return data_root(d.root) / "parts" / name


def partition_settings(config) -> dict:
    """Every config setting the stored files depend on, by its config name."""
    from .datasets.registry import dataset_files
    d, p, s = config.dataset, config.partition, config.sampler
    return {"dataset.name": d.name, "dataset.split": d.split,
            "dataset.files": dataset_files(d.name, d.root, d.path),
            "dataset.params": dict(d.params or {}), "partition.seed": p.seed,
            "dataset.normalize_features": d.normalize_features,
            "dataset.feature_dtype": d.feature_dtype,
            "partition.method": p.method, "partition.num_parts": num_parts(config),
            "sampler.fanouts": list(s.fanouts), "sampler.batch_size": s.batch_size}


def _settings_read_by(config) -> dict:
    from .mode import mode_class
    settings, keys = partition_settings(config), mode_class(config.mode).partition_keys
    if keys is not None:
        return {name: settings[name] for name in keys}
    raise PartitionError(f"mode {config.mode!r} keeps its own vertex ownership; partitions "
                         "on disk are for mode minibatch or fullgraph")


def open_partitions(config, graph=None, checksums: bool = False) -> PartitionSet:
    """The config's existing partitions, checked against it (sizes; sha256 if asked) and,
    given the run's graph, against that graph."""
    parts = PartitionSet(parts_dir(config))
    parts.check_matches(_settings_read_by(config), fix=FIX)
    if graph is not None and parts.manifest.get("source_fingerprint") != \
            graph_fingerprint(graph.indptr, graph.num_features):
        raise PartitionError(f"{parts.path} was built from another graph than this run's "
                             f"{graph.name!r}; rebuild it ({FIX}) or set partition.dir to "
                             "another directory")
    parts.verify(checksums=checksums)
    return parts


def ensure_partitions(config, graph=None, force: bool = False,
                      progress: bool = True) -> PartitionSet:
    """Open the config's partitions, building them first if there are none (or `force`).
    `graph`: the run's graph if already loaded (else it is loaded only to build)."""
    _settings_read_by(config)                   # a mode without partitions fails first
    path = parts_dir(config)
    built = path.exists() and any(path.iterdir())      # an empty directory is not built yet
    if built and not force:
        try:
            return open_partitions(config, graph)
        except StalePartitions:
            if config.partition.dir:      # the user's directory: theirs to delete
                raise
            # gnnsys's own cache (named by the settings), written by an older version:
            # rebuilt in place, as a missing one would be
    if built and not (path / "manifest.json").exists():
        raise PartitionError(f"{path} exists but is not a partition directory; remove it "
                             "or set partition.dir elsewhere")
    from .datasets import load_run_graph
    from .runlog import progress as bar
    graph = graph or load_run_graph(config)     # as training sees it (checked, normalised)
    build_partitions(graph, path, method=config.partition.method, num_parts=num_parts(config),
                     fanouts=list(config.sampler.fanouts),
                     batch_size=config.sampler.batch_size, seed=config.partition.seed,
                     progress=lambda it, **kw: bar(it, enabled=progress, **kw),
                     extra={"settings": partition_settings(config)})
    return open_partitions(config, graph)


def vertex_parts(parts: PartitionSet) -> np.ndarray:
    """Part of every original vertex id, int64 [N]: what `assign_parts` gave at build time
    (part k owns the relabelled ids offsets[k]..offsets[k+1], listed in its orig_ids)."""
    owner = np.full(parts.book.num_nodes, -1, dtype=np.int64)
    for k in range(parts.num_parts):
        owner[parts.array(k, "orig_ids")] = k
    return owner


def fullgraph_parts(config, graph, progress: bool = True) -> np.ndarray:
    """Full-graph mode's vertex -> part [N] from the shared cache; one part needs none."""
    if num_parts(config) == 1:
        return np.zeros(graph.num_nodes, dtype=np.int64)
    return vertex_parts(ensure_partitions(config, graph, progress=progress))
