import threading

import numpy as np
import pytest

from gnnsys.minibatch.loader import NodeLoader
from samplers.types import SampledSubgraph


class EchoSampler:
    """Stand-in sampler: one hop where each seed points to itself; records its thread."""
    num_buffers = 4

    def __init__(self, fail_at=None):
        self.threads, self.calls, self.fail_at = set(), 0, fail_at

    def sample(self, seeds, seed):
        self.threads.add(threading.current_thread().name)
        self.calls += 1
        if self.fail_at is not None and self.calls > self.fail_at:
            raise RuntimeError("sampler broke")
        n = len(seeds)
        return SampledSubgraph(n_id=np.asarray(seeds), hop_sizes=[n, n],
                               block_indptr=[np.arange(n + 1)], block_indices=[np.arange(n)],
                               x=np.asarray(seeds, dtype=np.float32)[:, None])


def test_epoch_covers_every_seed_once_in_background_thread():
    s = EchoSampler()
    labels = np.arange(100) * 10
    loader = NodeLoader(s, np.arange(100), labels, batch_size=32, prefetch=2, seed=3)
    batches = list(loader.epoch(0))
    assert len(batches) == len(loader) == 4
    got = np.concatenate([b.n_id.numpy() for b in batches])
    assert sorted(got.tolist()) == list(range(100))
    assert all((b.y.numpy() == b.n_id.numpy() * 10).all() for b in batches)
    assert s.threads == {"gnnsys-batch-prep"}
    # reproducible order per (seed, epoch), different across epochs
    again = np.concatenate([b.n_id.numpy() for b in loader.epoch(0)])
    other = np.concatenate([b.n_id.numpy() for b in loader.epoch(1)])
    assert (got == again).all() and not (got == other).all()


def test_exact_batch_count_cycles_seeds():
    loader = NodeLoader(EchoSampler(), np.arange(10), None, batch_size=4, num_batches=5,
                        prefetch=0)
    assert [len(b.n_id) for b in loader.epoch(0)] == [4] * 5


def test_sampler_errors_reach_the_consumer():
    loader = NodeLoader(EchoSampler(fail_at=1), np.arange(50), None, batch_size=10)
    with pytest.raises(RuntimeError, match="sampler broke"):
        list(loader.epoch(0))


def test_breaking_out_early_stops_the_producer():
    loader = NodeLoader(EchoSampler(), np.arange(1000), None, batch_size=10, prefetch=2)
    for i, _ in enumerate(loader.epoch(0)):
        if i == 2:
            break
    assert not any(t.name == "gnnsys-batch-prep" for t in threading.enumerate())


def test_too_few_buffers_is_a_clear_error():
    s = EchoSampler()
    s.num_buffers = 2
    with pytest.raises(ValueError, match="num_buffers=5"):
        NodeLoader(s, np.arange(10), None, prefetch=3)
