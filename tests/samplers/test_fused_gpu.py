"""Tests of the GPU fused sampler: kernels in numba's CUDA simulator, placement policy, real GPU.

The simulator must be switched on (NUMBA_ENABLE_CUDASIM=1) before numba.cuda is first
imported, and other test files of the same pytest run may import numba.cuda first, or
need the real one. So the kernel checks run in ONE child process, `python <this file>`,
which enables the simulator before any import, and each check is reported as its own test
here (test_kernel_in_cuda_simulator[...]). On a machine with a CUDA GPU the same checks
also run in-process on the device (marked gpu; skipped without one).

The kernels must agree with two references: the plain Python sampler below (written from
the specification in samplers/fused_cpu.py and common/rng.py) and the CPU kernel
FusedSampler. Both are exact: the GPU kernel draws the same random streams in the same
discovery order, so whole batches must be equal, not just similar. Graphs stay tiny
(the simulator runs every GPU thread as a Python thread).
"""
import os
import sys
from pathlib import Path

if __name__ == "__main__" and "--compile-ptx" not in sys.argv:   # simulator child:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"        # before numba.cuda is imported
if __name__ == "__main__":
    sys.path[:0] = [str(Path(__file__).resolve().parents[2])]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the shared harness

import numpy as np
import pytest

from cuda_simulator import (KernelChecks, assert_check_passed, assert_compiled, child_main,
                            child_results, compile_ptx, ptx_child_main, run_children)
from samplers.gpu_tiers import (DEVICE_TIER, FIRST_PEER_TIER, HOST_TIER, MISS, TIER_SHIFT,
                                TierBudgets, place_adjacency, place_features)

# Few lanes keep the simulator fast; the real-GPU run uses warps (32 lanes).
SIMULATOR_OPTIONS = {"lanes": 4, "groups_per_block": 8}
DEVICE_OPTIONS = {"lanes": 32, "groups_per_block": 4}
CHILD_TIMEOUT_S = 300


# ----------------------------------------------------------------------------- references
MASK64 = (1 << 64) - 1


def _mix64(z):
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & MASK64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & MASK64
    return z ^ (z >> 31)


class _Stream:
    """common/rng.py in plain Python ints: splitmix64 keyed by (seed, hop, position)."""

    def __init__(self, seed, hop, position):
        self.state = _mix64(_mix64(_mix64(seed & MASK64) ^ hop) ^ position)

    def below(self, bound):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        bits = _mix64(self.state)
        product = (bits >> 32) * bound
        low = product & 0xFFFFFFFF
        if low < bound:
            threshold = ((1 << 32) - bound) % bound
            while low < threshold:
                self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
                product = (_mix64(self.state) >> 32) * bound
                low = product & 0xFFFFFFFF
        return product >> 32


def reference_sample(indptr, indices, fanouts, seeds, seed, features=None, row_of=None):
    """The sampler's specification, one obvious loop at a time."""
    n_id = [int(s) for s in seeds]
    local = {}
    for i, node in enumerate(n_id):
        local.setdefault(node, i)
    hop_sizes, block_indptr, block_indices = [len(n_id)], [], []
    for hop, fanout in enumerate(fanouts):
        pointers, picked_locals = [0], []
        for target in range(hop_sizes[-1]):
            node = n_id[target]
            neighbours = indices[indptr[node]:indptr[node + 1]]
            degree = len(neighbours)
            if fanout < 0 or degree <= fanout:
                positions = list(range(degree))
            else:                                  # Floyd, inclusive range
                stream, positions = _Stream(seed, hop, target), []
                for j in range(degree - fanout, degree):
                    draw = stream.below(j + 1)
                    positions.append(j if draw in positions else draw)
            for position in positions:
                neighbour = int(neighbours[position])
                if neighbour not in local:
                    local[neighbour] = len(n_id)
                    n_id.append(neighbour)
                picked_locals.append(local[neighbour])
            pointers.append(len(picked_locals))
        hop_sizes.append(len(n_id))
        block_indptr.append(np.array(pointers, dtype=np.int64))
        block_indices.append(np.array(picked_locals, dtype=np.int64))
    n_id = np.array(n_id, dtype=np.int64)
    x = missing = None
    if features is not None:
        rows = n_id if row_of is None else row_of[n_id]
        x = np.where((rows >= 0)[:, None], features[np.maximum(rows, 0)], 0).astype(features.dtype)
        missing = np.flatnonzero(rows < 0)
    return n_id, hop_sizes, block_indptr, block_indices, x, missing


def tiny_graph(num_nodes=160, num_features=5, seed=0):
    """Random CSR with the awkward cases: degree-0 nodes, a hub (degree >> fanouts),
    self loops and repeated neighbours."""
    rng = np.random.default_rng(seed)
    degree = rng.integers(0, 9, num_nodes)
    degree[[3, 11]] = 0
    degree[7] = 120                                  # huge degree: Floyd over 120 slots
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    indices = rng.integers(0, num_nodes, int(indptr[-1])).astype(np.int32)
    indices[indptr[7]:indptr[7] + 3] = 7             # self loops on the hub
    features = rng.standard_normal((num_nodes, num_features)).astype(np.float32)
    return indptr, indices, features


SEEDS = np.array([7, 3, 20, 7, 41, 11, 90, 159, 0, 20], dtype=np.int64)   # repeats, deg 0


def assert_same_batch(sub, expected, check_x=True):
    n_id, hop_sizes, block_indptr, block_indices, x, missing = expected
    np.testing.assert_array_equal(sub.n_id, n_id)
    assert list(sub.hop_sizes) == list(hop_sizes)
    for got, want in zip(sub.block_indptr, block_indptr):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(sub.block_indices, block_indices):
        np.testing.assert_array_equal(got, want)
    if check_x and x is not None:
        np.testing.assert_array_equal(sub.x, x)
        np.testing.assert_array_equal(sub.missing, missing)


def cpu_batch(sub):
    """A FusedSampler result in reference_sample's tuple shape."""
    return (sub.n_id, sub.hop_sizes, sub.block_indptr, sub.block_indices, sub.x, sub.missing)


# ----------------------------------------------------------------------------- kernel checks
# Each takes the kernel options (lanes, groups) and raises on failure. They run in the
# simulator child and, with a GPU, in-process on the device.
KERNEL_CHECKS = KernelChecks()


@KERNEL_CHECKS
def matches_reference_and_cpu_kernel(options):
    from samplers.fused_cpu import FusedSampler
    from samplers.fused_gpu import GpuFusedSampler
    indptr, indices, features = tiny_graph()
    for fanouts in ([4, 3], [-1, 2]):
        gpu = GpuFusedSampler(indptr, indices, fanouts, features=features, **options)
        cpu = FusedSampler(indptr, indices, fanouts, features=features)
        for batch_seed in (0, 12345):
            sub = gpu.sample(SEEDS, batch_seed)
            assert_same_batch(sub, reference_sample(indptr, indices, fanouts, SEEDS,
                                                    batch_seed, features))
            assert_same_batch(sub, cpu_batch(cpu.sample(SEEDS, batch_seed)))
            assert sub.block_indices[0].dtype == np.int32 and sub.n_id.dtype == np.int64


@KERNEL_CHECKS
def picks_are_distinct_neighbours_and_uniform(options):
    """A node of degree 10 as 300 repeated seeds (each its own target and stream): every
    row holds 3 distinct true neighbours, and each neighbour is picked 3/10 of the time."""
    from samplers.fused_gpu import GpuFusedSampler
    indptr = np.array([0, 10] + [10] * 10, dtype=np.int64)
    indices = np.arange(1, 11, dtype=np.int64)
    sampler = GpuFusedSampler(indptr, indices, [3], **options)
    sub = sampler.sample(np.zeros(300, dtype=np.int64), seed=7)
    rows = np.split(sub.n_id[sub.block_indices[0]], sub.block_indptr[0][1:-1])
    assert all(len(set(row.tolist())) == 3 and set(row.tolist()) <= set(range(1, 11))
               for row in rows)
    counts = np.bincount(np.concatenate(rows), minlength=11)[1:]
    expected = 300 * 3 / 10
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 27.9, f"pick counts {counts} are not uniform (chi2={chi2:.1f}, 9 dof, p=.001)"


@KERNEL_CHECKS
def every_tier_and_the_miss_list(options):
    """Rows on device, host, two peer shards, past every budget, and without a local copy
    (row_of -1): each sampled node's row is exact and the misses are listed."""
    from samplers.fused_gpu import GpuFusedSampler
    indptr, indices, features = tiny_graph()
    num_nodes = indptr.size - 1
    row_of = np.arange(num_nodes, dtype=np.int64)[::-1].copy()      # rows permuted
    row_of[::9] = -1                                                 # not held here
    row_bytes = features.shape[1] * features.itemsize
    budgets = TierBudgets(device_bytes=20 * row_bytes, peer_bytes=(15 * row_bytes,) * 2,
                          host_bytes=60 * row_bytes)
    sampler = GpuFusedSampler(indptr, indices, [-1, 3], features=features, row_of=row_of,
                              budgets=budgets, **options)
    placement = sampler.placement
    sub = sampler.sample(SEEDS, seed=3)
    tiers = placement.location[sub.n_id] >> TIER_SHIFT
    held = placement.location[sub.n_id] != MISS
    for tier in (DEVICE_TIER, HOST_TIER, FIRST_PEER_TIER, FIRST_PEER_TIER + 1):
        assert np.any(held & (tiers == tier)), f"tier {tier} not exercised"
    assert np.any(row_of[sub.n_id] < 0) and np.any(~held & (row_of[sub.n_id] >= 0)), \
        "both kinds of miss (no local copy, over budget) must occur"
    np.testing.assert_array_equal(sub.missing, np.flatnonzero(~held))
    np.testing.assert_array_equal(sub.x[held], features[row_of[sub.n_id[held]]])
    assert not sub.x[~held].any()
    expected = reference_sample(indptr, indices, [-1, 3], SEEDS, 3)
    assert_same_batch(sub, expected, check_x=False)
    assert sampler.memory_report()["features"] == placement.bytes_per_tier()
    rows = sampler.locality(sub)["feature_rows"]
    assert rows["miss"] == sub.missing.size and sum(rows.values()) == sub.n_id.size
    assert rows["peer1"] == np.count_nonzero(held & (tiers == FIRST_PEER_TIER + 1))
    assert sampler._tiers[HOST_TIER].shape[1] == 32, "host rows padded to 128 bytes"


@KERNEL_CHECKS
def adjacency_split_between_device_and_host(options):
    """Hub lists replicated on the device, the rest read from pinned host memory: the
    same batch as with the whole CSR on the device."""
    from samplers.fused_gpu import GpuFusedSampler
    indptr, indices, features = tiny_graph()
    budget = indices.nbytes // 3
    split = GpuFusedSampler(indptr, indices, [3, 3], features=features,
                            adjacency_device_bytes=budget, **options)
    assert not split.adjacency.all_on_device and 0 < split.adjacency.num_hot < indptr.size - 1
    assert split.adjacency.hot_start[7] >= 0, "the hub must be replicated first"
    report = split.memory_report()["adjacency"]
    assert report["host"] == indices.nbytes and report["device"] > 0
    sub = split.sample(SEEDS, seed=5)
    assert_same_batch(sub, reference_sample(indptr, indices, [3, 3], SEEDS, 5, features))
    reads = split.locality(sub)["adjacency_reads"]
    assert reads["device"] > 0 and reads["host"] > 0
    assert reads["device"] + reads["host"] == sub.num_sampled_edges


@KERNEL_CHECKS
def shared_array_made_once_per_block(options):
    """numba's simulator makes a block's `cuda.shared.array` with an unlocked
    check-then-set; samplers/gpu_kernels.py serialises it, since scan_chunk_totals shares
    values through one across a barrier (the race once failed a CI run with a wrong scan
    total). A lookup that yields between the check and the set makes every thread race."""
    import threading
    import time
    from numba.cuda.simulator import kernelapi
    import samplers.gpu_kernels  # noqa: F401  (applies the fix in the simulator)

    class SlowLookup(dict):
        def get(self, key, default=None):
            found = super().get(key, default)
            time.sleep(0.01)                    # the other threads look up meanwhile
            return found

    shared = kernelapi.FakeCUDAShared(0)
    shared._allocations = SlowLookup()
    arrays = []
    threads = [threading.Thread(target=lambda: arrays.append(shared.array(4, np.int64)))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(a) for a in arrays}) == 1, "threads of one block got different arrays"


@KERNEL_CHECKS
def buffers_reused_across_batches(options):
    """Growing workspaces/hash table, then smaller batches, then on-device output: every
    batch equals the reference; host x stays valid for num_buffers - 1 more calls."""
    from samplers.fused_gpu import GpuFusedSampler
    indptr, indices, features = tiny_graph()
    sampler = GpuFusedSampler(indptr, indices, [3, 2], features=features, num_buffers=2,
                              **options)
    batches = [np.array([5]), np.arange(0, 160, 7), np.array([9, 9]), np.arange(30)]
    kept = None
    for step, seeds in enumerate(batches):
        sub = sampler.sample(seeds, seed=step)
        assert_same_batch(sub, reference_sample(indptr, indices, [3, 2], seeds, step, features))
        if step == 1:
            kept, kept_copy = sub.x, sub.x.copy()
        if step == 2:
            np.testing.assert_array_equal(kept, kept_copy)     # one call later: intact
    on_device = sampler.sample(batches[1], seed=1, on_device=True)
    assert_same_batch(on_device.__class__(
        n_id=on_device.n_id.copy_to_host(), hop_sizes=on_device.hop_sizes,
        block_indptr=[a.copy_to_host() for a in on_device.block_indptr],
        block_indices=[a.copy_to_host() for a in on_device.block_indices],
        x=on_device.x.copy_to_host(), missing=on_device.missing),
        reference_sample(indptr, indices, [3, 2], batches[1], 1, features))


@KERNEL_CHECKS
def float16_no_features_and_edge_cases(options):
    from samplers.fused_gpu import GpuFusedSampler
    indptr, indices, features = tiny_graph()
    half = features.astype(np.float16)
    sub = GpuFusedSampler(indptr, indices, [2], features=half, **options).sample(SEEDS, 1)
    assert sub.x.dtype == np.float16
    np.testing.assert_array_equal(sub.x, half[sub.n_id])
    bare = GpuFusedSampler(indptr, indices, [2, 0], **options)
    sub = bare.sample(SEEDS, 1)
    assert sub.x is None and sub.missing.size == 0 and sub.block_indices[1].size == 0
    assert_same_batch(sub, reference_sample(indptr, indices, [2, 0], SEEDS, 1))
    empty = bare.sample(np.empty(0, dtype=np.int64), 1)
    assert empty.hop_sizes == [0, 0, 0] and empty.n_id.size == 0
    assert [a.tolist() for a in empty.block_indptr] == [[0], [0]]
    lonely = bare.sample(np.array([3, 11]), 1)                      # degree-0 seeds only
    assert lonely.hop_sizes == [2, 2, 2] and lonely.num_sampled_edges == 0
    with pytest.raises(ValueError, match="seed ids must lie in"):
        bare.sample(np.array([160]), 0)


@KERNEL_CHECKS
def first_layer_aggregate_matches_the_cpu_kernel(options):
    """aggregate='mean' and 'gcn': the same batch as the CPU kernel's (picks as global
    ids, x_agg the same aggregates), rows read from every tier, and the device-resident
    output too."""
    from samplers.fused_cpu import FusedSampler
    from samplers.fused_gpu import GpuFusedSampler
    indptr, indices, features = tiny_graph()
    row_bytes = features.shape[1] * features.itemsize
    budgets = TierBudgets(device_bytes=40 * row_bytes, peer_bytes=(20 * row_bytes,) * 2,
                          host_bytes=len(features) * row_bytes)
    for fanouts, aggregate in (([4, 3], "mean"), ([-1, 2], "mean"), ([3], "gcn"),
                               ([2, 3], "gcn")):
        gpu = GpuFusedSampler(indptr, indices, fanouts, features=features, budgets=budgets,
                              aggregate=aggregate, **options)
        cpu = FusedSampler(indptr, indices, fanouts, features=features, aggregate=aggregate)
        for batch_seed in (0, 99):
            sub, want = gpu.sample(SEEDS, batch_seed), cpu.sample(SEEDS, batch_seed)
            assert_same_batch(sub, cpu_batch(want))
            assert sub.block_indices[-1].dtype == np.int64
            np.testing.assert_allclose(sub.x_agg, want.x_agg, rtol=1e-5, atol=1e-5)
            on_device = gpu.sample(SEEDS, batch_seed, on_device=True)
            np.testing.assert_allclose(on_device.x_agg.copy_to_host(), want.x_agg,
                                       rtol=1e-5, atol=1e-5)
    lonely = gpu.sample(np.array([3, 11]), 1)                     # degree-0 targets
    np.testing.assert_array_equal(lonely.x_agg, features[[3, 11]])  # gcn: the self loop
    with pytest.raises(ValueError, match="no misses"):
        GpuFusedSampler(indptr, indices, [2], features=features, aggregate="mean",
                        budgets=TierBudgets(device_bytes=row_bytes, host_bytes=0), **options)
    with pytest.raises(ValueError, match="no misses"):
        GpuFusedSampler(indptr, indices, [2], features=features.astype(np.float16),
                        aggregate="mean", **options)
    with pytest.raises(ValueError, match="'mean'"):
        GpuFusedSampler(indptr, indices, [2], features=features, aggregate="max", **options)


@pytest.fixture(scope="module")
def child_runs():
    """Both children of this file, started together (they overlap on two cores):
    'simulator' runs every kernel check in the CUDA simulator, 'ptx' compiles the
    kernels for a real GPU."""
    return run_children({"simulator": ([sys.executable, __file__], True),
                         "ptx": ([sys.executable, __file__, "--compile-ptx"], False)},
                        CHILD_TIMEOUT_S)


@pytest.fixture(scope="module")
def simulator_results(child_runs):
    return child_results(child_runs["simulator"])


@pytest.mark.parametrize("name", sorted(KERNEL_CHECKS))
def test_kernel_in_cuda_simulator(name, simulator_results):
    assert_check_passed(simulator_results, name)


# ----------------------------------------------------------------------------- PTX compile
def compile_kernels_to_ptx(cc=(9, 0)) -> list:
    """Compile every kernel for a real GPU (sm_90) with the argument types the sampler
    passes: catches what the simulator cannot (typing, e.g. int/uint mixes widening to
    float64; unsupported features). Needs NVVM (numba-cuda[cu12]), not a GPU."""
    from numba import typeof
    from numba import types as nt
    from samplers import gpu_kernels as kernels

    def array(dtype, ndim=1):
        return typeof(np.zeros((1,) * ndim, dtype=dtype))

    i64, u64, flag = nt.int64, nt.uint64, nt.boolean
    I64, U8, I32 = array(np.int64), array(np.uint8), array(np.int32)
    gather_args = [(nt.UniTuple(array(dt, 2), tiers), array(dt, 2), U8, flag)
                   for dt, tiers in ((np.float32, 4), (np.uint16, 2))]
    signatures = {
        "clear_table": [(I64, I64, I64)],
        "rehash_table": [(I64, I64, I64, I64, i64)],
        "scan_chunk_sums": [(values, i64, i64, I64) for values in (I64, U8)],
        "scan_chunk_totals": [(I64, i64)],
        "scan_write": [(values, i64, i64, I64, I64) for values in (I64, U8)],
        "insert_seeds": [(I64, I64, I64, i64, I64, I64)],
        "publish_seeds_and_gather": [(I64, i64, I64, I64, I64, I64) + g for g in gather_args],
        "count_picks": [(I64, i64, i64, I64, I64)],
        "sample_hop": [(I64, i64, I64, I64, ix, ix, I64, u64, u64, I64, I64, I64, I64, I64,
                        I64, i64) for ix in (I32, I64)],
        "mark_first_occurrences": [(I64, i64, I64, I64, U8)],
        "assign_and_gather": [(I64, I64, I64, i64, i64, I64, I64, I64) + g for g in gather_args],
        "relabel_picks": [(I64, i64, I64, I32)],
        "sample_and_aggregate": [(I64, i64, I64, I64, ix, ix, I64, u64, u64, I64, I64, I64,
                                  nt.UniTuple(array(np.float32, 2), 4), flag,
                                  array(np.float32, 2)) for ix in (I32, I64)],
    }
    compiled = []
    for name, variants in signatures.items():
        for signature in variants:
            ptx = compile_ptx(getattr(kernels, name), signature, cc)
            assert ".f64" not in ptx, f"{name}{signature}: float64 arithmetic crept in"
            compiled.append(name)
    return compiled


def test_kernels_compile_for_a_real_gpu(child_runs):
    assert_compiled(child_runs["ptx"])


# ----------------------------------------------------------------------------- real GPU
def _real_gpu() -> bool:
    from samplers.fused_gpu import cuda_gpu_available
    return cuda_gpu_available()


# Checks of numba's simulator itself (its shared arrays): nothing to check on a real GPU.
SIMULATOR_ONLY = {"shared_array_made_once_per_block"}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(set(KERNEL_CHECKS) - SIMULATOR_ONLY))
def test_kernel_on_gpu(name):
    if not _real_gpu():
        pytest.skip("needs a CUDA GPU (numba.cuda.is_available() is False)")
    (result,) = KERNEL_CHECKS.run([name], DEVICE_OPTIONS)
    assert result["ok"], result["error"]


# ----------------------------------------------------------------------------- placement
def test_feature_placement_fills_tiers_hottest_first():
    hotness = np.array([5, 9, 1, 7, 3, 8, 2, 6], dtype=np.float64)    # order 1 5 3 7 0 4 6 2
    row_bytes = 16
    budgets = TierBudgets(device_bytes=2 * row_bytes, peer_bytes=(row_bytes, row_bytes),
                          host_bytes=2 * row_bytes + 5)
    placement = place_features(8, hotness, row_bytes, budgets)
    tier_of = np.where(placement.location == MISS, -1, placement.location >> TIER_SHIFT)
    assert tier_of.tolist() == [HOST_TIER, DEVICE_TIER, -1, FIRST_PEER_TIER, HOST_TIER,
                                DEVICE_TIER, -1, FIRST_PEER_TIER + 1]
    assert [rows.tolist() for rows in placement.tier_rows] == [[1, 5], [0, 4], [3], [7]]
    row_in_tier = placement.location & ((1 << TIER_SHIFT) - 1)
    assert row_in_tier[[1, 5, 0, 4]].tolist() == [0, 1, 0, 1]
    assert placement.bytes_per_tier() == {"device": 32, "host": 32, "peer0": 16, "peer1": 16}
    assert placement.num_misses == 2 and "miss" in placement.report()


def test_feature_placement_keeps_rows_without_local_copy_as_misses():
    row_of = np.array([3, -1, 0, 1, -1, 2], dtype=np.int64)
    placement = place_features(6, np.arange(6), 4, TierBudgets(device_bytes=8), row_of)
    assert placement.location[[1, 4]].tolist() == [MISS, MISS]
    assert placement.tier_rows[DEVICE_TIER].tolist() == [2, 1]      # nodes 5, 3 -> rows
    assert placement.tier_rows[HOST_TIER].tolist() == [0, 3]        # nodes 2, 0 -> rows
    budgets = TierBudgets.from_device_fraction(100, 4, 0.15, num_peers=2)
    assert budgets.device_bytes == 60 and budgets.peer_bytes == (60, 60)
    with pytest.raises(ValueError, match="hotness must have shape"):
        place_features(6, np.arange(5), 4, TierBudgets(device_bytes=8))


def test_adjacency_placement_replicates_hottest_lists_within_budget():
    indptr = np.array([0, 1, 5, 5, 7], dtype=np.int64)              # degrees 1 4 0 2
    indices = np.array([9, 1, 2, 3, 4, 5, 6], dtype=np.int32)
    everything = place_adjacency(indptr, indices, device_bytes=None)
    assert everything.all_on_device and everything.hot_start.tolist() == [0, 1, 5, 5]
    partial = place_adjacency(indptr, indices, device_bytes=6 * 4)  # lists of nodes 1, 3
    assert not partial.all_on_device
    assert partial.hot_start.tolist() == [-1, 0, -1, 4]
    assert partial.hot_indices.tolist() == [1, 2, 3, 4, 5, 6]
    for node in (1, 3):
        start, degree = partial.hot_start[node], indptr[node + 1] - indptr[node]
        assert partial.hot_indices[start:start + degree].tolist() == \
            indices[indptr[node]:indptr[node + 1]].tolist()


def test_make_sampler_picks_cpu_without_a_gpu():
    from samplers.fused_cpu import FusedSampler
    from samplers.fused_gpu import make_sampler
    indptr, indices, features = tiny_graph()
    if _real_gpu():
        pytest.skip("a GPU is present: auto picks it")
    sampler = make_sampler("auto", indptr, indices, [2], features=features)
    assert isinstance(sampler, FusedSampler)
    with pytest.raises(ValueError, match="allowed: auto, cpu, cuda"):
        make_sampler("tpu", indptr, indices, [2])
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        with pytest.raises(RuntimeError, match="no CUDA GPU"):
            make_sampler("cuda", indptr, indices, [2])


if __name__ == "__main__" and sys.argv[1:] == ["--compile-ptx"]:
    ptx_child_main(lambda: len(compile_kernels_to_ptx()))
elif __name__ == "__main__":
    child_main(KERNEL_CHECKS, sys.argv[1:], SIMULATOR_OPTIONS)
