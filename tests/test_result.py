"""The output of a run in hand: `Trainer.fit()` returns the final metrics with the run's
config, directory and best-validation model; `load_run` rebuilds the same from the run
directory; whatever cannot give the run's model is one clear line."""
import json

import numpy as np
import pytest
import torch

import gnnsys
from gnnsys.config import ConfigError, from_dict
from gnnsys.metrics import accuracy
from gnnsys.testing import tiny_graph
from gnnsys.training import fit


def minibatch(tmp_path, **train):
    return {"mode": "minibatch", "dataset": {"name": "synthetic-tiny"},
            "model": {"arch": "sage", "hidden": 16, "layers": 2},
            "sampler": {"fanouts": [5, 5], "batch_size": 128, "threads": 1},
            "train": {"epochs": 2, "lr": 0.01, "progress": False, **train},
            "run": {"dir": str(tmp_path / "run")}}


def test_the_model_of_a_run_gives_its_test_accuracy(tmp_path):
    result = gnnsys.Trainer(minibatch(tmp_path)).fit()
    assert isinstance(result, dict) and result["epochs"] == 2
    assert result.run_dir == tmp_path / "run" and result.config.model.hidden == 16
    # exact layer-wise inference over the whole graph, as evaluation does it
    graph = gnnsys.datasets.load_run_graph(result.config)
    logits = result.model.inference(graph, 4096, torch.device("cpu"))
    test = torch.from_numpy(np.asarray(graph.test_idx))
    assert accuracy(logits[test], torch.from_numpy(graph.y)[test]) == result["test_acc"]
    loaded = gnnsys.load_run(tmp_path / "run")
    assert loaded == result and loaded.config == result.config
    for name, value in result.model.state_dict().items():
        torch.testing.assert_close(loaded.model.state_dict()[name], value)


@pytest.mark.parametrize("mode", ["fullgraph", "temporal"])
def test_every_mode_loads_its_selected_model(tmp_path, mode):
    from gnnsys.runlog import RunDir
    from tests.temporal.conftest import make_tiny_graph
    data = {"mode": mode, "train": {"epochs": 2, "progress": False},
            "run": {"dir": str(tmp_path / mode)}}
    if mode == "fullgraph":
        data.update(model={"arch": "gcn", "hidden": 8}, partition={"dir": str(tmp_path / "p")},
                    cluster={"workers": 2, "launcher": "threads"})
        graph = tiny_graph(num_nodes=120, num_features=4)
    else:
        data.update(model={"arch": "tgn", "heads": 2},
                    temporal={"memory_dim": 8, "time_dim": 4, "embedding_dim": 8,
                              "num_neighbors": 3}, sampler={"batch_size": 100})
        graph = make_tiny_graph()
    result = gnnsys.Trainer(data, data=graph).fit()
    best = RunDir(result.run_dir, writer=False).load_checkpoint()["best"]["model"]
    for name, value in result.model.state_dict().items():
        torch.testing.assert_close(value, best[name])


def test_what_cannot_give_the_run_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="holds no gnnsys run"):
        gnnsys.load_run(tmp_path / "nothing")
    run = tmp_path / "run"
    fit(from_dict(minibatch(tmp_path)))
    log = run / "metrics.jsonl"
    finished = log.read_text()
    log.write_text("".join(line + "\n" for line in finished.splitlines()
                           if json.loads(line)["kind"] != "final"))
    with pytest.raises(ConfigError, match="has not finished .* --resume"):
        gnnsys.load_run(run)
    log.write_text(finished)
    (run / "config.yaml").write_text((run / "config.yaml").read_text().replace(
        "hidden: 16", "hidden: 32"))
    with pytest.raises(ConfigError, match=r"written by another run .* model\.hidden"):
        gnnsys.load_run(run).model
    fit(from_dict(minibatch(tmp_path) | {"run": {"dir": str(run), "checkpoint_every": 0}}))
    with pytest.raises(ConfigError, match="holds no checkpoint"):
        gnnsys.load_run(run).model


def test_a_dataset_that_no_longer_matches_is_one_line(tmp_path):
    from gnnsys.prediction import load_model
    config = from_dict(minibatch(tmp_path))
    fit(config, tiny_graph(num_nodes=200, num_features=8))
    other = tiny_graph(num_nodes=200, num_features=5)
    with pytest.raises(ConfigError, match="no longer matches the model of the run .* "
                                          "feature width and class count"):
        load_model(config, tmp_path / "run", torch.device("cpu"), other)


def test_a_refused_predict_is_one_line_with_exit_2(tmp_path, capsys):
    """An unfinished run and a dataset that changed under the run, from the command line."""
    from gnnsys.cli import main
    run = tmp_path / "run"
    fit(from_dict(minibatch(tmp_path)))
    log = run / "metrics.jsonl"
    finished = log.read_text()
    log.write_text(finished.splitlines()[0] + "\n")
    capsys.readouterr()
    assert main(["predict", str(run), "--out", str(tmp_path / "p.npz")]) == 2
    err = capsys.readouterr().err
    assert "has not finished" in err and err.count("\n") == 1, err
    log.write_text(finished)
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("synthetic-tiny", "synthetic-small"))
    assert main(["predict", str(run), "--out", str(tmp_path / "p.npz")]) == 2
    err = capsys.readouterr().err
    assert "written by another run" in err and "dataset" in err and err.count("\n") == 1, err
    assert not (tmp_path / "p.npz").exists()


@pytest.mark.parametrize("mode, workers", [("minibatch", 1), ("minibatch", 2),
                                           ("fullgraph", 1), ("fullgraph", 2)])
def test_predictions_give_the_runs_test_accuracy(tmp_path, mode, workers):
    """Written and read back, the predictions of the test nodes score the run's test_acc;
    inference on K workers (each its own part) equals it on one to 1e-5."""
    pq = pytest.importorskip("pyarrow.parquet")
    data = minibatch(tmp_path) | {"mode": mode, "partition": {"dir": str(tmp_path / "parts")},
                                  "cluster": {"workers": workers, "launcher": "threads"}}
    if mode == "fullgraph":
        data["model"] = {"arch": "gcn", "hidden": 16, "layers": 2}
    result = gnnsys.Trainer(data).fit()
    test = result.predict("test", out=tmp_path / "test.parquet")
    read = pq.read_table(tmp_path / "test.parquet").to_pydict()
    assert list(read["node_id"]) == test["node_id"].tolist()
    assert np.mean(np.array(read["pred"]) == np.array(read["label"])) == \
        pytest.approx(result["test_acc"], abs=1e-6)
    graph = gnnsys.datasets.load_run_graph(result.config)
    assert sorted(test["node_id"]) == sorted(graph.test_idx)
    every = result.predict(out=tmp_path / "all.npz")
    with np.load(tmp_path / "all.npz", allow_pickle=False) as saved:
        assert saved["node_id"].tolist() == list(range(graph.num_nodes))
        assert np.array_equal(saved["scores"], every["scores"])
    alone = result.predict(workers=1)
    np.testing.assert_allclose(every["scores"], alone["scores"], rtol=1e-5, atol=1e-5)


def test_predict_from_the_command_line(tmp_path, capsys):
    from gnnsys.cli import main
    fit(from_dict(minibatch(tmp_path)))
    assert main(["predict", str(tmp_path / "run"), "--out", str(tmp_path / "p.npz"),
                 "--split", "val"]) == 0
    assert "predictions (val nodes), accuracy" in capsys.readouterr().out
    assert main(["predict", str(tmp_path / "run"), "--out", str(tmp_path / "n.npz"),
                 "--nodes", "7", "3", "7"]) == 0
    with np.load(tmp_path / "n.npz") as listed:
        everything = gnnsys.load_run(tmp_path / "run").predict()
        assert listed["node_id"].tolist() == [7, 3, 7]
        assert np.array_equal(listed["scores"], everything["scores"][[7, 3, 7]])
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "run"), "--out", str(tmp_path / "u.npz"),
                 "--nodes", "3", "99999"]) == 2
    err = capsys.readouterr().err
    assert "node id 99999 is not in the run's dataset" in err and err.count("\n") == 1
    assert not (tmp_path / "u.npz").exists()
    assert main(["predict", str(tmp_path / "run"), "--out", str(tmp_path / "p.txt")]) == 2
    assert "gnnsys: predict error: " in capsys.readouterr().err
    assert not (tmp_path / "p.txt").exists()


@pytest.mark.parametrize("mode", ["minibatch", "fullgraph"])
def test_a_layers_embeddings_on_two_workers_equal_one(tmp_path, mode):
    """--layer L: the output of the first L layers, exact inference on the run's workers
    (each its own part) as on one; the last layer's is the class scores."""
    from gnnsys.cli import main
    data = minibatch(tmp_path) | {"mode": mode, "partition": {"dir": str(tmp_path / "parts")},
                                  "cluster": {"workers": 2, "launcher": "threads"}}
    if mode == "fullgraph":
        data["model"] = {"arch": "sage", "hidden": 16, "layers": 2}
    result = gnnsys.Trainer(data).fit()
    assert main(["predict", str(result.run_dir), "--layer", "1", "--split", "test",
                 "--out", str(tmp_path / "h.npz")]) == 0
    with np.load(tmp_path / "h.npz") as h:
        first = {"node_id": h["node_id"], "embedding": h["embedding"]}
    assert first["embedding"].shape == (len(result.predict("test")["node_id"]), 16)
    every = result.embeddings(layer=1, workers=1)
    np.testing.assert_allclose(every["embedding"][first["node_id"]], first["embedding"],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result.embeddings(layer=2)["embedding"],
                               result.predict()["scores"], rtol=1e-5, atol=1e-5)
    if mode == "minibatch":         # the last layer on layer 1's output gives the scores
        graph = gnnsys.datasets.load_run_graph(result.config)
        rows = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
        edge_index = torch.from_numpy(np.stack([graph.indices.astype(np.int64), rows]))
        with torch.no_grad():
            scores = result.model.convs[1](torch.from_numpy(every["embedding"]), edge_index)
        np.testing.assert_allclose(scores.numpy(), result.predict()["scores"],
                                   rtol=1e-4, atol=1e-4)
    with pytest.raises(ConfigError, match="layer 3: the run's model has layers 1..2"):
        result.embeddings(layer=3)
    with pytest.raises(ConfigError, match="a node run embeds nodes by a layer's output"):
        result.embeddings(at=5.0)


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npz"])
def test_a_table_is_streamed_to_its_file_in_bounded_pieces(tmp_path, monkeypatch, suffix):
    """Ten million query scores must not become one string in memory: .csv and .parquet
    are written OUTPUT_ROWS rows at a time, and read back as one table."""
    import gnnsys.tables as tables
    rng = np.random.default_rng(0)
    table = {"src": np.arange(10, dtype=np.int64), "t": rng.random(10),
             "prob": rng.random(10).astype(np.float32), "scores": rng.random((10, 2))}
    largest = []
    formatted = np.char.mod
    monkeypatch.setattr(np.char, "mod", lambda fmt, v: largest.append(len(v)) or formatted(fmt, v))
    monkeypatch.setattr(tables, "OUTPUT_ROWS", 3)
    tables.write_table(tmp_path / f"out{suffix}", table)
    if suffix == ".csv":
        assert max(largest) == 3
        back = np.loadtxt(tmp_path / "out.csv", delimiter=",", skiprows=1)
        columns = open(tmp_path / "out.csv").readline().strip().split(",")
        assert columns == ["src", "t", "prob", "score_0", "score_1"]
        got = {c: back[:, i] for i, c in enumerate(columns)}
    elif suffix == ".parquet":
        import pyarrow.parquet as pq
        meta = pq.ParquetFile(tmp_path / "out.parquet").metadata
        assert meta.num_rows == 10 and meta.num_row_groups == 4
        got = {k: np.asarray(v) for k, v in pq.read_table(tmp_path / "out.parquet").to_pydict().items()}
    else:
        got = dict(np.load(tmp_path / "out.npz"))
        got.update({f"score_{c}": got["scores"][:, c] for c in range(2)})
    assert np.array_equal(got["src"], table["src"]) and np.array_equal(got["t"], table["t"])
    assert np.array_equal(np.float32(got["prob"]), table["prob"])
    for c in range(2):
        assert np.array_equal(got[f"score_{c}"], table["scores"][:, c])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".gnnsys-tmp")]
