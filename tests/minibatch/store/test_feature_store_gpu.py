"""The distributed worker's store-backed GPU sampler, in numba's CUDA simulator.

`store_sampler` (gnnsys/minibatch/loader.py) with sampler.device=cuda builds the GPU
fused sampler over the FeatureStore's table with the store's tiers: the device holds the
cached remote rows and the first cache.device_fraction local rows (FeatureStore.hotness),
pinned host memory the other local rows, and rows no tier holds are misses. Its batch must
equal the CPU FusedSampler's over the same table/row_of exactly (n_id, blocks, x with zero
rows, missing), and after `fill_missing` every row equals the original features.

As in tests/samplers/test_fused_gpu.py, the simulator must be on before numba.cuda is first
imported, so the check runs in a child process (`python <this file>`); with a real GPU it
also runs in-process (marked gpu). The graph stays tiny: the simulator is slow.
"""
import os
import sys
from pathlib import Path

if __name__ == "__main__":                       # simulator child
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"     # before numba.cuda is imported
    sys.path[:0] = [str(Path(__file__).resolve().parents[3])]
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # tests/: the shared harness

import tempfile

import numpy as np
import pytest

from cuda_simulator import (KernelChecks, assert_check_passed, child_main, child_results,
                            run_children)

CHILD_TIMEOUT_S = 300
FANOUTS = [3, 2]
CHECKS = KernelChecks()


@CHECKS
def store_backed_gpu_sampler_matches_cpu():
    import gnnsys.config
    from gnnsys.distributed.local import ThreadGroup
    from gnnsys.minibatch.loader import store_sampler
    from gnnsys.minibatch.batch import MiniBatch
    from gnnsys.minibatch.store import FeatureStore
    from gnnsys.testing import tiny_graph
    from partition.build import build_partitions
    from partition.format import PartitionSet
    from samplers import FusedSampler
    from samplers.fused_gpu import GpuFusedSampler
    from samplers.gpu_tiers import DEVICE_TIER, HOST_TIER, MISS, TIER_SHIFT

    graph = tiny_graph(num_nodes=90, avg_degree=4, num_features=3, seed=5)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "parts"
        build_partitions(graph, path, method="random", num_parts=2, fanouts=FANOUTS,
                         batch_size=8)
        parts = PartitionSet(path)
        indptr, indices = parts.full_csr()
        x_all = np.concatenate([parts.array(k, "x") for k in range(2)])
        group = ThreadGroup(2)
        stores = group.run(lambda comm: FeatureStore.open(
            parts, comm.rank, comm, indptr=indptr, indices=indices, policy="vip",
            replication=0.4, fanouts=FANOUTS, batch_size=8, device_fraction=0.3))
        seeds = [np.asarray(parts.array(k, "train_idx"))[:8] for k in range(2)]

    store = stores[0]
    config = gnnsys.config.from_dict({"sampler": {"device": "cuda", "fanouts": FANOUTS,
                                                  "prefetch": 1}})
    gpu = store_sampler(config, indptr, indices, store)
    assert isinstance(gpu, GpuFusedSampler) and gpu.num_buffers == 3
    # The device tier: the whole cache, then the first device_rows local rows.
    n_local = store.num_local
    np.testing.assert_array_equal(gpu.placement.tier_rows[DEVICE_TIER], np.concatenate(
        [n_local + np.arange(store.num_cached), np.arange(store.device_rows)]))
    np.testing.assert_array_equal(gpu.placement.tier_rows[HOST_TIER],
                                  np.arange(store.device_rows, n_local))

    cpu = FusedSampler(indptr, indices, FANOUTS, features=store.table, row_of=store.row_of)
    sub = gpu.sample(seeds[0], seed=11)
    want = cpu.sample(seeds[0], seed=11)
    np.testing.assert_array_equal(sub.n_id, want.n_id)
    assert list(sub.hop_sizes) == list(want.hop_sizes)
    for got, ref in zip(sub.block_indptr + sub.block_indices,
                        want.block_indptr + want.block_indices):
        np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(sub.x, want.x)
    np.testing.assert_array_equal(sub.missing, want.missing)
    location = gpu.placement.location[sub.n_id]
    tiers = location >> TIER_SHIFT
    for tier in (DEVICE_TIER, HOST_TIER):
        assert np.any((location != MISS) & (tiers == tier)), f"tier {tier} unused"
    assert np.any(store.row_of[sub.n_id] >= n_local), "no cached row served"
    assert sub.missing.size > 0, "no miss to fetch"

    # The batch completes through the remote fetch (rank 1 answers with a CPU batch).
    other = FusedSampler(indptr, indices, FANOUTS, features=stores[1].table,
                         row_of=stores[1].row_of).sample(seeds[1], seed=11)
    batches = [MiniBatch.from_sampled(sub), MiniBatch.from_sampled(other)]
    filled = group.run(lambda comm: stores[comm.rank].fill_missing(batches[comm.rank]))
    for batch in filled:
        np.testing.assert_array_equal(batch.x.numpy(), x_all[batch.n_id.numpy()])

    # Device-resident: the same batch wrapped straight from the kernel's device buffers
    # (sample(on_device=True); CUDA tensors on a GPU, host copies in the simulator) is the
    # host batch, labels included, and the remote fetch completes it the same way.
    labels = np.arange(indptr.size - 1) * 7 % 5
    on_device = MiniBatch.from_sampled(gpu.sample(seeds[0], seed=11, on_device=True), labels)
    on_host = MiniBatch.from_sampled(want, labels)
    for name in ("n_id", "x", "y", "missing"):
        np.testing.assert_array_equal(getattr(on_device, name).cpu().numpy(),
                                      getattr(on_host, name).numpy(), err_msg=name)
    assert len(on_device.blocks) == len(on_host.blocks) == len(FANOUTS)
    for got, ref in zip(on_device.blocks, on_host.blocks):
        assert (got.num_src, got.num_dst) == (ref.num_src, ref.num_dst)
        np.testing.assert_array_equal(got.edge_index.cpu().numpy(), ref.edge_index.numpy())
    other_batch = MiniBatch.from_sampled(other, labels)
    filled = group.run(lambda comm: stores[comm.rank].fill_missing(
        [on_device, other_batch][comm.rank]))
    np.testing.assert_array_equal(filled[0].x.cpu().numpy(), x_all[filled[0].n_id.cpu().numpy()])


@pytest.fixture(scope="module")
def simulator_results():
    child = run_children({"simulator": ([sys.executable, __file__], True)},
                         CHILD_TIMEOUT_S)["simulator"]
    return child_results(child)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_in_cuda_simulator(name, simulator_results):
    assert_check_passed(simulator_results, name)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_on_gpu(name):
    from samplers.fused_gpu import cuda_gpu_available
    if not cuda_gpu_available():
        pytest.skip("needs a CUDA GPU (numba.cuda.is_available() is False)")
    (result,) = CHECKS.run([name])
    assert result["ok"], result["error"]


if __name__ == "__main__":
    child_main(CHECKS, sys.argv[1:])
