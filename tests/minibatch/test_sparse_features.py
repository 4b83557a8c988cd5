"""Sparse (CSR) features in minibatch mode: kept sparse through the sampler, the feature
store and the wire, with the densified run's results up to float rounding."""
import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gnnsys.config import from_dict
from gnnsys.distributed.local import ThreadGroup
from gnnsys.minibatch.store.fetch import RemoteFetcher
from gnnsys.runlog import epochs, start
from gnnsys.sparse_features import as_csr, feature_bytes, row_tensor, stacked, stacked_rows
from gnnsys.testing import tiny_graph
from gnnsys.training import fit
from partition.format import PartitionBook

WORKERS = 2


def sparse_graph():
    graph = tiny_graph(num_nodes=240, num_features=32)
    keep = np.random.default_rng(0).random(graph.x.shape) < 0.1
    return dataclasses.replace(graph, x=as_csr(np.where(keep, graph.x, 0)))


def settings(tmp_path, workers, name):
    return from_dict({
        "mode": "minibatch",
        "model": {"arch": "sage", "hidden": 16, "layers": 2, "dropout": 0.0},
        "sampler": {"fanouts": [5, 5], "batch_size": 32, "threads": 1, "prefetch": 1},
        "cache": {"replication": 0.1},
        "partition": {"dir": str(tmp_path / f"parts-{name}")},
        "cluster": {"workers": workers, "launcher": "threads"},
        "train": {"epochs": 2, "seed": 3, "progress": False},
        "run": {"dir": str(tmp_path / f"run-{name}")}})


def test_one_worker_sparse_run_equals_densified_run(tmp_path):
    graph = sparse_graph()
    dense = dataclasses.replace(graph, x=graph.x.toarray())
    got = fit(settings(tmp_path, 1, "sparse"), graph=graph)
    want = fit(settings(tmp_path, 1, "dense"), graph=dense)
    for key in ("final_loss", "val_acc", "test_acc"):
        assert got[key] == pytest.approx(want[key], abs=1e-4), key


def test_two_thread_workers_sparse_run_equals_densified_run(tmp_path):
    graph = sparse_graph()
    dense = dataclasses.replace(graph, x=graph.x.toarray())
    got = fit(settings(tmp_path, WORKERS, "sparse"), graph)     # ranks as threads
    want = fit(settings(tmp_path, WORKERS, "dense"), dense)
    for key in ("final_loss", "val_acc", "test_acc"):
        assert got[key] == pytest.approx(want[key], abs=1e-4), key
    sparse_epoch = epochs(tmp_path / "run-sparse")[0]
    dense_epoch = epochs(tmp_path / "run-dense")[0]
    for s, d in zip(sparse_epoch["workers"], dense_epoch["workers"]):
        assert s["remote_rows"] == d["remote_rows"] > 0
        assert 0 < s["remote_feature_bytes"] < d["remote_feature_bytes"]
    assert all(rank["sparse"] for rank in start(tmp_path / "run-sparse")["setup"])


def test_remote_rows_cross_as_lengths_and_nonzeros():
    x = sp.random(40, 30, density=0.1, random_state=1, format="csr", dtype=np.float32)
    x = as_csr(x)
    book = PartitionBook(np.array([0, 20, 40]))
    asks = [np.array([25, 21, 39, 25]), np.array([3, 0, 17])]

    def rank(comm):
        lo, hi = book.range(comm.rank)
        fetcher = RemoteFetcher(comm, book, comm.rank, x[lo:hi])
        rows = fetcher.fetch(asks[comm.rank])
        return rows, comm.stats.bytes_recv, fetcher.row_bytes_recv

    for r, (rows, wire, payload) in enumerate(ThreadGroup(2).run(rank)):
        want = x[asks[r]]
        assert sp.issparse(rows) and (rows != want).nnz == 0
        ids = asks[1 - r].size                      # ids this rank was asked for
        assert payload == want.nnz * (4 + 4) + asks[r].size * 4
        assert wire == 8 + ids * 8 + payload         # counts + asked ids + the rows


def test_feature_bytes_count_nonzeros_not_zeros():
    x = sparse_graph().x
    assert feature_bytes(x) == x.nnz * 8 + (x.shape[0] + 1) * x.indptr.itemsize
    assert feature_bytes(x.toarray()) == x.shape[0] * x.shape[1] * 4


@pytest.mark.parametrize("kind", ["csr", "float32", "float16"])
def test_stacked_rows_reads_both_parts_without_stacking(kind):
    """Layer-wise inference's row gather over [own rows | halo rows] equals gathering
    from the stacked copy it no longer builds (own rows in any order, then halo rows)."""
    rng = np.random.default_rng(4)
    top, bottom = sp.random(30, 12, density=0.2, random_state=1, dtype=np.float32), \
        sp.random(9, 12, density=0.2, random_state=2, dtype=np.float32)
    top, bottom = as_csr(top), as_csr(bottom)
    if kind != "csr":
        dtype = getattr(torch, kind)
        top, bottom = torch.from_numpy(top.toarray()).to(dtype), bottom.toarray().astype(kind)
    ids = np.concatenate([np.arange(5, 12), rng.choice(np.arange(12, 30), 6, replace=False),
                          np.arange(30, 39)])
    got, want = stacked_rows(top, bottom, ids), row_tensor(stacked(top, bottom), ids)
    if kind == "csr":                   # torch sparse CSR tensors, as the first layer takes
        got, want = got.to_dense(), want.to_dense()
    assert got.dtype == want.dtype
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="before rows of the second"):
        stacked_rows(top, bottom, ids[::-1].copy())


@pytest.mark.parametrize("kind", ["csr", "dense"])
def test_fetched_rows_come_back_in_the_order_asked_from_several_owners(kind):
    """3 workers, each asking ids of both peers interleaved (and repeated): the replies,
    grouped by owner on the wire, are put back in the order asked. With one peer a wrong
    permutation of the owner groups would change nothing."""
    x = sparse_graph().x[:60]
    x = x if kind == "csr" else x.toarray()
    book = PartitionBook(np.array([0, 20, 40, 60]))
    asks = [np.array([45, 21, 59, 25, 40, 39, 21, 58]), np.array([3, 55, 0, 41, 17, 3]),
            np.array([39, 5, 20, 19, 0, 38])]

    def rank(comm):
        lo, hi = book.range(comm.rank)
        return RemoteFetcher(comm, book, comm.rank, x[lo:hi]).fetch(asks[comm.rank])

    for r, rows in enumerate(ThreadGroup(3).run(rank)):
        want = x[asks[r]]
        if kind == "csr":
            assert sp.issparse(rows) and (rows != want).nnz == 0, r
        else:
            np.testing.assert_array_equal(rows, want)
