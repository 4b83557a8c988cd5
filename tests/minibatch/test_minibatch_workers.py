"""K minibatch workers against one process, as far as they can be equal.

An epoch of K workers cannot equal an epoch of one process: each worker draws its batches
from its own part's training nodes, shuffled by its own seed (SALIENT++'s split), so the
batches themselves differ, and the sampler's random streams are keyed by the position of a
seed in its batch. What must hold, and is checked here through the real plug-in (its
partitions, feature store with cache and remote fetch, loader, loss) and the real gradient
all-reduce: one step of K workers computes the gradient one process computes on the union
of their batches (equal batch sizes, fanouts that take every neighbour so the blocks are
the same)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from gnnsys.config import from_dict
from gnnsys.distributed import launch
from gnnsys.minibatch.batch import MiniBatch
from gnnsys.minibatch.mode import MinibatchMode
from gnnsys.models import build_model
from gnnsys.partition_cache import ensure_partitions
from gnnsys.testing import tiny_graph
from partition.format import PartitionSet
from samplers import FusedSampler

WORKERS, BATCH, SEED = 2, 16, 1


def settings(tmp_path, workers):
    return from_dict({
        "mode": "minibatch",
        "model": {"arch": "sage", "hidden": 16, "layers": 2, "dropout": 0.0},
        "sampler": {"fanouts": [-1, -1], "batch_size": BATCH, "threads": 1, "prefetch": 1},
        "cache": {"replication": 0.1},
        "partition": {"dir": str(tmp_path / "parts")},
        "cluster": {"workers": workers, "launcher": "threads"},
        "train": {"epochs": 1, "seed": SEED, "progress": False},
        "run": {"dir": str(tmp_path / "run")}})


def first_step_of_workers(config, parts_path):
    """Each rank's first batch seeds, the all-reduced gradients and the initial weights."""
    def rank(ctx, config, parts_path):
        comm = ctx.comm
        mode = MinibatchMode(ctx, config, parts_path)
        seen = []
        epoch = mode.data.loader.epoch
        mode.data.loader.epoch = lambda e: (seen.append(b) or b for b in epoch(e))
        model = mode.build_model()           # replicas start from rank 0's weights
        model.load_state_dict(comm.broadcast_object(model.state_dict()))
        steps = mode.train_batches(0)
        initial = {k: v.clone() for k, v in model.state_dict().items()}
        loss, count, _ = next(steps)
        loss.backward()
        comm.all_reduce_gradients(model.parameters(), mode.grad_op)
        seeds = seen[0].n_id[:count].numpy().copy()
        # finish the epoch so every rank's loader makes the same collective calls
        for _ in steps:
            pass
        stats = mode.epoch_stats()
        # the batches needed cached and fetched rows: the store's whole path was exercised
        assert stats["cache_hits"] > 0 and stats["remote_rows"] > 0, stats
        return seeds, {n: p.grad.clone() for n, p in model.named_parameters()}, initial
    return launch(rank, config, parts_path)


def one_process_gradients(config, parts: PartitionSet, seeds, initial):
    indptr, indices = parts.full_csr()
    x = np.concatenate([parts.array(k, "x") for k in range(parts.num_parts)])
    y = np.concatenate([parts.array(k, "y") for k in range(parts.num_parts)]).astype(np.int64)
    sampler = FusedSampler(indptr, indices, [-1, -1], features=np.ascontiguousarray(x))
    batch = MiniBatch.from_sampled(sampler.sample(seeds, seed=0), y)
    model = build_model(config, x.shape[1], int(y.max()) + 1)
    model.load_state_dict(initial)
    F.cross_entropy(model(batch.x, batch.blocks, batch.n_id), batch.y).backward()
    return {n: p.grad for n, p in model.named_parameters()}


def test_a_step_of_two_workers_is_the_one_process_step_on_the_union_of_their_batches(tmp_path):
    graph = tiny_graph(num_nodes=300, num_features=8, seed=3)
    config = settings(tmp_path, WORKERS)
    parts = PartitionSet(ensure_partitions(config, graph, progress=False).path)
    ranks = first_step_of_workers(config, str(parts.path))
    union = np.concatenate([seeds for seeds, _, _ in ranks])
    assert [len(seeds) for seeds, _, _ in ranks] == [BATCH] * WORKERS   # mean of means = mean
    for r, (seeds, _, _) in enumerate(ranks):             # each rank drew its own part's seeds
        lo, hi = parts.book.range(r)
        assert ((seeds >= lo) & (seeds < hi)).all()
    reference = one_process_gradients(config, parts, union, ranks[0][2])
    for _, grads, _ in ranks:
        for name, grad in reference.items():
            assert grad.abs().sum() > 0, name
            torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
