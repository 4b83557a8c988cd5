"""The GPU sampler's atomics, checked without a GPU.

numba's CUDA simulator runs a block's threads one after another, so a kernel whose
`cuda.atomic.min` or compare-and-swap was replaced by a plain store passes every
simulator test. Here the simulator is made adversarial for the kernels holding the atomics
(`StoreBarrier`): a block's threads start together and store in lockstep, as a warp does,
the highest thread's store landing last, so every read-then-store of a shared slot races
as it can on a GPU. The real kernels must still equal the CPU kernel on a hub-heavy graph
(many threads claiming the same slot), and each mutant, a copy of samplers/gpu_kernels.py
with one atomic turned into a plain store, must be caught. All cases run in one child
process (the simulator must be on before numba.cuda is first imported). On hardware,
scripts/gpu_check.py's races stage and compute-sanitizer do the same job.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "samplers" / "gpu_kernels.py"

# name -> (the atomic as samplers/gpu_kernels.py has it, the plain store replacing it)
MUTANTS = {
    "seed_first_position_min": (
        "        cuda.atomic.min(first_pick, slot, i)\n",
        "        if i < first_pick[slot]:\n            first_pick[slot] = i\n"),
    "pick_first_occurrence_min": (
        "            cuda.atomic.min(first_pick, slot, offset + i)\n",
        "            first_pick[slot] = offset + i\n"),
    "node_map_compare_and_swap": (
        "            current = cuda.atomic.cas(keys, slot, EMPTY_KEY, key)\n",
        "            keys[slot] = key\n            current = EMPTY_KEY\n"),
}
BATCH_SEEDS = range(2)      # each mutant differs in one of these (checked: the same in 3 runs)
# The kernels holding the atomics run adversarially (the others as the simulator runs them:
# lockstep is slow in Python).
LOCKSTEP_KERNELS = {"insert_seeds", "sample_hop"}


def hub_graph(seed: int = 0):
    """60 nodes whose neighbour lists alternate between 3 hubs and other nodes: the
    threads of a block claim the same hub at once, and between a hub's picks lie first
    picks of other nodes (so a hub claimed at the wrong pick moves it in n_id)."""
    rng = np.random.default_rng(seed)
    num_nodes, hubs = 60, np.array([57, 58, 59])
    degree = rng.integers(4, 9, num_nodes)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(degree, out=indptr[1:])
    indices = rng.integers(0, 57, int(indptr[-1])).astype(np.int32)
    indices[::2] = rng.choice(hubs, indices[::2].size)
    features = rng.standard_normal((num_nodes, 3)).astype(np.float32)
    return indptr, indices, features


class StoreBarrier:
    """One block's stores in lockstep, as a warp executes them: a thread reaching a store
    waits until every running thread of its block is at a store (or finished, or waiting
    in syncthreads); then the waiting stores run in ascending thread order, so the
    highest thread's store lands last. Reads run freely. Under this order a check-then-
    store keeps the largest value and of two keys stored into one slot only the last
    stays: exactly the updates an atomic exists to keep."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running, self.waiting, self.batch, self.turn = set(), set(), [], 0
        self.wake = {}                  # thread id -> its Event (one wake-up per store)

    def _release(self):             # with self.lock held
        if not self.batch and self.waiting and self.waiting >= self.running:
            self.batch, self.turn, self.waiting = sorted(self.waiting), 0, set()
            self.wake[self.batch[0]].set()

    def join(self, tid):
        with self.lock:
            self.running.add(tid)
            self.wake.setdefault(tid, threading.Event())

    def leave(self, tid):
        with self.lock:
            self.running.discard(tid)
            self._release()

    def store(self, tid, do_store):
        with self.lock:
            self.wake[tid].clear()
            self.waiting.add(tid)
            self._release()
        self.wake[tid].wait()
        do_store()
        with self.lock:
            self.turn += 1
            if self.turn < len(self.batch):
                self.wake[self.batch[self.turn]].set()
            else:
                self.batch = []
                self._release()


def make_adversarial() -> None:
    """Patch numba's simulator: a block's threads start together and store in lockstep
    (StoreBarrier); atomics and syncthreads are left as they are."""
    from numba.cuda.simulator import kernelapi
    from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray
    from numba.cuda.simulator.kernel import BlockThread
    inside_atomic = threading.local()
    create, sync, store = BlockThread.__init__, BlockThread.syncthreads, \
        FakeWithinKernelCUDAArray.__setitem__

    def create_gated(self, f, manager, *args):
        if manager._f.__name__ not in LOCKSTEP_KERNELS:
            return create(self, f, manager, *args)
        # the simulator starts a block's threads one by one: none runs until all exist
        start = manager.__dict__.setdefault(
            "start", threading.Barrier(int(np.prod(manager._block_dim))))
        stores = manager.__dict__.setdefault("stores", StoreBarrier())

        def gated(*a, **kw):
            start.wait()
            try:
                f(*a, **kw)
            finally:
                stores.leave(self.thread_id)
        create(self, gated, manager, *args)
        stores.join(self.thread_id)

    def syncthreads(self):          # parked: the others' stores need not wait for it
        stores = getattr(self._manager, "stores", None)
        if stores is None:
            return sync(self)
        stores.leave(self.thread_id)
        sync(self)
        stores.join(self.thread_id)

    def lockstep_store(self, index, value):
        thread = threading.current_thread()
        if getattr(inside_atomic, "on", False) or not isinstance(thread, BlockThread) \
                or not hasattr(thread._manager, "stores"):
            return store(self, index, value)
        thread._manager.stores.store(thread.thread_id, lambda: store(self, index, value))

    def atomic(method):
        def call(*args, **kwargs):
            inside_atomic.on = True
            try:
                return method(*args, **kwargs)
            finally:
                inside_atomic.on = False
        return call

    for name in ("add", "cas", "compare_and_swap", "exch", "max", "min", "sub"):
        setattr(kernelapi.FakeCUDAAtomic, name, atomic(getattr(kernelapi.FakeCUDAAtomic, name)))
    BlockThread.__init__, BlockThread.syncthreads = create_gated, syncthreads
    FakeWithinKernelCUDAArray.__setitem__ = lockstep_store


def sampler_with_kernels(source: str, workdir: Path, name: str):
    """GpuFusedSampler bound to the kernels in `source` (loaded as samplers.gpu_kernels)."""
    import importlib
    import importlib.util
    import samplers
    path = workdir / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("samplers.gpu_kernels", path)
    kernels = importlib.util.module_from_spec(spec)
    sys.modules["samplers.gpu_kernels"] = samplers.gpu_kernels = kernels
    spec.loader.exec_module(kernels)
    import samplers.fused_gpu
    return importlib.reload(samplers.fused_gpu).GpuFusedSampler


def child(workdir: Path) -> dict:
    """In the simulator child: for the kernels as they are and for each mutant, the GPU
    sampler against the CPU kernel under the adversarial scheduler; which batch seeds
    differed."""
    sys.path.insert(0, str(ROOT))
    make_adversarial()
    from samplers.fused_cpu import FusedSampler
    indptr, indices, features = hub_graph()
    seeds = np.array([0, 5, 57, 9, 0, 12, 58, 20, 7, 5, 30, 16], dtype=np.int64)
    cpu = FusedSampler(indptr, indices, [4, 3], features=features, num_threads=1)
    source, differed = KERNELS.read_text(), {}
    for case in ["none", *MUTANTS]:
        mutated = source
        if case != "none":
            atomic, plain = MUTANTS[case]
            assert source.count(atomic) == 1, f"{case}: the atomic is no longer in the kernels"
            mutated = source.replace(atomic, plain)
        sampler = sampler_with_kernels(mutated, workdir, case)
        gpu = sampler(indptr, indices, [4, 3], features=features, lanes=4, groups_per_block=4)
        differed[case] = []
        for batch_seed in BATCH_SEEDS:
            got, want = gpu.sample(seeds, batch_seed), cpu.sample(seeds, batch_seed)
            same = (np.array_equal(got.n_id, want.n_id) and np.array_equal(got.x, want.x)
                    and all(np.array_equal(g, w) for g, w in zip(got.block_indices,
                                                                   want.block_indices)))
            if not same:
                differed[case].append(batch_seed)
    return differed


@pytest.fixture(scope="module")
def differed(tmp_path_factory) -> dict:
    """case -> the batch seeds whose batch differed from the CPU kernel's."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    done = subprocess.run([sys.executable, __file__, str(tmp_path_factory.mktemp("races"))],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_kernels_equal_the_cpu_kernel_when_threads_interleave(differed):
    assert differed["none"] == []


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_an_atomic_made_a_plain_store_is_caught(mutant, differed):
    assert differed[mutant], f"{mutant}: a plain store in place of the atomic went unnoticed"


if __name__ == "__main__":
    print(json.dumps(child(Path(sys.argv[1]))))
