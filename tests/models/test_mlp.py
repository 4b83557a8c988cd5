"""MLP, a model added as its module plus one registry line: features only, the graph
ignored; trains in minibatch mode on one worker and on two, predicts, and exports as
torch_geometric.nn.MLP."""
import numpy as np
import pytest
import torch
import torch_geometric

import gnnsys
from gnnsys.cli import main
from gnnsys.graph import Graph
from gnnsys.testing import tiny_graph


def settings(tmp_path, workers=1, **model):
    return {"mode": "minibatch",
            "model": {"arch": "mlp", "hidden": 16, "layers": 2, "dropout": 0.1, **model},
            "sampler": {"fanouts": [3, 3], "batch_size": 32, "threads": 1},
            "train": {"epochs": 15, "lr": 0.02, "progress": False, "eval_every": 5},
            "cluster": {"workers": workers, "launcher": "threads"},
            "partition": {"dir": str(tmp_path / "parts")},     # this graph's own
            "run": {"dir": str(tmp_path / "run")}}


def without_edges(graph: Graph) -> Graph:
    return Graph(indptr=np.zeros(graph.num_nodes + 1, dtype=np.int64),
                 indices=np.zeros(0, dtype=np.int64), x=graph.x, y=graph.y,
                 train_idx=graph.train_idx, val_idx=graph.val_idx, test_idx=graph.test_idx,
                 num_classes=graph.num_classes, name="no-edges")


@pytest.mark.parametrize("workers", [1, 2])
def test_mlp_trains_above_chance_from_features_alone(tmp_path, workers):
    graph = tiny_graph(num_nodes=300, num_features=8, num_classes=3)
    result = gnnsys.Trainer(settings(tmp_path, workers), data=graph).fit()
    assert result["test_acc"] > 0.6            # chance: 1/3
    # the graph plays no part: the same model on the same rows without any edge
    scores = torch.from_numpy(result.predict("all")["scores"])
    alone = result.model.inference(without_edges(graph))
    torch.testing.assert_close(scores, alone, atol=1e-6, rtol=0)
    rows = np.array([7, 3, 250])
    torch.testing.assert_close(result.model.inference_of(graph, rows), alone[rows])


def test_cli_trains_mlp_and_its_export_is_pyg_mlp(tmp_path, repo_root, capsys):
    """`--set model.arch=mlp`; PyG's MLP, rebuilt from the file alone, gives predict's
    scores (its forward takes the rows alone)."""
    run_dir = tmp_path / "run"
    args = ["train", "--config", str(repo_root / "configs" / "quickstart.yaml"),
            "--set", "model.arch=mlp", "--set", "model.norm=batch",
            "--set", "dataset.name=synthetic-tiny", "--set", "dataset.feature_dtype=float16",
            "--set", "train.epochs=1", "--set", "train.progress=false",
            "--set", "sampler.threads=1", "--set", f"run.dir={run_dir}"]
    assert main(args) == 0
    assert main(["export", str(run_dir), "--out", str(tmp_path / "m.pt")]) == 0
    assert "torch_geometric.nn.MLP(in_channels=" in capsys.readouterr().out
    saved = torch.load(tmp_path / "m.pt", weights_only=True)
    assert saved["class"] == "MLP" and saved["kwargs"]["norm"] == "batch_norm"
    pyg = torch_geometric.nn.MLP(**saved["kwargs"])
    pyg.load_state_dict(saved["state_dict"])
    result = gnnsys.load_run(run_dir)
    from gnnsys.datasets import load_dataset
    x = torch.from_numpy(np.array(load_dataset("synthetic-tiny").x)).half().float()
    with torch.no_grad():
        scores = pyg.eval()(x)
    torch.testing.assert_close(scores, torch.from_numpy(result.predict("all")["scores"]),
                               atol=1e-5, rtol=0)
