"""MLP: each node's logits from its own features alone, the graph ignored. The baseline
on graphs whose neighbours disagree (low homophily); PyG's `torch_geometric.nn.MLP` is
the same stack (Linear, norm, ReLU, dropout; the last Linear plain)."""
from __future__ import annotations

import types

import numpy as np
import torch
from torch import nn

from ..sparse_features import first_rows, is_sparse, row_tensor
from .base import PYG_NORMS, LayerRows, MinibatchModel, inference_input, norm_layers


class MLP(MinibatchModel):
    arch = "mlp"

    def __init__(self, arch: str, in_dim: int, hidden: int, out_dim: int, layers: int,
                 dropout: float = 0.5, heads: int = 4, norm: str = "none",
                 residual: bool = False):
        widths = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        super().__init__(widths, dropout, residual)
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.norms = norm_layers(norm, widths)

    def layer(self, i, x, edge_index, num_dst, n_id=None, x_agg=None):
        """Layer i of the block's targets' rows (its first num_dst sources); a sparse x in
        float32, as the message-passing models' (`BlockGNN.layer`)."""
        rows = first_rows(x, num_dst)
        if is_sparse(rows):
            with torch.autocast(device_type=x.device.type, enabled=False):
                out = self.lins[i](rows)
        else:
            out = self.lins[i](rows.float() if rows.dtype == torch.float16 else rows)
        return self._activate(i, out, x)

    @torch.no_grad()
    def inference(self, graph, batch_size=4096, device="cpu", progress=None, layers=None):
        """Every node's rows through the layers, batch by batch (no neighbours read)."""
        self.eval()
        x, n = inference_input(graph.x), graph.num_nodes
        outs = LayerRows(n, self.widths[layers or self.num_layers])
        steps = range(0, n, batch_size)
        for start in (progress(steps, "inference") if progress else steps):
            h = row_tensor(x, torch.arange(start, min(start + batch_size, n))).to(device)
            for i in range(layers or self.num_layers):
                h = self.layer(i, h, None, h.shape[0])
            outs.put(start, h.cpu())
        return outs.rows

    def inference_of(self, graph, rows, batch_size=4096, device="cpu", layers=None):
        sub = types.SimpleNamespace(x=graph.x[np.asarray(rows)], num_nodes=len(rows))
        return self.inference(sub, batch_size, device, layers=layers)

    def step_elements(self, batch) -> int:
        """Each layer's output rows, and its input rows beside them."""
        return sum(block.num_dst * (self.widths[i] + self.widths[i + 1])
                   for i, block in enumerate(batch.blocks))

    def pyg_export(self, config):
        m = config.model
        return "MLP", dict(in_channels=self.widths[0], hidden_channels=m.hidden,
                           out_channels=self.widths[-1], num_layers=m.layers,
                           dropout=m.dropout, **({"norm": None} | PYG_NORMS[m.norm]))
