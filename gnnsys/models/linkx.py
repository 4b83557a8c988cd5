"""LINKX (Lim et al., 2021): an MLP over each node's adjacency row, an MLP over its
features, combined, then an MLP to the classes; for graphs whose neighbours disagree
(low homophily). PyG's `torch_geometric.nn.LINKX` is the same module: this one holds its
parts (same names, same weights) and reads the adjacency rows of a batch's nodes from
the CSR as a sparse [rows, num_nodes] matrix, never densified.

Its layers for the blocks of a `MiniBatch`: layer 0 is the combination and the final
MLP's first Linear, layer i > 0 the final MLP's Linear i; between them ReLU, PyG's batch
norm and dropout, as PyG's final MLP has them (model.norm and model.residual do not
apply). The adjacency weight has a row per node (`num_nodes`), indexed by dataset id."""
from __future__ import annotations

import types
import warnings

import numpy as np
import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

from ..sparse_features import first_rows, is_sparse, row_tensor
from .base import LayerRows, MinibatchModel, csr_positions, inference_input


class LINKX(MinibatchModel):
    arch = "linkx"

    def __init__(self, arch: str, in_dim: int, hidden: int, out_dim: int, layers: int,
                 dropout: float = 0.5, heads: int = 4, norm: str = "none",
                 residual: bool = False, num_nodes: int = 0):
        super().__init__([in_dim] + [hidden] * (layers - 1) + [out_dim], dropout, False)
        pyg = pyg_nn.LINKX(num_nodes, in_dim, hidden, out_dim, layers, dropout=dropout)
        self.num_nodes = num_nodes
        self.edge_lin, self.node_mlp = pyg.edge_lin, pyg.node_mlp
        self.cat_lin1, self.cat_lin2, self.final_mlp = pyg.cat_lin1, pyg.cat_lin2, pyg.final_mlp
        self.adjacency = None

    @classmethod
    def check_config(cls, config) -> None:
        """model.norm and model.residual would be ignored: refused, not dropped."""
        from ..errors import ConfigError
        m = config.model
        for key, value, plain in (("norm", m.norm, "none"), ("residual", m.residual, False)):
            if value != plain:
                raise ConfigError(f"config key 'model.{key}' is {value!r} but model.arch linkx "
                                  "normalises as PyG's LINKX does (batch norm in its final "
                                  f"MLP); leave model.{key} at {plain}")

    @classmethod
    def from_config(cls, config, in_dim, num_classes, num_nodes=0):
        m = config.model
        return cls(m.arch, in_dim, m.hidden, num_classes, m.layers, m.dropout,
                   num_nodes=num_nodes)

    def set_adjacency(self, adjacency) -> "LINKX":
        """The graph whose rows `layer` reads: `adjacency()` = (indptr, indices, the
        dataset id of each row or None) in the ids of the batches' `n_id`."""
        indptr, indices, column_ids = adjacency()
        self.adjacency = (np.asarray(indptr), np.asarray(indices), column_ids)
        return self

    def adjacency_rows(self, ids: torch.Tensor, adjacency=None) -> torch.Tensor:
        """Rows `ids` of the adjacency matrix, sparse CSR [len(ids), num_nodes]."""
        indptr, indices, column_ids = adjacency or self.adjacency
        ids = ids.cpu().numpy()
        columns = indices[csr_positions(indptr, ids)].astype(np.int64)
        if column_ids is not None:
            columns = np.asarray(column_ids)[columns]
        crow = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(indptr[ids + 1] - indptr[ids], out=crow[1:])
        with warnings.catch_warnings():   # "sparse CSR support is in beta": known, wanted
            warnings.simplefilter("ignore")
            return torch.sparse_csr_tensor(
                torch.from_numpy(crow), torch.from_numpy(columns),
                torch.ones(len(columns)), size=(len(ids), self.num_nodes))

    def layer(self, i, x, edge_index, num_dst, n_id=None, x_agg=None, adjacency=None):
        """Layer i of the block's targets (its first num_dst sources, dataset ids
        n_id[:num_dst] in layer 0)."""
        rows = first_rows(x, num_dst)
        rows = rows.float() if rows.dtype == torch.float16 else rows
        if i == 0:
            adjacency = self.adjacency_rows(n_id[:num_dst], adjacency).to(x.device)
            rows = self.combine(adjacency, rows)
        return self.final_layer(i, rows)

    def combine(self, adjacency: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Layer 0's input: the MLP of the adjacency rows (sparse CSR, `adjacency_rows`)
        and that of the features `rows`, combined as PyG's LINKX does."""
        # sparse products in float32 whatever train.precision says (no bf16 kernel)
        with torch.autocast(device_type=rows.device.type, enabled=False):
            a = torch.sparse.mm(adjacency, self.edge_lin.weight) + self.edge_lin.bias
            h = self.node_mlp(rows) if is_sparse(rows) else None
        a = a + self.cat_lin1(a)
        h = self.node_mlp(rows) if h is None else h
        return F.relu(a + h + self.cat_lin2(h))

    def final_layer(self, i: int, rows: torch.Tensor, norm=None) -> torch.Tensor:
        """The final MLP's Linear i; then, but after the last, as PyG's final MLP: act
        first, then norm (`norm(module, rows)` instead of the module where given), then
        dropout."""
        out = self.final_mlp.lins[i](rows)
        if i < self.num_layers - 1:
            out = F.relu(out)
            out = self.final_mlp.norms[i](out) if norm is None else \
                norm(self.final_mlp.norms[i], out)
            out = F.dropout(out, self.final_mlp.dropout[i], self.training)
        return out

    @torch.no_grad()
    def inference(self, graph, batch_size=4096, device="cpu", progress=None, layers=None):
        """Every node's outputs, batch by batch: its adjacency row and its features."""
        self.eval()
        x, n = inference_input(graph.x), graph.num_nodes
        adjacency = (np.asarray(graph.indptr), np.asarray(graph.indices),
                     getattr(graph, "column_ids", None))
        outs = LayerRows(n, self.widths[layers or self.num_layers])
        steps = range(0, n, batch_size)
        for start in (progress(steps, "inference") if progress else steps):
            ids = torch.arange(start, min(start + batch_size, n))
            h = row_tensor(x, ids).to(device)
            for i in range(layers or self.num_layers):
                h = self.layer(i, h, None, h.shape[0], ids, adjacency=adjacency)
            outs.put(start, h.cpu())
        return outs.rows

    def inference_of(self, graph, rows, batch_size=4096, device="cpu", layers=None):
        rows = np.asarray(rows, dtype=np.int64)
        indptr = np.asarray(graph.indptr)
        sub = types.SimpleNamespace(     # the rows' own adjacency rows, columns unchanged
            x=graph.x[rows], num_nodes=len(rows),
            indptr=np.concatenate([[0], np.cumsum(np.diff(indptr)[rows])]),
            indices=np.asarray(graph.indices)[csr_positions(indptr, rows)])
        return self.inference(sub, batch_size, device, layers=layers)

    def step_elements(self, batch) -> int:
        """Layer 0: the adjacency rows' projection, the feature MLP and their sums;
        later layers their input and output rows."""
        hidden = self.cat_lin1.out_features
        first = batch.blocks[0].num_dst * (self.widths[0] + 6 * hidden + self.widths[1])
        return first + sum(block.num_dst * (self.widths[i] + self.widths[i + 1])
                           for i, block in enumerate(batch.blocks) if i > 0)

    def pyg_export(self, config):
        m = config.model
        return "LINKX", dict(num_nodes=self.num_nodes, in_channels=self.widths[0],
                             hidden_channels=m.hidden, out_channels=self.widths[-1],
                             num_layers=m.layers, dropout=m.dropout)
