"""`train.optimizer`: adam (L2 through the gradient) or adamw (decoupled decay), checked
when the config loads and built by the loop."""
import pytest
import torch

import gnnsys
from gnnsys.config import ConfigError, from_dict
from gnnsys.optimizers import build_optimizer
from gnnsys.testing import tiny_graph


def test_adamw_decays_the_weights_apart_from_the_step():
    # a zero gradient: AdamW still shrinks w by lr * weight_decay; Adam's L2 term becomes
    # the gradient and takes a full adaptive step of lr instead
    config = from_dict({"train": {"optimizer": "adamw", "lr": 0.1, "weight_decay": 0.5}})
    w = torch.nn.Parameter(torch.full((3,), 2.0))
    optimizer = build_optimizer([w], config.train)
    assert type(optimizer) is torch.optim.AdamW
    w.grad = torch.zeros(3)
    optimizer.step()
    torch.testing.assert_close(w.detach(), torch.full((3,), 2.0 * (1 - 0.1 * 0.5)))
    adam = build_optimizer([v := torch.nn.Parameter(torch.full((3,), 2.0))],
                           from_dict({"train": {"lr": 0.1, "weight_decay": 0.5}}).train)
    assert type(adam) is torch.optim.Adam
    v.grad = torch.zeros(3)
    adam.step()
    torch.testing.assert_close(v.detach(), torch.full((3,), 1.9))


def test_an_unknown_optimizer_is_one_line():
    with pytest.raises(ConfigError) as err:
        from_dict({"train": {"optimizer": "sgd"}})
    assert str(err.value) == "config key 'train.optimizer' is 'sgd'; allowed: adam, adamw"


def test_a_run_trains_with_adamw(tmp_path):
    result = gnnsys.Trainer({"model": {"hidden": 16}, "sampler": {"fanouts": [5, 5]},
                             "train": {"epochs": 3, "optimizer": "adamw",
                                       "weight_decay": 0.01, "progress": False},
                             "run": {"dir": str(tmp_path / "run")}},
                            data=tiny_graph()).fit()
    assert result.config.train.optimizer == "adamw" and result["test_acc"] > 0.5
