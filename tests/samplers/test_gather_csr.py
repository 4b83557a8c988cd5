"""The fused sampler's CSR-row gather against plain scipy row slicing."""
import numpy as np
import scipy.sparse as sp

from samplers import FusedSampler
from samplers._gather import NO_MISSING_FLAGS, NO_ROW_MAP
from samplers._gather_csr import gather_csr_rows


def _features(rows=120, dim=40, seed=0):
    x = sp.random(rows, dim, density=0.08, random_state=seed, format="csr", dtype=np.float32)
    x.sort_indices()
    return x


def test_gathered_rows_equal_scipy_row_slicing():
    x = _features()
    n_id = np.random.default_rng(1).integers(0, x.shape[0], 300).astype(np.int64)
    indptr, indices, data = gather_csr_rows(x.indptr, x.indices, x.data, NO_ROW_MAP, n_id,
                                            n_id.size, NO_MISSING_FLAGS)
    got = sp.csr_matrix((data, indices, indptr), shape=(n_id.size, x.shape[1]))
    want = x[n_id]
    assert np.array_equal(got.indptr, want.indptr)
    assert np.array_equal(got.indices, want.indices)
    assert np.array_equal(got.data, want.data)


def test_rows_through_row_of_and_missing_rows_are_empty():
    x = _features()
    num_nodes = 200
    row_of = np.full(num_nodes, -1, dtype=np.int64)
    owned = np.random.default_rng(2).choice(num_nodes, x.shape[0], replace=False)
    row_of[owned] = np.arange(x.shape[0])
    n_id = np.arange(num_nodes, dtype=np.int64)[::-1].copy()
    flags = np.full(num_nodes, 7, dtype=np.uint8)
    indptr, indices, data = gather_csr_rows(x.indptr, x.indices, x.data, row_of, n_id,
                                            n_id.size, flags)
    got = sp.csr_matrix((data, indices, indptr), shape=(n_id.size, x.shape[1]))
    rows = row_of[n_id]
    want = sp.vstack([x[r] if r >= 0 else sp.csr_matrix((1, x.shape[1])) for r in rows])
    assert (got != want).nnz == 0
    assert np.array_equal(flags, (rows < 0).astype(np.uint8))


def test_sampler_with_csr_features_returns_the_dense_samplers_rows_as_csr():
    rng = np.random.default_rng(3)
    adjacency = sp.random(150, 150, density=0.05, random_state=4, format="csr")
    x = _features(rows=150, seed=5)
    args = (adjacency.indptr.astype(np.int64), adjacency.indices.astype(np.int32), [4, 3])
    seeds = rng.choice(150, 20, replace=False)
    sparse = FusedSampler(*args, features=x).sample(seeds, seed=9)
    dense = FusedSampler(*args, features=x.toarray()).sample(seeds, seed=9)
    assert sp.issparse(sparse.x) and sparse.x.nnz == x[sparse.n_id].nnz
    assert np.array_equal(sparse.n_id, dense.n_id)
    assert np.array_equal(sparse.x.toarray(), dense.x)
