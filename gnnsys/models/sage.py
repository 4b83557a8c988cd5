"""GraphSAGE (mean aggregation, root weight) over sampled blocks, PyG's SAGEConv per layer.

On the CPU a layer's mean is one CSR x dense product over the block's rows; a sparse
input is projected before it is averaged; the fused sampler may average the first
layer's sources itself (`first_layer_aggregate`)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch_geometric.nn import SAGEConv

from ..sparse_features import first_rows, is_sparse
from .block_gnn import BlockGNN, _by_target, _csr


class SAGE(BlockGNN):
    arch = "sage"
    pyg_class = "GraphSAGE"
    first_layer_aggregate = "mean"

    def make_conv(self, in_dim, out_dim, heads, last):
        return SAGEConv(in_dim, out_dim)

    def aggregate(self, i, x, edge_index, num_dst, n_id, x_agg):
        conv = self.convs[i]
        if x_agg is not None:
            return _sage_sum(conv, x_agg, x[:num_dst])
        if is_sparse(x):
            return _sage_projecting_first(conv, x, edge_index, num_dst)
        if self.aggregates_as_csr(False, x.device):
            return _sage_mean_csr(conv, x, edge_index, num_dst)
        return conv((x, first_rows(x, num_dst)), edge_index)

    def layer_elements(self, i, block, wide_in, wide_out, csr):
        """SAGE's messages are its sources' rows, as wide as the layer's input (the first
        layer may project first: the narrower of the two there)."""
        if csr or i == 0:
            return super().layer_elements(i, block, wide_in, wide_out, csr)
        return block.num_dst * wide_out + block.edge_index.shape[1] * wide_in

    def reads_by_global_id(self, device):
        return True

    def global_layer(self, i, inputs, x, start, stop, src, dst):
        ei = torch.stack([src, dst]).to(x.device)
        return self.convs[i]((x, x[start:stop]), ei)


def _sage_mean_csr(conv: SAGEConv, x: torch.Tensor, edge_index, num_dst: int):
    """SAGEConv (mean, root weight) with the mean as one CSR x dense product: PyG's message
    passing first writes a message per sampled edge (735k x 100 floats in a products-scale
    first layer), then scatters them. The same product also picks the targets' own rows,
    so backward forms x's gradient in one product: slicing x[:num_dst] would add a zeroed
    copy of x's size and a sum over it (a products-scale second layer: 147k x 256 each)."""
    both = mean_adjacency(edge_index, num_dst, x.shape[0], roots=True)
    # in float32 whatever train.precision says: torch's CSR product on the CPU has no bf16
    # kernel (autocast would ask for one); the linear maps cast as it says
    with torch.autocast(device_type=x.device.type, enabled=False):
        rows = torch.sparse.mm(both, x.float())
    return _sage_sum(conv, rows[:num_dst], rows[num_dst:])


def _sage_sum(conv: SAGEConv, averaged: torch.Tensor, x_dst: torch.Tensor) -> torch.Tensor:
    """SAGEConv's lin_l(averaged) + lin_r(x_dst) into one output: the second product
    accumulates into the first's (no third tensor and no pass over the layer's output to
    add them; neither product's backward needs the output)."""
    out = torch.addmm(conv.lin_l.bias, x_dst, conv.lin_r.weight.t())
    return out.addmm_(averaged.to(out.dtype), conv.lin_l.weight.t().to(out.dtype))


def _sage_projecting_first(conv: SAGEConv, x: torch.Tensor, edge_index, num_dst: int):
    """SAGEConv (mean, root weight) on a sparse x: each source row is projected once
    (sparse x dense), then the projections are averaged, instead of averaging raw rows."""
    projected = F.linear(x, conv.lin_l.weight)
    out = conv.propagate(edge_index, x=(projected, None), size=(x.shape[0], num_dst))
    return out + conv.lin_l.bias + conv.lin_r(first_rows(x, num_dst))


def mean_adjacency(edge_index: torch.Tensor, num_dst: int, num_src: int,
                   roots: bool = False) -> torch.Tensor:
    """The block as a CSR matrix [num_dst, num_src] whose rows average a target's sampled
    sources (a target without any: a zero row). The sampler lists edges by target, so
    its rows need no sort; other edge lists are sorted by target first. `roots`: num_dst
    more rows, row num_dst + i selecting target i's own row."""
    src, dst = _by_target(edge_index)
    counts = torch.bincount(dst, minlength=num_dst)
    rows = 2 * num_dst if roots else num_dst
    indptr = torch.zeros(rows + 1, dtype=torch.int64, device=dst.device)
    torch.cumsum(counts, 0, out=indptr[1:num_dst + 1])
    values = (1.0 / counts.clamp(min=1).float())[dst]
    if roots:
        targets = torch.arange(num_dst, device=dst.device)
        indptr[num_dst + 1:] = indptr[num_dst] + targets + 1
        src = torch.cat([src, targets])
        values = torch.cat([values, torch.ones(num_dst, device=dst.device)])
    return _csr(indptr, src, values, (rows, num_src))
