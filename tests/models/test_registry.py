"""The model registry: (mode, arch) -> "module:attr", names only. It is model.arch's
vocabulary, each minibatch entry follows the contract, and nothing outside a model's own
module decides by its arch's name."""
import ast
import re
from pathlib import Path

import pytest

from gnnsys.models import registry

ROOT = Path(__file__).resolve().parents[2]


def imports(path: str, top_level_only: bool = False) -> set:
    tree = ast.parse((ROOT / path).read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    imported = {alias.name for node in nodes if isinstance(node, ast.Import)
                for alias in node.names}
    return imported | {node.module for node in nodes if isinstance(node, ast.ImportFrom)}


def test_the_registry_imports_no_model():
    """Reading model.arch's vocabulary loads no torch model (config and modes read it);
    `own`, which imports a user's class when model.arch names one, loads none either."""
    assert imports("gnnsys/models/registry.py") <= {"importlib", "__future__", "own"}
    assert imports("gnnsys/models/own.py", top_level_only=True) <= {
        "importlib", "inspect", "re", "__future__", "errors"}


@pytest.mark.parametrize("mode, arch", sorted(registry.MODELS))
def test_every_entry_is_importable_and_minibatch_ones_follow_the_contract(mode, arch):
    from gnnsys.models.base import MinibatchModel
    target = registry.model_class(mode, arch)
    if mode == "minibatch":
        assert issubclass(target, MinibatchModel) and target.arch == arch


def test_an_unknown_arch_names_the_registered_ones():
    with pytest.raises(ValueError, match="'new-net' is not a minibatch model; use one of "
                                         "sage, gcn, gat, mlp, linkx"):
        registry.model_class("minibatch", "new-net")


def test_no_ladder_over_arch_names():
    """The minibatch mode, its models' shared code and the export ask the model, never
    `arch == "..."`: a new model touches its module and the registry alone."""
    files = ["gnnsys/models/base.py", "gnnsys/models/block_gnn.py", "gnnsys/export.py",
             *map(str, (ROOT / "gnnsys/minibatch").rglob("*.py"))]
    for name in files:
        text = (ROOT / name).read_text()
        assert not re.search(r"arch\s*(==|!=|in)\s*[\"'(]", text), name
