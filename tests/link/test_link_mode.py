"""Link prediction on static graphs (mode `link`): trains above chance, keeps held-out
edges out of every training batch's message passing, and refuses bad settings in a line."""
import numpy as np
import pytest
import torch

import gnnsys
from gnnsys.config import load_config
from gnnsys.errors import ConfigError, DatasetError
from gnnsys.link.data import LinkData
from gnnsys.link.loader import EdgeLoader, negative_destinations
from gnnsys.minibatch.loader import fused_sampler
from gnnsys.models.decoders import DotDecoder, MLPDecoder
from gnnsys.testing import tiny_graph


def settings(tmp_path, **link):
    return {"mode": "link",
            "model": {"arch": "sage", "hidden": 16, "layers": 2, "dropout": 0.0},
            "sampler": {"fanouts": [5, 5], "batch_size": 64, "threads": 1},
            "train": {"epochs": 8, "lr": 0.01, "progress": False},
            "link": {"val": 0.1, "test": 0.2, **link},
            "run": {"dir": str(tmp_path / "run")}}


def keys(pairs, n):
    """Undirected pair keys, either orientation."""
    a, b = np.minimum(pairs[0], pairs[1]), np.maximum(pairs[0], pairs[1])
    return a * n + b


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_link_mode_trains_above_chance(tmp_path, decoder):
    graph = tiny_graph(num_nodes=300, avg_degree=8, num_features=8)
    result = gnnsys.Trainer(settings(tmp_path, decoder=decoder), data=graph).fit()
    assert result["test_auc"] > 0.7                     # chance: 0.5
    for name in ("test_ap", "test_mrr", "test_hits20", "test_hits50", "test_hits100"):
        assert 0 <= result[name] <= 1
    assert result["test_mrr"] > 2 / 101                  # chance: ~ln(101)/101


@pytest.mark.parametrize("arch", ["gat", "sage"])
def test_no_held_out_edge_reaches_a_training_batch(tmp_path, arch):
    """Every sampled edge of every training batch (and the graph the sampler reads, which
    also feeds the first-layer aggregate SAGE leaves to the sampler) is a training edge."""
    graph = tiny_graph(num_nodes=300, avg_degree=8, num_features=8)
    config = load_config(overrides=[f"model.arch={arch}", "mode=link", "model.layers=2",
                                    "sampler.fanouts=[-1,-1]", "sampler.batch_size=64",
                                    "link.val=0.1", "link.test=0.2"])
    data = LinkData(config, graph)
    n = graph.num_nodes
    held = np.concatenate([keys(data.held_out(s)[0], n) for s in ("val", "test")])
    assert len(held) > 100
    sampler_graph = np.stack([np.repeat(np.arange(n), data.graph.degree()),
                              data.graph.indices])
    assert not np.isin(keys(sampler_graph, n), held).any()
    train = keys(data.train_pairs, n)
    assert not np.isin(train, held).any()
    sampler = fused_sampler(config, data.graph.indptr, data.graph.indices, data.graph.x,
                            threads=1)
    loader = EdgeLoader(sampler, data.train_pairs, data.graph.degree(), 64, prefetch=0)
    seen = 0
    for lb in loader.epoch(0):
        n_id = lb.batch.n_id.numpy()
        for block in lb.batch.blocks:
            src, dst = block.edge_index.numpy()
            edges = np.stack([n_id[src], n_id[dst]])
            assert not np.isin(keys(edges, n), held).any()
            seen += edges.shape[1]
        assert np.isin(keys(n_id[lb.pos.numpy()], n), train).all()
    assert seen > 1000


def test_two_workers_take_the_single_process_step(tmp_path):
    """Every rank draws the global batch and its negatives and takes its slice; each
    rank's loss is its slice's sum over the global batch size and gradients add up: with
    whole neighbourhoods and no dropout two workers train the one-process model, up to
    summation order, and score the held-out pairs in the same order."""
    graph = tiny_graph(num_nodes=200, avg_degree=6, num_features=8)
    results = []
    for workers in (1, 2):
        cfg = settings(tmp_path / str(workers))
        cfg["sampler"].update(fanouts=[-1, -1], batch_size=100)
        cfg["train"]["epochs"] = 3
        cfg["cluster"] = {"workers": workers, "launcher": "threads"}
        results.append(gnnsys.Trainer(cfg, data=graph).fit())
    one, two = results
    for key in ("final_loss", "val_auc", "test_auc", "test_mrr", "test_hits20"):
        assert two[key] == pytest.approx(one[key], abs=2e-4), key
    for a, b in zip(one.model.parameters(), two.model.parameters()):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-3)


def test_negatives_are_seeded_and_degree_ones_avoid_isolated_nodes():
    degree = np.array([0, 3, 0, 1, 5])
    rng = lambda: np.random.default_rng(7)
    drawn = negative_destinations("degree", 5000, degree, rng())
    assert set(np.unique(drawn)) == {1, 3, 4}
    assert abs(np.mean(drawn == 4) - 5 / 9) < 0.03
    np.testing.assert_array_equal(drawn, negative_destinations("degree", 5000, degree, rng()))
    assert set(np.unique(negative_destinations("uniform", 5000, degree, rng()))) == set(range(5))


def test_decoders_score_a_pair_the_same_either_way_round():
    torch.manual_seed(0)
    a, b = torch.randn(10, 8), torch.randn(10, 8)
    for decoder in (DotDecoder(8), MLPDecoder(8).eval()):
        torch.testing.assert_close(decoder(a, b), decoder(b, a))
    torch.testing.assert_close(DotDecoder(8)(a, b), (a * b).sum(1))
    for decoder in (DotDecoder(8), MLPDecoder(8).eval()):     # rows against every node
        every = decoder.score_all(a[:3], b)
        assert every.shape == (3, 10)
        for i in range(3):
            torch.testing.assert_close(every[i], decoder(a[i].expand_as(b), b))


@pytest.mark.parametrize("overrides, words", [
    (["link.val=0.5", "link.test=0.5"], "leaving no training edge"),
    (["link.test=-0.1"], "link.test' must be in [0, 1)"),
    (["link.decoder=bilinear"], "link.decoder' is 'bilinear'; allowed: dot, mlp"),
    (["link.metric=acc"], "allowed: auc, ap, mrr"),
    (["model.layers=3"], "'sampler.fanouts' has 2 hops"),
])
def test_bad_link_settings_are_one_line(overrides, words):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["mode=link", *overrides])
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_graph_without_edges_is_refused():
    graph = tiny_graph(num_nodes=50)
    graph.indptr[:] = 0
    graph.indices = graph.indices[:0]
    with pytest.raises(DatasetError, match="no edge"):
        LinkData(load_config(overrides=["mode=link"]), graph)


def test_a_link_run_scores_pairs_ranks_partners_and_embeds_nodes(tmp_path):
    """What a finished run answers agrees with itself: a pair's score is the dot product of
    its nodes' embeddings (decoder dot), top-k partners are the best-scored nodes that are
    neither the node nor a neighbour of it in the whole dataset; bad asks are one line."""
    from gnnsys.errors import PredictError
    graph = tiny_graph(num_nodes=120, avg_degree=6, num_features=8)
    cfg = settings(tmp_path)
    cfg["train"]["epochs"] = 2
    result = gnnsys.Trainer(cfg, data=graph).fit()
    emb = result.embeddings()["embedding"]
    assert emb.shape == (120, 16)
    pairs = {"src": np.array([3, 7, 7]), "dst": np.array([9, 7, 100])}
    got = result.predict(pairs=pairs)
    np.testing.assert_allclose(got["score"], (emb[pairs["src"]] * emb[pairs["dst"]]).sum(1),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["prob"], 1 / (1 + np.exp(-got["score"].astype(float))),
                               rtol=1e-6)
    top = result.topk([5, 0], k=4)
    for node, partners, scores in zip(top["node_id"], top["partner"], top["score"]):
        linked = set(graph.indices[graph.indptr[node]:graph.indptr[node + 1]].tolist())
        allowed = np.array([v for v in range(120) if v != node and v not in linked])
        best = allowed[np.argsort(-(emb[allowed] @ emb[node]), kind="stable")[:4]]
        assert set(partners.tolist()) == set(best.tolist())
        assert np.all(np.diff(scores) <= 0)
    for ask, words in ((lambda: result.topk([5], k=0), "top 0: give 1 <= k"),
                       (lambda: result.predict(pairs={"src": [1], "dst": [500]}),
                        "dst 500 is not in the run's dataset"),
                       (lambda: result.predict("all"), "a link run scores node pairs")):
        with pytest.raises(PredictError, match=words):
            ask()


def link_bundle(path, graph, drop=()):
    """`graph` saved as a link bundle with no labels or features: its edges split 80/10/10
    by random_edge_split, the training graph as edge_index, the held-out pairs shipped."""
    from gnnsys.datasets.splits import random_edge_split
    split = random_edge_split(graph.indptr, graph.indices, graph.num_nodes, 0.1, 0.1, seed=3)
    rows = np.repeat(np.arange(graph.num_nodes), np.diff(split.indptr))
    arrays = {"edge_index": np.stack([rows, split.indices]), "num_nodes": graph.num_nodes,
              "val_pos": split.val_pos, "test_pos": split.test_pos,
              "val_neg": split.val_neg, "test_neg": split.test_neg}
    np.savez(path, **{k: v for k, v in arrays.items() if k not in drop})
    return split


def test_a_link_bundle_keeps_its_split_and_trains_on_learned_node_vectors(tmp_path):
    """A bundle that ships val/test pairs (as ogbl_ddi) is trained on that split (its
    edge_index the training graph; link.val / link.test unused); without features,
    link.node_embedding gives each node a learned input row; top-k leaves out held-out
    edges too."""
    graph = tiny_graph(num_nodes=200, avg_degree=8, num_features=8)
    split = link_bundle(tmp_path / "links.npz", graph)
    cfg = settings(tmp_path, node_embedding=16)
    cfg["dataset"] = {"path": str(tmp_path / "links.npz")}
    cfg["train"]["epochs"] = 20
    config = load_config(overrides=[f"{k}={v}" for k, v in (
        ("mode", "link"), ("dataset.path", tmp_path / "links.npz"))])
    data = LinkData(config)
    assert data.shipped_split
    np.testing.assert_array_equal(data.graph.indices, split.indices)
    np.testing.assert_array_equal(data.held_out("test")[0], split.test_pos)
    known_indptr, known = data.known_edges
    u, v = split.val_pos[:, 0]
    assert v in known[known_indptr[u]:known_indptr[u + 1]]
    result = gnnsys.Trainer(cfg).fit()
    assert result["test_auc"] > 0.65
    assert result.model.node_vectors.weight.shape == (200, 16)


def test_a_link_bundle_with_part_of_a_split_is_one_line(tmp_path):
    link_bundle(tmp_path / "links.npz", tiny_graph(num_nodes=50), drop=("test_neg",))
    with pytest.raises(DatasetError) as err:
        LinkData(load_config(overrides=["mode=link", f"dataset.path={tmp_path}/links.npz"]))
    assert "ships 'val_pos' but not 'test_neg'" in str(err.value)
    assert "\n" not in str(err.value)


def test_an_epoch_of_epoch_pairs_draws_that_many_distinct_positives_afresh():
    pairs = np.stack([np.arange(100), np.arange(100) + 100])
    loader = EdgeLoader(None, pairs, np.ones(200), batch_size=7, prefetch=0, epoch_pairs=30)
    first, second = loader.epoch_order(0), loader.epoch_order(1)
    assert len(loader) == 5 and len(first) == len(set(first)) == 30
    assert set(first) != set(second)
    np.testing.assert_array_equal(first, loader.epoch_order(0))
    assert len(EdgeLoader(None, pairs, np.ones(200), 7, prefetch=0)) == 15    # all 100


def test_each_rank_and_step_draws_its_own_dropout_and_leaves_torchs_generator_be():
    """K workers seeded alike would drop the same positions of their slices together: a
    step's forward draws from (seed, epoch, step, rank); torch's state outside is kept."""
    from types import SimpleNamespace

    from gnnsys.link.mode import LinkMode

    def draws(rank, epoch=0, step=0):
        mode = SimpleNamespace(config=SimpleNamespace(train=SimpleNamespace(seed=0)),
                               ctx=SimpleNamespace(rank=rank, device=torch.device("cpu")))
        with LinkMode._dropout_stream(mode, epoch, step):
            return torch.rand(4)
    torch.manual_seed(5)
    before = torch.rand(2)
    torch.manual_seed(5)
    torch.testing.assert_close(draws(0), draws(0))
    assert not torch.equal(draws(0), draws(1))
    assert not torch.equal(draws(0), draws(0, step=1))
    assert not torch.equal(draws(0), draws(0, epoch=1))
    torch.testing.assert_close(torch.rand(2), before)
