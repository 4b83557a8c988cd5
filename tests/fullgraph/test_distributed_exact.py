"""K Ray workers with quantisation off give the logits and gradients of one process.

One launch of 3 gloo workers runs every case (GCN and SAGE, overlap on and off), and
the single-process reference runs the same model over a plainly written dense
aggregation matrix. A second case checks that 8-bit quantised exchange stays close. CSR
features (kept sparse: the first layer projects, then aggregates) must give the same.
"""
import dataclasses
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gnnsys.config import from_dict
from gnnsys.distributed import launch
from gnnsys.fullgraph.exchange import BitAssignment, HaloExchanger
from gnnsys.fullgraph.model import FullGraphGNN
from gnnsys.fullgraph.timing import EpochTimers
from gnnsys.fullgraph.mode import LocalData, build_plan
from gnnsys.sparse_features import as_csr
from gnnsys.testing import tiny_graph

# (arch, overlap, quantisation bits (0 = off), features: "dense" or "csr": kept sparse,
# the first layer projecting before it aggregates)
CASES = [("gcn", False, 0, "dense"), ("gcn", True, 0, "dense"), ("sage", False, 0, "dense"),
         ("sage", True, 0, "dense"), ("gcn", True, 8, "dense"), ("gcn", False, 8, "dense"),
         ("gcn", True, 0, "csr"), ("sage", False, 0, "csr"), ("gcn", True, 8, "csr")]


def make_model(graph, arch):
    torch.manual_seed(0)
    return FullGraphGNN(arch, graph.num_features, 16, graph.num_classes, layers=3,
                        dropout=0.0, norm="layer")


def step(model, data, exchanger, comm):
    """One training forward/backward as the worker does it; logits and summed grads."""
    model.zero_grad()
    logits = model(data.x, exchanger, quantized=True)
    train = data.split["train"]
    loss = F.cross_entropy(logits[train], data.y[train], reduction="sum") \
        / data.global_count["train"]
    loss.backward()
    comm.all_reduce_gradients(model.parameters(), "sum")
    return logits.detach().numpy(), {n: p.grad.numpy().copy() for n, p in model.named_parameters()}


def probe(ctx, config, graph):
    plan = build_plan(ctx, config, graph)
    out = {"inner_gid": plan.inner_gid, "summary": plan.summary()}
    for arch, overlap, bits, features in CASES:
        arch_plan = plan if arch == config.model.arch else None
        if arch_plan is None:
            from gnnsys.fullgraph.halo import build_halo_plan
            parts = ctx.comm.all_gather_object((plan.rank, plan.inner_gid))
            vector = np.zeros(graph.num_nodes, np.int64)
            for rank, gids in parts:
                vector[gids] = rank
            arch_plan = build_halo_plan(graph, vector, ctx.rank, ctx.world_size, arch)
        exchanger = HaloExchanger(arch_plan, ctx.comm, EpochTimers(), overlap=overlap,
                                  assignment=BitAssignment(bits) if bits else None)
        data = LocalData(graph if features == "dense" else
                         dataclasses.replace(graph, x=as_csr(graph.x)), arch_plan)
        assert (data.x.layout == torch.strided) == (features == "dense")
        out[(arch, overlap, bits, features)] = (arch_plan.inner_gid,) + step(
            make_model(graph, arch), data, exchanger, ctx.comm)
    return out


def dense_reference(graph, arch):
    from tests.fullgraph.test_halo import dense_operator  # the plain matrix, written out
    a = torch.from_numpy(dense_operator(graph, arch)).float()
    model = make_model(graph, arch)
    x = torch.from_numpy(graph.x)
    h = x
    for layer in range(model.num_layers):
        out = model.neigh[layer](a @ h)
        if model.root is not None:
            out = out + model.root[layer](h)
        if layer < model.num_layers - 1:
            out = torch.relu(model.norms[layer](out))
        h = out
    y = torch.from_numpy(graph.y)
    train = torch.from_numpy(graph.train_idx)
    F.cross_entropy(h[train], y[train]).backward()
    return h.detach().numpy(), {n: p.grad.numpy() for n, p in model.named_parameters()}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    import ray.cloudpickle
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    graph = tiny_graph(num_nodes=150, avg_degree=6, num_features=5, num_classes=3, seed=7)
    config = from_dict({"mode": "fullgraph", "model": {"arch": "gcn"},
                        "cluster": {"workers": 3, "timeout_s": 120},
                        "partition": {"method": "random",
                                      "dir": str(tmp_path_factory.mktemp("parts"))}})
    return graph, launch(probe, config, graph)


def test_partitions_have_boundaries(results):
    _, ranks = results
    assert all(r["summary"]["halo"] > 0 and r["summary"]["central"] > 0 for r in ranks)


@pytest.mark.parametrize("case", [c for c in CASES if c[2] == 0])
def test_k_workers_equal_one_process(results, case):
    graph, ranks = results
    ref_logits, ref_grads = dense_reference(graph, case[0])
    for rank, r in enumerate(ranks):
        gids, logits, grads = r[case]
        np.testing.assert_allclose(logits, ref_logits[gids], rtol=1e-4, atol=1e-5)
        for name, grad in grads.items():
            np.testing.assert_allclose(grad, ref_grads[name], rtol=1e-4, atol=1e-6,
                                       err_msg=f"{case} rank {rank} {name}")


@pytest.mark.parametrize("case", [c for c in CASES if c[2] == 8])
def test_eight_bit_exchange_stays_close(results, case):
    graph, ranks = results
    ref_logits, ref_grads = dense_reference(graph, case[0])
    for r in ranks:
        gids, logits, grads = r[case]
        error = np.abs(logits - ref_logits[gids]).max()
        assert 0 < error < 0.05 * np.abs(ref_logits).max()      # quantised, but close
        for name, grad in grads.items():
            assert np.linalg.norm(grad - ref_grads[name]) <= 0.1 * np.linalg.norm(ref_grads[name]) + 1e-6
