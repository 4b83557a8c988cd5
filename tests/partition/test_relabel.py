"""Relabelling to contiguous per-part ranges agrees with a plain reference."""
import numpy as np

from gnnsys.testing import tiny_graph
from partition.relabel import contiguous_order, relabel_csr


def reference_relabel(indptr, indices, old_of_new, new_of_old):
    rows = []
    for old in old_of_new:
        rows.append(sorted(int(new_of_old[c]) for c in indices[indptr[old]:indptr[old + 1]]))
    out_indptr = np.cumsum([0] + [len(r) for r in rows])
    return out_indptr, np.array([c for r in rows for c in r])


def test_contiguous_ranges_and_key_order():
    parts = np.array([1, 0, 1, 0, 2, 1])
    key = np.array([0.1, 0.5, 0.9, 0.7, 0.0, 0.9])
    old_of_new, new_of_old, offsets = contiguous_order(parts, 3, key)
    assert offsets.tolist() == [0, 2, 5, 6]
    # part 0: keys 0.7 (old 3), 0.5 (old 1); part 1: 0.9 (old 2), 0.9 (old 5), 0.1 (old 0)
    assert old_of_new.tolist() == [3, 1, 2, 5, 0, 4]
    assert (new_of_old[old_of_new] == np.arange(6)).all()


def test_relabel_csr_matches_reference():
    g = tiny_graph(num_nodes=150, seed=1)
    parts = np.random.default_rng(0).integers(0, 4, g.num_nodes)
    old_of_new, new_of_old, _ = contiguous_order(parts, 4, np.random.default_rng(1).random(150))
    ip, ix = relabel_csr(g.indptr, g.indices, old_of_new, new_of_old)
    rip, rix = reference_relabel(g.indptr, g.indices, old_of_new, new_of_old)
    np.testing.assert_array_equal(ip, rip)
    np.testing.assert_array_equal(ix, rix)
    assert ix.dtype == g.indices.dtype
