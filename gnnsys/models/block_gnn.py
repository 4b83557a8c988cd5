"""GraphSAGE / GCN / GAT over the bipartite blocks of a `MiniBatch`, plus layer-wise
full-neighbourhood inference for evaluation.

Each layer maps the features of a block's sources to its targets. Because a block's
targets are a prefix of its sources, `x[:num_dst]` are the target rows. GCN is
normalised with the *global* degrees (weight 1/sqrt((d_u+1)(d_v+1)), self loop 1/(d_v+1)),
and a sampled target's neighbour sum is scaled by d_v / sampled_v, so that with all
neighbours it is exactly full-graph GCN and with sampling an unbiased estimate of it
(a block-local normalisation would change with the sample). GCN therefore needs the
global ids of the input nodes (`n_id`) and `set_degree(graph.degree())` once.

The input features may be a torch sparse CSR tensor (bag-of-words inputs kept sparse,
gnnsys.sparse_features): the first layer then multiplies sparse x dense, projecting
before it aggregates (GCN and GAT project first anyway, through F.linear, which takes a
sparse input; SAGE's mean is linear, so mean(x_j) W = mean(x_j W)). The result equals
the dense input's up to float rounding.
"""
from __future__ import annotations

import types
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

from ..sparse_features import first_rows, is_sparse, row_tensor
from .attention import gat_attend, gat_csr, gat_inputs
from .dropout import relu_dropout
from .norm import NORM_LAYERS

ARCHS = ("sage", "gcn", "gat")
# The fused sampler's first-layer aggregation (samplers/_aggregate.py) for each arch whose
# first layer is linear in its sources' rows.
FIRST_LAYER_AGGREGATES = {"sage": "mean", "gcn": "gcn"}


def _make_conv(arch: str, in_dim: int, out_dim: int, heads: int, last: bool):
    if arch == "sage":
        return SAGEConv(in_dim, out_dim)
    if arch == "gcn":
        return GCNConv(in_dim, out_dim, cached=False, add_self_loops=False, normalize=False)
    if arch == "gat":
        # hidden layers concatenate heads; the last layer averages them into classes
        if last:
            return GATConv(in_dim, out_dim, heads=heads, concat=False, add_self_loops=True)
        return GATConv(in_dim, out_dim // heads, heads=heads, concat=True, add_self_loops=True)
    raise ValueError(f"model.arch '{arch}' is not a minibatch model; use one of {', '.join(ARCHS)}")


class BlockGNN(nn.Module):
    def __init__(self, arch: str, in_dim: int, hidden: int, out_dim: int, layers: int,
                 dropout: float = 0.5, heads: int = 4, norm: str = "none",
                 residual: bool = False):
        super().__init__()
        if arch == "gat" and hidden % heads:
            raise ValueError(f"model.hidden ({hidden}) must be divisible by model.heads "
                             f"({heads}) for gat")
        self.arch, self.dropout, self.residual = arch, dropout, residual
        self.register_buffer("degree", torch.zeros(0), persistent=False)
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.convs = nn.ModuleList(
            _make_conv(arch, dims[i], dims[i + 1], heads, last=(i == layers - 1))
            for i in range(layers))
        self.norms = nn.ModuleList(NORM_LAYERS[norm](hidden) for _ in range(layers - 1))

    def set_degree(self, degree) -> "BlockGNN":
        """Global node degrees, needed by GCN's normalisation."""
        self.degree = torch.as_tensor(np.asarray(degree), dtype=torch.float32,
                                      device=self.degree.device)
        return self

    def _gcn_weights(self, edge_index, num_dst: int, n_id: torch.Tensor):
        if n_id is None or self.degree.numel() == 0:
            raise ValueError("gcn needs global degrees: call model.set_degree(graph.degree()) "
                             "and pass n_id to forward")
        """(weight of each sampled edge, weight of each target's self loop)."""
        deg = self.degree[n_id[:int(edge_index.max()) + 1 if edge_index.numel() else 0]]
        src, dst = edge_index
        sampled = torch.bincount(dst, minlength=num_dst).clamp(min=1).float()
        d_dst = self.degree[n_id[:num_dst]]
        weight = (deg[src] + 1).rsqrt() * (d_dst[dst] + 1).rsqrt() * (d_dst / sampled)[dst]
        return weight, 1.0 / (d_dst + 1)

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
        conv = self.convs[i]
        if x.dtype == torch.float16:      # features stored as float16 (dataset.feature_dtype)
            x = x.float()
        if x_agg is not None:
            if self.arch not in FIRST_LAYER_AGGREGATES:
                raise ValueError(f"the sampler aggregated the first layer's sources, which "
                                 f"only model.arch sage and gcn read; this model is {self.arch}")
            out = (_sage_sum(conv, x_agg, x[:num_dst]) if self.arch == "sage"
                   else F.linear(x_agg, conv.lin.weight, conv.bias))
        elif self.arch == "gcn":
            weight, loop_weight = self._gcn_weights(edge_index, num_dst, n_id)
            if self.aggregates_as_csr(is_sparse(x), x.device):
                out = _gcn_csr(conv, x, edge_index, weight, loop_weight)
            else:
                loops = torch.arange(num_dst, device=edge_index.device)
                out = conv(x, torch.cat([edge_index, torch.stack([loops, loops])], 1),
                           torch.cat([weight, loop_weight]))[:num_dst]
        elif self.arch == "sage" and is_sparse(x):
            out = _sage_projecting_first(conv, x, edge_index, num_dst)
        elif self.arch == "gat" and self.aggregates_as_csr(is_sparse(x), x.device):
            out = gat_csr(conv, x, *gat_rows(edge_index, num_dst), self.training)
        elif self.aggregates_as_csr(is_sparse(x), x.device):
            out = _sage_mean_csr(conv, x, edge_index, num_dst)
        else:
            out = conv((x, first_rows(x, num_dst)), edge_index)
        return self._activate(i, out, x)

    def aggregates_as_csr(self, sparse_input: bool, device: torch.device) -> bool:
        """Whether a layer aggregates its sources over CSR rows (no per-edge messages):
        SAGE's mean and GCN's normalised sum as one sparse product, GAT's weighted sum in
        gnnsys/models/attention.py; on dense rows on the CPU. On a GPU PyG's message
        passing stays (the CSR paths are not yet measured there)."""
        return not sparse_input and device.type == "cpu"

    def _activate(self, i: int, out: torch.Tensor, x_src: torch.Tensor) -> torch.Tensor:
        """Norm, ReLU and dropout after every layer but the last; with model.residual a
        hidden->hidden layer adds its targets' input rows (the first num_dst sources)."""
        if i < len(self.convs) - 1:
            out = relu_dropout(self.norms[i](out), self.dropout, self.training)
            if self.residual and i > 0:
                out = out + x_src[:out.shape[0]]
        return out

    def forward(self, x: torch.Tensor, blocks, n_id: torch.Tensor | None = None,
                x_agg: torch.Tensor | None = None) -> torch.Tensor:
        """x: input features of blocks[0]'s sources (global ids `n_id`, needed by gcn);
        `x_agg`: blocks[0]'s neighbour mean where the sampler averaged it (`MiniBatch`);
        returns the logits of the seeds."""
        if len(blocks) != len(self.convs):
            raise ValueError(f"got {len(blocks)} blocks for a {len(self.convs)}-layer model")
        for i, block in enumerate(blocks):
            x = self.layer(i, x, block.edge_index, block.num_dst, n_id,
                           x_agg if i == 0 else None)
        return x

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
            # SAGE, and GAT over CSR rows, read sources by global id: no relabelling
            by_global_id = ((self.arch == "sage" or (self.arch == "gat" and self.aggregates_as_csr(
                False, torch.device(device)))) and not ((sparse or half) and i == 0))
            x_on_device = x.to(device) if by_global_id else None
            # GAT projects every node once per layer, not once per batch that reads it
            gat = (gat_inputs(self.convs[i], x_on_device)
                   if by_global_id and self.arch == "gat" else None)
            for start in (progress(steps, f"inference layer {i + 1}") if progress else steps):
                stop = min(start + batch_size, n)
                lo, hi = int(indptr[start]), int(indptr[stop])
                src = indices[lo:hi]
                dst = torch.repeat_interleave(torch.arange(stop - start),
                                              indptr[start + 1:stop + 1] - indptr[start:stop])
                if gat is not None:
                    rows = gat_rows(torch.stack([src, dst]), stop - start, first_target=start)
                    out = gat_attend(self.convs[i], gat[0], gat[1], gat[2][start:stop], *rows,
                                     False)
                    outs.put(start, self._activate(i, out, x_on_device[start:stop]))
                    continue
                if by_global_id:
                    ei = torch.stack([src, dst]).to(device)
                    out = self.convs[i]((x_on_device, x_on_device[start:stop]), ei)
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

    def inference_of(self, graph, rows, batch_size: int = 4096, device="cpu",
                     layers: int | None = None) -> torch.Tensor:
        """`inference`'s output rows of the nodes `rows` alone (in that order), computed on
        the subgraph of the nodes within `layers` hops of them. Exact: layer l reads its
        targets' in-neighbours only, so the nodes of the last hop, whose own neighbours
        are cut off, give nothing but their input rows to what `rows` need."""
        hops = layers or len(self.convs)
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
        degree = self.degree                # GCN's weights stay the whole graph's
        if degree.numel():
            self.degree = degree[torch.from_numpy(ball).to(degree.device)]
        try:
            out = self.inference(sub, batch_size, device, layers=layers)
        finally:
            self.degree = degree
        return out[torch.from_numpy(np.searchsorted(ball, rows))]


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


def inference_input(x):
    """Input rows for layer-wise inference: CSR as it is, float16 kept float16 (the first
    layer converts each batch), anything else as float32; dense rows are not copied when
    they already have that dtype."""
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


def build_model(config, in_dim: int, num_classes: int) -> BlockGNN:
    m = config.model
    return BlockGNN(m.arch, in_dim, m.hidden, num_classes, m.layers, m.dropout, m.heads,
                    m.norm, m.residual)
