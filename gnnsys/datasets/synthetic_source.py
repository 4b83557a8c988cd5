"""Registry hooks for synthetic datasets: resolve parameters, generate once, cache on disk.

A synthetic graph is cached under <data root>/synthetic/<name>-<hash>/, the hash covering
the generator version, the full parameter set and the split, so changing any of them
builds a new graph and an old cache is never silently reused. Later loads memory-map it.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from gnnsys.datasets.cache import load_or_build
from gnnsys.datasets.synthetic import GENERATOR_VERSION, SyntheticParams, generate
from gnnsys.errors import DatasetError


def resolve_params(name: str, entry: dict, overrides: dict | None = None) -> SyntheticParams:
    """The preset's params with `overrides` applied, validated."""
    values = {**entry.get("params", {}), **(overrides or {})}
    try:
        return SyntheticParams.from_dict(values)
    except (KeyError, TypeError, ValueError) as err:
        message = err.args[0] if err.args else str(err)
        raise DatasetError(f"dataset '{name}': {message}") from None


def cache_dir(name: str, params: SyntheticParams, root: Path, split: int = 0) -> Path:
    key = json.dumps({"generator_version": GENERATOR_VERSION, "params": params.to_dict(),
                      "split": split}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return root / "synthetic" / f"{name}-{digest}"


def load(name: str, entry: dict, root: Path, split: int = 0, params: dict | None = None):
    resolved = resolve_params(name, entry, params)
    return load_or_build(cache_dir(name, resolved, root, split),
                         lambda: generate(resolved, name=name, split=split))


def locate(name: str, entry: dict, root: Path):
    return True, cache_dir(name, resolve_params(name, entry), root)
