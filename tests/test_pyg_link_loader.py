"""gnnsys.pyg.LinkNeighborLoader: PyG's LinkNeighborLoader contract over gnnsys's sampler
(edge_label_index / edge_label with binary negatives, triplet indices), and a PyG link-
prediction loop written for PyG's loader training on it unchanged but for the import."""
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn.models import GraphSAGE
from torch_geometric.sampler import NegativeSampling

from gnnsys.interop.pyg import to_pyg
from gnnsys.metrics import roc_auc
from gnnsys.pyg import LinkNeighborLoader
from gnnsys.testing import tiny_graph


@pytest.fixture(scope="module")
def data():
    return to_pyg(tiny_graph(num_nodes=300, avg_degree=8, num_features=6, isolated=3))


def edge_set(data):
    return set(zip(data.edge_index[0].tolist(), data.edge_index[1].tolist()))


def test_binary_batches_carry_the_positives_then_as_many_negatives(data):
    positives = data.edge_index[:, :200]
    loader = LinkNeighborLoader(data, [4, 3], edge_label_index=positives,
                                neg_sampling_ratio=1.0, batch_size=50, shuffle=True)
    wanted, edges, seen = set(zip(*positives.tolist())), edge_set(data), 0
    for batch in loader:
        label_index = batch.n_id[batch.edge_label_index]
        assert label_index.shape == (2, 100)
        assert torch.equal(batch.edge_label, torch.cat([torch.ones(50), torch.zeros(50)]))
        assert set(zip(*label_index[:, :50].tolist())) <= wanted
        src, dst = batch.n_id[batch.edge_index]
        assert set(zip(src.tolist(), dst.tolist())) <= edges     # sampled edges are real
        assert torch.equal(batch.x, data.x[batch.n_id])
        seen += 50
    assert seen == 200 and len(loader) == 4


def test_triplet_batches_index_a_source_its_destination_and_its_negatives(data):
    positives = data.edge_index[:, :64]
    loader = LinkNeighborLoader(data, [4, 3], edge_label_index=positives, batch_size=16,
                                neg_sampling=NegativeSampling("triplet", amount=3))
    batch = next(iter(loader))
    assert batch.src_index.shape == (16,) and batch.dst_neg_index.shape == (16, 3)
    pairs = set(zip(*positives.tolist()))
    got = zip(batch.n_id[batch.src_index].tolist(), batch.n_id[batch.dst_pos_index].tolist())
    assert set(got) <= pairs


def test_a_pyg_link_prediction_loop_trains_on_it(data):
    """The shape of PyG's link-prediction examples: GraphSAGE embeddings, a dot product
    of edge_label_index's ends, BCE against edge_label; held-out edges scored after."""
    torch.manual_seed(0)
    perm = torch.randperm(data.edge_index.shape[1])
    held, train = data.edge_index[:, perm[:300]], data.edge_index[:, perm[300:]]
    train_data = data.clone()
    train_data.edge_index = train
    loader = LinkNeighborLoader(train_data, [5, 5], edge_label_index=train,
                                neg_sampling_ratio=1.0, batch_size=128, shuffle=True)
    model = GraphSAGE(data.num_features, 32, num_layers=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(15):
        for batch in loader:
            h = model(batch.x, batch.edge_index)
            score = (h[batch.edge_label_index[0]] * h[batch.edge_label_index[1]]).sum(-1)
            loss = F.binary_cross_entropy_with_logits(score, batch.edge_label)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        h = model(data.x, train)
        fake = torch.randint(0, data.num_nodes, held.shape)
        scores = torch.cat([(h[held[0]] * h[held[1]]).sum(-1), (h[fake[0]] * h[fake[1]]).sum(-1)])
    labels = torch.cat([torch.ones(300), torch.zeros(300)])
    assert roc_auc(scores.numpy(), labels.numpy()) > 0.75


def test_what_it_cannot_sample_is_refused_naming_pygs_loader(data):
    with pytest.raises(ValueError, match="disjoint=True.*torch_geometric.loader"):
        LinkNeighborLoader(data, [4], edge_label_index=data.edge_index, disjoint=True)
