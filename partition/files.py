"""Atomic directory writes (stdlib only), used by partition.format and gnnsys.graph."""
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
