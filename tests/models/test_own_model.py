"""A model class of the user's own (examples/own_model.py), named by import path in
model.arch or handed to Trainer: trains on one worker and on two, its run rebuilds it
(load_run, gnnsys predict), and each thing that is not such a class is one clear line."""
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

import gnnsys
from gnnsys.cli import main
from gnnsys.config import from_dict
from gnnsys.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PATH = "own_model:NeighbourMeanMLP"


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    """examples/ on sys.path, as a user's module is on PYTHONPATH."""
    monkeypatch.syspath_prepend(str(EXAMPLES))


def settings(tmp_path, workers=1, **model):
    return {"mode": "minibatch", "dataset": {"name": "synthetic-tiny"},
            "model": {"hidden": 16, "layers": 2, "dropout": 0.1, **model},
            "sampler": {"fanouts": [5, 5], "batch_size": 256, "threads": 1},
            "train": {"epochs": 3, "lr": 0.02, "progress": False, "eval_every": 3},
            "cluster": {"workers": workers, "launcher": "threads"},
            "partition": {"dir": str(tmp_path / "parts")},
            "run": {"dir": str(tmp_path / "run")}}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("given", ["path", "class"])
def test_own_model_trains_above_chance_and_its_run_rebuilds_it(tmp_path, workers, given):
    from own_model import NeighbourMeanMLP
    if given == "path":
        trainer = gnnsys.Trainer(settings(tmp_path, workers, arch=PATH))
    else:
        config = settings(tmp_path, workers)
        trainer = gnnsys.Trainer(config, model_class=NeighbourMeanMLP)
        assert "arch" not in config["model"]            # the caller's dict is left alone
    result = trainer.fit()
    assert result["test_acc"] > 0.5                      # chance: 1/4
    assert type(result.model) is NeighbourMeanMLP
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["model"]["arch"] == PATH
    again = gnnsys.load_run(tmp_path / "run")
    assert type(again.model) is NeighbourMeanMLP
    table = again.predict("test")
    assert (table["pred"] == table["label"]).mean() == pytest.approx(result["test_acc"])


def test_cli_trains_predicts_and_refuses_to_export_own_model(tmp_path, capsys, repo_root):
    run_dir = tmp_path / "run"
    assert main(["train", "--config", str(repo_root / "configs" / "quickstart.yaml"),
                 "--set", f"model.arch={PATH}", "--set", "model.hidden=16",
                 "--set", "dataset.name=synthetic-tiny", "--set", "train.epochs=1",
                 "--set", "train.progress=false", "--set", "sampler.threads=1",
                 "--set", f"run.dir={run_dir}"]) == 0
    assert main(["predict", str(run_dir), "--out", str(tmp_path / "p.npz")]) == 0
    table = np.load(tmp_path / "p.npz")
    result = gnnsys.load_run(run_dir)
    np.testing.assert_allclose(table["scores"], result.predict("all")["scores"],
                               atol=1e-6)
    capsys.readouterr()
    assert main(["export", str(run_dir), "--out", str(tmp_path / "m.pt")]) == 2
    assert (f"model.arch {PATH} cannot be exported as a torch_geometric model"
            in capsys.readouterr().err)


def test_a_run_whose_module_is_gone_is_one_line(tmp_path, monkeypatch, capsys):
    """The saved config names the class by path: where it no longer imports, predict
    says which module to make importable."""
    (tmp_path / "moved_model.py").write_text((EXAMPLES / "own_model.py").read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    gnnsys.Trainer(settings(tmp_path, arch="moved_model:NeighbourMeanMLP")).fit()
    (tmp_path / "moved_model.py").unlink()
    monkeypatch.delitem(sys.modules, "moved_model")
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "run"), "--out", str(tmp_path / "p.npz")]) == 2
    err = capsys.readouterr().err
    assert "config key 'model.arch' is 'moved_model:NeighbourMeanMLP' but module moved_model " \
           "is not importable here; install it or put its directory on PYTHONPATH" in err
    assert "Traceback" not in err and not (tmp_path / "p.npz").exists()


MODULE = '''
import torch
from gnnsys.models.base import MinibatchModel

def make():
    pass

class Plain:
    pass

class Module(torch.nn.Module):
    pass

class NoLayer(MinibatchModel):
    pass

class OwnInit(MinibatchModel):
    def __init__(self, width):
        super().__init__([width, width], 0.0, False)
    layer = inference = step_elements = lambda self, *args: None
'''


@pytest.mark.parametrize("arch, says", [
    ("no_such_module_here:Model", "but module no_such_module_here is not importable here; "
     "install it or put its directory on PYTHONPATH"),
    ("user_deps:Model", "but importing user_deps failed: No module named 'not_installed_dep'"),
    ("user_raises:Model", "but importing user_raises failed: RuntimeError: broken module"),
    ("user_models:Missing", "but module user_models has no Missing; name a class defined there"),
    ("user_models:", "a class of your own is named module:Class, e.g. my_models:MyGNN"),
    ("user_models:make", ", a function, not a class; name a subclass of "
     "gnnsys.models.base.MinibatchModel"),
    ("user_models:Plain", ", a class that is not a torch nn.Module; subclass "
     "gnnsys.models.base.MinibatchModel"),
    ("user_models:Module", ", an nn.Module that does not follow the minibatch model contract "
     "(from_config, layer, inference, ...); subclass gnnsys.models.base.MinibatchModel"),
    ("user_models:NoLayer", ", a class that does not define layer, inference, step_elements; "
     "define them"),
    ("user_models:OwnInit", ", whose __init__ does not take the arguments "
     "MinibatchModel.from_config passes"),
])
def test_what_is_not_a_model_class_is_one_line_naming_the_key(tmp_path, monkeypatch, arch,
                                                              says):
    (tmp_path / "user_models.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "user_deps.py").write_text("import not_installed_dep\n")
    (tmp_path / "user_raises.py").write_text("raise RuntimeError('broken module')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as err:
        from_dict({"model": {"arch": arch}})
    message = str(err.value)
    assert message.startswith(f"config key 'model.arch' is '{arch}'") and says in message
    assert "\n" not in message


@pytest.mark.parametrize("mode, archs", [("temporal", "tgn, jodie, apan"),
                                         ("fullgraph", "gcn, sage, mlp, linkx")])
def test_other_modes_refuse_a_class_of_ones_own(mode, archs):
    with pytest.raises(ConfigError) as err:
        from_dict({"mode": mode, "model": {"arch": PATH}})
    assert str(err.value) == (f"config key 'model.arch' is '{PATH}', a model class of your "
                              f"own, but mode '{mode}' trains only its built-in archs "
                              f"({archs}); a class of your own trains in mode minibatch")


class Redefined:          # replaced below: its import path then names another class
    pass


Original = Redefined


class Redefined:          # noqa: F811
    pass


def test_trainer_refuses_a_class_it_could_not_import_again(tmp_path):
    from own_model import NeighbourMeanMLP

    class Local(NeighbourMeanMLP):
        pass
    script = type("Script", (NeighbourMeanMLP,), {"__module__": "__main__"})
    for cls, says in [(Local, "is defined inside a function, where its import path cannot "
                              f"find it; define it at the top level of {__name__}"),
                      (script, "model_class Script is defined in __main__ (the script being "
                               "run), which Ray workers, load_run and gnnsys predict cannot "
                               "import; move it into a module of its own"),
                      (Original, f"is not what its import path {__name__}:Redefined names"),
                      (NeighbourMeanMLP(None, 4, 4, 2, 1), "not a class; pass the model "
                                                           "class itself")]:
        with pytest.raises(ConfigError, match=None) as err:
            gnnsys.Trainer(settings(tmp_path), model_class=cls)
        assert says in str(err.value), str(err.value)
