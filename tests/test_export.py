"""A minibatch run exported for serving without gnnsys: PyG's own GraphSAGE / GCN / GAT,
rebuilt from the file by the README's recipe alone, gives `gnnsys predict`'s scores on a
full-graph forward; what has no PyG counterpart is one line."""
import numpy as np
import pytest
import torch
import torch_geometric

import gnnsys
from gnnsys.cli import main
from gnnsys.config import ConfigError
from gnnsys.datasets import load_dataset
from gnnsys.datasets.for_run import prepared_inputs
from gnnsys.graph import Graph
from gnnsys.interop.pyg import to_pyg
from gnnsys.testing import tiny_graph


def run(tmp_path, arch="sage", model=None, dataset=None, data=None):
    config = {"mode": "minibatch", "dataset": {"name": "synthetic-tiny", **(dataset or {})},
              "model": {"arch": arch, "hidden": 16, "layers": 2, **(model or {})},
              "sampler": {"fanouts": [5, 5, 5][:(model or {}).get("layers", 2)],
                          "batch_size": 128, "threads": 1},
              "train": {"epochs": 1, "lr": 0.01, "progress": False},
              "run": {"dir": str(tmp_path / "run")}}
    return gnnsys.Trainer(config, data=data).fit()


def readme_inputs(x, f) -> torch.Tensor:
    """The README's input recipe, written out as a reader without gnnsys has it."""
    if f["normalize"] == "row":
        x = x / x.sum(1, keepdim=True).clamp(min=1e-12)
    if f["normalize"] == "standard":
        x = (x - f["mean"]) / f["std"]
    if f["dtype"] == "float16":
        x = x.half().float()
    return x


def serve(path, data) -> torch.Tensor:
    """The README's recipe, torch and torch_geometric only."""
    saved = torch.load(path, weights_only=True)
    model = getattr(torch_geometric.nn, saved["class"])(**saved["kwargs"])
    model.load_state_dict(saved["state_dict"])
    x = readme_inputs(data.x.float(), saved["features"])
    with torch.no_grad():
        return model.eval()(x, data.edge_index)


@pytest.mark.parametrize("arch,model,dataset", [
    ("sage", {"norm": "batch"}, {"normalize_features": "row"}),
    ("gcn", {"norm": "layer", "layers": 3}, {"normalize_features": "standard"}),
    ("gat", {"heads": 2, "layers": 3}, {"feature_dtype": "float16"}),
])
def test_pyg_forward_of_the_export_equals_gnnsys_predict(tmp_path, arch, model, dataset):
    result = run(tmp_path, arch, model, dataset)
    result.export_pyg(tmp_path / "model.pt")
    data = to_pyg(load_dataset("synthetic-tiny"))
    scores = serve(tmp_path / "model.pt", data)
    # the recipe gnnsys ships (what its readers call) is the README's, and gives the
    # inputs the run trained on (to float32 rounding: numpy and torch sum a row apart)
    features = torch.load(tmp_path / "model.pt", weights_only=True)["features"]
    x = prepared_inputs(data.x.float(), features)
    torch.testing.assert_close(x, readme_inputs(data.x.float(), features), atol=0, rtol=0)
    trained = gnnsys.datasets.load_run_graph(result.config).x
    torch.testing.assert_close(x, torch.from_numpy(np.asarray(trained, dtype=np.float32)),
                               atol=1e-5, rtol=1e-4)
    table = result.predict("all")
    assert (table["node_id"] == np.arange(len(scores))).all()
    torch.testing.assert_close(scores, torch.from_numpy(table["scores"]), atol=1e-5, rtol=0)


def test_the_command_line_writes_the_same(tmp_path, capsys):
    result = run(tmp_path)
    assert main(["export", str(result.run_dir), "--out", str(tmp_path / "m.pt")]) == 0
    assert "state_dict of torch_geometric.nn.GraphSAGE(in_channels=" in capsys.readouterr().out
    saved = torch.load(tmp_path / "m.pt", weights_only=True)
    for name, value in result.export_pyg()["state_dict"].items():
        torch.testing.assert_close(saved["state_dict"][name], value)


def test_what_pyg_has_no_model_for_is_one_line(tmp_path, capsys):
    result = run(tmp_path, model={"layers": 3, "residual": True})
    with pytest.raises(ConfigError, match=r"residual cannot be exported .*load_run\(run_dir\)"):
        result.export_pyg(tmp_path / "m.pt")
    assert main(["export", str(result.run_dir), "--out", str(tmp_path / "m.pt")]) == 2
    assert "model.residual cannot be exported" in capsys.readouterr().err
    assert not (tmp_path / "m.pt").exists()
    graph = tiny_graph(num_nodes=60)
    loops = np.arange(5)
    edges = np.concatenate([graph.edge_index(), np.stack([loops, loops])], 1)
    graph = Graph.from_edge_index(edges, graph.num_nodes, x=graph.x, y=graph.y,
                                  num_classes=graph.num_classes, train_idx=graph.train_idx,
                                  val_idx=graph.val_idx, test_idx=graph.test_idx, name="loops")
    with pytest.raises(ConfigError, match="5 self loops"):
        run(tmp_path / "gcn", "gcn", data=graph).export_pyg()
