"""The block model against a plain full-graph PyG model: with all neighbours sampled,
minibatch forward and layer-wise inference must equal the full-graph computation."""
import numpy as np
import pytest
import torch

from gnnsys.minibatch.batch import Block
from gnnsys.models import BlockGNN
from gnnsys.testing import tiny_graph


def _full_blocks(graph, seeds, hops):
    """Reference: all-neighbour expansion with seeds first, as the sampler lays it out."""
    n_id = list(seeds)
    pos = {v: i for i, v in enumerate(n_id)}
    blocks, frontier_size = [], len(n_id)
    for _ in range(hops):
        src, dst = [], []
        for t in range(frontier_size):
            v = n_id[t]
            for u in graph.indices[graph.indptr[v]:graph.indptr[v + 1]]:
                if int(u) not in pos:
                    pos[int(u)] = len(n_id)
                    n_id.append(int(u))
                src.append(pos[int(u)])
                dst.append(t)
        blocks.append(Block(torch.tensor([src, dst], dtype=torch.long), len(n_id), frontier_size))
        frontier_size = len(n_id)
    return torch.tensor(n_id), list(reversed(blocks))


def _full_graph_forward(model, graph):
    """Plain PyG over the whole graph; GCN uses PyG's own symmetric normalisation."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    x = torch.from_numpy(np.asarray(graph.x))
    edge_index = torch.from_numpy(graph.edge_index())
    for i, conv in enumerate(model.convs):
        if model.arch == "gcn":
            ei, w = gcn_norm(edge_index, None, graph.num_nodes, add_self_loops=True)
            x = conv(x, ei, w)
        else:
            x = conv((x, x), edge_index)
        if i < len(model.convs) - 1:
            x = torch.relu(x)
    return x


@pytest.mark.parametrize("arch", ["sage", "gcn", "gat"])
def test_block_forward_equals_full_graph(arch):
    torch.manual_seed(0)
    g = tiny_graph(num_nodes=60)
    model = BlockGNN(arch, g.num_features, 16, g.num_classes, layers=2, dropout=0.0).eval()
    model.set_degree(g.degree())
    seeds = [3, 7, 11, 59]
    n_id, blocks = _full_blocks(g, seeds, 2)
    out = model(torch.from_numpy(g.x)[n_id], blocks, n_id)
    ref = _full_graph_forward(model, g)[seeds]
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ["sage", "gcn", "gat"])
def test_layerwise_inference_equals_minibatch_with_all_neighbours(arch):
    torch.manual_seed(1)
    g = tiny_graph(num_nodes=80)
    model = BlockGNN(arch, g.num_features, 16, g.num_classes, layers=2, dropout=0.3)
    model.set_degree(g.degree())
    full = model.inference(g, batch_size=17)        # odd batch size crosses boundaries
    model.eval()
    seeds = list(range(0, 80, 9))
    n_id, blocks = _full_blocks(g, seeds, 2)
    out = model(torch.from_numpy(g.x)[n_id], blocks, n_id)
    torch.testing.assert_close(full[seeds], out, atol=1e-5, rtol=1e-4)


def test_wrong_block_count_is_an_error():
    model = BlockGNN("sage", 4, 8, 2, layers=2)
    with pytest.raises(ValueError, match="1 blocks for a 2-layer"):
        model(torch.zeros(3, 4), [Block(torch.zeros(2, 0, dtype=torch.long), 3, 1)])


def test_gat_heads_must_divide_hidden():
    with pytest.raises(ValueError, match="divisible"):
        BlockGNN("gat", 4, 10, 2, layers=2, heads=4)


def test_gcn_without_degrees_is_a_clear_error():
    model = BlockGNN("gcn", 4, 8, 2, layers=1)
    with pytest.raises(ValueError, match="set_degree"):
        model(torch.zeros(3, 4), [Block(torch.tensor([[1], [0]]), 3, 1)])


def test_residual_adds_the_hidden_input_in_both_forward_paths():
    torch.manual_seed(2)
    g = tiny_graph(num_nodes=70)
    model = BlockGNN("sage", g.num_features, 16, g.num_classes, layers=3, dropout=0.0,
                     residual=True).eval()
    # Reference: plain PyG over the whole graph, adding the input of the hidden->hidden layer.
    x = torch.from_numpy(np.asarray(g.x))
    edge_index = torch.from_numpy(g.edge_index())
    h1 = torch.relu(model.convs[0]((x, x), edge_index))
    h2 = torch.relu(model.convs[1]((h1, h1), edge_index)) + h1
    ref = model.convs[2]((h2, h2), edge_index)
    seeds = [0, 5, 33, 69]
    n_id, blocks = _full_blocks(g, seeds, 3)
    torch.testing.assert_close(model(x[n_id], blocks, n_id), ref[seeds], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(model.inference(g, batch_size=13), ref, atol=1e-5, rtol=1e-4)
    plain = BlockGNN("sage", g.num_features, 16, g.num_classes, layers=3, dropout=0.0)
    plain.load_state_dict(model.state_dict())
    assert not torch.allclose(plain.eval().inference(g), ref, atol=1e-3)   # it does add


@pytest.mark.parametrize("in_dim, out_dim", [(6, 9), (9, 6)])     # sum first / project first
def test_gcn_as_csr_equals_pygs_message_passing(in_dim, out_dim):
    """The CSR GCN layer (edges in any order, repeated edges, a target without neighbours,
    self loops) equals PyG's GCNConv over the same weighted edges, forward and gradient."""
    from torch_geometric.nn import GCNConv
    from gnnsys.models.gcn import _gcn_csr
    torch.manual_seed(0)
    conv = GCNConv(in_dim, out_dim, add_self_loops=False, normalize=False)
    torch.nn.init.normal_(conv.bias)
    src = torch.tensor([3, 1, 4, 4, 0, 6, 2, 5, 1])
    dst = torch.tensor([1, 0, 2, 2, 0, 1, 3, 2, 0])          # target 4: no neighbours
    weight, loop_weight = torch.rand(9), torch.rand(5)
    x = torch.randn(7, in_dim, requires_grad=True)
    got = _gcn_csr(conv, x, torch.stack([src, dst]), weight, loop_weight)
    (grad_got,) = torch.autograd.grad(got.square().sum(), x)
    loops = torch.arange(5)
    want = conv(x, torch.stack([torch.cat([src, loops]), torch.cat([dst, loops])]),
                torch.cat([weight, loop_weight]))[:5]
    (grad_want,) = torch.autograd.grad(want.square().sum(), x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad_got, grad_want)


def test_sage_mean_as_csr_equals_pygs_message_passing():
    """The CSR mean (edges in any order, repeated edges, a target without neighbours)
    equals PyG's SAGEConv, forward and gradient."""
    from torch_geometric.nn import SAGEConv
    from gnnsys.models.sage import _sage_mean_csr
    torch.manual_seed(0)
    conv = SAGEConv(6, 5)
    src = torch.tensor([3, 1, 4, 4, 0, 6, 2, 5, 1])
    dst = torch.tensor([1, 0, 2, 2, 0, 1, 3, 2, 0])          # target 4: no neighbours
    edge_index = torch.stack([src, dst])
    x = torch.randn(7, 6, requires_grad=True)
    got = _sage_mean_csr(conv, x, edge_index, 5)
    (grad_got,) = torch.autograd.grad(got.square().sum(), x)
    want = conv((x, x[:5]), edge_index)
    (grad_want,) = torch.autograd.grad(want.square().sum(), x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(grad_got, grad_want)
