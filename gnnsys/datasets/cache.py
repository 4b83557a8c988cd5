"""Build-once, load-memory-mapped-afterwards caching of graphs under the data root.

Several processes (a benchmark and its workers, parallel test runs) may ask for the same
graph at once: an exclusive file lock beside the cache directory makes the first one build
and save it (atomically, via `Graph.save`) while the others wait and then load the result.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Callable

from common.files import open_own
from gnnsys.errors import DatasetError
from gnnsys.graph import Graph


def is_cached(directory: Path) -> bool:
    return (directory / "meta.json").is_file()


def load_or_build(directory: Path, build: Callable[[], Graph], mmap: bool = True) -> Graph:
    """Graph.load(directory) if it is there, else build(), save it there, and load it back."""
    directory = Path(directory)
    if is_cached(directory):
        return _load(directory, mmap)
    directory.parent.mkdir(parents=True, exist_ok=True)
    lock_path = directory.parent / f".{directory.name}.lock"
    with open(open_own(lock_path, os.O_WRONLY), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not is_cached(directory):     # another process may have built it meanwhile
                build().save(directory)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return _load(directory, mmap)


def _load(directory: Path, mmap: bool) -> Graph:
    """The cached graph; a damaged cache is one line saying how to rebuild it."""
    try:
        return Graph.load(directory, mmap=mmap)
    except (ValueError, OSError, KeyError, TypeError) as err:   # JSONDecodeError is a ValueError
        raise DatasetError(f"the cached graph in {directory} is damaged ({type(err).__name__}: "
                           f"{' '.join(str(err).split())[:200]}); delete that directory and "
                           "the next run rebuilds it") from None

