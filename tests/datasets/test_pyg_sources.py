"""Planetoid and JODIE loaders, end to end on tiny fake files in PyG's standard layout."""
import pickle

import numpy as np
import pytest
import torch

from gnnsys.datasets import load_dataset
from gnnsys.datasets.pyg_sources import jodie_to_temporal, planetoid_to_graph


def write_fake_planetoid(raw_dir, num_train=30, num_pool=600, num_test=20, features=8,
                         classes=3, seed=0):
    """The Planetoid ind.cora.* pickles for a random graph (PyG's val set is fixed at 500)."""
    rng = np.random.default_rng(seed)
    raw_dir.mkdir(parents=True)
    num_nodes = num_pool + num_test
    one_hot = np.eye(classes)[rng.integers(0, classes, num_nodes)]
    features_all = rng.random((num_nodes, features)).astype(np.float32)
    graph = {v: [int(u) for u in rng.integers(0, num_nodes, 3)] for v in range(num_nodes)}
    parts = {"x": features_all[:num_train], "y": one_hot[:num_train],
             "allx": features_all[:num_pool], "ally": one_hot[:num_pool],
             "tx": features_all[num_pool:], "ty": one_hot[num_pool:], "graph": graph}
    for key, value in parts.items():
        with open(raw_dir / f"ind.cora.{key}", "wb") as handle:
            pickle.dump(value, handle)
    (raw_dir / "ind.cora.test.index").write_text(
        "\n".join(str(i) for i in range(num_pool, num_nodes)) + "\n")
    return num_nodes, graph


def test_planetoid_loads_from_standard_layout(data_dir):
    num_nodes, graph = write_fake_planetoid(data_dir / "planetoid" / "Cora" / "raw")
    g = load_dataset("planetoid-cora", root=data_dir)
    assert g.name == "planetoid-cora" and g.num_nodes == num_nodes
    assert (len(g.train_idx), len(g.val_idx), len(g.test_idx)) == (30, 500, 20)
    assert g.x.dtype == np.float32 and g.num_features == 8 and g.num_classes == 3
    expected = {(u, v) for v, us in graph.items() for u in us if u != v}
    src, dst = g.edge_index()
    # PyG keeps the raw direction (v's list gives edges v -> u); the raw graph is symmetric
    # in real Planetoid files, so check the undirected edge sets.
    got = {(int(a), int(b)) for a, b in zip(src, dst)}
    undirected = lambda edges: {tuple(sorted(e)) for e in edges}   # noqa: E731
    assert undirected(got) == undirected(expected)


def test_planetoid_to_graph_converts_masks_and_dtypes():
    from torch_geometric.data import Data

    data = Data(x=torch.rand(4, 2, dtype=torch.float64),
                edge_index=torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]]),
                y=torch.tensor([0, 1, -1, 1]),
                train_mask=torch.tensor([True, False, True, False]),
                val_mask=torch.tensor([False, True, False, False]),
                test_mask=torch.tensor([False, False, False, True]))
    g = planetoid_to_graph(data, "tiny", num_classes=2)
    assert g.x.dtype == np.float32 and g.y.dtype == np.int64
    assert g.train_idx.tolist() == [0]       # node 2 is unlabelled (-1): left out
    assert g.val_idx.tolist() == [1] and g.test_idx.tolist() == [3]
    assert g.indices[g.indptr[1]:g.indptr[2]].tolist() == [0]   # row 1 lists in-neighbour 0


def write_fake_jodie_csv(path, num_events=200, users=15, items=7, feat=4, seed=0):
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True)
    t = np.sort(rng.integers(0, 10_000, num_events))
    rows = ["user_id,item_id,timestamp,state_label,comma_separated_list_of_features"]
    for i in range(num_events):
        feats = ",".join(f"{v:.3f}" for v in rng.random(feat))
        rows.append(f"{rng.integers(0, users)},{rng.integers(0, items)},{t[i]},"
                    f"{int(rng.random() < 0.1)},{feats}")
    path.write_text("\n".join(rows) + "\n")
    return t


def test_jodie_loads_from_standard_layout(data_dir):
    t = write_fake_jodie_csv(data_dir / "jodie" / "mooc" / "raw" / "mooc.csv")
    g = load_dataset("jodie-mooc", root=data_dir)
    assert g.name == "jodie-mooc" and g.num_events == 200 and g.bipartite
    assert g.src.max() < g.num_src_nodes <= g.dst.min()
    assert g.edge_feat.shape == (200, 4) and g.edge_feat.dtype == np.float32
    np.testing.assert_array_equal(g.t, t)
    assert g.val_time == pytest.approx(np.quantile(t, 0.70))
    again = load_dataset("jodie-mooc", root=data_dir)      # read from the csv again
    np.testing.assert_array_equal(again.dst, g.dst)


def test_jodie_to_temporal_sorts_by_time():
    from torch_geometric.data import TemporalData

    data = TemporalData(src=torch.tensor([0, 1, 0]), dst=torch.tensor([2, 3, 3]),
                        t=torch.tensor([5, 1, 3]), msg=torch.zeros(3, 0),
                        y=torch.tensor([0, 1, 0]))
    g = jodie_to_temporal(data, "x")
    assert g.t.tolist() == [1, 3, 5] and g.src.tolist() == [1, 0, 0]
    assert g.edge_label.tolist() == [1, 0, 0]
    assert g.edge_feat is None and g.num_nodes == 4 and g.num_src_nodes == 2


class _Payload:
    """Unpickling this would create the marker directory."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.makedirs, (str(self.marker),))


def test_crafted_planetoid_and_jodie_files_run_nothing(data_dir, tmp_path):
    import torch
    from gnnsys.datasets import DatasetError
    marker = tmp_path / "pwned"
    raw = data_dir / "planetoid" / "Cora" / "raw"
    write_fake_planetoid(raw)
    processed = raw.parent / "processed"                   # PyG's cache: never read
    processed.mkdir()
    for name in ("data.pt", "pre_transform.pt", "pre_filter.pt"):
        torch.save(_Payload(marker), processed / name)
    assert load_dataset("planetoid-cora", root=data_dir).num_nodes == 620
    with open(raw / "ind.cora.graph", "wb") as handle:     # a raw pickle with a payload
        pickle.dump({0: _Payload(marker)}, handle)
    with pytest.raises(DatasetError, match="ind.cora.graph holds .*refusing"):
        load_dataset("planetoid-cora", root=data_dir)
    write_fake_jodie_csv(data_dir / "jodie" / "mooc" / "raw" / "mooc.csv")
    (data_dir / "jodie" / "mooc" / "processed").mkdir()
    torch.save(_Payload(marker), data_dir / "jodie" / "mooc" / "processed" / "data.pt")
    assert load_dataset("jodie-mooc", root=data_dir).num_events == 200
    assert not marker.exists()
