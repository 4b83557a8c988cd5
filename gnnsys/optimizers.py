"""`train.optimizer`: the optimizer the loop steps, built in one place.

`adam` adds `train.weight_decay` to each gradient (L2, torch's Adam); `adamw` decays the
weights themselves, apart from the adaptive step (Loshchilov & Hutter), as LINKX's
published runs do: with a weight row per node, L2 through Adam's per-element scaling
regularises rarely updated rows far less than decoupled decay does."""
from __future__ import annotations

import torch

OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


def build_optimizer(parameters, train) -> torch.optim.Optimizer:
    """`train.optimizer` over `parameters` with `train.lr` and `train.weight_decay`."""
    # fused: one kernel for all parameters (the per-tensor loop cost ~3 ms a step)
    return OPTIMIZERS[train.optimizer](parameters, lr=train.lr,
                                       weight_decay=train.weight_decay, fused=True)
