"""Feature store + remote fetch: every batch row equals the original graph's features,
whichever tier (local, cache, remote) served it; counters add up."""
import numpy as np
import pytest

from gnnsys.distributed.local import ThreadGroup
from gnnsys.minibatch.batch import MiniBatch
from gnnsys.minibatch.store import FeatureStore, RemoteFetcher
from gnnsys.testing import tiny_graph
from partition.build import build_partitions
from partition.format import PartitionSet
from samplers import FusedSampler


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    g = tiny_graph(num_nodes=500, avg_degree=6, num_features=5, seed=7)
    path = tmp_path_factory.mktemp("parts") / "tiny-3"
    build_partitions(g, path, method="metis", num_parts=3, fanouts=[4, 3], batch_size=16)
    return PartitionSet(path)


def reference_features(parts):
    return np.concatenate([parts.array(k, "x") for k in range(parts.num_parts)])


@pytest.mark.parametrize("policy,replication", [("none", 0.0), ("degree", 0.2), ("vip", 0.5)])
def test_batches_match_reference_features(parts, policy, replication):
    indptr, indices = parts.full_csr()
    x_all = reference_features(parts)

    def worker(comm):
        k = comm.rank
        store = FeatureStore.open(parts, k, comm, indptr=indptr, indices=indices,
                                  policy=policy, replication=replication, fanouts=[4, 3],
                                  batch_size=16)
        sampler = FusedSampler(indptr, indices, [4, 3], features=store.table,
                               row_of=store.row_of)
        train = np.asarray(parts.array(k, "train_idx"))
        for i in range(3):
            # Federated seeds: each rank draws from its own part, same number of batches.
            seeds = np.resize(train, 16 * (i + 1))[16 * i:]
            batch = store.fill_missing(MiniBatch.from_sampled(sampler.sample(seeds, i)))
            np.testing.assert_array_equal(batch.x.numpy(), x_all[batch.n_id.numpy()])
        return store.describe(), {**store.take_stats(), "bytes_recv": comm.stats.bytes_recv}

    results = ThreadGroup(3).run(worker)
    for k, (info, stats) in enumerate(results):
        if policy == "none":
            assert info["cached_rows"] == 0
        else:                          # a cache exists, within its replication budget
            assert 0 < info["cached_rows"] <= int(replication * 500 / 3)
        assert stats["batches"] == 3
        if policy == "none":
            assert stats["cache_hits"] == 0
        assert stats["bytes_recv"] >= stats["remote_rows"] * 5 * 4
    served = sum(s["rows_served"] for _, s in results)
    fetched = sum(s["remote_rows"] for _, s in results)
    assert served == fetched > 0


def test_cache_cuts_remote_rows(parts):
    indptr, indices = parts.full_csr()

    def run(policy):
        def worker(comm):
            k = comm.rank
            store = FeatureStore.open(parts, k, comm, indptr=indptr, indices=indices,
                                      policy=policy, replication=1.0, fanouts=[4, 3],
                                      batch_size=16)
            sampler = FusedSampler(indptr, indices, [4, 3], features=store.table,
                                   row_of=store.row_of)
            seeds = np.asarray(parts.array(k, "train_idx"))[:16]
            store.fill_missing(MiniBatch.from_sampled(sampler.sample(seeds, 0)))
            return store.take_stats()["remote_rows"]
        return sum(ThreadGroup(3).run(worker))

    assert run("vip") < run("none")


def test_fetch_rejects_own_rows(parts):
    fetcher = RemoteFetcher(ThreadGroup(1).comm(0), parts.book, 0,
                            np.zeros((parts.book.size(0), 5), np.float32))
    with pytest.raises(ValueError, match="rows it owns"):
        fetcher.fetch(np.array([0]))


def open_stores(parts, policy="vip", replication=0.3, device_fraction=0.25):
    """Every rank's FeatureStore (opened together: the cache fill is a collective)."""
    indptr, indices = parts.full_csr()
    group = ThreadGroup(parts.num_parts)
    return group.run(lambda comm: FeatureStore.open(
        parts, comm.rank, comm, indptr=indptr, indices=indices, policy=policy,
        replication=replication, fanouts=[4, 3], batch_size=16,
        device_fraction=device_fraction))


def test_hotness_puts_cache_then_hottest_local_rows_on_the_device(parts):
    from samplers.gpu_tiers import DEVICE_TIER, HOST_TIER, MISS, hotness_order, place_features
    store = open_stores(parts)[1]
    n_local, n_cached = store.num_local, store.num_cached
    assert n_cached > 0 and 0 < store.device_rows < n_local
    hot = store.hotness()
    assert hot.shape == (parts.book.num_nodes,)
    np.testing.assert_array_equal(hot > 0, store.row_of >= 0)      # 0 = no copy here
    # Ranking: the cache in its own order (hottest first), then the local rows in VIP
    # (= on-disk) order; i.e. table rows n_local.., then 0..n_local.
    order = hotness_order(hot)[:n_local + n_cached]
    lo = parts.book.range(1)[0]
    np.testing.assert_array_equal(order, np.concatenate(
        [store.cached_ids, lo + np.arange(n_local)]))
    row_bytes = store.table.shape[1] * store.table.itemsize
    placement = place_features(parts.book.num_nodes, hot, row_bytes, store.tier_budgets(),
                               store.row_of)
    np.testing.assert_array_equal(placement.tier_rows[DEVICE_TIER], np.concatenate(
        [n_local + np.arange(n_cached), np.arange(store.device_rows)]))
    np.testing.assert_array_equal(placement.tier_rows[HOST_TIER],
                                  np.arange(store.device_rows, n_local))
    assert placement.num_misses == np.count_nonzero(store.row_of < 0)
    assert np.all(placement.location[store.row_of < 0] == MISS)


def test_hotness_without_cache_is_the_local_vip_order(parts):
    store = open_stores(parts, policy="none", device_fraction=0.0)[0]
    hot = store.hotness()
    lo, hi = parts.book.range(0)
    assert store.num_cached == 0 and np.count_nonzero(hot) == hi - lo
    assert np.all(np.diff(hot[lo:hi]) < 0)                          # row 0 hottest
    assert store.tier_budgets().device_bytes == 0


def test_fill_missing_writes_on_the_batch_device_and_dtype(parts):
    """fill_missing converts fetched rows to batch.x's device and dtype (here CPU float16:
    the CPU stand-in for a batch whose features live on a GPU)."""
    indptr, indices = parts.full_csr()
    x_all = reference_features(parts)

    def worker(comm):
        store = FeatureStore.open(parts, comm.rank, comm, indptr=indptr, indices=indices,
                                  policy="none", replication=0.0, fanouts=[4, 3],
                                  batch_size=16)
        sampler = FusedSampler(indptr, indices, [4, 3], features=store.table,
                               row_of=store.row_of)
        seeds = np.asarray(parts.array(comm.rank, "train_idx"))[:16]
        batch = MiniBatch.from_sampled(sampler.sample(seeds, 0))
        batch.x = batch.x.half()
        batch = store.fill_missing(batch)
        assert batch.missing.numel() > 0
        np.testing.assert_array_equal(batch.x.numpy(),
                                      x_all[batch.n_id.numpy()].astype(np.float16))

    ThreadGroup(3).run(worker)


def test_worker_sampler_on_cpu_is_the_plain_fused_sampler(parts):
    """sampler.device=cpu (and auto without a GPU): the worker's sampler is the CPU
    FusedSampler over the store's table, as before; the GPU tiers are never computed."""
    import gnnsys.config
    from gnnsys.minibatch.loader import store_sampler
    from samplers.fused_gpu import cuda_gpu_available
    indptr, indices = parts.full_csr()
    store = open_stores(parts)[0]

    def no_tiers():
        raise AssertionError("the CPU path must not compute GPU tiers")
    store.gpu_tiers = no_tiers
    devices = ["cpu"] + ([] if cuda_gpu_available() else ["auto"])
    seeds = np.asarray(parts.array(0, "train_idx"))[:16]
    plain = FusedSampler(indptr, indices, [4, 3], features=store.table, row_of=store.row_of,
                         num_buffers=5)
    want = plain.sample(seeds, 3)
    for device in devices:
        config = gnnsys.config.from_dict({"sampler": {"device": device, "fanouts": [4, 3],
                                                      "prefetch": 3}})
        sampler = store_sampler(config, indptr, indices, store)
        assert type(sampler) is FusedSampler and sampler.num_buffers == 5
        got = sampler.sample(seeds, 3)
        for name in ("n_id", "x", "missing"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
        for a, b in zip(got.block_indptr + got.block_indices,
                        want.block_indptr + want.block_indices):
            np.testing.assert_array_equal(a, b)
