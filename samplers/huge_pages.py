"""Transparent huge pages for the sampler's large, randomly read arrays (Linux).

A batch reads ~400k feature rows and neighbour lists at random places: with 4 KiB pages
nearly every read also misses the TLB; a 2 MiB page covers 512 times the memory per TLB
entry. Where THP runs in `madvise` mode (a common default) only memory that asks for
huge pages gets them, and memory already faulted in is collapsed only slowly by
khugepaged. So `huge_page_copy` maps fresh anonymous memory, asks for huge pages
(madvise MADV_HUGEPAGE) before touching it, and copies the array in: the copy is faulted
in as huge pages. Elsewhere (THP off, another OS, a small array) the array is returned
as it is. Depends on numpy only.
"""
from __future__ import annotations

import mmap
import sys
from pathlib import Path

import numpy as np

HUGE_PAGE = 2 << 20
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode() -> str:
    """'always', 'madvise' or 'never' (the bracketed THP setting); 'never' off Linux."""
    try:
        text = THP_SETTING.read_text()
    except OSError:
        return "never"
    return text[text.index("[") + 1:text.index("]")] if "[" in text else "never"


def huge_page_copy(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of `array` in memory advised for transparent huge pages, or
    `array` itself where huge pages cannot be had (small array, THP off, no madvise)."""
    if (array.nbytes < HUGE_PAGE or not sys.platform.startswith("linux")
            or thp_mode() == "never" or not hasattr(mmap, "MADV_HUGEPAGE")):
        return array
    # One huge page of slack: the mapping is only 4 KiB aligned, the array starts at
    # the first 2 MiB boundary inside it.
    length = -(-array.nbytes // HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE
    region = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.madvise(mmap.MADV_HUGEPAGE)
    raw = np.frombuffer(region, dtype=np.uint8)        # keeps the mapping alive
    start = -raw.ctypes.data % HUGE_PAGE
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    np.copyto(out, array)
    return out
