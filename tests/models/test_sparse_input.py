"""A sparse (CSR) input batch gives the dense input's outputs and weight gradients, for
every architecture, in training forward and in layer-wise inference."""
import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from gnnsys.models import BlockGNN
from gnnsys.sparse_features import as_csr, csr_tensor
from gnnsys.testing import tiny_graph
from tests.models.test_block_gnn import _full_blocks


def _sparse_graph():
    graph = tiny_graph(num_nodes=60, num_features=24)
    keep = np.random.default_rng(0).random(graph.x.shape) < 0.15
    return dataclasses.replace(graph, x=as_csr(np.where(keep, graph.x, 0)))


def _model(arch):
    torch.manual_seed(0)
    return BlockGNN(arch, 24, 16, 3, layers=2, dropout=0.0)


@pytest.mark.parametrize("arch", ["sage", "gcn", "gat"])
def test_sparse_batch_equals_dense_batch(arch):
    graph = _sparse_graph()
    n_id, blocks = _full_blocks(graph, [3, 7, 11, 20], hops=2)
    rows = graph.x[n_id.numpy()]
    outputs, grads = [], []
    for x in (csr_tensor(rows), torch.from_numpy(rows.toarray())):
        model = _model(arch).set_degree(graph.degree())
        out = model(x, blocks, n_id)
        out.square().sum().backward()
        outputs.append(out.detach())
        grads.append(model.convs[0].lin_l.weight.grad if arch == "sage"
                     else model.convs[0].lin.weight.grad)
    assert torch.allclose(outputs[0], outputs[1], atol=1e-5)
    assert grads[0] is not None and torch.allclose(grads[0], grads[1], atol=1e-4)


@pytest.mark.parametrize("arch", ["sage", "gcn", "gat"])
def test_inference_over_csr_features_equals_dense(arch):
    graph = _sparse_graph()
    dense = dataclasses.replace(graph, x=graph.x.toarray())
    model = _model(arch).set_degree(graph.degree())
    got = model.inference(graph, batch_size=16)
    want = model.inference(dense, batch_size=16)
    assert sp.issparse(graph.x)
    assert torch.allclose(got, want, atol=1e-5)
