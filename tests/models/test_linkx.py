"""LINKX, a model added as its module plus one registry line: an MLP over each node's
adjacency row (read from the CSR, sparse) and one over its features, combined. Where the
features say nothing and every neighbour is of another class, it learns the classes
from the adjacency rows alone; it trains on one worker and two, predicts, and exports as
torch_geometric.nn.LINKX."""
import numpy as np
import pytest
import torch
import torch_geometric

import gnnsys
from gnnsys.cli import main
from gnnsys.graph import Graph
from gnnsys.interop.pyg import to_pyg


def heterophilous_graph(num_nodes=300, avg_degree=6, seed=0) -> Graph:
    """Two classes, every edge between them (bipartite), features pure noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, num_nodes)
    zeros, ones = np.flatnonzero(y == 0), np.flatnonzero(y == 1)
    m = num_nodes * avg_degree // 2
    src, dst = rng.choice(zeros, m), rng.choice(ones, m)
    edges = np.unique(np.concatenate([np.stack([src, dst]), np.stack([dst, src])], 1), axis=1)
    perm = rng.permutation(num_nodes)
    a, b = int(0.6 * num_nodes), int(0.8 * num_nodes)
    return Graph.from_edge_index(edges, num_nodes,
                                 x=rng.normal(0, 1, (num_nodes, 8)).astype(np.float32),
                                 y=y.astype(np.int64), num_classes=2,
                                 train_idx=np.sort(perm[:a]), val_idx=np.sort(perm[a:b]),
                                 test_idx=np.sort(perm[b:]), name="bipartite")


def settings(tmp_path, arch="linkx", workers=1):
    return {"mode": "minibatch",
            "model": {"arch": arch, "hidden": 16, "layers": 2, "dropout": 0.1},
            "sampler": {"fanouts": [3, 3], "batch_size": 32, "threads": 1},
            "train": {"epochs": 15, "lr": 0.02, "progress": False, "eval_every": 5},
            "cluster": {"workers": workers, "launcher": "threads"},
            "partition": {"dir": str(tmp_path / "parts")},     # this graph's own
            "run": {"dir": str(tmp_path / arch / str(workers))}}


def pyg_forward(saved: dict, graph: Graph) -> torch.Tensor:
    model = getattr(torch_geometric.nn, saved["class"])(**saved["kwargs"])
    model.load_state_dict(saved["state_dict"])
    data = to_pyg(graph)
    with torch.no_grad():
        return model.eval()(data.x.float(), data.edge_index)


@pytest.mark.parametrize("workers", [1, 2])
def test_linkx_learns_from_adjacency_rows_and_exports_to_pyg(tmp_path, workers):
    graph = heterophilous_graph()
    result = gnnsys.Trainer(settings(tmp_path, workers=workers), data=graph).fit()
    assert result["test_acc"] > 0.8                     # features alone: chance, 1/2
    scores = torch.from_numpy(result.predict("all")["scores"])
    if workers == 2:        # each worker's rows and halo, relabelled: the same scores
        torch.testing.assert_close(torch.from_numpy(result.predict("all", workers=2)["scores"]),
                                   scores, atol=1e-5, rtol=0)
    saved = result.export_pyg(tmp_path / "linkx.pt")
    assert saved["class"] == "LINKX" and saved["kwargs"]["num_nodes"] == graph.num_nodes
    torch.testing.assert_close(pyg_forward(saved, graph), scores, atol=1e-5, rtol=0)
    rows = np.array([7, 3, 250, 7])
    torch.testing.assert_close(result.model.inference_of(graph, rows), scores[rows],
                               atol=1e-6, rtol=0)


def test_mlp_has_nothing_to_learn_there(tmp_path):
    """The same graph is chance for a features-only model: what LINKX learned is the
    adjacency rows'."""
    result = gnnsys.Trainer(settings(tmp_path, "mlp"), data=heterophilous_graph()).fit()
    assert result["test_acc"] < 0.7


@pytest.mark.parametrize("key, value", [("norm", "layer"), ("residual", True)])
def test_what_linkx_would_ignore_is_refused(key, value, capsys, repo_root):
    from gnnsys.config import ConfigError, from_dict
    with pytest.raises(ConfigError) as err:
        from_dict({"model": {"arch": "linkx", key: value, "layers": 3},
                   "sampler": {"fanouts": [3, 3, 3]}})
    assert str(err.value) == (f"config key 'model.{key}' is {value!r} but model.arch linkx "
                              "normalises as PyG's LINKX does (batch norm in its final MLP); "
                              f"leave model.{key} at {'none' if key == 'norm' else False}")
    assert main(["train", "--config", str(repo_root / "configs" / "quickstart.yaml"),
                 "--set", "model.arch=linkx", "--set", f"model.{key}={value}",
                 "--set", "model.layers=3", "--set", "sampler.fanouts=[3,3,3]"]) == 2
    assert "model.arch linkx normalises as PyG's LINKX does" in capsys.readouterr().err


def test_cli_trains_linkx(tmp_path, repo_root):
    args = ["train", "--config", str(repo_root / "configs" / "quickstart.yaml"),
            "--set", "model.arch=linkx", "--set", "dataset.name=synthetic-tiny",
            "--set", "train.epochs=1", "--set", "train.progress=false",
            "--set", "sampler.threads=1", "--set", f"run.dir={tmp_path / 'run'}"]
    assert main(args) == 0
    assert main(["predict", str(tmp_path / "run"), "--out", str(tmp_path / "p.csv"),
                 "--nodes", "3", "1"]) == 0
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 3
