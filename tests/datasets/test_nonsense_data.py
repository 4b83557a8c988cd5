"""Data that would train on nonsense without a word is refused before training, in one
line that names the dataset and what is wrong (never train on nonsense); a
config that would silently train every default or write into the working directory too."""
import dataclasses

import numpy as np
import pytest

import gnnsys
from gnnsys.cli import main
from gnnsys.config import ConfigError, from_dict, load_config
from gnnsys.datasets import DatasetError
from gnnsys.testing import tiny_graph, tiny_temporal_graph

RUN = {"mode": "minibatch", "model": {"arch": "sage", "hidden": 8, "layers": 2},
       "sampler": {"fanouts": [3, 3], "batch_size": 64, "threads": 1},
       "train": {"epochs": 1, "progress": False}}


def broken(what: str):
    g = tiny_graph(num_nodes=100, num_features=4)
    if what == "overlapping splits":
        return dataclasses.replace(g, val_idx=np.concatenate([g.val_idx, g.train_idx[:3]]))
    if what == "no labelled training node":
        y = g.y.copy()
        y[g.train_idx] = -1
        return dataclasses.replace(g, y=y)
    if what == "empty train split":
        return dataclasses.replace(g, train_idx=np.zeros(0, dtype=np.int64))
    if what == "zero feature columns":
        return dataclasses.replace(g, x=np.zeros((100, 0), dtype=np.float32))
    if what == "label too large":
        y = g.y.copy()
        y[5] = g.num_classes
        return dataclasses.replace(g, y=y)
    if what == "label below -1":
        y = g.y.copy()
        y[7] = -2
        return dataclasses.replace(g, y=y)
    raise AssertionError(what)


CASES = {"overlapping splits": "3 nodes are in both the train and val splits",
         "no labelled training node": "the train split has no labelled node",
         "empty train split": "the train split has no labelled node (0 nodes",
         "zero feature columns": "the features have 0 columns",
         "label too large": "node 5 has label 3, outside 0..2",
         "label below -1": "node 7 has label -2, outside 0..2"}


@pytest.mark.parametrize("what", sorted(CASES))
def test_static_nonsense_is_refused_before_training(tmp_path, what):
    with pytest.raises(DatasetError) as err:
        gnnsys.Trainer({**RUN, "run": {"dir": str(tmp_path / "run")}}, data=broken(what)).fit()
    assert CASES[what] in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_event_times_must_be_finite(tmp_path):
    g = tiny_temporal_graph()
    t = g.t.astype(np.float64)
    t[-5:] = np.nan                     # at the end: still "sorted" as far as < can tell
    data = {"mode": "temporal", "model": {"arch": "tgn"}, "train": {"epochs": 1, "progress": False},
            "run": {"dir": str(tmp_path / "run")}}
    with pytest.raises(DatasetError, match=r"event 1195 has time nan; every event needs a "
                                           r"finite time \(5 do not\)"):
        gnnsys.Trainer(data, data=dataclasses.replace(g, t=t)).fit()


def test_overlapping_masks_in_a_bundle_exit_2(tmp_path, capsys):
    g = tiny_graph(num_nodes=100, num_features=4)
    masks = {s: np.zeros(100, dtype=bool) for s in ("train", "val", "test")}
    for s in masks:
        masks[s][getattr(g, f"{s}_idx")] = True
    masks["test"][g.train_idx[:10]] = True          # training nodes would be scored
    rows = np.repeat(np.arange(100), np.diff(g.indptr))
    np.savez(tmp_path / "g.npz", edge_index=np.stack([g.indices, rows]), y=g.y, x=g.x,
             **{f"{s}_mask": m for s, m in masks.items()})
    assert main(["train", "--config", "/dev/null"]) == 2
    assert "is empty" in capsys.readouterr().err
    (tmp_path / "run.yaml").write_text("mode: minibatch\n")
    code = main(["train", "--config", str(tmp_path / "run.yaml"),
                 "--set", f"dataset.path={tmp_path / 'g.npz'}",
                 "--set", f"run.dir={tmp_path / 'run'}", "--set", "train.progress=false"])
    err = capsys.readouterr().err
    assert code == 2 and "10 nodes are in both the train and test splits" in err, err
    assert err.count("\n") == 1, err


def test_a_config_that_says_nothing_is_refused(tmp_path):
    empty = tmp_path / "run.yaml"
    empty.write_text("# nothing yet\n")
    with pytest.raises(ConfigError, match="is empty; write at least the settings"):
        load_config(empty)
    with pytest.raises(ConfigError, match="config file /dev/null is empty"):
        load_config("/dev/null")
    with pytest.raises(ConfigError, match="'run.dir' must be a non-empty path, got ''"):
        from_dict({"run": {"dir": ""}})
