"""GCN over sampled blocks, PyG's GCNConv per layer, normalised with the *global* degrees.

Weight 1/sqrt((d_u+1)(d_v+1)) per edge, self loop 1/(d_v+1), and a sampled target's
neighbour sum scaled by d_v / sampled_v: with all neighbours it is exactly full-graph
GCN, with sampling an unbiased estimate of it (a block-local normalisation would change
with the sample). GCN therefore needs the global ids of the input nodes (`n_id`) and
`set_degree(graph.degree())` once. On the CPU a layer is one CSR product; the fused
sampler may compute the first layer's normalised sum itself (`first_layer_aggregate`)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

from ..sparse_features import is_sparse
from .block_gnn import BlockGNN, _by_target, _csr, _rows_with_loops


class GCN(BlockGNN):
    arch = "gcn"
    pyg_class = "GCN"
    first_layer_aggregate = "gcn"
    export_refuses_self_loops = True

    def make_conv(self, in_dim, out_dim, heads, last):
        return GCNConv(in_dim, out_dim, cached=False, add_self_loops=False, normalize=False)

    def _gcn_weights(self, edge_index, num_dst: int, n_id: torch.Tensor):
        """(weight of each sampled edge, weight of each target's self loop)."""
        if n_id is None or self.degree.numel() == 0:
            raise ValueError("gcn needs global degrees: call model.set_degree(graph.degree()) "
                             "and pass n_id to forward")
        deg = self.degree[n_id[:int(edge_index.max()) + 1 if edge_index.numel() else 0]]
        src, dst = edge_index
        sampled = torch.bincount(dst, minlength=num_dst).clamp(min=1).float()
        d_dst = self.degree[n_id[:num_dst]]
        weight = (deg[src] + 1).rsqrt() * (d_dst[dst] + 1).rsqrt() * (d_dst / sampled)[dst]
        return weight, 1.0 / (d_dst + 1)

    def aggregate(self, i, x, edge_index, num_dst, n_id, x_agg):
        conv = self.convs[i]
        if x_agg is not None:
            return F.linear(x_agg, conv.lin.weight, conv.bias)
        weight, loop_weight = self._gcn_weights(edge_index, num_dst, n_id)
        if self.aggregates_as_csr(is_sparse(x), x.device):
            return _gcn_csr(conv, x, edge_index, weight, loop_weight)
        loops = torch.arange(num_dst, device=edge_index.device)
        return conv(x, torch.cat([edge_index, torch.stack([loops, loops])], 1),
                    torch.cat([weight, loop_weight]))[:num_dst]


def _gcn_csr(conv: GCNConv, x: torch.Tensor, edge_index, weight, loop_weight):
    """GCNConv (normalised sum with self loops, then bias) as one CSR product. The sum is
    linear, so it runs on the narrower side: where the layer widens (the first, 100 -> 256
    on synthetic-products, where PyG projects all 490k sampled rows and writes a 256-wide
    message per edge) it sums the input rows and maps the targets' sums; elsewhere it
    sums projected rows. The products stay float32 (see _sage_mean_csr)."""
    adjacency = gcn_adjacency(edge_index, weight, loop_weight, x.shape[0])
    lin = conv.lin.weight                                     # [out, in]
    if lin.shape[1] <= lin.shape[0]:
        with torch.autocast(device_type=x.device.type, enabled=False):
            summed = torch.sparse.mm(adjacency, x.float())
        return F.linear(summed, lin, conv.bias)
    projected = F.linear(x, lin)
    with torch.autocast(device_type=x.device.type, enabled=False):
        return torch.sparse.mm(adjacency, projected.float()) + conv.bias


def gcn_adjacency(edge_index: torch.Tensor, weight: torch.Tensor, loop_weight: torch.Tensor,
                  num_src: int) -> torch.Tensor:
    """The block's GCN weights as a CSR matrix [num_dst, num_src]: row i holds target i's
    sampled edges, then its self loop (`_rows_with_loops`)."""
    src, dst, weight = _by_target(edge_index, weight)
    num_dst = loop_weight.numel()
    indptr, columns, at_edges, at_loops = _rows_with_loops(src, dst, num_dst)
    values = torch.empty(columns.numel(), dtype=weight.dtype, device=dst.device)
    values[at_edges], values[at_loops] = weight, loop_weight
    return _csr(indptr, columns, values, (num_dst, num_src))
