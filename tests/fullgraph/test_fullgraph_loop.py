"""The full-graph mode through the real training loop (TrainingLoop + FullGraphMode), K
ranks as threads: with quantisation off, K workers train the model one process trains
(same losses, same parameters after several epochs); with it on, every rank and every
exchange draws its own quantisation noise."""
import dataclasses
import threading

import numpy as np
import pytest
import torch

from gnnsys.config import from_dict
from gnnsys.distributed import launch
from gnnsys.fullgraph import quantize_fast
from gnnsys.sparse_features import as_csr
from gnnsys.testing import tiny_graph
from gnnsys.training import TrainingLoop

EPOCHS = 4


def config(tmp_path, workers, device, arch="gcn", quantization="none", layers=2):
    return from_dict({
        "mode": "fullgraph",
        "model": {"arch": arch, "hidden": 16, "layers": layers, "dropout": 0.0},
        "fullgraph": {"quantization": {"mode": quantization, "uniform_bits": 2,
                                       "assign_every": 2}},
        # stream: METIS's pymetis is not on the GPU machine's image, and the exchange makes
        # every partition train the same model
        "partition": {"dir": str(tmp_path / f"parts{workers}"), "method": "stream"},
        "cluster": {"workers": workers, "launcher": "threads"},
        "train": {"epochs": EPOCHS, "eval_every": EPOCHS, "lr": 0.05, "seed": 3,
                  "progress": False, "device": device},
        "run": {"dir": str(tmp_path / f"run{workers}")}})


def train(tmp_path, workers, csr=None, device="cpu", **settings):
    """Each rank's (model state on the CPU, per-epoch losses) after EPOCHS epochs, ranks
    training on `device`. `csr` True / False: the graph with 70% of its feature entries
    zeroed, as CSR / dense; None: as it is."""
    graph = tiny_graph(num_nodes=240, num_features=8, seed=5)
    if csr is not None:
        x = graph.x * (np.random.default_rng(0).random(graph.x.shape) < 0.3)
        graph = dataclasses.replace(graph, x=as_csr(x) if csr else x.astype(np.float32))

    def rank(ctx, config, graph):
        loop = TrainingLoop(ctx, config, (graph,))
        loop.run()
        assert loop.mode.data.x.layout == (torch.sparse_csr if csr else torch.strided)
        assert loop.mode.data.x.device.type == device
        return ({k: v.detach().cpu().clone() for k, v in loop.model.state_dict().items()},
                [h["loss"] for h in loop.history])
    return launch(rank, config(tmp_path, workers, device, **settings), graph)


# linkx: one layer, no batch norm, whose bias before it Adam moves by the sign of a
# gradient that is zero but for rounding; its batch norm: test_fullgraph_models.py
@pytest.mark.parametrize("arch, layers", [("gcn", 2), ("sage", 2), ("mlp", 2), ("linkx", 1)])
def test_three_workers_train_the_model_of_one_process(tmp_path, arch, layers):
    [(single, single_losses)] = train(tmp_path, 1, arch=arch, layers=layers)
    ranks = train(tmp_path, 3, arch=arch, layers=layers)
    for state, losses in ranks:
        # the logged loss is the global mean (each rank divides by the global train count)
        assert losses == pytest.approx(single_losses, rel=1e-5)
        for name, value in single.items():
            torch.testing.assert_close(state[name], value, rtol=1e-4, atol=1e-5, msg=name)
    # several epochs really moved the model (equal because both trained, not because idle)
    assert single_losses[-1] < single_losses[0] - 1e-3


def test_every_rank_and_exchange_draws_its_own_quantisation_noise(tmp_path, monkeypatch):
    seeds, lock = [], threading.Lock()
    encode = quantize_fast.encode_rows   # the exchanger's codec on CPU

    def recording(source, rows, counts, seed):
        with lock:
            seeds.append(seed)
        return encode(source, rows, counts, seed)
    monkeypatch.setattr(quantize_fast, "encode_rows", recording)
    ranks = train(tmp_path, 3, quantization="uniform")
    # 3 ranks x EPOCHS epochs x (forward of 2 layers + backward of 1) x peers: none repeats
    assert len(seeds) >= 3 * EPOCHS * 3
    assert len(set(seeds)) == len(seeds), "two exchanges quantised with the same noise"
    assert all(len(losses) == EPOCHS for _, losses in ranks)


def test_csr_features_train_the_model_of_dense_features(tmp_path):
    """Kept CSR (the first layer projects, then aggregates) trains what the same features
    given dense train: same losses and parameters, 2 workers, quantisation off."""
    [(single, single_losses)] = train(tmp_path / "dense", 1, csr=False)
    for state, losses in train(tmp_path / "csr", 2, csr=True):
        assert losses == pytest.approx(single_losses, rel=1e-5)
        for name, value in single.items():
            torch.testing.assert_close(state[name], value, rtol=1e-4, atol=1e-5, msg=name)
    assert single_losses[-1] < single_losses[0] - 1e-3


def test_csr_features_train_under_adaptive_quantisation(tmp_path):
    """The CSR first layer's projected rows and their gradients are messages like any
    other: the adaptive assigner profiles, traces and re-solves them (epoch 2)."""
    for _, losses in train(tmp_path, 2, csr=True, quantization="adaptive"):
        assert len(losses) == EPOCHS and np.isfinite(losses).all()


def test_threads_on_a_gpu_are_refused(tmp_path):
    """Worker threads on one GPU deadlock in the backward exchange (torch runs every
    thread's CUDA backward on one engine thread): refused up front, in one line."""
    from gnnsys.config import ConfigError
    with pytest.raises(ConfigError, match="cluster.launcher: ray"):
        config(tmp_path, 2, "cuda")
    assert config(tmp_path, 2, "cpu").cluster.workers == 2


@pytest.mark.gpu
def test_csr_features_on_the_gpu_train_what_the_cpu_trains(tmp_path):
    """The CSR first layer (torch sparse CSR x dense on CUDA) and the projected exchange
    on the GPU train the CPU run's model (scripts/gpu_check.py runs this on hardware)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU with CUDA torch")
    # one worker: threads of one process cannot train full-graph together on a GPU
    # (test_threads_on_a_gpu_are_refused); the exchange on CUDA is test_quantize_gpu's
    want = train(tmp_path / "cpu", 1, csr=True)
    got = train(tmp_path / "cuda", 1, csr=True, device="cuda")
    for (state, losses), (want_state, want_losses) in zip(got, want):
        assert losses == pytest.approx(want_losses, rel=1e-4)
        for name, value in want_state.items():
            torch.testing.assert_close(state[name], value, rtol=1e-3, atol=1e-4, msg=name)
