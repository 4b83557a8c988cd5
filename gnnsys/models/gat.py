"""GAT over sampled blocks, PyG's GATConv per layer: hidden layers concatenate their heads,
the last averages them into classes. On the CPU a layer's attention-weighted sum runs
over the block's CSR rows (`attention.py`), no per-edge messages."""
from __future__ import annotations

import torch
from torch_geometric.nn import GATConv

from ..sparse_features import first_rows, is_sparse
from .attention import gat_attend, gat_csr, gat_inputs
from .block_gnn import BlockGNN, _by_target, _rows_with_loops


class GAT(BlockGNN):
    arch = "gat"
    pyg_class = "GAT"

    def __init__(self, arch, in_dim, hidden, out_dim, layers, dropout=0.5, heads=4,
                 norm="none", residual=False):
        if hidden % heads:
            raise ValueError(f"model.hidden ({hidden}) must be divisible by model.heads "
                             f"({heads}) for gat")
        super().__init__(arch, in_dim, hidden, out_dim, layers, dropout, heads, norm, residual)

    def make_conv(self, in_dim, out_dim, heads, last):
        # hidden layers concatenate heads; the last layer averages them into classes
        if last:
            return GATConv(in_dim, out_dim, heads=heads, concat=False, add_self_loops=True)
        return GATConv(in_dim, out_dim // heads, heads=heads, concat=True, add_self_loops=True)

    def aggregate(self, i, x, edge_index, num_dst, n_id, x_agg):
        conv = self.convs[i]
        if self.aggregates_as_csr(is_sparse(x), x.device):
            return gat_csr(conv, x, *gat_rows(edge_index, num_dst), self.training)
        return conv((x, first_rows(x, num_dst)), edge_index)

    def layer_elements(self, i, block, wide_in, wide_out, csr):
        """Over CSR rows: every source row projected, and a few numbers per edge and head."""
        if not csr:
            return super().layer_elements(i, block, wide_in, wide_out, csr)
        heads = self.convs[i].heads
        return ((block.num_src + 2 * block.num_dst) * wide_out
                + 4 * heads * (block.edge_index.shape[1] + block.num_dst))

    def pyg_export(self, config):
        name, kwargs = super().pyg_export(config)
        return name, {**kwargs, "heads": config.model.heads}

    def reads_by_global_id(self, device):
        return self.aggregates_as_csr(False, device)

    def global_layer_inputs(self, i, x):
        # every node projected once per layer, not once per batch that reads it
        return gat_inputs(self.convs[i], x)

    def global_layer(self, i, inputs, x, start, stop, src, dst):
        rows = gat_rows(torch.stack([src, dst]), stop - start, first_target=start)
        return gat_attend(self.convs[i], inputs[0], inputs[1], inputs[2][start:stop], *rows,
                          False)


def gat_rows(edge_index: torch.Tensor, num_dst: int, first_target: int = 0) -> tuple:
    """(indptr, columns) of the block's rows as GATConv sees them: the sampled edges less
    any self loop, then one self loop per target (`_rows_with_loops`). Target i is
    source first_target + i (0 in a block; layer-wise inference numbers sources by
    global id)."""
    src, dst = _by_target(edge_index)
    distinct = src != dst + first_target
    if not bool(distinct.all()):
        src, dst = src[distinct], dst[distinct]
    indptr, columns, _, _ = _rows_with_loops(src, dst, num_dst, first_target)
    return indptr, columns
