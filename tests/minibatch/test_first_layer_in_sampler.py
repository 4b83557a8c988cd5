"""The first layer aggregated by the sampler (samplers/_aggregate.py: SAGE's mean, GCN's
normalised sum) gives the step the unfused batch gives: the same logits and gradients;
and the loader asks for it only where it can hold (SAGE or GCN, dense float32 rows all
local)."""
import numpy as np
import pytest
import torch

from gnnsys.config import load_config
from gnnsys.minibatch.batch import MiniBatch
from gnnsys.minibatch.loader import first_layer_aggregate, fused_sampler
from gnnsys.models.block_gnn import BlockGNN
from samplers import FusedSampler


def small_graph(num_nodes=2000, seed=0):
    rng = np.random.default_rng(seed)
    degree = rng.integers(0, 20, num_nodes)
    indptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    indices = rng.integers(0, num_nodes, indptr[-1]).astype(np.int32)
    return indptr, indices, rng.standard_normal((num_nodes, 16)).astype(np.float32)


@pytest.mark.parametrize("arch,aggregate", [("sage", "mean"), ("gcn", "gcn")])
@pytest.mark.parametrize("fanouts", [[6], [5, 4, 3]])
def test_the_sampler_s_aggregate_gives_the_unfused_step(fanouts, arch, aggregate):
    indptr, indices, x = small_graph()
    seeds = np.arange(0, 2000, 37)
    batches = [MiniBatch.from_sampled(FusedSampler(indptr, indices, fanouts, features=x,
                                                   aggregate=kind).sample(seeds, 9))
               for kind in (None, aggregate)]
    assert batches[0].x_agg is None and batches[1].x_agg is not None
    torch.manual_seed(0)
    model = BlockGNN(arch, 16, 32, 5, len(fanouts), dropout=0.0)
    model.set_degree(np.diff(indptr))
    grads = []
    for batch in batches:
        model.zero_grad()
        logits = model(batch.x, batch.blocks, batch.n_id, batch.x_agg)
        logits.square().sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        batch.logits = logits.detach()
    torch.testing.assert_close(batches[1].logits, batches[0].logits, rtol=1e-5, atol=1e-5)
    for plain, fused in zip(*grads):
        torch.testing.assert_close(fused, plain, rtol=1e-4, atol=1e-4)


def test_a_model_that_does_not_aggregate_linearly_refuses_the_sampler_s_mean():
    indptr, indices, x = small_graph()
    batch = MiniBatch.from_sampled(FusedSampler(indptr, indices, [4], features=x,
                                                aggregate="mean").sample(np.arange(10), 0))
    model = BlockGNN("gat", 16, 32, 5, 1)
    with pytest.raises(ValueError, match="only model.arch sage and gcn"):
        model(batch.x, batch.blocks, batch.n_id, batch.x_agg)


def config(arch="sage"):
    return load_config(None, ["mode=minibatch", f"model.arch={arch}", "sampler.fanouts=[4,4]",
                              "model.layers=2"])


def test_the_loader_asks_for_the_mean_only_where_it_holds():
    indptr, indices, x = small_graph()
    assert first_layer_aggregate(config(), x, None) == "mean"
    assert fused_sampler(config(), indptr, indices, x).aggregate == "mean"
    assert fused_sampler(config("gcn"), indptr, indices, x).aggregate == "gcn"
    assert first_layer_aggregate(config("gat"), x, None) is None
    assert first_layer_aggregate(config(), x.astype(np.float16), None) is None
    assert first_layer_aggregate(config(), x, np.arange(len(x))) is None
    assert first_layer_aggregate(config(), None, None) is None
