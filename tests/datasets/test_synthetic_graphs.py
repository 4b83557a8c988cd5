"""The synthetic DC-SBM generator: determinism, graph hygiene, realism, caching."""
import numpy as np
import pytest

from gnnsys.datasets import DatasetError, load_dataset
from gnnsys.datasets.synthetic import SyntheticParams, generate
from gnnsys.datasets.synthetic_source import cache_dir, resolve_params
from gnnsys.datasets import registry

# The same code path as the products preset (Zipf classes, degree cap, top-up rounds),
# at a size that generates in milliseconds.
PRODUCTS_LIKE = SyntheticParams(num_nodes=5000, avg_degree=30, num_classes=12, num_features=24,
                                power_law_exponent=2.5, max_degree=400, homophily=0.6,
                                class_size_exponent=1.0, feature_noise=2.0, label_noise=0.05,
                                train_fraction=0.08, val_fraction=0.02, seed=3)


@pytest.fixture(scope="module")
def graph():
    return generate(PRODUCTS_LIKE, name="products-like")


def test_same_seed_gives_identical_arrays(graph):
    again = generate(PRODUCTS_LIKE, name="products-like")
    for key in ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx"):
        np.testing.assert_array_equal(getattr(graph, key), getattr(again, key), err_msg=key)


def test_other_seed_gives_another_graph(graph):
    other = generate(SyntheticParams(**{**PRODUCTS_LIKE.to_dict(), "seed": 4}))
    assert not np.array_equal(graph.indices[:1000], other.indices[:1000])


def test_symmetric_simple_sorted(graph):
    n = graph.num_nodes
    rows = np.repeat(np.arange(n), graph.degree())
    cols = graph.indices.astype(np.int64)
    assert not np.any(rows == cols), "self loops"
    keys = rows * n + cols
    assert np.all(np.diff(keys) > 0), "rows must be sorted and free of duplicates"
    assert np.array_equal(np.sort(cols * n + rows), keys), "every edge needs its reverse"


def test_sizes_and_dtypes(graph):
    p = PRODUCTS_LIKE
    assert graph.num_nodes == p.num_nodes
    assert abs(graph.num_edges / p.num_nodes - p.avg_degree) < 0.02 * p.avg_degree
    assert graph.x.dtype == np.float32 and graph.x.shape == (p.num_nodes, p.num_features)
    assert graph.y.dtype == np.int64 and graph.num_classes == p.num_classes
    assert graph.indices.dtype == np.int32
    parts = [graph.train_idx, graph.val_idx, graph.test_idx]
    assert sum(len(s) for s in parts) == p.num_nodes
    assert len(np.unique(np.concatenate(parts))) == p.num_nodes
    assert len(graph.train_idx) == round(0.08 * p.num_nodes)


def test_degrees_are_heavy_tailed(graph):
    degree = graph.degree()
    assert degree.max() > 8 * degree.mean()
    assert degree.max() <= 1.5 * PRODUCTS_LIKE.max_degree
    assert np.median(degree) < degree.mean()       # right-skewed, like real graphs


def test_classes_are_homophilous_and_skewed(graph):
    src, dst = graph.edge_index()
    intra = np.mean(graph.y[src] == graph.y[dst])
    assert intra > 0.45 > 3 / PRODUCTS_LIKE.num_classes
    sizes = np.bincount(graph.y, minlength=PRODUCTS_LIKE.num_classes)
    assert sizes[0] > 3 * sizes[-1]


def test_features_predict_labels(graph):
    x, y, k = graph.x, graph.y, graph.num_classes
    train, test = graph.train_idx, graph.test_idx
    centroids = np.stack([x[train][y[train] == c].mean(0) for c in range(k)])
    distance = ((x[test][:, None, :] - centroids[None]) ** 2).sum(-1)
    accuracy = np.mean(distance.argmin(1) == y[test])
    majority = np.bincount(y[test]).max() / len(test)
    assert accuracy > majority + 0.2


def test_label_noise_is_the_requested_share():
    clean = generate(SyntheticParams(num_nodes=4000, seed=1))
    noisy = generate(SyntheticParams(num_nodes=4000, seed=1, label_noise=0.2))
    changed = np.mean(clean.y != noisy.y)
    assert 0.2 * 0.75 * 0.8 < changed < 0.2 * 0.75 * 1.2   # redrawn to another class: 3/4
    np.testing.assert_array_equal(clean.indices, noisy.indices)


def test_bad_params_are_named():
    with pytest.raises(DatasetError, match="homophily"):
        load_dataset("synthetic-tiny", params={"homophily": 2.0})
    with pytest.raises(DatasetError, match="unknown synthetic parameter.*num_nodez"):
        load_dataset("synthetic-tiny", params={"num_nodez": 10})


def test_load_caches_on_disk_and_memory_maps(data_dir):
    first = load_dataset("synthetic-tiny", root=data_dir)
    entry = registry.lookup("synthetic-tiny")
    directory = cache_dir("synthetic-tiny", resolve_params("synthetic-tiny", entry), data_dir)
    assert (directory / "meta.json").is_file()
    assert not first.indices.flags.writeable and not first.x.flags.writeable   # mmap'd, 'r'
    second = load_dataset("synthetic-tiny", root=data_dir)
    assert second.name == "synthetic-tiny" and second.metric == "accuracy"
    np.testing.assert_array_equal(first.x, second.x)
    np.testing.assert_array_equal(first.indices, second.indices)
    fresh = generate(resolve_params("synthetic-tiny", entry), name="synthetic-tiny")
    np.testing.assert_array_equal(fresh.indices, second.indices)


def test_params_and_split_get_their_own_cache(data_dir):
    base = load_dataset("synthetic-tiny", root=data_dir)
    bigger = load_dataset("synthetic-tiny", root=data_dir, params={"num_nodes": 3000})
    resplit = load_dataset("synthetic-tiny", root=data_dir, split=1)
    assert bigger.num_nodes == 3000
    np.testing.assert_array_equal(base.indices, resplit.indices)
    assert not np.array_equal(base.train_idx, resplit.train_idx)
    assert len(list((data_dir / "synthetic").glob("synthetic-tiny-*"))) == 3


def test_presets_are_sized_as_documented():
    products = resolve_params("synthetic-products", registry.lookup("synthetic-products"))
    assert products.num_nodes == 2_450_000 and products.num_classes == 47
    assert products.num_features == 100
    assert 120e6 < products.num_nodes * products.avg_degree < 128e6
    small = resolve_params("synthetic-small", registry.lookup("synthetic-small"))
    assert 20_000 <= small.num_nodes <= 50_000 and small.num_features == 100


RING_LIKE = SyntheticParams(**{**PRODUCTS_LIKE.to_dict(), "num_nodes": 20000,
                               "local_fraction": 0.98, "locality_scale": 10})


def test_without_locality_the_graph_is_the_version_1_graph(graph):
    # local_fraction = 0 must not move a single edge of the cached version-1 presets:
    # this is PRODUCTS_LIKE's fingerprint from before locality existed.
    import hashlib
    digest = hashlib.sha256()
    for key in ("indptr", "indices", "x", "y", "train_idx"):
        digest.update(np.ascontiguousarray(getattr(graph, key)).tobytes())
    assert digest.hexdigest() == ("e7db77ab267ed5d91ed2c414d4e69f032cbda67c"
                                  "7ccff79f05fcef671ca539bf")


def test_locality_puts_most_edges_near_each_other_on_the_hidden_ring():
    from gnnsys.datasets.synthetic import _ring_shuffle
    ring = generate(RING_LIKE)
    position = np.empty(ring.num_nodes, dtype=np.int64)
    position[_ring_shuffle(RING_LIKE)] = np.arange(ring.num_nodes)
    src, dst = ring.edge_index()
    gap = np.abs(position[src] - position[dst])
    gap = np.minimum(gap, ring.num_nodes - gap)
    # Pareto distances from 10 nodes: half within 20 (in mass units, so roughly), while a
    # uniform pair is 5000 apart on average
    assert np.median(gap) < 60
    assert np.mean(gap < 1000) > 0.9
    # ids carry no trace of the ring, classes are arcs so local edges are homophilous
    assert abs(np.corrcoef(position, np.arange(ring.num_nodes))[0, 1]) < 0.05
    assert np.mean(ring.y[src] == ring.y[dst]) > 0.8
    np.testing.assert_array_equal(ring.indices, generate(RING_LIKE).indices)


def test_locality_lets_metis_cut_few_edges():
    from partition.metis import metis_parts
    from partition.quality import partition_quality
    ring = generate(RING_LIKE)
    plain = generate(SyntheticParams(**{**RING_LIKE.to_dict(), "local_fraction": 0.0}))
    cut = [partition_quality(g.indptr, g.indices, metis_parts(g.indptr, g.indices, 4), 4)
           ["edge_cut_fraction"] for g in (ring, plain)]
    assert cut[0] < 0.1 < cut[1]


def test_bad_locality_params_are_named():
    with pytest.raises(ValueError, match="local_fraction must be in"):
        SyntheticParams(local_fraction=1.5).validate()
    with pytest.raises(ValueError, match="locality_scale must be >= 1"):
        SyntheticParams(locality_scale=0.5).validate()
