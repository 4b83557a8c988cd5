"""Freed memory stays in the training process for the next step (glibc's malloc).

Every training step allocates and frees the same large tensors again. A minibatch step on
synthetic-products (3-layer SAGE 128, batch 1024) allocates ~1.3 GB of gathered rows,
messages and gradients, mostly in blocks over 32 MB: glibc serves each of those with a
fresh mmap and unmaps it on free (32 MB is the most its mmap threshold can be raised to),
so every step page-faults and zeroes all of it again. On the dev VM that was ~325k page
faults and ~0.55 s of kernel time in a step of ~1.07 s CPU. With mmap off and the heap
never trimmed, freed blocks are reused: after the first steps have grown the heap to the
run's peak, a step takes no page faults (BENCHMARKS.md, "Memory allocator"). The same
reason PyTorch's CPU performance guide suggests jemalloc or tcmalloc, without preloading
a library.

The cost: memory the run frees is kept by the process until it exits (RSS stays at the
run's peak rather than falling between steps). `GNNSYS_MALLOC=system` keeps glibc's
defaults, and so does any malloc tuning already in the environment (the user's wins).
Elsewhere (musl, macOS) this does nothing.
"""
from __future__ import annotations

import ctypes
import logging
import os

from .config import ConfigError

log = logging.getLogger(__name__)

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
LARGEST_TRIM_THRESHOLD = 2 ** 31 - 1       # mallopt takes an int
USER_TUNING = ("MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
               "MALLOC_TOP_PAD_")
CHOICES = ("keep", "system")

_applied = None


def keep_freed_memory() -> str:
    """Apply the policy once per process; returns what this process's malloc does:
    "keep" (freed memory reused), or "system" (glibc's defaults, or not glibc)."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def choice() -> str:
    """`GNNSYS_MALLOC`, checked (`fit` checks it before any worker starts)."""
    value = os.environ.get("GNNSYS_MALLOC", "keep")
    if value not in CHOICES:
        raise ConfigError(f"GNNSYS_MALLOC={value!r}; use one of {', '.join(CHOICES)} "
                          "(or unset it: keep)")
    return value


def _apply() -> str:
    tuned = [name for name in USER_TUNING if name in os.environ] or \
        (["GLIBC_TUNABLES"] if "malloc" in os.environ.get("GLIBC_TUNABLES", "") else [])
    if choice() == "system" or tuned:
        return "system"
    try:
        mallopt = ctypes.CDLL(None).mallopt       # the C library this process runs on
    except (OSError, AttributeError):
        return "system"                           # not glibc
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not (mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, LARGEST_TRIM_THRESHOLD)):
        log.warning("mallopt refused the keep-freed-memory settings; glibc's defaults apply")
        return "system"
    return "keep"
