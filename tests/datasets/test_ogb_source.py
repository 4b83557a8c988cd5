"""OGB loader, end to end on a tiny fake ogbn-arxiv in ogb's raw csv.gz layout."""
import gzip

import numpy as np
import pytest

from gnnsys.datasets import load_dataset
from gnnsys.datasets.ogb_source import ogb_to_graph
from gnnsys.errors import DatasetError


def write_csv_gz(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as handle:
        handle.write("\n".join(",".join(str(v) for v in row) for row in rows) + "\n")


def write_fake_arxiv(directory, num_nodes=50, num_edges=120, features=5, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    edges = rng.integers(0, num_nodes, (num_edges, 2))
    labels = rng.integers(0, classes, num_nodes)
    (directory / "raw").mkdir(parents=True)
    (directory / "RELEASE_v1.txt").write_text("fake ogbn-arxiv for tests\n")
    write_csv_gz(directory / "raw" / "edge.csv.gz", edges)
    write_csv_gz(directory / "raw" / "num-node-list.csv.gz", [[num_nodes]])
    write_csv_gz(directory / "raw" / "num-edge-list.csv.gz", [[num_edges]])
    write_csv_gz(directory / "raw" / "node-feat.csv.gz", rng.random((num_nodes, features)))
    write_csv_gz(directory / "raw" / "node-label.csv.gz", labels[:, None])
    write_csv_gz(directory / "raw" / "node_year.csv.gz", [[2020]] * num_nodes)
    order = rng.permutation(num_nodes)
    for part, ids in zip(("train", "valid", "test"), np.split(order, [30, 40])):
        write_csv_gz(directory / "split" / "time" / f"{part}.csv.gz", ids[:, None])
    return edges, labels


def test_ogb_arxiv_loads_symmetrized_and_is_cached(data_dir):
    pytest.importorskip("ogb", reason="loading OGB data needs the ogb extra")
    directory = data_dir / "ogb" / "ogbn_arxiv"
    edges, labels = write_fake_arxiv(directory)
    g = load_dataset("ogbn-arxiv", root=data_dir)
    assert g.name == "ogbn-arxiv" and g.num_nodes == 50 and g.num_classes == 40
    np.testing.assert_array_equal(g.y, labels)
    assert (len(g.train_idx), len(g.val_idx), len(g.test_idx)) == (30, 10, 10)
    assert g.x.shape == (50, 5) and g.x.dtype == np.float32
    expected = {(int(a), int(b)) for a, b in edges if a != b}
    expected |= {(b, a) for a, b in expected}
    src, dst = g.edge_index()
    assert sorted(zip(src.tolist(), dst.tolist())) == sorted(expected)
    assert (directory / "gnnsys" / "meta.json").is_file()


class PlantMarker:
    """Unpickling this creates `path`: proof that a loader ran code from a data file."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_ogb_never_unpickles_planted_processed_files(data_dir, tmp_path):
    """ogb's NodePropPredDataset would torch.load processed/data_processed and
    split/<kind>/split_dict.pt; the loader reads the raw files only."""
    pytest.importorskip("ogb", reason="loading OGB data needs the ogb extra")
    import torch
    directory = data_dir / "ogb" / "ogbn_arxiv"
    edges, labels = write_fake_arxiv(directory)
    marker = tmp_path / "pwned"
    (directory / "processed").mkdir()
    for planted in (directory / "processed" / "data_processed",
                    directory / "split" / "time" / "split_dict.pt"):
        torch.save({"graph": PlantMarker(marker), "labels": PlantMarker(marker)}, planted)
    g = load_dataset("ogbn-arxiv", root=data_dir)
    assert not marker.exists()
    np.testing.assert_array_equal(g.y, labels)
    assert (len(g.train_idx), len(g.val_idx), len(g.test_idx)) == (30, 10, 10)


def test_ogb_corrupt_raw_file_is_one_line_naming_it(data_dir):
    pytest.importorskip("ogb", reason="loading OGB data needs the ogb extra")
    directory = data_dir / "ogb" / "ogbn_arxiv"
    write_fake_arxiv(directory)
    bad = directory / "raw" / "node-label.csv.gz"
    bad.write_bytes(bad.read_bytes()[:12])            # truncated gzip
    with pytest.raises(DatasetError) as err:
        load_dataset("ogbn-arxiv", root=data_dir)
    assert str(bad) in str(err.value) and "\n" not in str(err.value)


def test_ogb_to_graph_maps_nan_labels_to_unlabelled():
    graph_dict = {"edge_index": np.array([[0, 1], [1, 2]]), "num_nodes": 3,
                  "node_feat": np.ones((3, 2), np.float64)}
    labels = np.array([[1.0], [np.nan], [0.0]])
    split = {"train": np.array([0]), "valid": np.array([2]), "test": np.array([], np.int64)}
    directed = ogb_to_graph(graph_dict, labels, split, "p", num_classes=2, symmetrize=False)
    assert directed.y.tolist() == [1, -1, 0] and directed.num_edges == 2
    undirected = ogb_to_graph(graph_dict, labels, split, "p", num_classes=2, symmetrize=True)
    assert undirected.num_edges == 4 and undirected.x.dtype == np.float32
