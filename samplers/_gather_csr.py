"""Feature-row gather of the fused sampler for a CSR feature table: a batch's rows as
their nonzeros (a CSR batch), never as dense rows of zeros. Numba only.

Two parallel passes over the batch's rows: their lengths (prefix-summed into the batch's
indptr), then each row's column indices and values copied to their place. `row_of` as in
samplers/_gather.py: global id -> table row, -1 = no local copy (an empty row, flagged in
`is_missing`); an empty `row_of` means row = global id.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from samplers._gather import _table_row


@njit(parallel=True, nogil=True, cache=True)
def _row_lengths(indptr, row_of, n_id, num_rows, lengths, is_missing):
    for i in prange(num_rows):
        row = _table_row(row_of, n_id[i])
        if row < 0:
            lengths[i] = 0
            is_missing[i] = 1
            continue
        if row_of.size:
            is_missing[i] = 0
        lengths[i] = indptr[row + 1] - indptr[row]


@njit(parallel=True, nogil=True, cache=True)
def _copy_rows(indptr, indices, data, row_of, n_id, num_rows, out_indptr, out_indices,
               out_data):
    for i in prange(num_rows):
        row = _table_row(row_of, n_id[i])
        if row < 0:
            continue
        start, out = indptr[row], out_indptr[i]
        for k in range(indptr[row + 1] - start):
            out_indices[out + k] = indices[start + k]
            out_data[out + k] = data[start + k]


def gather_csr_rows(indptr, indices, data, row_of, n_id, num_rows, is_missing):
    """(indptr int64 [num_rows+1], indices, data) of table rows n_id[:num_rows]."""
    lengths = np.empty(num_rows, dtype=np.int64)
    _row_lengths(indptr, row_of, n_id, num_rows, lengths, is_missing)
    out_indptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_indptr[1:])
    nnz = int(out_indptr[-1])
    out_indices = np.empty(nnz, dtype=indices.dtype)
    out_data = np.empty(nnz, dtype=data.dtype)
    _copy_rows(indptr, indices, data, row_of, n_id, num_rows, out_indptr, out_indices,
               out_data)
    return out_indptr, out_indices, out_data
