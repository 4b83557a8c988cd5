"""MLP and LINKX in full-graph mode: the minibatch modules' parts (same parameters, same
PyG export) over each rank's rows, no halo exchanged. K workers give the gradients of
one process (LINKX's batch norm by every rank's rows), predict equals the export's PyG
forward, and a model that exchanges nothing refuses quantisation."""
import numpy as np
import pytest
import torch
import torch_geometric

import gnnsys
from gnnsys.config import ConfigError, from_dict
from gnnsys.distributed import launch
from gnnsys.fullgraph.sync_norm import synced_batch_norm
from gnnsys.testing import tiny_graph
from gnnsys.training import TrainingLoop
from tests.models.test_linkx import heterophilous_graph, pyg_forward


def settings(tmp_path, arch, workers, layers=2, **extra):
    return {"mode": "fullgraph",
            "model": {"arch": arch, "hidden": 16, "layers": layers, "dropout": 0.1},
            "train": {"epochs": 30, "lr": 0.02, "progress": False, "eval_every": 10},
            "cluster": {"workers": workers, "launcher": "threads"},
            "partition": {"dir": str(tmp_path / "parts"), "method": "random"},
            "run": {"dir": str(tmp_path / arch / str(workers))}, **extra}


def first_step_gradients(ctx, config, graph):
    """This rank's rows and the first step's gradients, summed over ranks as the loop does."""
    loop = TrainingLoop(ctx, config, (graph,))
    loss, _, _ = next(loop.mode.train_batches(0))
    loss.backward()
    ctx.comm.all_reduce_gradients(loop.model.parameters(), "sum")
    return {n: p.grad.clone() for n, p in loop.model.named_parameters()}, \
        loop.mode.plan.summary()


@pytest.mark.parametrize("arch", ["mlp", "linkx"])
def test_three_workers_give_the_gradients_of_one_process(tmp_path, arch):
    graph = tiny_graph(num_nodes=240, num_features=8, seed=5)
    config = from_dict(settings(tmp_path, arch, 1, layers=3), ["model.dropout=0.0"])
    [(single, _)] = launch(first_step_gradients, config, graph)
    three = from_dict(settings(tmp_path, arch, 3, layers=3), ["model.dropout=0.0"])
    ranks = launch(first_step_gradients, three, graph)
    for grads, summary in ranks:
        assert summary["halo"] == summary["send_rows"] == 0      # nothing crosses
        assert summary["inner"] < graph.num_nodes
        for name, value in single.items():
            torch.testing.assert_close(grads[name], value, rtol=1e-4, atol=1e-6, msg=name)
    if arch == "linkx":        # the batch norm's weight moved the same way everywhere
        assert single["final_mlp.norms.0.module.weight"].abs().sum() > 0


def test_synced_batch_norm_is_batch_norm_over_every_rank():
    x = torch.randn(30, 4, dtype=torch.float64)
    w = torch.randn(4, 4, dtype=torch.float64)

    def rank(ctx, config, x):
        rows = np.array_split(np.arange(len(x)), ctx.world_size)[ctx.rank]
        mine = x[rows].clone().requires_grad_()
        norm = torch.nn.BatchNorm1d(4).double()
        out = synced_batch_norm(norm, mine, ctx.comm)
        ((out @ w) ** 3).sum().backward()
        return out.detach(), mine.grad, norm.running_mean, norm.running_var

    whole = x.clone().requires_grad_()
    norm = torch.nn.BatchNorm1d(4).double()
    out = norm(whole)
    ((out @ w) ** 3).sum().backward()
    config = from_dict({"mode": "fullgraph", "cluster": {"workers": 3, "launcher": "threads"}})
    got = launch(rank, config, x)
    torch.testing.assert_close(torch.cat([g[0] for g in got]), out.detach())
    torch.testing.assert_close(torch.cat([g[1] for g in got]), whole.grad)
    for _, _, mean, var in got:
        torch.testing.assert_close(mean, norm.running_mean)
        torch.testing.assert_close(var, norm.running_var)


@pytest.mark.parametrize("arch, workers", [("mlp", 1), ("linkx", 1), ("linkx", 2)])
def test_predict_equals_the_exports_pyg_forward(tmp_path, arch, workers):
    graph = heterophilous_graph()
    result = gnnsys.Trainer(settings(tmp_path, arch, workers), data=graph).fit()
    if arch == "linkx":
        assert result["test_acc"] > 0.8          # from the adjacency rows: features are noise
    scores = torch.from_numpy(result.predict("all")["scores"])
    saved = result.export_pyg(tmp_path / f"{arch}.pt")
    assert saved["class"] == {"mlp": "MLP", "linkx": "LINKX"}[arch]
    if arch == "mlp":
        pyg = torch_geometric.nn.MLP(**saved["kwargs"])
        pyg.load_state_dict(saved["state_dict"])
        with torch.no_grad():
            expected = pyg.eval()(torch.from_numpy(graph.x))
    else:
        expected = pyg_forward(saved, graph)
    torch.testing.assert_close(expected, scores, atol=1e-5, rtol=0)


def test_quantisation_is_refused_where_no_rows_cross(tmp_path):
    with pytest.raises(ConfigError) as err:
        from_dict(settings(tmp_path, "mlp", 2,
                           fullgraph={"quantization": {"mode": "uniform"}}))
    assert str(err.value) == ("config key 'fullgraph.quantization.mode' is 'uniform' but "
                              "model.arch mlp exchanges no rows (each worker computes its "
                              "own); set fullgraph.quantization.mode: none")


def test_linkx_refuses_what_it_would_ignore_in_full_graph_mode_too(tmp_path):
    with pytest.raises(ConfigError, match="model.arch linkx normalises as PyG's LINKX does"):
        from_dict(settings(tmp_path, "linkx", 1, layers=1) | {
            "model": {"arch": "linkx", "norm": "layer"}})


def test_gcn_export_is_refused_naming_why(tmp_path):
    config = settings(tmp_path, "gcn", 1)
    config["train"].update(epochs=1, eval_every=1)
    result = gnnsys.Trainer(config, data=tiny_graph(num_nodes=60)).fit()
    with pytest.raises(ConfigError, match="full-graph model.arch gcn cannot be exported as a "
                                          "torch_geometric model: ") as err:
        result.export_pyg()
    assert "1/sqrt(d_out(u) d_in(v))" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("workers, norm", [(1, "none"), (2, "layer")])
def test_sage_exports_as_pygs_graphsage(tmp_path, workers, norm):
    graph = tiny_graph(num_nodes=120, seed=3)
    config = settings(tmp_path, "sage", workers)
    config["model"]["norm"] = norm
    config["train"].update(epochs=5, eval_every=5)
    result = gnnsys.Trainer(config, data=graph).fit()
    scores = torch.from_numpy(result.predict("all")["scores"])
    saved = result.export_pyg(tmp_path / "sage.pt")
    assert saved["class"] == "GraphSAGE"
    pyg = torch_geometric.nn.GraphSAGE(**saved["kwargs"])
    pyg.load_state_dict(saved["state_dict"])
    with torch.no_grad():
        expected = pyg.eval()(torch.from_numpy(graph.x), torch.from_numpy(graph.edge_index()))
    torch.testing.assert_close(expected, scores, atol=1e-5, rtol=0)


def test_sage_export_refuses_a_graph_with_self_loops(tmp_path):
    from gnnsys.graph import Graph
    base = tiny_graph(num_nodes=60, seed=1)
    loops = np.stack([np.arange(3), np.arange(3)])
    graph = Graph.from_edge_index(np.concatenate([base.edge_index(), loops], 1), 60, x=base.x,
                                  y=base.y, num_classes=base.num_classes,
                                  train_idx=base.train_idx, val_idx=base.val_idx,
                                  test_idx=base.test_idx, name="loops")
    config = settings(tmp_path, "sage", 1)
    config["train"].update(epochs=1, eval_every=1)
    result = gnnsys.Trainer(config, data=graph).fit()
    with pytest.raises(ConfigError) as err:
        result.export_pyg()
    assert str(err.value) == ("the run's graph has 3 self loops, which torch_geometric's "
                              "GraphSAGE weighs otherwise than gnnsys's sage: no "
                              "torch_geometric model equals it")
