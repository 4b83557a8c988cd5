"""train.precision (gnnsys/precision.py): bf16 autocast around each step's forward only,
float32 weights, a minibatch run that trains; modes without it refuse it in one line."""
import pytest
import torch

from gnnsys.config import from_dict
from gnnsys.errors import ConfigError
from gnnsys.precision import forward_in
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


@pytest.mark.parametrize("mode, arch", [("fullgraph", "gcn"), ("temporal", "tgn")])
def test_modes_without_bf16_refuse_it(mode, arch):
    with pytest.raises(ConfigError, match="train.precision' is 'bf16' but mode"):
        from_dict({"mode": mode, "model": {"arch": arch}, "train": {"precision": "bf16"}})
