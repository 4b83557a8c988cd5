"""A user's own graph: `dataset.path`, the Python API on PyG / DGL objects, an extra
registry file, and the one-line messages for files that do not fit (docs/DATA.md)."""
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import gnnsys
from gnnsys.config import ConfigError, from_dict
from gnnsys.datasets import DatasetError, list_datasets, load_dataset, load_run_graph, registry
from gnnsys.interop import to_pyg
from gnnsys.testing import shared_data_dir, tiny_graph

DATA_MD = Path(__file__).resolve().parents[2] / "docs" / "DATA.md"
MINIBATCH = {"mode": "minibatch", "model": {"arch": "sage", "hidden": 16, "layers": 2},
             "sampler": {"fanouts": [4, 4], "batch_size": 32, "threads": 1}}
TEMPORAL = {"mode": "temporal", "model": {"arch": "tgn", "heads": 2, "dropout": 0.0},
            "sampler": {"batch_size": 100, "threads": 1},
            "temporal": {"memory_dim": 16, "time_dim": 8, "embedding_dim": 16,
                         "num_neighbors": 5, "eval_negatives": 4}}


def run_config(base: dict, run_dir: Path, **dataset) -> dict:
    return {**base, "dataset": dataset, "run": {"dir": str(run_dir)},
            "train": {"epochs": 2, "lr": 0.01, "progress": False, "seed": 0}}


def doc_blocks(heading: str) -> list[str]:
    """The Python blocks of DATA.md's section `heading`."""
    text = DATA_MD.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end if end > 0 else None], flags=re.S)


@pytest.fixture
def doc_bundles(tmp_path, monkeypatch):
    """The directory where DATA.md's numpy examples, run verbatim, wrote their files."""
    blocks = doc_blocks("Writing one from numpy")
    assert len(blocks) == 2 and len(blocks[0].splitlines()) <= 15
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code, str(DATA_MD), "exec"), {})
    return tmp_path


def test_doc_example_static_file_trains_by_path(doc_bundles):
    config = from_dict(run_config(MINIBATCH, doc_bundles / "run", path="my_graph.npz"))
    assert config.dataset.name == "my_graph" and config.dataset.task == "node"
    metrics = gnnsys.Trainer(config).fit()
    assert metrics["test_acc"] > 0.6          # the features carry the class: far above 1/3


def test_doc_one_liner_trains_a_shipped_config_on_the_file(doc_bundles, repo_root):
    """DATA.md's `gnnsys train --config configs/quickstart.yaml --set dataset.path=...`:
    the path given on the command line replaces the config's dataset.name."""
    from gnnsys.cli import main
    assert main(["train", "--config", str(repo_root / "configs/quickstart.yaml"),
                 "--set", "dataset.path=my_graph.npz", "--set", "train.epochs=1",
                 "--set", f"run.dir={doc_bundles / 'cli'}", "--set", "train.progress=false"]) == 0
    saved = yaml.safe_load((doc_bundles / "cli" / "config.yaml").read_text())["dataset"]
    assert (saved["name"], saved["path"]) == ("my_graph", "my_graph.npz")


def test_doc_example_temporal_file_trains_by_path(doc_bundles):
    metrics = gnnsys.Trainer(run_config(TEMPORAL, doc_bundles / "run",
                                        path="my_events.npz")).fit()
    assert 0.0 <= metrics["test_ap"] <= 1.0


@pytest.mark.parametrize("order", ["shuffled", "sorted"])
def test_predictions_are_keyed_by_the_bundles_own_node_ids(doc_bundles, order):
    """node_ids: the user's id of each node (not 0..N-1; shuffled, or sorted with gaps, where
    a mapping that assumed contiguous or unsorted ids would go wrong) keys the predictions
    and --nodes, through a 2-worker run whose parts relabel the rows."""
    from gnnsys.cli import main
    with np.load(doc_bundles / "my_graph.npz") as arrays:
        bundle = dict(arrays)
    n = len(bundle["y"])
    ids = 10 ** 9 + 3 * (np.random.default_rng(0).permutation(n) if order == "shuffled"
                         else np.arange(n))
    np.savez(doc_bundles / "ids.npz", **bundle, node_ids=ids)
    data = run_config(MINIBATCH, doc_bundles / "run", path="ids.npz")
    data.update(cluster={"workers": 2, "launcher": "threads"},
                partition={"dir": str(doc_bundles / "parts")})
    result = gnnsys.Trainer(data).fit()
    every = gnnsys.load_run(result.run_dir).predict()
    assert every["node_id"].tolist() == ids.tolist()            # row r: the user's ids[r]
    assert every["label"].tolist() == bundle["y"].tolist()
    test = result.predict("test")
    assert np.mean(test["pred"] == test["label"]) == pytest.approx(result["test_acc"], abs=1e-6)
    assert main(["predict", str(result.run_dir), "--out", str(doc_bundles / "n.npz"),
                 "--nodes", str(ids[7]), str(ids[3])]) == 0
    with np.load(doc_bundles / "n.npz") as listed:
        assert listed["node_id"].tolist() == [ids[7], ids[3]]
        np.testing.assert_array_equal(listed["scores"], every["scores"][[7, 3]])
    with pytest.raises(ConfigError, match=r"node id 7 is not in the run's dataset .*not "
                                          "contiguous"):
        result.predict(nodes=[7])


def test_a_directory_of_npy_files_is_the_same_bundle(doc_bundles):
    folder = doc_bundles / "my_graph"
    folder.mkdir()
    with np.load(doc_bundles / "my_graph.npz") as arrays:
        for key in arrays.files:
            np.save(folder / f"{key}.npy", arrays[key])
    from_file = load_dataset("my_graph", path=str(doc_bundles / "my_graph.npz"))
    from_dir = load_dataset("my_graph", path=str(folder))
    np.testing.assert_array_equal(from_dir.indices, from_file.indices)
    np.testing.assert_array_equal(from_dir.x, from_file.x)
    np.testing.assert_array_equal(from_dir.test_idx, from_file.test_idx)


def tiny_hetero_bundle(path):
    """A bundle of typed nodes as shared/data/hetero stores them: 6 labelled papers, 3
    authors (paper 0 and 1 share author 0; papers 1, 2, 3 author 1; paper 5 has none)."""
    papers, authors = np.array([0, 1, 1, 2, 3, 4]), np.array([0, 0, 1, 1, 1, 2])
    masks = np.zeros((2, 6), dtype=bool)
    np.savez(path, num_nodes__paper=np.array(6), num_nodes__author=np.array(3),
             edge_index__paper__written_by__author=np.stack([papers, authors]),
             edge_index__author__writes__paper=np.stack([authors, papers]),
             x__paper=np.eye(6, 4, dtype=np.float32), y__paper=np.array([0, 1, 0, 1, 0, 1]),
             train_mask__paper=masks | [1, 1, 1, 1, 0, 0], val_mask__paper=masks | [0] * 4 + [1, 0],
             test_mask__paper=masks | [0] * 5 + [1])


def test_a_heterogeneous_bundle_says_so_and_the_doc_converts_it(tmp_path, monkeypatch):
    """It read as a static bundle missing 'edge_index' (a malformed file?): one line says
    it is heterogeneous and where the conversion is; DATA.md's conversion, run verbatim,
    writes a static bundle of the labelled type that loads."""
    monkeypatch.chdir(tmp_path)
    tiny_hetero_bundle(tmp_path / "acm_heco.npz")
    for task in ("node_classification", "link_prediction"):
        with pytest.raises(DatasetError) as err:
            load_dataset("acm", path="acm_heco.npz", task=task)
        assert_one_line(err, "acm_heco.npz is a heterogeneous bundle (node types paper, "
                        "author; 2 relations such as paper__written_by__author)",
                        "homogeneous graphs only", 'docs/DATA.md, "Heterogeneous bundles"')
    shared = shared_data_dir()
    if shared is not None:                     # the project's own heterogeneous graphs
        with pytest.raises(DatasetError, match="dblp_hgb.npz is a heterogeneous bundle"):
            load_dataset("dblp", path=str(shared / "hetero" / "dblp_hgb.npz"))
    [code] = doc_blocks("Heterogeneous bundles")
    exec(compile(code, str(DATA_MD), "exec"), {})
    graph = load_dataset("acm_paper", path="acm_paper.npz")
    pairs = {(int(u), int(v)) for u in range(6)
             for v in graph.indices[graph.indptr[u]:graph.indptr[u + 1]]}
    assert pairs == {(0, 1), (1, 0), (1, 2), (2, 1), (1, 3), (3, 1), (2, 3), (3, 2)}
    assert graph.x.shape == (6, 4) and list(graph.test_idx) == [5]


def test_heterogeneous_data_from_python_says_so():
    from torch_geometric.data import HeteroData
    with pytest.raises(TypeError, match="HeteroData: gnnsys trains homogeneous graphs only"):
        gnnsys.interop.as_graph(HeteroData())


def test_pyg_data_trains_through_the_python_api(tmp_path):
    graph = tiny_graph(num_nodes=300, num_features=8, seed=3)
    through_pyg = gnnsys.Trainer(run_config(MINIBATCH, tmp_path / "a"),
                                 data=to_pyg(graph)).fit()
    direct = gnnsys.training.fit(from_dict(run_config(MINIBATCH, tmp_path / "b")), graph)
    assert through_pyg["test_acc"] == direct["test_acc"]


def test_pyg_temporal_data_trains_through_the_python_api(tmp_path):
    from torch_geometric.data import TemporalData

    rng = np.random.default_rng(0)
    t = np.sort(rng.integers(0, 10_000, 600))
    data = TemporalData(src=torch.from_numpy(rng.integers(0, 30, 600)),
                        dst=torch.from_numpy(rng.integers(30, 50, 600)),
                        t=torch.from_numpy(t), msg=torch.rand(600, 3))
    metrics = gnnsys.Trainer(run_config(TEMPORAL, tmp_path / "run"), data=data).fit()
    assert 0.0 <= metrics["test_ap"] <= 1.0


def test_data_of_the_wrong_kind_is_refused(tmp_path):
    with pytest.raises(ValueError, match="is temporal; use mode: temporal"):
        from torch_geometric.data import TemporalData
        data = TemporalData(src=torch.tensor([0, 1]), dst=torch.tensor([2, 3]),
                            t=torch.tensor([1, 2]))
        gnnsys.Trainer(run_config(MINIBATCH, tmp_path / "run"), data=data).fit()
    with pytest.raises(TypeError, match="cannot train on a list"):
        gnnsys.Trainer(run_config(MINIBATCH, tmp_path / "run"), data=[1, 2]).fit()


def test_dgl_graph_trains_through_the_python_api(tmp_path):
    pytest.importorskip("dgl")
    from gnnsys.interop import to_dgl

    graph = tiny_graph(num_nodes=300, num_features=8, seed=3)
    metrics = gnnsys.Trainer(run_config(MINIBATCH, tmp_path / "run"), data=to_dgl(graph)).fit()
    assert metrics["test_acc"] > 0.5


def test_extra_registry_extends_the_built_in_one(doc_bundles, monkeypatch):
    extra = doc_bundles / "mine.yaml"
    entry = {"source": "bundle", "task": "node_classification", "metric": "roc_auc"}
    extra.write_text(yaml.safe_dump({
        "mine": {**entry, "file": str(doc_bundles / "my_graph.npz")},
        "cora": {**entry, "file": str(doc_bundles / "my_graph.npz")}}))
    monkeypatch.setenv(registry.REGISTRY_ENV, str(extra))
    names = {info.name for info in list_datasets()}
    assert {"mine", "cora", "synthetic-tiny", "wikipedia"} <= names    # built-ins stay
    assert load_dataset("mine").metric == "roc_auc"
    assert load_dataset("cora").num_nodes == 300                       # the user's file wins


def test_missing_user_bundle_does_not_claim_the_project_ships_it(tmp_path, monkeypatch):
    with pytest.raises(DatasetError) as err:
        load_dataset("x", path=str(tmp_path / "nowhere.npz"))
    assert_one_line(err, "nowhere.npz", "no such file")
    extra = tmp_path / "mine.yaml"
    extra.write_text(yaml.safe_dump({"gone": {"source": "bundle", "task": "link_prediction",
                                              "metric": "ap", "file": "mine/gone.npz"}}))
    monkeypatch.setenv(registry.REGISTRY_ENV, str(extra))
    with pytest.raises(DatasetError) as err:
        load_dataset("gone", root=tmp_path)
    assert "mine/gone.npz" in str(err.value) and "Copy" not in str(err.value)


def assert_one_line(err, *parts):
    message = str(err.value)
    assert "\n" not in message, message
    for part in parts:
        assert part in message, message
    assert "docs/DATA.md" in message, message


STATIC = dict(edge_index=np.array([[0, 1, 2, 3], [1, 2, 3, 0]]), y=np.array([0, 1, 0, 1]),
              x=np.ones((4, 2), dtype=np.float32))
TEMPORAL_EVENTS = dict(src=np.array([0, 1, 2]), dst=np.array([1, 2, 3]), t=np.array([1, 2, 3]))
MALFORMED = {
    "temporal file read as static": (TEMPORAL_EVENTS, "node_classification",
                                     ["no array 'edge_index'", "train it with mode: temporal"]),
    "static file read as temporal": (STATIC, "link_prediction",
                                     ["no array 'src'", "with mode: minibatch, fullgraph or link"]),
    "no labels": ({**STATIC, "y": None}, "node_classification", ["no array 'y'"]),
    "edge_index not (2, E)": ({**STATIC, "edge_index": np.zeros((3, 4), dtype=np.int64)},
                              "node_classification", ["'edge_index'", "(2, num_edges)"]),
    "labels not 1-D": ({**STATIC, "y": np.zeros((4, 2), dtype=np.int64)},
                       "node_classification", ["'y'", "(4, 2)"]),
    "x rows differ": ({**STATIC, "x": np.ones((5, 2), dtype=np.float32)},
                      "node_classification", ["'x' has 5 rows"]),
    "train mask only": ({**STATIC, "train_mask": np.ones(4, dtype=bool)},
                        "node_classification", ["no array 'val_mask'"]),
    "mask too short": ({**STATIC, **{f"{p}_mask": np.ones(3, dtype=bool)
                                     for p in ("train", "val", "test")}},
                       "node_classification", ["'train_mask' has shape (3,)"]),
    "events unsorted": ({**TEMPORAL_EVENTS, "t": np.array([3, 1, 2])}, "link_prediction",
                        ["sorted"]),
    "edge features per event": ({**TEMPORAL_EVENTS, "edge_feat": np.ones((2, 4))},
                                "link_prediction", ["edge_feat has 2 rows"]),
    "node ids repeated": ({**STATIC, "node_ids": np.array([5, 9, 5, 2])},
                          "node_classification", ["'node_ids' gives id 5 to more than one"]),
    "node ids per node": ({**TEMPORAL_EVENTS, "node_ids": np.array([3, 1])},
                          "link_prediction", ["'node_ids' has shape (2,)", "(4,) integers"]),
    "fractional node ids": ({**STATIC, "edge_index": np.array([[0, 1.5], [1, 2]])},
                            "node_classification", ["'edge_index' holds float64 values that "
                                                    "are not whole numbers"]),
    "fractional labels": ({**STATIC, "y": np.array([0, 1, 0.5, 1])}, "node_classification",
                          ["'y' holds float64", "nothing is rounded"]),
    "fractional event ids": ({**TEMPORAL_EVENTS, "dst": np.array([1.0, 2.25, 3.0])},
                             "link_prediction", ["'dst' holds float64"]),
    "bipartite ids crossed": ({**TEMPORAL_EVENTS, "bipartite": np.array(True),
                               "num_src_nodes": np.array(2)}, "link_prediction",
                              ["sources are 0..1 and destinations 2..", "event 0 goes 0 -> 1",
                               "(2 such events)", "drop 'bipartite'"]),
    "bipartite without num_src_nodes": ({**TEMPORAL_EVENTS, "bipartite": np.array(True)},
                                        "link_prediction", ["no array 'num_src_nodes'"]),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_gets_one_line_naming_file_key_and_schema(case, tmp_path):
    arrays, task, parts = MALFORMED[case]
    path = tmp_path / "bad.npz"
    np.savez(path, **{key: value for key, value in arrays.items() if value is not None})
    with pytest.raises(DatasetError) as err:
        load_dataset("bad", path=str(path), task=task)
    assert_one_line(err, str(path), *parts)


def test_unreadable_file_names_the_file_and_schema(tmp_path):
    path = tmp_path / "bad.npz"
    path.write_bytes(b"not a zip")
    with pytest.raises(DatasetError) as err:
        load_dataset("bad", path=str(path))
    assert_one_line(err, str(path), "not a readable .npz")


def test_config_refuses_name_with_path_and_a_task_the_mode_does_not_train():
    with pytest.raises(ConfigError, match="'dataset.name'.*'dataset.path' exclude each other"):
        from_dict({"dataset": {"name": "cora", "path": "my_graph.npz"}})
    with pytest.raises(ConfigError, match="'dataset.task' is 'link_prediction' but mode "
                                          "'minibatch' trains node prediction on static"):
        from_dict({"dataset": {"path": "my_graph.npz", "task": "link_prediction"}})
    saved = from_dict({"dataset": {"path": "my_graph.npz"}}).to_dict()
    assert from_dict(saved).dataset.name == "my_graph"      # a saved run config loads again
    with pytest.raises(ConfigError, match="exclude each other"):   # both on the command line
        from_dict({}, ["dataset.name=cora", "dataset.path=my_graph.npz"])


def test_dataset_task_reads_todays_and_older_names_and_the_bundle_by_its_kind(doc_bundles):
    """`dataset.task` is node or link (an older run config's node_classification /
    link_prediction still loads, unchanged, so its checkpoint still matches); the data
    kind the mode trains decides how a path's bundle is read."""
    temporal = {"mode": "temporal", "model": {"arch": "tgn"}}
    for task in ("link", "link_prediction"):
        config = from_dict({**temporal, "dataset": {"path": "e.npz", "task": task}})
        assert config.dataset.task == task
    with pytest.raises(ConfigError, match="'dataset.task' is 'node' but mode 'temporal' "
                                          "trains link prediction on temporal data"):
        from_dict({**temporal, "dataset": {"path": "e.npz", "task": "node"}})
    assert from_dict({**temporal, "dataset": {"path": "e.npz"}}).dataset.task == "link"
    static = from_dict(run_config(MINIBATCH, doc_bundles / "run", path="my_graph.npz"))
    with pytest.raises(DatasetError) as err:        # read as the temporal mode's kind
        load_run_graph(dataclasses.replace(static, mode="temporal"))
    assert_one_line(err, "no array 'src', which a temporal bundle needs",
                    "it holds a static bundle (edge_index, y)", "mode: minibatch, fullgraph or link")


def test_a_dataset_on_the_command_line_replaces_the_configs(repo_root):
    """`--set dataset.path=FILE` trains any shipped config on one's own file (and
    `--set dataset.name=X` a config with a path on X), without editing the YAML."""
    from gnnsys.config import load_config
    config = load_config(repo_root / "configs/quickstart.yaml", ["dataset.path=data/my.npz"])
    assert (config.dataset.name, config.dataset.path) == ("my", "data/my.npz")
    raw = {"dataset": {"path": "my_graph.npz"}}
    config = from_dict(raw, ["dataset.name=cora"])
    assert (config.dataset.name, config.dataset.path) == ("cora", None)
    assert raw == {"dataset": {"path": "my_graph.npz"}}     # the caller's dict is untouched
