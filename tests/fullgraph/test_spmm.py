"""The numba CSR x dense product against torch.sparse.mm and a dense matmul."""
import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gnnsys.fullgraph.halo import SparseOperator
from gnnsys.fullgraph.spmm import spmm


def operator(rows, cols, density, seed):
    matrix = sp.random(rows, cols, density=density, format="csr", dtype=np.float32,
                       random_state=seed)
    return SparseOperator.from_scipy(matrix), matrix.toarray()


@pytest.mark.parametrize("rows,cols,density", [(30, 40, 0.1), (1, 5, 1.0), (7, 3, 0.0),
                                               (0, 4, 0.5), (5, 0, 0.5)])
def test_spmm_matches_the_references(rows, cols, density):
    op, dense_op = operator(rows, cols, density, seed=rows + cols)
    h = torch.randn(cols, 9, generator=torch.Generator().manual_seed(0))
    got = spmm(op.forward, h)
    assert got.shape == (rows, 9)
    np.testing.assert_allclose(got.numpy(), dense_op @ h.numpy(), rtol=1e-5, atol=1e-6)
    if rows and cols:
        assert torch.allclose(got, torch.sparse.mm(op.forward, h), rtol=1e-5, atol=1e-6)
    transposed = spmm(op.transpose, torch.ones(rows, 2))
    np.testing.assert_allclose(transposed.numpy(), dense_op.T @ np.ones((rows, 2)), rtol=1e-5,
                               atol=1e-6)


def test_spmm_writes_and_adds_into_row_slices():
    op, dense_op = operator(6, 8, 0.4, seed=1)
    h = torch.randn(8, 4)
    out = torch.full((10, 4), 7.0)
    spmm(op.forward, h, out[2:8])                   # overwrites stale values
    expected = np.full((10, 4), 7.0, np.float32)
    expected[2:8] = dense_op @ h.numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
    spmm(op.forward, h, out[2:8], accumulate=True)
    expected[2:8] *= 2
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_spmm_checks_shapes():
    op, _ = operator(3, 4, 0.5, seed=2)
    with pytest.raises(ValueError, match="columns"):
        spmm(op.forward, torch.zeros(5, 2))
    with pytest.raises(ValueError, match="contiguous"):
        spmm(op.forward, torch.zeros(4, 2), torch.zeros(2, 3).t())
