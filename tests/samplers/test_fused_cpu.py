"""Tests of the fused CPU sampler against the plain reference in tests/samplers/reference.py.

The kernel and the reference implement the same specification (random streams, Floyd,
discovery order), so most checks are exact equality of whole batches; the rest are
structural invariants, a full-expansion check that needs no randomness, seeded
statistical tests of uniformity, and edge cases. Graphs are small: the reference is
pure Python.
"""
import importlib.util
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from samplers import FusedSampler, SampledSubgraph
from samplers._node_map import NodeMap


def _load_reference():
    # Loaded by path under a unique name: several test folders keep a `reference.py`,
    # and a plain `import reference` would pick up whichever was imported first.
    path = Path(__file__).with_name("reference.py")
    spec = importlib.util.spec_from_file_location("samplers_fused_cpu_reference", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


reference = _load_reference()


# ----------------------------------------------------------------------------- graphs
def random_graph(num_nodes, mean_degree, seed, index_dtype=np.int32, hubs=0):
    """CSR with distinct neighbours per row, some isolated nodes and `hubs` nodes that
    are in-neighbours of about half the graph (high fan-in and high degree)."""
    rng = np.random.default_rng(seed)
    rows = []
    for node in range(num_nodes):
        degree = min(int(rng.geometric(1.0 / (mean_degree + 1))) - 1, num_nodes)
        row = rng.choice(num_nodes, size=degree, replace=False)
        if hubs:
            row = np.union1d(row, np.arange(hubs)[rng.random(hubs) < 0.5])
            rng.shuffle(row)
        rows.append(row)
    if hubs:
        rows[0] = rng.permutation(num_nodes)            # a node whose degree is N
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(r) for r in rows])
    indices = np.concatenate(rows).astype(index_dtype)
    return indptr, indices


def star_graph(num_leaves):
    """Node 0 <- every leaf, every leaf <- 0: one huge row and many degree-1 rows."""
    indptr = np.concatenate([[0, num_leaves], num_leaves + np.arange(1, num_leaves + 1)])
    indices = np.concatenate([np.arange(1, num_leaves + 1), np.zeros(num_leaves)])
    return indptr.astype(np.int64), indices.astype(np.int32)


def features_for(num_rows, width=7, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal((num_rows, width)).astype(dtype)


def assert_same_as_reference(sub, expected):
    np.testing.assert_array_equal(sub.n_id, expected["n_id"])
    assert sub.hop_sizes == expected["hop_sizes"]
    for hop in range(len(expected["block_indptr"])):
        np.testing.assert_array_equal(sub.block_indptr[hop], expected["block_indptr"][hop])
        np.testing.assert_array_equal(sub.block_indices[hop], expected["block_indices"][hop])
    if expected["x"] is None:
        assert sub.x is None
    else:
        assert sub.x.dtype == expected["x"].dtype
        np.testing.assert_array_equal(sub.x, expected["x"])
    np.testing.assert_array_equal(sub.missing, expected["missing"])


GRAPHS = {
    "random-int32": lambda: random_graph(300, 6, seed=1),
    "random-int64": lambda: random_graph(300, 6, seed=2, index_dtype=np.int64),
    "hubs": lambda: random_graph(200, 3, seed=3, hubs=5),
    "star": lambda: star_graph(150),
}


# ----------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("fanouts", [[4, 3], [15, 10, 5], [2, -1], [0, 3]])
def test_matches_reference_exactly(graph, fanouts):
    indptr, indices = GRAPHS[graph]()
    num_nodes = indptr.size - 1
    features = features_for(num_nodes)
    sampler = FusedSampler(indptr, indices, fanouts, features=features, num_threads=2)
    rng = np.random.default_rng(7)
    for batch_seed in (0, 12345, -3):
        seeds = rng.choice(num_nodes, size=min(20, num_nodes), replace=False)
        sub = sampler.sample(seeds, seed=batch_seed)
        expected = reference.reference_sample(indptr, indices, fanouts, seeds, batch_seed,
                                              features)
        assert_same_as_reference(sub, expected)
        reference.check_invariants(sub, indptr, indices, fanouts, seeds)


@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_structural_invariants(graph):
    indptr, indices = GRAPHS[graph]()
    num_nodes = indptr.size - 1
    fanouts = [5, 4, -1]
    sampler = FusedSampler(indptr, indices, fanouts)
    rng = np.random.default_rng(11)
    for batch_seed in range(3):
        seeds = rng.integers(0, num_nodes, size=12)          # may contain repeats
        sub = sampler.sample(seeds, seed=batch_seed)
        assert isinstance(sub, SampledSubgraph) and sub.x is None
        assert sub.n_id.dtype == np.int64
        assert all(ix.dtype == np.int32 for ix in sub.block_indices)
        reference.check_invariants(sub, indptr, indices, fanouts, seeds)


def test_full_expansion_when_fanouts_cover_every_degree():
    indptr, indices = random_graph(400, 4, seed=5)
    max_degree = int(np.diff(indptr).max())
    seeds = np.array([3, 17, 3, 250, 0])
    n_id, hop_sizes, blocks = reference.full_expansion(indptr, indices, 3, seeds)
    for fanouts in ([max_degree] * 3, [-1] * 3, [max_degree + 10, -1, max_degree]):
        sub = FusedSampler(indptr, indices, fanouts).sample(seeds, seed=99)
        assert sub.n_id.tolist() == n_id
        assert sub.hop_sizes == hop_sizes
        for hop, rows in enumerate(blocks):
            got = [sub.block_indices[hop][a:b].tolist()
                   for a, b in zip(sub.block_indptr[hop][:-1], sub.block_indptr[hop][1:])]
            assert got == rows


# ----------------------------------------------------------------------------- features
@pytest.mark.parametrize("overlap_gather", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_feature_rows_exact(dtype, overlap_gather, tmp_path):
    indptr, indices = random_graph(500, 8, seed=8)
    features = features_for(500, width=33, dtype=dtype)        # odd width: ragged tails
    on_disk = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=dtype,
                                        shape=features.shape)
    on_disk[:] = features
    on_disk.flush()
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    seeds = np.arange(0, 500, 9)
    for table in (features, mapped):
        sampler = FusedSampler(indptr, indices, [6, 4], features=table,
                               overlap_gather=overlap_gather)
        sub = sampler.sample(seeds, seed=4)
        assert sampler.last_rows_gathered_beside_relabel == (
            sub.hop_sizes[1] if overlap_gather else 0)
        assert sub.x.dtype == dtype and sub.x.shape == (sub.n_id.size, 33)
        np.testing.assert_array_equal(sub.x, features[sub.n_id])
        assert sub.missing.size == 0


def test_row_of_tiers_and_missing_rows():
    indptr, indices = random_graph(300, 6, seed=9)
    rng = np.random.default_rng(0)
    # A store holding a third of the nodes, in a shuffled order, plus 5 unrelated rows.
    held = rng.random(300) < 0.34
    row_of = np.full(300, -1, dtype=np.int64)
    row_of[held] = rng.permutation(int(held.sum())) + 5
    table = features_for(int(held.sum()) + 5, width=16)
    sampler = FusedSampler(indptr, indices, [5, 5], features=table, row_of=row_of)
    seeds = rng.choice(300, size=25, replace=False)
    # Twice in a row on the same ring buffer: zero rows must be rewritten, not stale.
    for batch_seed in range(2 * sampler.num_buffers):
        sub = sampler.sample(seeds, seed=batch_seed)
        expected = reference.reference_sample(indptr, indices, [5, 5], seeds, batch_seed,
                                              table, row_of)
        assert_same_as_reference(sub, expected)
        rows = row_of[sub.n_id]
        np.testing.assert_array_equal(sub.missing, np.flatnonzero(rows < 0))
        assert not sub.x[sub.missing].any()
        np.testing.assert_array_equal(sub.x[rows >= 0], table[rows[rows >= 0]])


def test_ring_buffers_stay_valid_for_num_buffers_minus_one_calls():
    indptr, indices = random_graph(300, 5, seed=10)
    features = features_for(300)
    sampler = FusedSampler(indptr, indices, [4, 4], features=features, num_buffers=3)
    seeds = np.arange(10)
    first = sampler.sample(seeds, seed=0)
    kept = first.x.copy()
    for batch_seed in (1, 2):
        sampler.sample(seeds + 20 * batch_seed, seed=batch_seed)
        np.testing.assert_array_equal(first.x, kept)            # still valid
    fourth = sampler.sample(seeds + 100, seed=3)                 # wraps onto buffer 0
    assert np.shares_memory(fourth.x, first.x)
    # A bigger batch grows the buffer of its slot instead of overflowing it.
    big = sampler.sample(np.arange(300), seed=4)
    np.testing.assert_array_equal(big.x, features[big.n_id])



def test_a_second_thread_sampling_with_the_same_sampler_is_refused():
    """Its work arrays and output buffers serve one stream: a call that overlaps another
    is refused by name (two prefetch threads on one sampler once corrupted memory and
    aborted the process), and the sampler serves again once the first call returns."""
    indptr, indices = random_graph(100, 4, seed=11)
    sampler = FusedSampler(indptr, indices, [3], features=features_for(100))
    inside, release, out = threading.Event(), threading.Event(), {}
    plain = sampler._sample

    def held(*args):
        inside.set()
        release.wait(10)
        return plain(*args)

    sampler._sample = held
    first = threading.Thread(target=lambda: out.setdefault("first", sampler.sample(
        np.arange(5), seed=0)))
    first.start()
    assert inside.wait(10)
    with pytest.raises(RuntimeError, match="another thread samples with the same sampler"):
        sampler.sample(np.arange(5), seed=1)
    release.set()
    first.join(10)
    assert out["first"].n_id[:5].tolist() == list(range(5))
    sampler._sample = plain
    assert sampler.sample(np.arange(5), seed=1).n_id[:5].tolist() == list(range(5))


# ----------------------------------------------------------------------------- determinism
def test_deterministic_and_independent_of_thread_count():
    indptr, indices = random_graph(2000, 12, seed=12, hubs=3)
    features = features_for(2000, width=8)
    seeds = np.random.default_rng(1).choice(2000, size=200, replace=False)
    runs = [FusedSampler(indptr, indices, [10, 5, 3], features=features,
                         num_threads=threads, overlap_gather=overlap).sample(seeds, seed=2024)
            for threads, overlap in ((1, True), (2, True), (2, False), (1, False))]
    for other in runs[1:]:
        np.testing.assert_array_equal(other.n_id, runs[0].n_id)
        for hop in range(3):
            np.testing.assert_array_equal(other.block_indices[hop], runs[0].block_indices[hop])
        np.testing.assert_array_equal(other.x, runs[0].x)
    different = FusedSampler(indptr, indices, [10, 5, 3]).sample(seeds, seed=2025)
    assert not np.array_equal(different.block_indices[0], runs[0].block_indices[0])


@pytest.mark.parametrize("num_shards", [1, 2, 4])
def test_serial_and_sharded_relabel_agree_across_batches(num_shards):
    """Serial (1 shard) and sharded relabelling give the reference's batch, also when the
    map is reused for a second batch (a new generation over the old words)."""
    indptr, indices = random_graph(3000, 10, seed=13)
    seeds = np.arange(0, 3000, 30)
    expected = reference.reference_sample(indptr, indices, [8, 6], seeds, 5)
    other_seeds = np.arange(7, 3000, 41)
    other = reference.reference_sample(indptr, indices, [8, 6], other_seeds, 6)
    for threads in (1, 2):
        sampler = FusedSampler(indptr, indices, [8, 6], num_threads=threads)
        sampler._node_map = NodeMap(sampler.num_nodes, num_shards)
        for _ in range(2):                     # second round: words of older generations
            assert_same_as_reference(sampler.sample(seeds, seed=5), expected)
            assert_same_as_reference(sampler.sample(other_seeds, seed=6), other)


def test_sharded_relabel_matches_serial_on_repeats_and_new_nodes():
    """Kernel level: every candidate stream (repeats within the hop, nodes known before
    it, nodes new in it) relabels the same in 1, 2, 4 and 8 shards."""
    rng = np.random.default_rng(3)
    seeds = rng.choice(5000, 40, replace=False)
    hops = [rng.integers(0, 5000, size) for size in (1, 7, 5000, 30000)]
    results = []
    for shards in (1, 2, 4, 8):
        node_map = NodeMap(5000, shards)
        node_map.start_batch()
        n_id = np.empty(40 + sum(h.size for h in hops), dtype=np.int64)
        node_map.insert_seeds(seeds, n_id)
        known, locals_ = 40, []
        for hop in hops:
            local = np.empty(hop.size, dtype=np.int32)
            known += node_map.relabel_hop(hop, hop.size, known, n_id, local,
                                          np.empty(hop.size, dtype=np.int64))
            locals_.append(local)
        results.append((n_id[:known].copy(), locals_))
    n_id, locals_ = results[0]
    assert np.unique(n_id).size == n_id.size and np.isin(n_id, seeds).sum() == 40
    for hop, local in zip(hops, locals_):
        np.testing.assert_array_equal(n_id[local], hop)      # every edge points at its node
    for other_n_id, other_locals in results[1:]:
        np.testing.assert_array_equal(other_n_id, n_id)
        for a, b in zip(other_locals, locals_):
            np.testing.assert_array_equal(a, b)


def test_generation_wraparound_clears_the_table():
    indptr, indices = random_graph(300, 5, seed=14)
    sampler = FusedSampler(indptr, indices, [3, 3])
    expected = sampler.sample(np.arange(12), seed=1)
    sampler._node_map.generation = (1 << 31) - 1
    for _ in range(2):
        np.testing.assert_array_equal(sampler.sample(np.arange(12), seed=1).n_id,
                                      expected.n_id)
    assert sampler._node_map.generation == 2


# ----------------------------------------------------------------------------- statistics
def test_each_neighbour_is_included_with_probability_fanout_over_degree():
    """One batch with the same node as seed 4000 times: each slot is an independent
    draw (streams are keyed by position). Chi-square over the 24 neighbours, seeded, so
    the test cannot flake; threshold is the 1e-6 quantile (df = 23)."""
    degree, fanout, draws = 24, 5, 4000
    indptr = np.array([0, degree] + [degree] * degree, dtype=np.int64)
    indices = np.arange(1, degree + 1, dtype=np.int32)
    sub = FusedSampler(indptr, indices, [fanout]).sample(np.zeros(draws, np.int64), seed=3)
    picked = sub.n_id[sub.block_indices[0]]
    counts = np.bincount(picked, minlength=degree + 1)[1:]
    expected = draws * fanout / degree
    chi_square = float(((counts - expected) ** 2 / expected).sum())
    assert chi_square < 67.0, (chi_square, counts)                 # chi2.ppf(1-1e-6, 23)
    assert counts.sum() == draws * fanout


def test_every_subset_is_equally_likely():
    """Floyd with the inclusive range is uniform over k-subsets (the exclusive-range
    variant SALIENT ships is not). 5 choose 2 = 10 subsets, 6000 draws, df = 9."""
    degree, fanout, draws = 5, 2, 6000
    indptr = np.array([0, degree] + [degree] * degree, dtype=np.int64)
    indices = np.arange(1, degree + 1, dtype=np.int32)
    sub = FusedSampler(indptr, indices, [fanout]).sample(np.zeros(draws, np.int64), seed=8)
    pairs = np.sort(sub.n_id[sub.block_indices[0]].reshape(draws, fanout), axis=1)
    _, counts = np.unique(pairs[:, 0] * 10 + pairs[:, 1], return_counts=True)
    assert counts.size == 10
    expected = draws / 10
    chi_square = float(((counts - expected) ** 2 / expected).sum())
    assert chi_square < 42.0, (chi_square, counts)                 # chi2.ppf(1-1e-6, 9)


# ----------------------------------------------------------------------------- edge cases
def test_empty_batch_has_correctly_shaped_outputs():
    indptr, indices = random_graph(50, 3, seed=15)
    sampler = FusedSampler(indptr, indices, [3, 2], features=features_for(50, width=4))
    sub = sampler.sample(np.array([], dtype=np.int64), seed=0)
    assert sub.n_id.shape == (0,) and sub.hop_sizes == [0, 0, 0]
    assert [ip.tolist() for ip in sub.block_indptr] == [[0], [0]]
    assert [ix.shape for ix in sub.block_indices] == [(0,), (0,)]
    assert sub.x.shape == (0, 4) and sub.missing.shape == (0,)
    assert sub.num_sampled_edges == 0


def test_degree_zero_and_fanout_above_degree():
    # 0 has no in-neighbours; 1 <- {0}; 2 <- {0, 1}.
    indptr = np.array([0, 0, 1, 3], dtype=np.int64)
    indices = np.array([0, 0, 1], dtype=np.int32)
    sub = FusedSampler(indptr, indices, [10, 10]).sample(np.array([0, 2]), seed=1)
    assert sub.n_id.tolist() == [0, 2, 1]
    assert sub.block_indptr[0].tolist() == [0, 0, 2]
    assert sub.block_indices[0].tolist() == [0, 2]
    assert sub.block_indptr[1].tolist() == [0, 0, 2, 3]


def test_repeated_seeds_keep_their_slots_and_edges_use_the_first():
    indptr, indices = star_graph(40)
    seeds = np.array([0, 5, 0, 5, 7])
    sub = FusedSampler(indptr, indices, [3, 2]).sample(seeds, seed=6)
    assert sub.n_id[:5].tolist() == seeds.tolist()
    # Each slot of the hub (positions 0 and 2) is a target with its own draw of 3 leaves.
    rows = [sub.block_indices[0][a:b] for a, b in zip(sub.block_indptr[0][:-1],
                                                      sub.block_indptr[0][1:])]
    assert len(rows[0]) == len(rows[2]) == 3
    # Leaves 5 and 7 point at the hub's first slot, never at its repeat.
    assert rows[1].tolist() == rows[3].tolist() == rows[4].tolist() == [0]
    assert 2 not in np.concatenate(sub.block_indices).tolist()
    assert 3 not in np.concatenate(sub.block_indices).tolist()
    reference.check_invariants(sub, indptr, indices, [3, 2], seeds)


def test_multi_edges_count_as_separate_neighbours():
    # 0 <- {1, 1, 1, 2}: positions are sampled without replacement, ids may repeat.
    indptr = np.array([0, 4, 4, 4], dtype=np.int64)
    indices = np.array([1, 1, 1, 2], dtype=np.int32)
    sub = FusedSampler(indptr, indices, [3]).sample(np.array([0]), seed=2)
    assert sub.block_indptr[0].tolist() == [0, 3]
    assert sub.n_id.tolist() in ([0, 1, 2], [0, 2, 1], [0, 1])
    reference.check_invariants(sub, indptr, indices, [3], [0], unique_rows=False)


def test_sampler_output_feeds_minibatch():
    torch = pytest.importorskip("torch")
    from gnnsys.minibatch.batch import MiniBatch
    indptr, indices = random_graph(200, 5, seed=16)
    features = features_for(200, width=6)
    sub = FusedSampler(indptr, indices, [4, 3], features=features).sample(np.arange(8), 0)
    batch = MiniBatch.from_sampled(sub, labels=np.arange(200))
    assert batch.x.shape == (sub.n_id.size, 6) and batch.y.tolist() == list(range(8))
    assert [b.num_dst for b in batch.blocks] == [sub.hop_sizes[1], sub.hop_sizes[0]]
    assert batch.blocks[0].edge_index.dtype == torch.int64


@pytest.mark.parametrize("kwargs, message", [
    (dict(fanouts=[]), "fanouts"),
    (dict(fanouts=[3, -2]), "fanouts"),
    (dict(fanouts=[3], features=np.zeros((2, 3), np.float32)), "rows"),
    (dict(fanouts=[3], features=np.zeros((4, 3), np.float64)), "float32"),
    (dict(fanouts=[3], features=np.zeros((4, 3), np.float32), row_of=np.zeros(2)), "row_of"),
    (dict(fanouts=[3], num_threads=10_000), "num_threads"),
])
def test_bad_arguments_are_named(kwargs, message):
    indptr, indices = random_graph(4, 2, seed=17)
    with pytest.raises(ValueError, match=message):
        FusedSampler(indptr, indices, **kwargs)


def test_bad_graph_and_seeds_are_named():
    """The checks both fused samplers share (samplers/_inputs.py)."""
    indptr, indices = random_graph(4, 2, seed=17)
    with pytest.raises(ValueError, match="FusedSampler: indptr.*the CSR is inconsistent"):
        FusedSampler(indptr, indices[:-1], [2])
    with pytest.raises(ValueError, match="indices must be 1-D int32 or int64, got float32"):
        FusedSampler(indptr, indices.astype(np.float32), [2])
    with pytest.raises(ValueError, match=r"FusedSampler.sample: seeds must be a 1-D integer"):
        FusedSampler(indptr, indices, [2]).sample(np.zeros((2, 2), np.int64), 0)


def test_out_of_range_seeds_are_rejected():
    indptr, indices = random_graph(10, 2, seed=18)
    sampler = FusedSampler(indptr, indices, [2])
    with pytest.raises(ValueError, match="seed ids"):
        sampler.sample(np.array([3, 10]), seed=0)
