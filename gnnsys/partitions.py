"""Find the partitions a config asks for, or build them once (`gnnsys partition`).

The directory is `partition.dir`, or `<data root>/parts/<dataset>-s<split>-<method>-<K>`.
An existing directory is reused when its manifest matches the config (dataset, split,
generator params, method, number of parts) and its files have the recorded sizes; a
mismatch or corruption is an error naming the directory, never a silent rebuild.
"""
from __future__ import annotations

from pathlib import Path

from partition.build import build_partitions
from partition.format import PartitionError, PartitionSet


def num_parts(config) -> int:
    return config.partition.num_parts or config.cluster.workers


def parts_dir(config) -> Path:
    if config.partition.dir:
        return Path(config.partition.dir).expanduser()
    d = config.dataset
    from .datasets import data_root
    name = f"{d.name}-s{d.split}-{config.partition.method}-{num_parts(config)}"
    return data_root(d.root) / "parts" / name


def expected_manifest(config) -> dict:
    d = config.dataset
    return {"dataset_key": d.name, "split": d.split, "params": dict(d.params or {}),
            "normalize_features": d.normalize_features,
            "method": config.partition.method, "num_parts": num_parts(config)}


def open_partitions(config, checksums: bool = False) -> PartitionSet:
    """The config's existing partitions, checked against it (sizes; sha256 if asked)."""
    parts = PartitionSet(parts_dir(config))
    parts.check_matches(expected_manifest(config))
    parts.verify(checksums=checksums)
    return parts


def ensure_partitions(config, force: bool = False, progress: bool = True) -> PartitionSet:
    """Open the config's partitions, building them first if there are none (or `force`)."""
    path = parts_dir(config)
    if path.exists() and not force:
        return open_partitions(config)
    if path.exists() and not (path / "manifest.json").exists():
        raise PartitionError(f"{path} exists but is not a partition directory; remove it "
                             "or set partition.dir elsewhere")
    from .datasets import load_run_graph
    from .runlog import progress as bar
    # The same graph single-machine training sees (validated, features normalised).
    graph = load_run_graph(config)
    build_partitions(graph, path, method=config.partition.method, num_parts=num_parts(config),
                     fanouts=list(config.sampler.fanouts),
                     batch_size=config.sampler.batch_size, seed=config.train.seed,
                     progress=lambda it, **kw: bar(it, enabled=progress, **kw),
                     extra=expected_manifest(config))
    return open_partitions(config)
