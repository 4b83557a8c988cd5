"""Atomic directory writes, shared by the partition format and `gnnsys.graph.Graph.save`.

Lives here (numpy-free, stdlib only) because `partition/` must not import `gnnsys`."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_directory(path: Path):
    """Build a directory at a temporary sibling path, then swap it in for `path` in one
    rename; on any error the temporary is removed and an existing `path` is untouched."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
