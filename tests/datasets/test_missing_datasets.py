"""Datasets whose files are absent fail at once, naming the files and where to put them."""
import socket

import pytest

from gnnsys.datasets import DatasetError, list_datasets, load_dataset


@pytest.mark.parametrize("name, expected", [
    ("planetoid-pubmed", ["ind.pubmed.allx", "planetoid/PubMed/raw"]),
    ("ogbn-arxiv", ["RELEASE_v1.txt", "raw/edge.csv.gz", "ogb/ogbn_arxiv", "arxiv.zip"]),
    ("ogbn-papers100M", ["raw/data.npz", "papers100M-bin.zip"]),
    ("jodie-reddit", ["reddit.csv", "jodie/reddit/raw"]),
])
def test_missing_download_fails_fast_with_the_fix(data_dir, name, expected, monkeypatch):
    if name.startswith("ogbn-"):
        pytest.importorskip("ogb", reason="the ogb extra lists the OGB files")

    def no_network(*args, **kwargs):
        raise AssertionError("a missing dataset must not try the network")
    for name_ in ("getaddrinfo", "create_connection"):
        monkeypatch.setattr(socket, name_, no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    with pytest.raises(DatasetError) as err:
        load_dataset(name, root=data_dir)
    message = str(err.value)
    assert str(data_dir) in message and "no network" in message
    for fragment in expected:
        assert fragment in message
    assert not any(data_dir.iterdir()), "a failed load must not leave files behind"


def test_missing_bundle_names_file_and_places(data_dir, no_bundles):
    with pytest.raises(DatasetError) as err:
        load_dataset("cora", root=data_dir)
    message = str(err.value)
    assert "static/cora.npz" in message
    assert str(data_dir / "bundles" / "static" / "cora.npz") in message
    assert "GNNSYS_SHARED_DATA" in message
    infos = {i.name: i for i in list_datasets(root=data_dir)}
    assert not infos["cora"].available and not infos["wikipedia"].available


def test_partial_ogb_download_lists_only_the_missing_files(data_dir):
    pytest.importorskip("ogb", reason="the ogb extra lists the OGB files")
    directory = data_dir / "ogb" / "ogbn_products"
    (directory / "raw").mkdir(parents=True)
    (directory / "RELEASE_v1.txt").write_text("")
    (directory / "raw" / "edge.csv.gz").write_bytes(b"")
    with pytest.raises(DatasetError) as err:
        load_dataset("ogbn-products", root=data_dir)
    message = str(err.value)
    assert "raw/node-feat.csv.gz" in message and "RELEASE_v1.txt" not in message
    assert "split/sales_ranking/train.csv.gz" in message
