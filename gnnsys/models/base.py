"""The contract of a minibatch model: what `gnnsys.minibatch` and `gnnsys.export` call.

A model is a subclass of `MinibatchModel` named in `registry.MODELS`, or the user's own
named by import path (`own.py`). It maps the input
rows of a `MiniBatch`'s first block through one `layer` per block to the seeds' logits;
layer i maps block i's sources to its targets, and a block's targets are a prefix of its
sources, so `x[:num_dst]` are the target rows. Between layers: norm, ReLU, dropout, and
with model.residual a hidden->hidden layer adds its targets' input rows.
"""
from __future__ import annotations

import types

import numpy as np
import torch
from torch import nn

from .dropout import relu_dropout
from .norm import NORM_LAYERS


class MinibatchModel(nn.Module):
    arch: str                              # its model.arch (registry key; a user's own may lack it)
    # what the fused sampler may compute for the first layer instead of gathering its
    # sources' rows (samplers/_aggregate.py: "mean", "gcn"); None: gather them
    first_layer_aggregate: str | None = None
    # PyG's layer weighs self loops otherwise (GCNConv): the export checks the graph has none
    export_refuses_self_loops: bool = False

    def __init__(self, widths: list, dropout: float, residual: bool):
        """widths: input, hidden..., output width of each layer's rows. A subclass builds
        its layers, then `self.norms = norm_layers(...)` (parameters in that order)."""
        super().__init__()
        self.widths, self.dropout, self.residual = list(widths), dropout, residual

    @classmethod
    def from_config(cls, config, in_dim: int, num_classes: int,
                    num_nodes: int = 0) -> "MinibatchModel":
        """The model `config.model` asks for, for rows of `in_dim` and `num_classes` classes
        of a graph of `num_nodes` (a model with a weight per node reads it)."""
        m = config.model
        return cls(m.arch, in_dim, m.hidden, num_classes, m.layers, m.dropout, m.heads,
                   m.norm, m.residual)

    @classmethod
    def check_config(cls, config) -> None:
        """Raise ConfigError where `config.model` asks for what this model does not train
        (called when the config loads)."""

    @property
    def num_layers(self) -> int:
        return len(self.widths) - 1

    def set_degree(self, degree) -> "MinibatchModel":
        """Global node degrees, for a model whose weights read them (GCN); others ignore them."""
        return self

    def set_adjacency(self, adjacency) -> "MinibatchModel":
        """For a model that reads adjacency rows (LINKX): `adjacency()` gives the graph
        in the ids of the batches' `n_id` as (indptr, indices, each id's dataset id or
        None). Others ignore it (and never call it)."""
        return self

    def layer(self, i: int, x: torch.Tensor, edge_index: torch.Tensor, num_dst: int,
              n_id: torch.Tensor | None = None, x_agg: torch.Tensor | None = None):
        """Layer i over a block: x the sources' rows (dense, float16 or sparse CSR),
        `edge_index` (source, target) local ids, `n_id` the sources' global ids, `x_agg`
        the sampler's `first_layer_aggregate` of the targets (x then their rows)."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor, blocks, n_id: torch.Tensor | None = None,
                x_agg: torch.Tensor | None = None) -> torch.Tensor:
        """x: input features of blocks[0]'s sources (global ids `n_id`); `x_agg`: the
        sampler's first-layer aggregate where it made one (`MiniBatch`); returns the
        logits of the seeds."""
        if len(blocks) != self.num_layers:
            raise ValueError(f"got {len(blocks)} blocks for a {self.num_layers}-layer model")
        for i, block in enumerate(blocks):
            x = self.layer(i, x, block.edge_index, block.num_dst, n_id,
                           x_agg if i == 0 else None)
        return x

    def _activate(self, i: int, out: torch.Tensor, x_src: torch.Tensor) -> torch.Tensor:
        """Norm, ReLU and dropout after every layer but the last; with model.residual a
        hidden->hidden layer adds its targets' input rows (the first num_dst sources)."""
        if i < self.num_layers - 1:
            out = relu_dropout(self.norms[i](out), self.dropout, self.training)
            if self.residual and i > 0:
                out = out + x_src[:out.shape[0]]
        return out

    def inference(self, graph, batch_size: int = 4096, device="cpu", progress=None,
                  layers: int | None = None) -> torch.Tensor:
        """Every node's logits (or the output of the first `layers` layers) over full
        neighbourhoods, without sampling."""
        raise NotImplementedError

    def inference_of(self, graph, rows, batch_size: int = 4096, device="cpu",
                     layers: int | None = None) -> torch.Tensor:
        """`inference`'s output rows of the nodes `rows` alone (in that order), computed on
        the subgraph of the nodes within `layers` hops of them. Exact: layer l reads its
        targets' in-neighbours only, so the nodes of the last hop, whose own neighbours
        are cut off, give nothing but their input rows to what `rows` need."""
        hops = layers or self.num_layers
        indptr, indices = np.asarray(graph.indptr), np.asarray(graph.indices)
        rows = np.asarray(rows, dtype=np.int64)
        ball = np.unique(rows)
        for _ in range(hops):
            ball = np.union1d(ball, indices[csr_positions(indptr, ball)])
        at = csr_positions(indptr, ball)
        column = np.minimum(np.searchsorted(ball, indices[at]), len(ball) - 1)
        inside = ball[column] == indices[at]
        owner = np.repeat(np.arange(len(ball)), np.diff(indptr)[ball])
        sub_indptr = np.zeros(len(ball) + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner[inside], minlength=len(ball)), out=sub_indptr[1:])
        sub = types.SimpleNamespace(x=graph.x[ball], indptr=sub_indptr,
                                    indices=column[inside], num_nodes=len(ball))
        degree = getattr(self, "degree", None)      # GCN's weights stay the whole graph's
        if degree is not None and degree.numel():
            self.degree = degree[torch.from_numpy(ball).to(degree.device)]
        try:
            out = self.inference(sub, batch_size, device, layers=layers)
        finally:
            if degree is not None:
                self.degree = degree
        return out[torch.from_numpy(np.searchsorted(ball, rows))]

    def step_elements(self, batch) -> int:
        """A lower bound of the float32 elements one training step over `batch` holds
        beside the parameters (layers' outputs, messages): `gnnsys.step_memory` refuses
        a step that cannot fit before it runs."""
        raise NotImplementedError

    def pyg_export(self, config) -> tuple[str, dict]:
        """(class name in torch_geometric.nn, its kwargs) of the PyG model whose
        state_dict this model's loads into, names equal (PyG's BatchNorm's `.module.`
        aside); raise ConfigError where there is none."""
        from ..errors import ConfigError
        raise ConfigError(f"model.arch {config.model.arch} cannot be exported as a "
                          "torch_geometric model; use gnnsys.load_run(run_dir).model")

    def pyg_state_dict(self) -> dict:
        """This model's weights under the names of `pyg_export`'s model."""
        return self.state_dict()


def norm_layers(norm: str, widths: list) -> nn.ModuleList:
    """model.norm's layer after each hidden layer."""
    return nn.ModuleList(NORM_LAYERS[norm](w) for w in widths[1:-1])


# model.norm as PyG's basic GNNs take it (their default is none)
PYG_NORMS = {"none": {},
             "layer": {"norm": "layer_norm", "norm_kwargs": {"mode": "node"}},
             "batch": {"norm": "batch_norm"}}


def pyg_basic_gnn(name: str, in_dim: int, out_dim: int, config) -> tuple[str, dict]:
    """(name, kwargs) of PyG's basic GNN `name` as `config.model` builds it: norm, ReLU,
    dropout between layers."""
    m = config.model
    return name, dict(in_channels=in_dim, hidden_channels=m.hidden, num_layers=m.layers,
                      out_channels=out_dim, dropout=m.dropout, **PYG_NORMS[m.norm])


def csr_positions(indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The positions in a CSR `indices` array of every entry of `rows`, row by row."""
    starts = indptr[rows]
    counts = indptr[rows + 1] - starts
    return np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(counts.sum())


class LayerRows:
    """One layer's output rows, written batch by batch into a single tensor: a list of
    batches and a concatenation would hold every row twice at the end of the layer (on
    synthetic-products, 1.25 GB more at the peak of evaluation)."""

    def __init__(self, num_rows: int, width: int = 0):
        self.num_rows = num_rows
        self.rows = torch.empty(0, width)

    def put(self, start: int, out: torch.Tensor) -> None:
        if self.rows.shape[0] != self.num_rows:        # the first batch: its width and dtype
            self.rows = torch.empty(self.num_rows, out.shape[1], dtype=out.dtype)
        self.rows[start:start + out.shape[0]] = out


def inference_input(x):
    """Input rows for layer-wise inference: CSR as it is, float16 kept float16 (the first
    layer converts each batch), anything else as float32; dense rows are not copied when
    they already have that dtype."""
    from ..sparse_features import is_sparse
    if is_sparse(x):
        return x
    dtype = np.float16 if x.dtype == np.float16 else np.float32
    return _readonly_tensor(np.ascontiguousarray(x, dtype=dtype))


def _readonly_tensor(array: np.ndarray) -> torch.Tensor:
    """Wrap a (possibly read-only, memory-mapped) array without copying; it is only read."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)
