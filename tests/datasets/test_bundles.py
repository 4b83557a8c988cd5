"""The offline .npz bundles: counts from shared/data/MANIFEST.md, splits, features, errors."""
import functools

import numpy as np
import pytest

from gnnsys.datasets import DatasetError, load_dataset
from gnnsys.datasets import bundles
from gnnsys.temporal_graph import TemporalGraph

from conftest import needs_shared_data, shared_data_dir

# name: (nodes, directed edges, features, classes, splits in the file or None)
STATIC = {
    "cora": (2708, 10556, 1433, 7, 1),
    "citeseer": (3327, 9104, 3703, 6, 1),
    "tolokers": (11758, 1038000, 10, 2, 10),
    "chameleon": (2277, 62742, 2325, 5, 10),
    "chameleon_filtered": (890, 17708, 2325, 5, 10),
    "squirrel": (5201, 396706, 2089, 5, 10),
    "squirrel_filtered": (2223, 93996, 2089, 5, 10),
    "actor": (7600, 53318, 932, 5, 10),
    "texas": (183, 558, 1703, 5, 10),
    "cornell": (183, 554, 1703, 5, 10),
    "wisconsin": (251, 900, 1703, 5, 10),
    "twitch_en": (7126, 70648, 3170, 2, None),
    "flickr_amgcn": (7575, 479476, 12047, 9, 3),
    "blogcatalog": (5196, 343486, 8189, 6, None),
    "github": (37700, 578006, 49, 2, None),
}
# name: (nodes, events, edge feature dim, bipartite)
TEMPORAL = {
    "wikipedia": (9227, 157474, 0, True),
    "email_eu_core": (1005, 332334, 0, False),
    "collegemsg": (1899, 59835, 0, False),
    "bitcoin_otc": (5881, 35592, 1, False),
    "bitcoin_alpha": (3783, 24186, 1, False),
}

pytestmark = needs_shared_data


@functools.lru_cache(maxsize=4)
def cached_load(name, split=0):
    """Each bundle is loaded once per test session (flickr's dense features are 365 MB)."""
    return load_dataset(name, split=split)


@pytest.mark.parametrize("name", sorted(STATIC))
def test_static_bundle_matches_manifest(name):
    nodes, edges, features, classes, _ = STATIC[name]
    g = cached_load(name)
    assert (g.num_nodes, g.num_edges, g.num_features, g.num_classes) == \
        (nodes, edges, features, classes)
    assert g.name == name and g.x.dtype == np.float32 and g.y.dtype == np.int64
    assert g.indices.dtype == np.int32 and g.indptr.dtype == np.int64
    parts = [g.train_idx, g.val_idx, g.test_idx]
    assert all(len(p) > 0 for p in parts)
    assert len(np.unique(np.concatenate(parts))) == sum(len(p) for p in parts), "overlap"
    assert all(np.all(g.y[p] >= 0) for p in parts), "unlabelled nodes in a split"
    assert g.metric == ("roc_auc" if name in ("tolokers", "twitch_en", "github") else "accuracy")


def test_cora_public_split():
    g = cached_load("cora")
    assert (len(g.train_idx), len(g.val_idx), len(g.test_idx)) == (140, 500, 1000)
    assert g.metric == "accuracy" and g.meta["split_kind"] == "standard"


def test_citeseer_unlabelled_nodes_stay_out_of_the_splits():
    g = cached_load("citeseer")
    assert np.sum(g.y == -1) == 15
    assert not np.any(g.y[np.concatenate([g.train_idx, g.val_idx, g.test_idx])] < 0)


def test_multi_split_selection_and_range_error():
    first, last = cached_load("chameleon_filtered", 0), \
        cached_load("chameleon_filtered", 9)
    assert not np.array_equal(first.train_idx, last.train_idx)
    with pytest.raises(DatasetError, match="10 standard split.*split=10"):
        cached_load("chameleon_filtered", 10)
    with pytest.raises(DatasetError, match="1 standard split"):
        cached_load("cora", 1)


def test_flickr_val_is_carved_from_unused_nodes():
    for split, per_class in enumerate((20, 40, 60)):
        g = cached_load("flickr_amgcn", split)
        assert len(g.train_idx) == 9 * per_class and len(g.test_idx) == 1000
        assert len(g.val_idx) == bundles.FLICKR_VAL_SIZE
        assert not set(g.val_idx) & (set(g.train_idx) | set(g.test_idx))


def test_random_split_is_stratified_and_seeded():
    g = cached_load("twitch_en")
    again = load_dataset("twitch_en")
    np.testing.assert_array_equal(g.train_idx, again.train_idx)
    assert abs(len(g.train_idx) / g.num_nodes - 0.6) < 0.01
    overall = np.mean(g.y == 1)
    assert abs(np.mean(g.y[g.train_idx] == 1) - overall) < 0.005
    other = cached_load("twitch_en", 1)
    assert not np.array_equal(g.train_idx, other.train_idx)
    custom = load_dataset("twitch_en", params={"train_fraction": 0.1, "val_fraction": 0.1})
    assert abs(len(custom.train_idx) / g.num_nodes - 0.1) < 0.01
    with pytest.raises(DatasetError, match="unknown params"):
        load_dataset("twitch_en", params={"seed": 3})
    with pytest.raises(DatasetError, match="ships standard splits"):
        load_dataset("texas", params={"train_fraction": 0.5})
    with pytest.raises(DatasetError, match="temporal and takes no params"):
        load_dataset("collegemsg", params={"train_fraction": 0.5})


def test_github_structural_features_are_deterministic():
    g = cached_load("github")
    np.testing.assert_allclose(g.x[:, 0], np.log1p(g.degree()), rtol=1e-6)
    np.testing.assert_array_equal(g.x[:, 1:17].sum(1), 1.0)
    np.testing.assert_array_equal(g.x, load_dataset("github").x)
    assert "structural" in g.meta["features"]


@pytest.mark.parametrize("name", sorted(TEMPORAL))
def test_temporal_bundle_matches_manifest(name):
    nodes, events, edge_dim, bipartite = TEMPORAL[name]
    g = cached_load(name)
    assert isinstance(g, TemporalGraph) and g.name == name and g.metric == "ap"
    assert (g.num_nodes, g.num_events, g.edge_feat_dim, g.bipartite) == \
        (nodes, events, edge_dim, bipartite)
    assert np.all(np.diff(g.t) >= 0)
    train, val, test = g.split_masks()
    assert np.all(train.astype(int) + val + test == 1)
    # The bundle thresholds are the 70%/85% quantiles: shares come out near 70/15/15.
    assert 0.65 < train.mean() < 0.75 and 0.1 < val.mean() < 0.2 and 0.1 < test.mean() < 0.2
    last_train = np.flatnonzero(train)[-1]
    assert np.all(train[:last_train + 1]), "train must be a prefix of the events"


def test_wikipedia_is_bipartite_with_ban_labels():
    g = cached_load("wikipedia")
    assert g.num_src_nodes == 8227
    assert g.src.max() < 8227 <= g.dst.min()
    assert int(g.edge_label.sum()) == 217
    assert cached_load("email_eu_core").node_label.max() == 41


def test_bundle_dirs_are_searched_in_order(data_dir, monkeypatch, tmp_path):
    shared = shared_data_dir()
    monkeypatch.setattr(bundles, "CHECKOUT_SHARED_DATA", tmp_path / "nowhere")
    monkeypatch.setenv(bundles.SHARED_DATA_ENV, str(shared))
    assert load_dataset("texas", root=data_dir).meta["file"] == str(shared / "static/texas.npz")
    local = data_dir / "bundles" / "static"
    local.mkdir(parents=True)
    (local / "texas.npz").write_bytes((shared / "static" / "texas.npz").read_bytes())
    assert load_dataset("texas", root=data_dir).meta["file"] == str(local / "texas.npz")
