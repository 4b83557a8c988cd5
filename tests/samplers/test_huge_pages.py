"""samplers/huge_pages.py: the copy equals the array, starts on a huge-page boundary where
THP can be asked for, and small arrays (or THP off) are returned as they are."""
import numpy as np
import pytest

from samplers import huge_pages
from samplers.huge_pages import HUGE_PAGE, huge_page_copy


def test_copy_is_equal_and_huge_page_aligned():
    array = np.random.default_rng(0).random((HUGE_PAGE // 400 * 3 + 7, 100), dtype=np.float32)
    copy = huge_page_copy(array)
    np.testing.assert_array_equal(copy, array)
    assert copy.dtype == array.dtype and copy.shape == array.shape
    if huge_pages.thp_mode() == "never":
        pytest.skip("transparent huge pages are off here: the array comes back as it is")
    assert copy is not array and copy.ctypes.data % HUGE_PAGE == 0
    assert copy.flags.c_contiguous and copy.flags.writeable


def test_small_arrays_and_thp_off_are_returned_as_they_are(monkeypatch):
    small = np.arange(10)
    assert huge_page_copy(small) is small
    big = np.zeros(HUGE_PAGE, dtype=np.uint8)
    monkeypatch.setattr(huge_pages, "thp_mode", lambda: "never")
    assert huge_page_copy(big) is big
