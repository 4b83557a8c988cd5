"""The registry: listing, name lookup, data root resolution and argument errors."""
from pathlib import Path

import pytest
import yaml

from gnnsys.datasets import DatasetError, data_root, list_datasets, load_dataset
from gnnsys.datasets import registry

REQUIRED_NAMES = {
    "synthetic-tiny", "synthetic-small", "synthetic-products",
    "cora", "citeseer", "tolokers", "chameleon", "chameleon_filtered", "squirrel",
    "squirrel_filtered", "actor", "texas", "cornell", "wisconsin", "twitch_en",
    "flickr_amgcn", "blogcatalog", "github",
    "wikipedia", "email_eu_core", "collegemsg", "bitcoin_otc", "bitcoin_alpha",
    "planetoid-cora", "planetoid-citeseer", "planetoid-pubmed",
    "ogbn-arxiv", "ogbn-products", "ogbn-papers100M",
    "jodie-wikipedia", "jodie-reddit", "jodie-mooc", "jodie-lastfm",
}


def test_registry_has_every_required_entry():
    assert REQUIRED_NAMES <= set(registry.registry())


def test_list_datasets_reports_every_entry(data_dir):
    infos = {info.name: info for info in list_datasets(root=data_dir)}
    assert REQUIRED_NAMES <= set(infos)
    tiny = infos["synthetic-tiny"]
    assert (tiny.source, tiny.task, tiny.kind, tiny.metric, tiny.available) == \
        ("synthetic", "node", "static", "accuracy", True)
    assert tiny.location.startswith(str(data_dir / "synthetic"))
    assert infos["ogbn-products"].available is False
    assert infos["ogbn-products"].location == str(data_dir / "ogb" / "ogbn_products")
    assert (infos["wikipedia"].task, infos["wikipedia"].kind, infos["wikipedia"].metric) == \
        ("link", "temporal", "ap")
    assert infos["tolokers"].metric == "roc_auc"
    assert all(info.description for info in infos.values())


def test_unknown_name_suggests_close_names():
    with pytest.raises(DatasetError) as err:
        load_dataset("cora2")
    message = str(err.value)
    assert "'cora'" in message and "gnnsys datasets" in message


def test_data_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("GNNSYS_DATA", str(tmp_path / "env"))
    assert data_root(tmp_path / "explicit") == tmp_path / "explicit"
    assert data_root() == tmp_path / "env"
    monkeypatch.delenv("GNNSYS_DATA")
    assert data_root() == Path("~/.cache/gnnsys").expanduser()


@pytest.mark.parametrize("split", [-1, 1.5, True])
def test_bad_split_is_rejected(split):
    with pytest.raises(DatasetError, match="split"):
        load_dataset("synthetic-tiny", split=split)


def test_bad_registry_entry_names_the_field(tmp_path, monkeypatch):
    bad = tmp_path / "datasets.yaml"
    bad.write_text(yaml.safe_dump({"mine": {"source": "ftp", "task": "node_classification",
                                            "metric": "accuracy"}}))
    monkeypatch.setenv(registry.REGISTRY_ENV, str(bad))
    with pytest.raises(DatasetError, match="entry 'mine'.*'source' is 'ftp'"):
        list_datasets()


def test_task_and_kind_are_apart_and_older_entries_still_read(tmp_path, monkeypatch):
    """An entry names its task (node | link) and data kind (static | temporal); an older
    entry's task (node_classification, link_prediction) still reads, as both."""
    extra = tmp_path / "datasets.yaml"
    file = {"source": "bundle", "file": "x.npz"}
    extra.write_text(yaml.safe_dump({
        "old-static": {**file, "task": "node_classification", "metric": "accuracy"},
        "old-temporal": {**file, "task": "link_prediction", "metric": "ap"},
        "new-node": {**file, "task": "node", "metric": "accuracy"},
        "new-static-link": {**file, "task": "link", "kind": "static", "metric": "ap"}}))
    monkeypatch.setenv(registry.REGISTRY_ENV, str(extra))
    got = {name: (e["task"], e["kind"]) for name, e in registry.registry().items()}
    assert got["old-static"] == ("node", "static") and got["new-node"] == ("node", "static")
    assert got["old-temporal"] == ("link", "temporal")
    assert got["new-static-link"] == ("link", "static")
    assert got["wikipedia"] == ("link", "temporal") and got["cora"] == ("node", "static")
    with pytest.raises(DatasetError, match="'old-temporal' is registered as link prediction "
                                           "on temporal data, not kind static"):
        registry.dataset_entry("old-temporal", kind="static")
    with pytest.raises(DatasetError, match="not kind temporal"):
        registry.dataset_entry("new-static-link", task="link_prediction")


def test_bad_data_kind_names_the_field(tmp_path, monkeypatch):
    bad = tmp_path / "datasets.yaml"
    bad.write_text(yaml.safe_dump({"mine": {"source": "bundle", "file": "x.npz", "task": "node",
                                            "kind": "hetero", "metric": "accuracy"}}))
    monkeypatch.setenv(registry.REGISTRY_ENV, str(bad))
    with pytest.raises(DatasetError, match="entry 'mine'.*'kind' is 'hetero'; allowed: "
                                           "static, temporal"):
        list_datasets()
