"""Minibatch training on a real GPU (marked gpu: skipped without one; scripts/gpu_check.py
runs these first). Without a GPU the same paths run in numba's CUDA simulator:
tests/minibatch/store/test_feature_store_gpu.py (device-resident batch == host batch).
"""
import numpy as np
import pytest

import gnnsys

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def needs_gpu():
    import torch
    from samplers.fused_gpu import cuda_gpu_available
    if not (torch.cuda.is_available() and cuda_gpu_available()):
        pytest.skip("needs a CUDA GPU seen by torch and numba")


def test_device_batches_wrap_the_kernels_buffers():
    """sample(on_device=True) -> MiniBatch: CUDA tensors over the kernel's own memory (no
    copy), equal to the host batch of the same seeds."""
    from gnnsys.minibatch.batch import MiniBatch
    from gnnsys.testing import tiny_graph
    from samplers.fused_gpu import GpuFusedSampler
    g = tiny_graph(num_nodes=500, avg_degree=6, num_features=8)
    sampler = GpuFusedSampler(g.indptr, g.indices, [4, 3], features=g.x)
    seeds = np.arange(0, 500, 7)
    sub = sampler.sample(seeds, seed=3, on_device=True)
    batch = MiniBatch.from_sampled(sub, g.y, copy_x=False)
    assert batch.x.is_cuda and batch.n_id.is_cuda and batch.y.is_cuda
    assert batch.x.data_ptr() == sub.x.__cuda_array_interface__["data"][0]
    host = MiniBatch.from_sampled(sampler.sample(seeds, seed=3), g.y)
    np.testing.assert_array_equal(batch.x.cpu().numpy(), host.x.numpy())
    np.testing.assert_array_equal(batch.y.cpu().numpy(), host.y.numpy())
    for got, want in zip(batch.blocks, host.blocks):
        np.testing.assert_array_equal(got.edge_index.cpu().numpy(), want.edge_index.numpy())


@pytest.mark.parametrize("feature_dtype", ["float32", "float16"])
def test_minibatch_trains_on_the_gpu(tmp_path, feature_dtype):
    cfg = gnnsys.config.from_dict({
        "dataset": {"name": "synthetic-tiny", "feature_dtype": feature_dtype},
        "model": {"arch": "sage", "hidden": 32, "layers": 2},
        "sampler": {"fanouts": [5, 5], "batch_size": 64, "device": "cuda"},
        "train": {"epochs": 3, "lr": 0.01, "progress": False, "device": "cuda"},
        "run": {"dir": str(tmp_path / "run")}})
    metrics = gnnsys.Trainer(cfg).fit()
    assert metrics["test_acc"] > 0.5, metrics
