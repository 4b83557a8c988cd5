"""A run's model as PyG's own model, to serve without gnnsys.

A model that has a PyG counterpart names it (`pyg_export`; one without is refused, as
is model.residual). Minibatch SAGE, GCN and GAT are PyG's basic GNN layer for layer (the
same convs; norm, ReLU, dropout between layers; GAT heads concatenated, averaged in the
last layer; GCN's global-degree weights over full neighbourhoods are GCNConv's own, on a
graph without self loops); MLP and LINKX are PyG's, in either mode; full-graph SAGE is
PyG's GraphSAGE on a graph without self loops (its mean leaves them out). The file, weights
only: {"class", "kwargs", "state_dict", "features": how the run prepared its inputs
(README, "Use")}.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from .errors import ConfigError


def export_pyg(result, path=None) -> dict:
    """The run's model as {"class", "kwargs", "state_dict", "features"}, written to `path`
    atomically when given: torch_geometric.nn.<class>(**kwargs) loads the state_dict."""
    import torch_geometric.nn as pyg_nn
    from .runlog import check_output, torch_bytes, write_output
    if path is not None:
        check_output(path, needed=result.needed_files())   # before any work
    config = result.config
    m, d = config.model, config.dataset
    model = result.model
    if m.residual or not hasattr(model, "pyg_export"):
        what = "model.residual" if m.residual else f"{config.mode} model.arch {m.arch}"
        raise ConfigError(f"{what} cannot be exported as a torch_geometric model (PyG has no "
                          "model equal to it); use gnnsys.load_run(run_dir).model (weights: "
                          "checkpoint.pt in the run directory)")
    name, kwargs = model.pyg_export(config)
    pyg = getattr(pyg_nn, name)(**kwargs)
    names = {k.replace(".module.", "."): k for k in pyg.state_dict()}  # PyG's BatchNorm wraps
    pyg.load_state_dict({names.get(k, k): v for k, v in model.pyg_state_dict().items()})
    features = {"normalize": d.normalize_features, "dtype": d.feature_dtype}
    no_self_loops = model.export_refuses_self_loops
    if no_self_loops or d.normalize_features == "standard":
        _check_graph(config, result._graph, features, no_self_loops and name)
    saved = {"class": name, "kwargs": kwargs, "state_dict": pyg.state_dict(),
             "features": features}
    if path is not None:
        write_output(path, torch_bytes(saved), needed=result.needed_files())
    return saved


def _check_graph(config, graph, features: dict, no_self_loops) -> None:
    """`no_self_loops` (the PyG class, or False): refuse a graph with self loops, which that
    class weighs otherwise (minibatch GCN counts them in the degree and adds one more,
    GCNConv keeps one; full-graph SAGE's mean leaves them out, SAGEConv's counts them).
    Standard features: their training-node mean and std."""
    from .datasets.for_run import load_run_graph, standard_statistics
    from .sparse_features import densified
    raw = dataclasses.replace(config.dataset, normalize_features="none", feature_dtype="float32")
    graph = load_run_graph(dataclasses.replace(config, dataset=raw), graph)
    edges = graph.edge_index() if no_self_loops else np.zeros((2, 0))
    loops = int((edges[0] == edges[1]).sum())
    if loops:
        raise ConfigError(f"the run's graph has {loops} self loops, which torch_geometric's "
                          f"{no_self_loops} weighs otherwise than gnnsys's "
                          f"{config.model.arch}: no torch_geometric model equals it")
    if features["normalize"] == "standard":
        x = densified(graph.x, "dataset.normalize_features=standard")
        mean, std = standard_statistics(np.asarray(x, dtype=np.float32), graph.train_idx)
        features["mean"], features["std"] = torch.from_numpy(mean), torch.from_numpy(std)
