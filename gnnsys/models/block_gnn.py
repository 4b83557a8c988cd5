"""The message-passing models over the bipartite blocks of a `MiniBatch` (GraphSAGE,
GCN, GAT: one module each, `registry.MODELS`), and what they share: layer-wise
full-neighbourhood inference and the blocks' CSR layouts.

A layer's CSR fast path (its aggregation as sparse products over the block's rows, no
per-edge messages) is its model's own (`sage.py`, `gcn.py`, `gat.py` with
`attention.py`); on a GPU, and for sparse inputs, PyG's message passing stays.

The input features may be a torch sparse CSR tensor (bag-of-words inputs kept sparse,
gnnsys.sparse_features): the first layer then multiplies sparse x dense, projecting
before it aggregates (GCN and GAT project first anyway, through F.linear, which takes a
sparse input; SAGE's mean is linear, so mean(x_j) W = mean(x_j W)). The result equals
the dense input's up to float rounding.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn

from ..sparse_features import is_sparse, row_tensor
from .base import LayerRows, MinibatchModel, inference_input, norm_layers, pyg_basic_gnn
from .registry import archs, model_class

ARCHS = archs("minibatch")


class BlockGNN(MinibatchModel):
    """A stack of PyG convs, one per block. `BlockGNN(arch, ...)` builds the registered
    model of that arch; a subclass makes its convs (`make_conv`) and aggregates a
    block's sources (`aggregate`)."""

    pyg_class: str | None = None         # its torch_geometric.nn basic GNN (None: no export)

    def __new__(cls, arch: str | None = None, *args, **kwargs):
        if cls is BlockGNN:
            cls = model_class("minibatch", arch)
            if not issubclass(cls, BlockGNN):
                raise ValueError(f"model.arch '{arch}' is not a message-passing model; build "
                                 "it with gnnsys.models.build_model")
        return super().__new__(cls)

    def __init__(self, arch: str, in_dim: int, hidden: int, out_dim: int, layers: int,
                 dropout: float = 0.5, heads: int = 4, norm: str = "none",
                 residual: bool = False):
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        super().__init__(dims, dropout, residual)
        self.register_buffer("degree", torch.zeros(0), persistent=False)
        self.convs = nn.ModuleList(
            self.make_conv(dims[i], dims[i + 1], heads, last=(i == layers - 1))
            for i in range(layers))
        self.norms = norm_layers(norm, dims)

    def set_degree(self, degree) -> "BlockGNN":
        """Global node degrees, needed by GCN's normalisation (kept by every arch, so a
        model's inference over a subgraph restores the whole graph's)."""
        self.degree = torch.as_tensor(np.asarray(degree), dtype=torch.float32,
                                      device=self.degree.device)
        return self

    def make_conv(self, in_dim: int, out_dim: int, heads: int, last: bool) -> nn.Module:
        raise NotImplementedError

    def layer(self, i: int, x: torch.Tensor, edge_index: torch.Tensor, num_dst: int,
              n_id: torch.Tensor | None = None, x_agg: torch.Tensor | None = None):
        """Layer i over a block; `x_agg`: its targets' aggregated sources, aggregated by
        the sampler (the first layer: SAGE's neighbour mean, GCN's whole normalised sum;
        samplers/_aggregate.py), x then the targets' rows. A sparse x's layer runs in
        float32 whatever `train.precision` says: torch's sparse CSR products have no bf16
        kernel, and autocast would ask for one (later layers follow the precision)."""
        if is_sparse(x):
            with torch.autocast(device_type=x.device.type, enabled=False):
                return self._layer(i, x, edge_index, num_dst, n_id, x_agg)
        return self._layer(i, x, edge_index, num_dst, n_id, x_agg)

    def _layer(self, i, x, edge_index, num_dst, n_id, x_agg):
        if x.dtype == torch.float16:      # features stored as float16 (dataset.feature_dtype)
            x = x.float()
        if x_agg is not None and self.first_layer_aggregate is None:
            raise ValueError(f"the sampler aggregated the first layer's sources, which "
                             f"only model.arch sage and gcn read; this model is {self.arch}")
        return self._activate(i, self.aggregate(i, x, edge_index, num_dst, n_id, x_agg), x)

    def aggregate(self, i, x, edge_index, num_dst, n_id, x_agg) -> torch.Tensor:
        """Conv i's output rows of the block's targets (before norm and activation)."""
        raise NotImplementedError

    def aggregates_as_csr(self, sparse_input: bool, device: torch.device) -> bool:
        """Whether a layer aggregates its sources over CSR rows (no per-edge messages):
        SAGE's mean and GCN's normalised sum as one sparse product, GAT's weighted sum in
        gnnsys/models/attention.py; on dense rows on the CPU. On a GPU PyG's message
        passing stays (the CSR paths are not yet measured there)."""
        return not sparse_input and device.type == "cpu"

    def step_elements(self, batch) -> int:
        """Every layer's output rows and its messages, one per sampled edge (PyG's convs
        over edge_index gather them, `layer_elements`); where the model aggregates over
        CSR rows instead there are no messages, but the aggregated rows and the linear
        maps' outputs exist beside their sum."""
        elements = 0
        for i, block in enumerate(batch.blocks):
            csr = self.aggregates_as_csr(i == 0 and is_sparse(batch.x), batch.x.device)
            elements += self.layer_elements(i, block, self.widths[i], self.widths[i + 1], csr)
        return elements

    def layer_elements(self, i: int, block, wide_in: int, wide_out: int, csr: bool) -> int:
        """Layer i's share of `step_elements`: a conv that projects first (GCN, GAT)
        writes messages as wide as its output."""
        if csr:
            return block.num_dst * (wide_in + 3 * wide_out)
        return block.num_dst * wide_out + block.edge_index.shape[1] * min(wide_in, wide_out)

    def pyg_export(self, config) -> tuple[str, dict]:
        """PyG's basic GNN of the same convs; norm, ReLU, dropout between layers."""
        if self.pyg_class is None:          # e.g. a subclass of the user's own
            return super().pyg_export(config)
        return pyg_basic_gnn(self.pyg_class, self.convs[0].in_channels,
                             self.convs[-1].out_channels, config)

    def reads_by_global_id(self, device: torch.device) -> bool:
        """Whether layer-wise inference feeds a layer every node's rows, indexed by
        global id (`global_layer`), instead of each batch's relabelled sources."""
        return False

    def global_layer_inputs(self, i: int, x: torch.Tensor):
        """What `global_layer` reads of all nodes' rows x, made once per layer."""
        return x

    def global_layer(self, i: int, inputs, x: torch.Tensor, start: int, stop: int,
                     src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Conv i's output rows of targets [start, stop) with sources `src` by global id."""
        raise NotImplementedError

    @torch.no_grad()
    def inference(self, graph, batch_size: int = 4096, device="cpu",
                  progress=None, layers: int | None = None) -> torch.Tensor:
        """Layer-wise inference over full neighbourhoods: each layer is computed for all
        nodes before the next, so no node's neighbourhood is expanded more than once.
        `layers`: the output of the first that many layers (default all: the logits)."""
        self.eval()
        # CSR and float16 rows are gathered per batch in the first layer (float16 made
        # float32 there, batch by batch: no float32 copy of the whole matrix)
        x = inference_input(graph.x)
        sparse = is_sparse(x)
        half = not sparse and x.dtype == torch.float16
        indptr = torch.from_numpy(np.asarray(graph.indptr))
        indices = torch.from_numpy(np.asarray(graph.indices).astype(np.int64))
        n = graph.num_nodes
        steps = range(0, n, batch_size)
        for i in range(layers or len(self.convs)):
            outs = LayerRows(n)
            by_global_id = (self.reads_by_global_id(torch.device(device))
                            and not ((sparse or half) and i == 0))
            x_on_device = x.to(device) if by_global_id else None
            inputs = self.global_layer_inputs(i, x_on_device) if by_global_id else None
            for start in (progress(steps, f"inference layer {i + 1}") if progress else steps):
                stop = min(start + batch_size, n)
                lo, hi = int(indptr[start]), int(indptr[stop])
                src = indices[lo:hi]
                dst = torch.repeat_interleave(torch.arange(stop - start),
                                              indptr[start + 1:stop + 1] - indptr[start:stop])
                if by_global_id:
                    out = self.global_layer(i, inputs, x_on_device, start, stop, src, dst)
                    outs.put(start, self._activate(i, out, x_on_device[start:stop]).cpu())
                    continue
                # sources: the targets themselves first, then their neighbours
                nodes, inv = torch.unique(torch.cat([torch.arange(start, stop), src]),
                                          return_inverse=True)
                order = torch.cat([inv[:stop - start], inv[stop - start:]])
                # relabel so targets occupy local ids 0..B-1
                local = torch.full((len(nodes),), -1, dtype=torch.long)
                local[order[:stop - start]] = torch.arange(stop - start)
                rest = torch.nonzero(local < 0).flatten()
                local[rest] = torch.arange(stop - start, stop - start + len(rest))
                sources = torch.empty(len(nodes), dtype=torch.long)
                sources[local] = nodes
                edge_index = torch.stack([local[inv[stop - start:]], dst])
                h = row_tensor(x, sources).to(device)
                outs.put(start, self.layer(i, h, edge_index.to(device), stop - start,
                                           sources.to(device)).cpu())
            x = outs.rows
        return x


def _rows_with_loops(src: torch.Tensor, dst: torch.Tensor, num_dst: int,
                     first_target: int = 0) -> tuple:
    """CSR layout of edges ordered by target with each target's self loop (target i is
    source first_target + i) after its edges, placed without a sort (each row's loop
    shifts later rows by one): (indptr, columns, the edges' positions, the loops')."""
    indptr = torch.zeros(num_dst + 1, dtype=torch.int64, device=dst.device)
    torch.cumsum(torch.bincount(dst, minlength=num_dst) + 1, 0, out=indptr[1:])
    at_edges = torch.arange(dst.numel(), device=dst.device) + dst
    at_loops = indptr[1:] - 1
    columns = torch.empty(dst.numel() + num_dst, dtype=torch.int64, device=dst.device)
    columns[at_edges] = src
    columns[at_loops] = torch.arange(first_target, first_target + num_dst, device=dst.device)
    return indptr, columns, at_edges, at_loops


def _by_target(edge_index: torch.Tensor, *per_edge: torch.Tensor) -> tuple:
    """(src, dst, *per_edge) ordered by target: as they are when already so (the
    sampler's blocks), else stably sorted."""
    src, dst = edge_index
    if dst.numel() > 1 and not bool((dst[1:] >= dst[:-1]).all()):
        order = torch.argsort(dst, stable=True)
        return (src[order], dst[order], *(t[order] for t in per_edge))
    return (src, dst, *per_edge)


def _csr(indptr, columns, values, size) -> torch.Tensor:
    with warnings.catch_warnings():   # "sparse CSR support is in beta": known, wanted
        warnings.simplefilter("ignore")
        return torch.sparse_csr_tensor(indptr, columns, values, size=size,
                                       check_invariants=False)


def build_model(config, in_dim: int, num_classes: int, num_nodes: int = 0) -> MinibatchModel:
    """The registered minibatch model of `config.model.arch`."""
    return model_class("minibatch", config.model.arch).from_config(config, in_dim, num_classes,
                                                                    num_nodes)

