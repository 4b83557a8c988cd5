"""The full-graph models (`registry.MODELS`' fullgraph entries) and their contract.

GCN and GraphSAGE aggregate over a partition with halo exchange; MLP and LINKX are the
minibatch modules' (same parameters, same PyG export) with a full-graph forward: they
read no neighbour's rows, so no rows cross (LINKX reads its rows' adjacency rows, global
column ids, against a weight every rank holds).

GCN and GraphSAGE:

Each layer aggregates, then transforms (AdaQP order, ../shared/ALGORITHMS.md 4.3.2), so the
messages of layer l have that layer's input width:

    GCN:  out = (A_hat H) W + b
    SAGE: out = (mean_{u in N(v)} H_u) W_neigh + H_v W_root + b
    hidden layers: ReLU(norm(out)) then dropout; the last layer gives logits.

Sparse (CSR) input features are the exception: the first layer projects, then
aggregates, (A X) W = A (X W), so X is only ever multiplied sparse x dense and the
first layer's messages are its projected rows (output width, e.g. 64 instead of a
bag-of-words width of thousands), whose gradients travel back like any later layer's.

The model itself is an ordinary nn.Module; where the rows live is the business of
`HaloAggregate`, so with one worker it is plain full-graph training.
"""
from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..models import linkx, mlp
from ..models.dropout import relu_dropout
from ..models.norm import NORM_LAYERS
from .exchange import AggregationStep, HaloExchanger, halo_aggregate
from .sync_norm import synced_batch_norm

# model.norm's batch norm would need statistics synchronised across partitions (LINKX's
# own, PyG's, is: sync_norm.py)
NORMS = ("none", "layer")


class FullGraphModel:
    """What `FullGraphMode` calls of a full-graph model (an nn.Module besides):

    - `aggregation`: the edge weights of the halo plan it aggregates over (`halo.AGGREGATIONS`),
      or None: it reads no neighbour's rows, so its plan has no halo and nothing crosses
    - `from_config(config, in_dim, num_classes, num_nodes)`, `check_config(config)`
    - `set_rows(plan, graph)`: this rank's rows, before training (LINKX: their adjacency rows)
    - `forward(x, exchanger, quantized, layers=None)`: this rank's inner rows' logits (or
      the output of the first `layers` layers); x in the plan's local order
    - `step_elements(rows)`: a lower bound of the float32 elements a step over `rows` rows
      holds beside the parameters (`step_memory.check_step_fits`)
    - `pyg_export(config)`, where PyG has the same model (`gnnsys.export`)
    """
    aggregation: str | None = None
    export_refuses_self_loops: bool = False   # as MinibatchModel's (export checks the graph)

    def set_rows(self, plan, graph) -> "FullGraphModel":
        return self

    def pyg_state_dict(self) -> dict:
        """Its weights under the names of `pyg_export`'s model."""
        return self.state_dict()


class FullGraphGNN(FullGraphModel, nn.Module):
    """GCN (arch "gcn") or GraphSAGE ("sage") over the halo plan."""

    def __init__(self, arch: str, in_dim: int, hidden: int, out_dim: int, layers: int,
                 dropout: float = 0.5, norm: str = "none"):
        super().__init__()
        self.arch, self.dropout = arch, dropout
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.widths = dims
        self.neigh = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.root = nn.ModuleList(nn.Linear(a, b, bias=False)
                                  for a, b in zip(dims[:-1], dims[1:])) if arch == "sage" else None
        self.norms = nn.ModuleList(NORM_LAYERS[norm](d) for d in dims[1:-1])

    @classmethod
    def from_config(cls, config, in_dim: int, num_classes: int, num_nodes: int = 0):
        m = config.model
        return cls(m.arch, in_dim, m.hidden, num_classes, m.layers, m.dropout, m.norm)

    @classmethod
    def check_config(cls, config) -> None:
        """Nothing beyond the mode's `supports`."""

    @property
    def num_layers(self) -> int:
        return len(self.neigh)

    def step_elements(self, rows: int) -> int:
        """Every layer's output rows."""
        return rows * sum(self.widths[1:])

    # why no torch_geometric model equals this one (`gnnsys.export`)
    not_pyg = "no torch_geometric model equals it"

    def pyg_export(self, config):
        from ..errors import ConfigError
        raise ConfigError(f"full-graph model.arch {self.arch} cannot be exported as a "
                          f"torch_geometric model: {self.not_pyg}; use "
                          "gnnsys.load_run(run_dir).model")

    def forward(self, x: torch.Tensor, exchanger: HaloExchanger, quantized: bool,
                layers: int | None = None) -> torch.Tensor:
        """x: features of this worker's inner nodes [central | marginal]; returns their
        logits (or the output of the first `layers` layers)."""
        h = x
        for layer in range(layers or self.num_layers):
            step = AggregationStep(exchanger.plan, exchanger, layer, quantized)
            neigh = self.neigh[layer]
            if h.layout == torch.strided:
                out = neigh(halo_aggregate(h, step))
            else:                   # sparse x dense first: see the module docstring
                out = halo_aggregate(F.linear(h, neigh.weight), step) + neigh.bias
            if self.root is not None:
                out = out + self.root[layer](h)
            if layer < self.num_layers - 1:
                out = relu_dropout(self.norms[layer](out), self.dropout, self.training)
            h = out
        return h


class GCN(FullGraphGNN):
    arch = aggregation = "gcn"
    not_pyg = ("it weighs an edge u->v by 1/sqrt(d_out(u) d_in(v)), GCNConv by "
               "1/sqrt(d_in(u) d_in(v)), unequal on a directed graph")


class SAGE(FullGraphGNN):
    """PyG's GraphSAGE layer for layer on a graph without self loops (its mean leaves them
    out, SAGEConv's counts them: the export checks there are none): `neigh` is SAGEConv's
    `lin_l`, `root` its `lin_r`."""
    arch = aggregation = "sage"
    export_refuses_self_loops = True

    def pyg_export(self, config) -> tuple[str, dict]:
        from ..models.base import pyg_basic_gnn
        return pyg_basic_gnn("GraphSAGE", self.widths[0], self.widths[-1], config)

    def pyg_state_dict(self) -> dict:
        renamed = {"neigh": "lin_l", "root": "lin_r"}
        out = {}
        for key, value in self.state_dict().items():
            part, i, rest = key.split(".", 2)
            out[f"convs.{i}.{renamed[part]}.{rest}" if part in renamed else key] = value
        return out


class MLP(FullGraphModel, mlp.MLP):
    """The minibatch MLP over this rank's rows, all at once."""

    def forward(self, x, exchanger=None, quantized=False, layers=None):
        for i in range(layers or self.num_layers):
            x = self.layer(i, x, None, x.shape[0])
        return x

    def step_elements(self, rows: int) -> int:
        return rows * sum(self.widths[1:])


class LINKX(FullGraphModel, linkx.LINKX):
    """The minibatch LINKX over this rank's rows: their adjacency rows (sparse, global
    column ids) times the adjacency weight every rank holds, whose gradient the loop
    all-reduces as any parameter's; its final MLP's batch norm by every rank's rows."""
    rows_adjacency = None

    def set_rows(self, plan, graph) -> "LINKX":
        self.rows_adjacency = self.adjacency_rows(
            torch.from_numpy(plan.inner_gid),
            (np.asarray(graph.indptr), np.asarray(graph.indices), None))
        return self

    def forward(self, x, exchanger, quantized=False, layers=None):
        if self.rows_adjacency.device != x.device:     # once, after the model moved
            self.rows_adjacency = self.rows_adjacency.to(x.device)
        h = self.combine(self.rows_adjacency, x)
        norm = functools.partial(synced_batch_norm, comm=exchanger.comm)
        for i in range(layers or self.num_layers):
            h = self.final_layer(i, h, norm)
        return h

    def step_elements(self, rows: int) -> int:
        """The adjacency rows' projection, the feature MLP and their sums, then each
        layer's output rows."""
        return rows * (6 * self.cat_lin1.out_features + sum(self.widths[1:]))
