import hashlib
import os
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def numba_cache_for_these_sources() -> Path:
    """A numba cache directory only this exact source tree can have filled: named by a
    digest of every package source, the Python and the numba version. Tests are never
    served machine code compiled from an older version of a module (a stale cache once
    hid a bug planted in common/rng.py), yet an unchanged tree reuses its kernels."""
    digest = hashlib.sha256()
    for path in sorted(p for package in ("common", "samplers", "partition", "gnnsys")
                       for p in (REPO / package).rglob("*.py")):
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    key = f"{digest.hexdigest()[:20]}-py{sys.version_info.major}{sys.version_info.minor}" \
          f"-numba{version('numba')}"
    return Path(tempfile.gettempdir()) / "gnnsys-test-numba" / key


# Before anything imports numba (it reads the variable once); subprocesses and Ray
# workers inherit it.
if "numba" in sys.modules:
    raise RuntimeError("numba was imported before tests/conftest.py could set "
                       "NUMBA_CACHE_DIR; remove the plugin or import that loads it early")
os.environ["NUMBA_CACHE_DIR"] = str(numba_cache_for_these_sources())


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    """Every test runs in its own tmp_path: a relative path (a shipped config's run.dir,
    runs/quickstart) lands there, never in the checkout."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture
def threads_restored():
    """Puts torch's and numba's thread pools back after a test that sets them (the bench
    scripts' set_threads, a mode's training threads), so later tests see the usual pools."""
    import numba
    import torch
    torch_threads, numba_threads = torch.get_num_threads(), numba.get_num_threads()
    yield
    torch.set_num_threads(torch_threads)
    numba.set_num_threads(numba_threads)
