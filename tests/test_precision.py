"""train.precision (gnnsys/precision.py): bf16 autocast around each step's forward only,
float32 weights, a minibatch run that trains (dense and CSR features, every arch); modes
without it refuse it in one line."""
import dataclasses

import numpy as np
import pytest
import torch

from gnnsys.config import from_dict
from gnnsys.errors import ConfigError
from gnnsys.precision import PRECISIONS, forward_in
from gnnsys.sparse_features import as_csr
from gnnsys.testing import tiny_graph
from gnnsys.training import fit


def test_each_forward_runs_under_autocast_and_what_follows_it_does_not():
    seen = []

    def steps():
        for _ in range(2):
            seen.append(torch.is_autocast_enabled("cpu"))
            yield torch.ones(2, 2) @ torch.ones(2, 2)

    for out in forward_in("bf16", torch.device("cpu"), steps()):
        assert out.dtype == torch.bfloat16 and not torch.is_autocast_enabled("cpu")
    assert seen == [True, True]
    assert [o.dtype for o in forward_in("fp32", torch.device("cpu"), steps())] == \
        [torch.float32] * 2


def test_a_bf16_minibatch_run_trains_with_float32_weights(tmp_path):
    config = from_dict({"mode": "minibatch", "model": {"arch": "sage", "hidden": 16, "layers": 2},
                        "sampler": {"fanouts": [4, 4], "batch_size": 32, "threads": 1},
                        "train": {"epochs": 3, "lr": 0.01, "progress": False,
                                  "precision": "bf16"},
                        "run": {"dir": str(tmp_path / "run")}})
    final = fit(config, tiny_graph(num_nodes=300, num_features=8, seed=3))
    assert final["test_acc"] > 0.5 and final["final_loss"] < 2.0
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert all(t.dtype == torch.float32 for t in state["current"]["model"].values()
               if t.is_floating_point())


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("features", ["dense", "csr"])
@pytest.mark.parametrize("arch", ["sage", "gcn", "gat"])
def test_every_precision_trains_on_dense_and_csr_features(arch, features, precision, tmp_path):
    # bag-of-words features stay CSR, whose products torch has no bf16 kernel for: the
    # sparse first layer runs in float32 and the run trains like the dense one
    graph = tiny_graph(num_nodes=120, num_features=16, seed=1)
    if features == "csr":
        keep = np.random.default_rng(0).random(graph.x.shape) < 0.2
        graph = dataclasses.replace(graph, x=as_csr(np.where(keep, graph.x, 0)))
    config = from_dict({"mode": "minibatch", "model": {"arch": arch, "hidden": 8, "layers": 2},
                        "sampler": {"fanouts": [3, 3], "batch_size": 32, "threads": 1},
                        "train": {"epochs": 1, "progress": False, "precision": precision},
                        "run": {"dir": str(tmp_path / "run")}})
    final = fit(config, graph)
    assert np.isfinite(final["final_loss"]) and 0 <= final["test_acc"] <= 1


@pytest.mark.parametrize("mode, arch", [("fullgraph", "gcn"), ("temporal", "tgn")])
def test_modes_without_bf16_refuse_it(mode, arch):
    with pytest.raises(ConfigError, match="train.precision' is 'bf16' but mode"):
        from_dict({"mode": mode, "model": {"arch": arch}, "train": {"precision": "bf16"}})
