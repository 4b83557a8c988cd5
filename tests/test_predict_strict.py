"""Predict and export as strict as --resume, and as plain as they can be: the dataset's
files checked by content, a run still training named as such, one process where it fits,
bad node ids refused before any inference, --nodes inferred over their neighbourhood
only, CSV output, another graph of the same widths through --set dataset.path, and each
refusal one line under a label that says what is wrong."""
import os

import numpy as np
import pytest
import torch

import gnnsys
from gnnsys.cli import main
from gnnsys.config import from_dict
from gnnsys.errors import DatasetMismatch, OverrideError, PredictError
from gnnsys.models.block_gnn import build_model
from gnnsys.prediction import prediction_workers
from gnnsys.result import other_dataset
from gnnsys.runlog import RunDir
from gnnsys.testing import tiny_graph

QUICKSTART = os.path.join(os.path.dirname(__file__), "..", "configs", "quickstart.yaml")


def bundle(path, graph, x=None):
    rows = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr))
    np.savez(path, edge_index=np.stack([graph.indices, rows]), y=graph.y,
             x=graph.x if x is None else x, num_classes=graph.num_classes)
    return path


def train(tmp_path, mode="minibatch", **cluster):
    """A finished run on a bundle file of 120 nodes (4 features, 3 classes)."""
    data = {"mode": mode, "dataset": {"path": str(bundle(tmp_path / "g.npz", tiny_graph(
                num_nodes=120, num_features=4)))},
            "model": {"arch": "sage" if mode == "minibatch" else "gcn", "hidden": 8,
                      "layers": 2},
            "sampler": {"fanouts": [3, 3], "batch_size": 64, "threads": 1},
            "train": {"epochs": 1, "progress": False}, "run": {"dir": str(tmp_path / "run")},
            "partition": {"dir": str(tmp_path / "parts")}, "cluster": cluster}
    return gnnsys.Trainer(data).fit()


def refused(capsys, *argv) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gnnsys: "), err
    return err


def test_a_dataset_file_replaced_at_the_same_shape_is_refused(tmp_path, capsys):
    """Same size, same time, other content: predict and export refuse it as --resume does."""
    result = train(tmp_path)
    path = tmp_path / "g.npz"
    before = path.stat()
    graph = tiny_graph(num_nodes=120, num_features=4)
    bundle(path, graph, x=graph.x[::-1] + 1)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    run, out = str(result.run_dir), str(tmp_path / "p.npz")
    err = refused(capsys, "predict", run, "--out", out)
    assert "dataset error: the dataset's files changed since the run in" in err, err
    err = refused(capsys, "export", run, "--out", str(tmp_path / "m.pt"))
    assert "dataset's files changed" in err, err
    assert not os.path.exists(out) and not (tmp_path / "m.pt").exists()
    with pytest.raises(DatasetMismatch, match="restore them, or predict on that graph"):
        gnnsys.load_run(run).predict()
    # named on purpose, the changed file is predicted on
    assert main(["predict", run, "--out", out, "--set", f"dataset.path={path}"]) == 0


def test_a_run_still_training_is_named_so_not_sent_to_resume(tmp_path, capsys):
    """Mid-run (no final record yet) or resumed after it finished: the lock says so."""
    result = train(tmp_path)
    log = result.run_dir / "metrics.jsonl"
    finished = log.read_text()
    training = RunDir(result.run_dir)
    for text in (finished.splitlines()[0] + "\n", finished):
        log.write_text(text)
        training.lock()                       # as the training process holds it
        try:
            for command in ("predict", "export"):
                err = refused(capsys, command, str(result.run_dir), "--out",
                              str(tmp_path / "p.npz"))
                assert f"run error: the run in {result.run_dir} is still training (pid " \
                    f"{os.getpid()})" in err and "--resume" not in err, err
        finally:
            training.unlock()
    log.write_text(finished.splitlines()[0] + "\n")
    err = refused(capsys, "predict", str(result.run_dir), "--out", str(tmp_path / "p.npz"))
    assert "run error: the run in" in err and "has not finished" in err, err


def test_predict_runs_in_one_process_where_the_run_trained_here(tmp_path, monkeypatch):
    import gnnsys.distributed
    result = train(tmp_path, workers=2, launcher="threads")
    launched = []
    launch = gnnsys.distributed.launch
    monkeypatch.setattr(gnnsys.distributed, "launch",
                        lambda fn, config, *a: launched.append(config.cluster.workers)
                        or launch(fn, config, *a))
    alone = result.predict()
    assert launched == [1]
    np.testing.assert_allclose(alone["scores"], result.predict(workers=2)["scores"],
                               rtol=1e-5, atol=1e-5)
    assert prediction_workers(result.config, None) == 1
    config = from_dict(result.config.to_dict() | {"cluster": {"workers": 2,
                                                              "address": "10.0.0.1:6379"}})
    assert prediction_workers(config, None) == 2 and prediction_workers(config, 3) == 3


def test_bad_requests_are_refused_before_any_inference(tmp_path, capsys, monkeypatch):
    import gnnsys.distributed
    result = train(tmp_path)
    run, out = str(result.run_dir), str(tmp_path / "p.npz")
    monkeypatch.setattr(gnnsys.distributed, "launch", lambda *a: pytest.fail("inferred"))
    err = refused(capsys, "predict", run, "--out", out, "--nodes", "3", "99999")
    assert "predict error: node id 99999 is not in the run's dataset" in err, err
    err = refused(capsys, "predict", run, "--out", out, "--workers", "0")
    assert "predict error: workers 0: infer on 1 or more workers" in err, err
    err = refused(capsys, "predict", run, "--out", str(tmp_path / "p.txt"))
    assert "predict error: " in err and ".csv" in err, err
    with pytest.raises(PredictError, match="no node ids given"):
        result.predict(nodes=[])
    with pytest.raises(PredictError, match="workers -1"):
        result.predict(workers=-1)


@pytest.mark.parametrize("arch", ["sage", "gcn", "gat"])
@pytest.mark.parametrize("layers", [1, 2])
def test_a_few_nodes_are_inferred_over_their_neighbourhood_alone(arch, layers, monkeypatch):
    """Exact (the whole graph's rows), and on a subgraph: not every node."""
    from gnnsys.models.block_gnn import BlockGNN
    graph = tiny_graph(num_nodes=300, avg_degree=3, num_features=6, isolated=3)
    config = from_dict({"model": {"arch": arch, "hidden": 8, "layers": 2, "heads": 2,
                                  "norm": "layer"}})
    torch.manual_seed(0)
    model = build_model(config, graph.num_features, graph.num_classes).eval()
    model.set_degree(graph.degree())
    rows = np.array([5, 298, 5, 17])           # a repeat and an isolated node
    whole = model.inference(graph, 64, layers=layers)
    sizes = []
    inference = BlockGNN.inference
    monkeypatch.setattr(BlockGNN, "inference", lambda self, g, *a, **k:
                        sizes.append(g.num_nodes) or inference(self, g, *a, **k))
    some = model.inference_of(graph, rows, 64, layers=layers)
    torch.testing.assert_close(some, whole[torch.from_numpy(rows)], rtol=1e-5, atol=1e-5)
    assert len(sizes) == 1 and 3 < sizes[0] < graph.num_nodes
    assert model.degree.numel() == graph.num_nodes       # the whole graph's, restored


def test_node_predictions_as_csv(tmp_path, capsys):
    result = train(tmp_path)
    run = str(result.run_dir)
    assert main(["predict", run, "--out", str(tmp_path / "p.csv"), "--nodes", "7", "3"]) == 0
    header, *lines = (tmp_path / "p.csv").read_text().splitlines()
    assert header == "node_id,pred,score_0,score_1,score_2,label"     # as .parquet has them
    want = result.predict(nodes=[7, 3])
    assert [int(line.split(",")[0]) for line in lines] == [7, 3]
    read = np.array([[float(v) for v in line.split(",")[2:5]] for line in lines],
                    dtype=np.float32)
    assert np.array_equal(read, want["scores"])          # floats read back exactly


@pytest.mark.parametrize("mode", ["minibatch", "fullgraph"])
def test_predict_on_another_graph_of_the_same_widths(tmp_path, capsys, mode):
    result = train(tmp_path, mode=mode)
    run = str(result.run_dir)
    new = tiny_graph(num_nodes=90, num_features=4, seed=2)
    path = bundle(tmp_path / "new.npz", new)
    assert main(["predict", run, "--out", str(tmp_path / "p.npz"),
                 "--set", f"dataset.path={path}"]) == 0
    assert "90 predictions (all nodes)" in capsys.readouterr().out
    on_new = gnnsys.load_run(run, overrides=[f"dataset.path={path}"])
    for name, value in result.model.state_dict().items():       # the run's own weights
        torch.testing.assert_close(on_new.model.state_dict()[name], value)
    if mode == "minibatch":            # the exact inference on the new graph
        graph = gnnsys.datasets.load_run_graph(on_new.config)
        with np.load(tmp_path / "p.npz") as got:
            torch.testing.assert_close(torch.from_numpy(got["scores"]),
                                       on_new.model.inference(graph, 64), rtol=1e-5, atol=1e-5)
    narrow = bundle(tmp_path / "narrow.npz", tiny_graph(num_nodes=90, num_features=3))
    err = refused(capsys, "predict", run, "--out", str(tmp_path / "q.npz"),
                  "--set", f"dataset.path={narrow}")
    assert "dataset error: the dataset 'narrow' no longer matches the model" in err, err
    assert "feature width and class count" in err
    err = refused(capsys, "predict", run, "--out", str(tmp_path / "q.npz"),
                  "--set", "model.hidden=4")
    assert "predict error: --set model.hidden: predict takes dataset.* settings only" in err


def test_a_temporal_run_is_not_moved_to_another_graph():
    config = from_dict({"mode": "temporal", "model": {"arch": "tgn"}})
    with pytest.raises(PredictError, match="temporal run predicts on the event stream it "
                                           "trained on"):
        other_dataset(config, ["dataset.path=other.npz"])


def test_a_typo_in_set_is_the_overrides_not_the_yaml_files(capsys):
    capsys.readouterr()
    assert main(["train", "-c", QUICKSTART, "--set", "train.epoch=3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gnnsys: override error: --set train.epoch=3: unknown config key "
                          "'train.epoch'") and "quickstart.yaml" not in err, err
    with pytest.raises(OverrideError, match="--set trian.epochs=3: unknown config key 'trian'"):
        gnnsys.load_config(QUICKSTART, ["trian.epochs=3"])
