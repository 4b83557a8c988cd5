"""Numba's on-disk cache for the kernels, stamped with every kernel source.

Numba checks a cached function only against the file that defines it, but the kernels
inline functions from other files (common/rng.py into samplers/_hop_sampling.py and into
gnnsys/fullgraph/quantize_fast.py): after an edit to rng.py it would serve machine code
built from the old rng.py (numba freezes imported constants into the code, too). Kernels
defined in samplers/ or in common/rng.py, or in a file passed to `depends_on_samplers`,
are stamped with a digest of all samplers/*.py sources and common/rng.py (and of the
files named with it) as well, so an edit to any of them recompiles every kernel that could
have inlined it. Imported by samplers/__init__.py and common/rng.py, so it is in place
before the first @njit(cache=True) runs.
"""
from __future__ import annotations

import hashlib
import importlib.util
import warnings
from pathlib import Path

from numba.core import caching

# samplers/ found without importing it (its __init__ imports this module first)
SAMPLERS_DIR = Path(importlib.util.find_spec("samplers").submodule_search_locations[0]).resolve()
# the sources a kernel may inline: every samplers module and the random streams
KERNEL_SOURCES = (*sorted(SAMPLERS_DIR.glob("*.py")), Path(__file__).resolve().with_name("rng.py"))


def sources_digest(paths) -> str:
    """sha256 over the names and contents of `paths`."""
    return hashlib.sha256(b"".join(Path(path).name.encode() + b"\0" + Path(path).read_bytes()
                                   for path in paths)).hexdigest()


SOURCES_DIGEST = sources_digest(KERNEL_SOURCES)
_DEPENDENTS: dict[Path, str] = {}


def depends_on_samplers(py_file: str, *also: str) -> None:
    """Stamp the cached kernels of `py_file` with the kernel sources (samplers/ and
    common/rng.py) and the files `also` (whose constants it imports) too. Call it before
    its first @njit(cache=True)."""
    _DEPENDENTS[Path(py_file).resolve()] = SOURCES_DIGEST + sources_digest(also)


class KernelSourcesLocator(caching._CacheLocator):
    """numba's usual locator for the file (same directory); only the stamp is wider."""

    def __init__(self, inner, digest):
        self._inner, self._digest = inner, digest

    def get_cache_path(self):
        return self._inner.get_cache_path()

    def get_source_stamp(self):
        return self._inner.get_source_stamp(), self._digest

    def get_disambiguator(self):
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file):
        path = Path(py_file).resolve()
        digest = SOURCES_DIGEST if path in KERNEL_SOURCES else _DEPENDENTS.get(path)
        if digest is None:
            return None
        for locator_class in _LOCATORS:
            if locator_class.__name__ != cls.__name__:
                inner = locator_class.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner, digest)
        return None


# numba >= 0.68 names it CacheImpl, older versions _CacheImpl (both private API).
_impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
_LOCATORS = getattr(_impl, "_locator_classes", None)
if _LOCATORS is None:
    warnings.warn("this numba version moved its cache locators: gnnsys kernels are "
                  "cached per file, so delete __pycache__/*.nbi after editing samplers/ "
                  "or common/rng.py")
elif not any(c.__name__ == KernelSourcesLocator.__name__ for c in _LOCATORS):
    _LOCATORS.insert(0, KernelSourcesLocator)
