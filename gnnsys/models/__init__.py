"""Minibatch models (one module per architecture, `registry.MODELS` names them) over
sampled blocks, built on the contract in `base.py`; hashed dropout, the norm layers."""


def __getattr__(name):
    # imported on use: `gnnsys.models.registry` is read without loading torch
    if name in ("BlockGNN", "build_model"):
        from . import block_gnn
        return getattr(block_gnn, name)
    raise AttributeError(name)


__all__ = ["BlockGNN", "build_model"]
