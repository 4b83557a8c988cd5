"""Feature store + remote fetch: every batch row equals the original graph's features,
whichever tier (local, cache, remote) served it; counters add up."""
import numpy as np
import pytest

from gnnsys.distributed.local import ThreadGroup
from gnnsys.minibatch import MiniBatch
from gnnsys.store import FeatureStore, RemoteFetcher
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
        return store.describe(), store.take_stats()

    results = ThreadGroup(3).run(worker)
    for k, (info, stats) in enumerate(results):
        assert info["cached_rows"] == (0 if policy == "none"
                                       else min(int(replication * 500 / 3), info["cached_rows"]))
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
