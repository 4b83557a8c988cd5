"""Freed memory stays in the training process for the next step (glibc's malloc).

Every training step allocates and frees the same large tensors again. A minibatch step on
synthetic-products (3-layer SAGE 128, batch 1024) allocates ~1.3 GB of gathered rows,
messages and gradients, mostly in blocks over 32 MB: glibc serves each of those with a
fresh mmap and unmaps it on free (32 MB is the most its mmap threshold can be raised to),
so every step page-faults and zeroes all of it again: about half the step's CPU time went
to the kernel (BENCHMARKS.md, "Memory allocator"). With mmap off and the heap
never trimmed, freed blocks are reused: after the first steps have grown the heap to the
run's peak, a step takes no page faults (BENCHMARKS.md, "Memory allocator"). The same
reason PyTorch's CPU performance guide suggests jemalloc or tcmalloc, without preloading
a library.

Threads need one more setting. A thread other than the main one allocates from its own
arena, whose heaps hold at most 64 MB, and glibc serves anything larger there with mmap
whatever M_MMAP_MAX says. A Ray actor runs its methods on such a thread (and the loader
samples on one), so a worker's step faulted its tensors in again every step. With one
arena every thread allocates from the main heap. A thread keeps the arena it first
allocated from, so the setting must be in place before the thread's first allocation:
`mallopt` here covers the threads a run starts later, and `worker_environment()` gives a
Ray worker process `MALLOC_ARENA_MAX=1` from its start (its threads exist before any
method runs).

The cost: memory the run frees is kept by the process until it exits (RSS stays at the
run's peak rather than falling between steps). `GNNSYS_MALLOC=system` keeps glibc's
defaults, and so does any malloc tuning already in the environment (the user's wins; a
user's `MALLOC_ARENA_MAX` alone is kept and the rest applied).
Elsewhere (musl, macOS) this does nothing.
"""
from __future__ import annotations

import ctypes
import logging
import os
import resource

from .errors import ConfigError

log = logging.getLogger(__name__)

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
LARGEST_TRIM_THRESHOLD = 2 ** 31 - 1       # mallopt takes an int
USER_TUNING = ("MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
               "MALLOC_TOP_PAD_")
ARENAS = "MALLOC_ARENA_MAX"
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


def peak_rss_mb() -> float:
    """The most resident memory this process has held so far, in MB (Linux: kB units)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_environment() -> dict:
    """Environment variables a worker process needs from its start for the policy (one
    arena: see the module docstring); empty when the policy is off or the user set it."""
    if _wanted() == "system" or ARENAS in os.environ:
        return {}
    return {ARENAS: "1"}


def _wanted() -> str:
    """The policy asked for: `GNNSYS_MALLOC`, unless the user tuned malloc themselves."""
    asked = choice()                    # checked first: a bad value is named either way
    user_tuned = any(name in os.environ for name in USER_TUNING) or \
        "malloc" in os.environ.get("GLIBC_TUNABLES", "")
    return "system" if user_tuned else asked


def _apply() -> str:
    if _wanted() == "system":
        return "system"
    try:
        mallopt = ctypes.CDLL(None).mallopt       # the C library this process runs on
    except (OSError, AttributeError):
        return "system"                           # not glibc
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not (mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, LARGEST_TRIM_THRESHOLD)):
        log.warning("mallopt refused the keep-freed-memory settings; glibc's defaults apply")
        return "system"
    if ARENAS not in os.environ:
        mallopt(M_ARENA_MAX, 1)
    return "keep"
