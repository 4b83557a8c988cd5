"""A model class of the user's own: `model.arch: "my_models:MyGNN"` (module:qualname), or
the class itself handed to `Trainer(config, model_class=MyGNN)`, which records its path.

The run's saved config names it by that path alone, so wherever the model is built (this
process, every Ray worker, later `load_run`, `gnnsys predict`, `gnnsys export`) its
module must be importable: installed, or its directory on PYTHONPATH. Minibatch mode only
(`MODES`): a full-graph or temporal model is its mode's own code. Imported only when a
config names one; a built-in arch imports no user code.
"""
from __future__ import annotations

import importlib
import inspect
import re

from ..errors import ConfigError

MODES = ("minibatch",)                  # the modes whose model.arch may name a class
PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
# what MinibatchModel leaves to each model (its own raise NotImplementedError)
REQUIRED = ("layer", "inference", "step_elements")
CONTRACT = "gnnsys.models.base.MinibatchModel (docs/CODEMAP.md, \"The model contract\")"


def own_class(mode: str, path: str, built_in: tuple) -> type:
    """The class `path` names, imported and checked against the contract of `mode`'s
    models (whose own archs are `built_in`); ConfigError naming model.arch and the fix
    where it is not one."""
    said = f"config key 'model.arch' is {path!r}"
    if mode not in MODES:
        raise ConfigError(f"{said}, a model class of your own, but mode '{mode}' trains only "
                          f"its built-in archs ({', '.join(built_in)}); a class of your "
                          f"own trains in mode {' or '.join(MODES)}")
    if not PATH.fullmatch(path):
        raise ConfigError(f"{said}: a class of your own is named module:Class, e.g. "
                          "my_models:MyGNN")
    module_name, qualname = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if not f"{module_name}.".startswith(f"{err.name}."):   # a module it imports is missing
            raise ConfigError(f"{said} but importing {module_name} failed: {err}") from None
        raise ConfigError(f"{said} but module {module_name} is not importable here; install "
                          "it or put its directory on PYTHONPATH (Ray workers, load_run and "
                          "gnnsys predict import it too)") from None
    except Exception as err:
        raise ConfigError(f"{said} but importing {module_name} failed: "
                          f"{type(err).__name__}: {err}") from None
    found = attribute(module, qualname)
    if found is None:
        raise ConfigError(f"{said} but module {module_name} has no {qualname}; name a "
                          "class defined there")
    check_contract(found, said)
    return found


def attribute(module, qualname: str):
    """What `qualname` (dotted: a class in a class) names in `module`, or None."""
    for part in qualname.split("."):
        module = getattr(module, part, None)
    return module


def check_contract(cls, said: str) -> None:
    """Refuse what is not a minibatch model class, naming what it lacks."""
    import torch
    from .base import MinibatchModel
    if not isinstance(cls, type):
        raise ConfigError(f"{said}, a {type(cls).__name__}, not a class; name a subclass "
                          f"of {CONTRACT}")
    if not issubclass(cls, torch.nn.Module):
        raise ConfigError(f"{said}, a class that is not a torch nn.Module; subclass {CONTRACT}")
    if not issubclass(cls, MinibatchModel):
        raise ConfigError(f"{said}, an nn.Module that does not follow the minibatch model "
                          f"contract (from_config, layer, inference, ...); subclass {CONTRACT}")
    missing = [name for name in REQUIRED if getattr(cls, name) is getattr(MinibatchModel, name)]
    if missing:
        raise ConfigError(f"{said}, a class that does not define {', '.join(missing)}; "
                          "define them (or subclass gnnsys.models.block_gnn.BlockGNN, which "
                          "gives them for a stack of message-passing layers)")
    if cls.from_config.__func__ is MinibatchModel.from_config.__func__:
        try:        # the default from_config passes the built-in models' arguments
            inspect.signature(cls).bind("arch", 1, 1, 1, 1, 0.5, 4, "none", False)
        except TypeError:
            raise ConfigError(f"{said}, whose __init__ does not take the arguments "
                              "MinibatchModel.from_config passes (arch, in_dim, hidden, "
                              "out_dim, layers, dropout, heads, norm, residual); define "
                              f"{cls.__name__}.from_config(config, in_dim, num_classes, "
                              "num_nodes=0)") from None


def class_path(cls) -> str:
    """`module:qualname` of a class handed over in Python (`Trainer(model_class=...)`),
    refused where that path cannot find it again (a script's `__main__`, a function's
    local class, a class its module no longer holds)."""
    if not isinstance(cls, type):
        raise ConfigError(f"model_class is {cls!r}, not a class; pass the model class itself")
    module, qualname = cls.__module__, cls.__qualname__
    if module == "__main__":
        raise ConfigError(f"model_class {qualname} is defined in __main__ (the script being "
                          "run), which Ray workers, load_run and gnnsys predict cannot import; "
                          "move it into a module of its own (e.g. my_models.py, on PYTHONPATH)"
                          " and import it from there")
    if "<locals>" in qualname:
        raise ConfigError(f"model_class {qualname} is defined inside a function, where its "
                          f"import path cannot find it; define it at the top level of {module}")
    path = f"{module}:{qualname}"
    if attribute(importlib.import_module(module), qualname) is not cls:
        raise ConfigError(f"model_class {qualname} is not what its import path {path} names "
                          "(a class redefined, or its module imported under another name); "
                          "import it from its module")
    return path
