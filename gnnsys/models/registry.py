"""Which model each mode trains under each `model.arch`: (mode, arch) -> "module:attr".

Names only (no imports): `model.arch`'s vocabulary of a mode is `archs(mode)`, read by
the mode's `supports` without loading any model. A minibatch entry is a class following
`gnnsys.models.base.MinibatchModel`; adding a minibatch model is its module plus one line
here. A full-graph entry is a class following `gnnsys.fullgraph.model.FullGraphModel`,
a temporal one what that mode builds (its own contract).
A `model.arch` of the form "module:Class" names a class of the user's own instead
(`own.py`: imported only then).
"""
from __future__ import annotations

import importlib

MODELS = {
    ("minibatch", "sage"): "gnnsys.models.sage:SAGE",
    ("minibatch", "gcn"): "gnnsys.models.gcn:GCN",
    ("minibatch", "gat"): "gnnsys.models.gat:GAT",
    ("minibatch", "mlp"): "gnnsys.models.mlp:MLP",
    ("minibatch", "linkx"): "gnnsys.models.linkx:LINKX",
    ("fullgraph", "gcn"): "gnnsys.fullgraph.model:GCN",
    ("fullgraph", "sage"): "gnnsys.fullgraph.model:SAGE",
    ("fullgraph", "mlp"): "gnnsys.fullgraph.model:MLP",
    ("fullgraph", "linkx"): "gnnsys.fullgraph.model:LINKX",
    ("temporal", "tgn"): "gnnsys.temporal.models:build_model",
    ("temporal", "jodie"): "gnnsys.temporal.models:build_model",
    ("temporal", "apan"): "gnnsys.temporal.models:build_model",
}

# Link mode encodes nodes with the minibatch models above and scores a pair of embeddings
# with one of these (`link.decoder`): name -> "module:Class" (`gnnsys/models/decoders.py`).
DECODERS = {"dot": "gnnsys.models.decoders:DotDecoder",
            "mlp": "gnnsys.models.decoders:MLPDecoder"}


# A mode whose models are another mode's: link mode encodes nodes with the minibatch models.
MODELS_OF = {"link": "minibatch"}


def archs(mode: str) -> tuple:
    """The `model.arch` values `mode` trains, in registry order."""
    mode = MODELS_OF.get(mode, mode)
    return tuple(arch for (m, arch) in MODELS if m == mode)


def is_class_path(arch: str) -> bool:
    """Whether `arch` names a model class of the user's own ("module:Class")."""
    return ":" in arch


def decoder_class(name: str):
    """The link decoder class `link.decoder` names, imported on use."""
    module, attr = DECODERS[name].split(":")
    return getattr(importlib.import_module(module), attr)


def model_class(mode: str, arch: str):
    """The registered object of (mode, arch), or the user's class `arch` names (checked),
    imported on use."""
    mode = MODELS_OF.get(mode, mode)
    if is_class_path(arch):
        from .own import own_class
        return own_class(mode, arch, archs(mode))
    if (mode, arch) not in MODELS:
        raise ValueError(f"model.arch '{arch}' is not a {mode} model; use one of "
                         f"{', '.join(archs(mode))}")
    module, name = MODELS[mode, arch].split(":")
    return getattr(importlib.import_module(module), name)
