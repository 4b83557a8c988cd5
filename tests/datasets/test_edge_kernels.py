"""The numba dedup/symmetrize kernels against a plain Python set reference."""
import numpy as np
import pytest

from gnnsys.datasets.edges import symmetric_csr, unique_undirected


def reference_symmetric(src, dst):
    edges = {(int(a), int(b)) for a, b in zip(src, dst) if a != b}
    edges |= {(b, a) for a, b in edges}
    return sorted(edges)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_symmetric_csr_matches_reference(dtype):
    rng = np.random.default_rng(7)
    n = 300
    src = rng.integers(0, n, 5000).astype(dtype)
    dst = rng.integers(0, n, 5000).astype(dtype)
    indptr, indices = symmetric_csr(src, dst, n)
    rows = np.repeat(np.arange(n), np.diff(indptr))
    assert list(zip(rows.tolist(), indices.tolist())) == reference_symmetric(src, dst)
    assert indptr.dtype == np.int64 and indices.dtype == np.int32


def test_unique_undirected_keeps_one_copy_per_pair():
    indptr, cols = unique_undirected(np.array([0, 1, 2, 2, 3]), np.array([1, 0, 2, 3, 2]), 4)
    assert indptr.tolist() == [0, 1, 1, 2, 2] and cols.tolist() == [1, 3]


def test_out_of_range_ids_are_rejected():
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        symmetric_csr(np.array([0, 5]), np.array([1, 2]), 3)


def test_empty_edge_list():
    indptr, indices = symmetric_csr(np.empty(0, np.int64), np.empty(0, np.int64), 5)
    assert indptr.tolist() == [0] * 6 and indices.size == 0
