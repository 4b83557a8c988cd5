"""gnnsys.pyg: PyG's NeighborLoader contract, checked on a synthetic graph and on Cora."""
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torch_geometric.typing
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.nn import SAGEConv
from torch_geometric.nn.models import GraphSAGE

from gnnsys.interop.pyg import to_pyg
from gnnsys.pyg import FusedNeighborSampler, NeighborLoader
from gnnsys.testing import shared_data_dir, tiny_graph

FANOUTS = [4, 3]


@pytest.fixture(scope="module")
def data():
    """A symmetric graph without repeated edges, with varied degrees and isolated nodes."""
    return to_pyg(tiny_graph(num_nodes=300, avg_degree=8, num_features=6, isolated=3))


def in_degree(data):
    return torch.bincount(data.edge_index[1], minlength=data.num_nodes)


def check_batch(batch, data, fanouts, seeds):
    """Every PyG-contract property of one batch; `seeds` = global ids expected first."""
    n_id, (src, dst) = batch.n_id, batch.edge_index
    bs = batch.batch_size
    assert torch.equal(n_id[:bs], seeds), "seeds first, in order"
    assert len(torch.unique(n_id)) == len(n_id), "each node once"
    assert torch.equal(batch.x, data.x[n_id]) and torch.equal(batch.y, data.y[n_id])
    # every edge is an edge of the graph (source = neighbour, target = sampled node)
    edges = set(zip(data.edge_index[0].tolist(), data.edge_index[1].tolist()))
    assert all(e in edges for e in zip(n_id[src].tolist(), n_id[dst].tolist()))
    # layers: hop h's edges run from the nodes new at hop h - 1 to nodes known after hop h
    nodes, counts = batch.num_sampled_nodes, batch.num_sampled_edges
    assert nodes[0] == bs and len(nodes) == len(fanouts) + 1 and len(counts) == len(fanouts)
    assert sum(nodes) == len(n_id) and sum(counts) == src.numel()
    bounds, first_edge = np.cumsum([0] + list(nodes)), 0
    degree = in_degree(data)
    for hop, fanout in enumerate(fanouts):
        hop_src = src[first_edge:first_edge + counts[hop]]
        hop_dst = dst[first_edge:first_edge + counts[hop]]
        first_edge += counts[hop]
        lo, hi = bounds[hop], bounds[hop + 1]
        assert bool(((hop_dst >= lo) & (hop_dst < hi)).all()), f"hop {hop} targets"
        assert bool((hop_src < bounds[hop + 2]).all()), f"hop {hop} sources"
        new = torch.arange(bounds[hop + 1], bounds[hop + 2])
        assert bool(torch.isin(new, hop_src).all()), f"hop {hop}: new nodes are sources"
        got = torch.bincount(hop_dst - lo, minlength=hi - lo)
        want = degree[n_id[lo:hi]] if fanout < 0 else degree[n_id[lo:hi]].clamp(max=fanout)
        assert torch.equal(got, want), f"hop {hop}: min(degree, fanout) per target"
        pairs = hop_dst * len(n_id) + hop_src
        assert len(torch.unique(pairs)) == len(pairs), "without replacement"


def epoch(loader, seed=None):
    if seed is not None:
        torch.manual_seed(seed)
    return [(b.n_id.clone(), b.edge_index.clone()) for b in loader]


def same_epochs(a, b):
    return len(a) == len(b) and all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1])
                                    for x, y in zip(a, b))


def test_batches_keep_the_pyg_contract(data):
    loader = NeighborLoader(data, num_neighbors=FANOUTS, batch_size=32)
    assert len(loader) == -(-data.num_nodes // 32)
    for i, batch in enumerate(loader):
        ids = torch.arange(i * 32, min((i + 1) * 32, data.num_nodes))
        assert torch.equal(batch.input_id, ids)
        check_batch(batch, data, FANOUTS, ids)
        assert "e_id" not in batch              # no edge attributes, not asked for


def test_all_neighbours_and_three_hops(data):
    fanouts = [-1, 2, -1]
    for batch in NeighborLoader(data, num_neighbors=fanouts, batch_size=50):
        check_batch(batch, data, fanouts, batch.input_id)


def test_input_nodes_as_mask_and_as_index_give_the_same_batches(data):
    index = data.train_mask.nonzero().view(-1)
    by_mask = NeighborLoader(data, FANOUTS, input_nodes=data.train_mask, batch_size=40)
    by_index = NeighborLoader(data, FANOUTS, input_nodes=index, batch_size=40)
    a, b = epoch(by_mask, seed=3), epoch(by_index, seed=3)
    assert same_epochs(a, b) and len(a) == -(-len(index) // 40)
    for i, batch in enumerate(by_index):
        check_batch(batch, data, FANOUTS, index[i * 40:(i + 1) * 40])
        assert torch.equal(batch.input_id, torch.arange(i * 40, i * 40 + batch.batch_size))


def test_drop_last(data):
    index = torch.arange(100)
    loader = NeighborLoader(data, FANOUTS, input_nodes=index, batch_size=30, drop_last=True)
    sizes = [b.batch_size for b in loader]
    assert len(loader) == 3 and sizes == [30, 30, 30]
    keep = NeighborLoader(data, FANOUTS, input_nodes=index, batch_size=30)
    assert [b.batch_size for b in keep] == [30, 30, 30, 10]


def test_shuffle_is_reproducible_with_a_seed_and_background_threads_change_nothing(data):
    inline = NeighborLoader(data, FANOUTS, batch_size=64, shuffle=True)
    threaded = NeighborLoader(data, FANOUTS, batch_size=64, shuffle=True, num_workers=2)
    first = epoch(inline, seed=7)
    assert same_epochs(first, epoch(inline, seed=7))
    assert same_epochs(first, epoch(threaded, seed=7))
    assert not same_epochs(first, epoch(inline, seed=8))
    torch.manual_seed(7)
    seen = torch.cat([b.input_id for b in inline])
    assert not torch.equal(seen, torch.arange(data.num_nodes))          # shuffled
    assert torch.equal(seen.sort().values, torch.arange(data.num_nodes))  # each once
    for batch in threaded:
        check_batch(batch, data, FANOUTS, batch.input_id)


def test_e_id_and_edge_attributes_follow_the_original_edges(data):
    weighted = data.clone()
    weighted.edge_attr = torch.randn(data.num_edges, 2)
    # PyG sorts edges by target; shuffle the columns so its permutation is not identity
    order = torch.randperm(data.num_edges, generator=torch.Generator().manual_seed(0))
    weighted.edge_index, weighted.edge_attr = data.edge_index[:, order], weighted.edge_attr[order]
    for batch in NeighborLoader(weighted, FANOUTS, batch_size=64):
        assert torch.equal(weighted.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
        assert torch.equal(batch.edge_attr, weighted.edge_attr[batch.e_id])
    plain = next(iter(NeighborLoader(data, FANOUTS, batch_size=64, return_e_id=True)))
    assert torch.equal(data.edge_index[:, plain.e_id], plain.n_id[plain.edge_index])


def test_trim_to_layer_gives_the_untrimmed_seed_outputs(data):
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=3).eval()
    for batch in NeighborLoader(data, FANOUTS, batch_size=64):
        full = model(batch.x, batch.edge_index)[:batch.batch_size]
        trimmed = model(batch.x, batch.edge_index,
                        num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                        num_sampled_edges_per_hop=batch.num_sampled_edges)
        assert torch.allclose(full, trimmed[:batch.batch_size], atol=1e-5)


def test_pyg_layerwise_inference_accepts_the_loader_and_is_exact(data):
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=3).eval()
    loader = NeighborLoader(data, [-1], batch_size=64)
    with torch.no_grad():
        assert torch.allclose(model.inference(loader), model(data.x, data.edge_index),
                              atol=1e-5)


def test_sampler_works_inside_pyg_node_loader(data):
    sampler = FusedNeighborSampler(data, FANOUTS)
    loader = NodeLoader(data, node_sampler=sampler, input_nodes=data.val_mask, batch_size=16)
    seeds = data.val_mask.nonzero().view(-1)
    for i, batch in enumerate(loader):
        check_batch(batch, data, FANOUTS, seeds[i * 16:(i + 1) * 16])


@pytest.mark.parametrize("option, named", [
    ({"replace": True}, "replace=True"), ({"disjoint": True}, "disjoint=True"),
    ({"time_attr": "time"}, "temporal"), ({"weight_attr": "w"}, "weighted"),
    ({"subgraph_type": "induced"}, "subgraph_type='induced'"),
    ({"directed": False}, "directed=False"),
    ({"num_neighbors": {("a", "to", "a"): [2]}}, "per-edge-type")])
def test_unsupported_options_raise_one_line_naming_pygs_loader(data, option, named):
    kwargs = {"num_neighbors": FANOUTS, **option}
    with pytest.raises(ValueError) as err:
        NeighborLoader(data, **kwargs)
    message = str(err.value)
    assert named in message and "torch_geometric.loader.NeighborLoader" in message
    assert "\n" not in message


@pytest.mark.skipif(not (torch_geometric.typing.WITH_PYG_LIB
                         or torch_geometric.typing.WITH_TORCH_SPARSE),
                    reason="PyG's own NeighborLoader needs pyg-lib or torch-sparse, "
                           "neither installable here")
def test_layer_sizes_match_pygs_own_loader(data):
    from torch_geometric.loader import NeighborLoader as PygLoader
    fanouts = [-1, -1]          # all neighbours: both loaders must give the same layers
    ours = NeighborLoader(data, fanouts, batch_size=32)
    theirs = PygLoader(data, num_neighbors=fanouts, batch_size=32)
    for a, b in zip(ours, theirs):
        assert a.num_sampled_nodes == list(b.num_sampled_nodes)
        assert a.num_sampled_edges == list(b.num_sampled_edges)
        assert set(a.n_id.tolist()) == set(b.n_id.tolist())


def test_example_runs_on_a_synthetic_graph(repo_root):
    result = subprocess.run(
        [sys.executable, str(repo_root / "examples" / "pyg_neighbor_loader.py"),
         "--nodes", "400", "--epochs", "2"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "test accuracy" in result.stdout


# ---------------------------------------------------------------- Cora accuracy
SEEDS = (0, 1, 2)


def pyg_sage_test_accuracy(data, seed):
    """PyG SAGEConv trained through gnnsys.pyg.NeighborLoader the way gnnsys's trainer
    trains (same layers, Adam, epochs); test accuracy at the best validation epoch."""
    torch.manual_seed(seed)
    conv1, conv2 = SAGEConv(data.num_features, 64), SAGEConv(64, int(data.y.max()) + 1)
    model = torch.nn.ModuleList([conv1, conv2])
    forward = lambda x, edge_index: conv2(
        F.dropout(F.relu(conv1(x, edge_index)), 0.5, model.training), edge_index)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = NeighborLoader(data, [10, 10], input_nodes=data.train_mask, batch_size=140,
                            shuffle=True)
    best_val, test = -1.0, 0.0
    for _ in range(50):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = forward(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            pred = forward(data.x, data.edge_index).argmax(-1)
        accuracy = lambda mask: float((pred[mask] == data.y[mask]).float().mean())
        if accuracy(data.val_mask) > best_val:
            best_val, test = accuracy(data.val_mask), accuracy(data.test_mask)
    return test


@pytest.mark.skipif(shared_data_dir() is None, reason="needs ../shared/data (Cora)")
def test_cora_accuracy_matches_gnnsys_trainer(tmp_path):
    from gnnsys.config import from_dict
    from gnnsys.datasets import load_dataset
    from gnnsys.training import fit

    data = to_pyg(load_dataset("cora"))
    ours = np.mean([pyg_sage_test_accuracy(data, seed) for seed in SEEDS])
    trainer = np.mean([fit(from_dict({
        "dataset": {"name": "cora"},
        "model": {"arch": "sage", "hidden": 64, "layers": 2, "dropout": 0.5},
        "sampler": {"fanouts": [10, 10], "batch_size": 140},
        "train": {"epochs": 50, "lr": 0.01, "seed": seed, "progress": False},
        "run": {"dir": str(tmp_path / f"seed{seed}")}}))["test_acc"] for seed in SEEDS])
    assert ours > 0.7 and abs(ours - trainer) <= 0.01, (ours, trainer)


def test_pyg_data_without_features_still_samples():
    data = Data(edge_index=torch.tensor([[1, 2, 0], [0, 0, 1]]), num_nodes=3)
    batch = next(iter(NeighborLoader(data, [2], batch_size=1)))
    assert batch.n_id.tolist() == [0, 1, 2] or batch.n_id.tolist() == [0, 2, 1]
    assert batch.num_sampled_nodes == [1, 2] and batch.num_sampled_edges == [2]


def test_partitions_as_pyg_feature_and_graph_stores(tmp_path):
    from gnnsys.pyg import NeighborLoader, PartitionFeatureStore, partition_stores
    from gnnsys.testing import tiny_graph
    from partition.build import build_partitions
    from partition.format import PartitionSet
    g = tiny_graph(num_nodes=300, num_features=6, seed=4)
    build_partitions(g, tmp_path / "parts", method="random", num_parts=3, fanouts=[3, 3],
                     batch_size=16)
    parts = PartitionSet(tmp_path / "parts")
    x_all = np.concatenate([parts.array(k, "x") for k in range(3)])
    features, graph = partition_stores(tmp_path / "parts")
    ids = torch.tensor([299, 0, 150, 7, 7])
    got = features.get_tensor(group_name=None, attr_name="x", index=ids)
    assert torch.equal(got, torch.from_numpy(x_all[ids.numpy()]))
    assert features.get_tensor_size(attr_name="x") == (300, 6)
    with pytest.raises(ValueError, match="read-only"):
        features.put_tensor(torch.zeros(300, 6), group_name=None, attr_name="x", index=None)
    indptr, indices = parts.full_csr()
    train = torch.from_numpy(parts.global_split("train_idx"))
    loader = NeighborLoader((features, graph), [3, 2], input_nodes=train, batch_size=32)
    batch = next(iter(loader))
    assert torch.equal(batch.x, torch.from_numpy(x_all[batch.n_id.numpy()]))
    assert torch.equal(batch.n_id[:batch.batch_size], train[:batch.batch_size])
    edges = set(zip(np.asarray(indices).tolist(),
                    np.repeat(np.arange(300), np.diff(indptr)).tolist()))
    src, dst = batch.n_id[batch.edge_index]
    assert all((int(a), int(b)) in edges for a, b in zip(src, dst))
    assert isinstance(features, PartitionFeatureStore)
