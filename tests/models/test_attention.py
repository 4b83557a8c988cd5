"""GAT's weighted sum over CSR rows (gnnsys/models/attention.py) against PyG's GATConv:
the same output and the same gradient of every input and parameter; its kernels against
plain loops."""
import numpy as np
import pytest
import torch
from torch_geometric.nn import GATConv

from gnnsys.models.attention import _by_source, _WeightedSum, gat_csr
from gnnsys.models.block_gnn import BlockGNN
from gnnsys.models.gat import gat_rows


def block(num_src=40, num_dst=15, num_edges=120, seed=0):
    """Edges in any order with repeats, self loops (src == dst) and a target (14) without
    any neighbour."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (num_edges,), generator=g)
    dst = torch.randint(0, num_dst - 1, (num_edges,), generator=g)
    src[:6] = dst[:6]
    src[6:9] = src[9]
    dst[6:9] = dst[9]
    return torch.stack([src, dst]), num_src, num_dst


def with_random_attention(conv):
    torch.manual_seed(1)
    with torch.no_grad():        # PyG's init leaves the bias at zero: give every term weight
        for p in conv.parameters():
            p.normal_(0, 0.5)
    return conv


@pytest.mark.parametrize("concat", [True, False])
def test_gat_csr_equals_pygs_gatconv(concat):
    edge_index, num_src, num_dst = block()
    conv = with_random_attention(GATConv(12, 6, heads=3, concat=concat, add_self_loops=True))
    x = torch.randn(num_src, 12, requires_grad=True)
    grad = torch.randn(num_dst, 18 if concat else 6)
    results = []
    for forward in (lambda: conv((x, x[:num_dst]), edge_index),
                    lambda: gat_csr(conv, x, *gat_rows(edge_index, num_dst), True)):
        x.grad = None
        conv.zero_grad()
        out = forward()
        out.backward(grad)
        results.append([out.detach(), x.grad.clone()] + [p.grad.clone() for p in conv.parameters()])
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_gat_rows_drop_sampled_self_loops_and_add_one_per_target():
    edge_index = torch.tensor([[2, 1, 0, 1, 3], [1, 0, 0, 2, 2]])   # (0 -> 0) is a loop
    indptr, columns = gat_rows(edge_index, 3)
    assert indptr.tolist() == [0, 2, 4, 7]
    assert columns.tolist() == [1, 0, 2, 1, 1, 3, 2]


def test_weighted_sum_kernels_equal_plain_loops():
    edge_index, num_src, num_dst = block(num_edges=300, seed=3)
    indptr, columns = gat_rows(edge_index, num_dst)
    alpha = torch.rand(columns.numel(), 2, requires_grad=True)
    values = torch.randn(num_src, 2, 5, requires_grad=True)
    out = _WeightedSum.apply(indptr, columns, alpha, values)
    grad = torch.randn_like(out)
    out.backward(grad)
    rows = torch.repeat_interleave(torch.arange(num_dst), torch.diff(indptr))
    a, v = alpha.detach().double(), values.detach().double()
    want = torch.zeros(num_dst, 2, 5, dtype=torch.float64)
    want.index_add_(0, rows, a[:, :, None] * v[columns])
    close = {"rtol": 1e-4, "atol": 1e-5}                 # float32 sums against float64
    torch.testing.assert_close(out.double(), want, **close)
    torch.testing.assert_close(alpha.grad.double(),
                               (grad.double()[rows] * v[columns]).sum(-1), **close)
    want_values = torch.zeros_like(v).index_add_(0, columns, a[:, :, None] * grad.double()[rows])
    torch.testing.assert_close(values.grad.double(), want_values, **close)
    source_indptr, entry, target = _by_source(indptr.numpy(), columns.numpy(), num_src)
    for s in range(num_src):
        listed = entry[source_indptr[s]:source_indptr[s + 1]]
        assert sorted(listed.tolist()) == torch.nonzero(columns == s).flatten().tolist()
        np.testing.assert_array_equal(target[source_indptr[s]:source_indptr[s + 1]],
                                      rows[listed].numpy())


def test_block_gnn_gat_on_the_cpu_takes_the_csr_path_and_equals_pyg():
    """The model's layer routes GAT through gat_csr on the CPU: logits and gradients as
    with PyG's message passing (the route a GPU keeps)."""
    edge_index, num_src, num_dst = block()
    torch.manual_seed(0)
    model = BlockGNN("gat", 12, 8, 4, 1, heads=2, dropout=0.0).eval()
    x = torch.randn(num_src, 12)
    conv = model.convs[0]
    got = model.layer(0, x, edge_index, num_dst)
    want = conv((x, x[:num_dst]), edge_index)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert model.aggregates_as_csr(False, x.device)
    assert not model.aggregates_as_csr(True, x.device)


def test_gat_rows_number_targets_from_first_target():
    """Layer-wise inference: sources by global id, target i is node first_target + i."""
    edge_index = torch.tensor([[12, 11, 10, 3], [1, 0, 0, 1]])     # (10 -> target 0) loops
    indptr, columns = gat_rows(edge_index, 2, first_target=10)
    assert indptr.tolist() == [0, 2, 5]
    assert columns.tolist() == [11, 10, 12, 3, 11]
