"""Exact layer-wise inference over partitioned features: each worker computes its own
rows, one layer at a time, fetching its halo (remote neighbours) between layers.

Same result as single-machine full-neighbourhood inference (`BlockGNN.inference`):
layer i of an owned row needs layer i-1 of all its neighbours, so after each layer
every worker fetches the halo rows' embeddings from their owners with one exchange
(`RemoteFetcher`). Every rank makes the same calls (one fetch per layer). Sparse (CSR)
input features stay CSR through the first layer's fetch and product, float16 ones
float16.
"""
from __future__ import annotations

import numpy as np
import torch

from ..models.base import LayerRows, inference_input
from ..sparse_features import is_sparse, stacked_rows
from .store.fetch import RemoteFetcher


class HaloGraph:
    """The rows a worker owns, their columns renumbered into [own rows | halo rows]."""

    def __init__(self, indptr: np.ndarray, indices: np.ndarray, lo: int, hi: int):
        self.lo, self.hi, self.num_own = lo, hi, hi - lo
        self.indptr = np.asarray(indptr[lo:hi + 1]) - indptr[lo]
        cols = np.asarray(indices[indptr[lo]:indptr[hi]]).astype(np.int64)
        remote = (cols < lo) | (cols >= hi)
        self.halo = np.unique(cols[remote])
        local = cols - lo
        local[remote] = self.num_own + np.searchsorted(self.halo, cols[remote])
        self.local_cols = local
        # global id of every local node, for models that need it (GCN degrees)
        self.global_ids = np.concatenate([np.arange(lo, hi), self.halo])


@torch.no_grad()
def halo_inference(model, halo: HaloGraph, x_own: np.ndarray, comm, book, part: int,
                   batch_size: int = 4096, device="cpu", progress=None,
                   layers: int | None = None) -> torch.Tensor:
    """Outputs [num_own, C] of the worker's own rows (model: a `MinibatchModel`; x_own dense
    or CSR); of its first `layers` layers if given."""
    model.eval()
    # float16 rows stay float16 through the first layer's fetch; the layer converts them
    # batch by batch (no float32 copy of the worker's rows)
    h_own = inference_input(x_own)
    indptr = torch.from_numpy(halo.indptr)
    cols = torch.from_numpy(halo.local_cols)
    global_ids = torch.from_numpy(halo.global_ids)
    n = halo.num_own
    steps = range(0, n, batch_size)
    for i in range(layers or model.num_layers):
        fetcher = RemoteFetcher(comm, book, part, h_own if is_sparse(h_own) else h_own.numpy())
        h_halo = fetcher.fetch(halo.halo)       # local ids: own rows, then these
        outs = LayerRows(n, model.widths[i + 1])
        for start in (progress(steps, f"inference layer {i + 1}") if progress else steps):
            stop = min(start + batch_size, n)
            src = cols[int(indptr[start]):int(indptr[stop])]
            dst = torch.repeat_interleave(torch.arange(stop - start),
                                          indptr[start + 1:stop + 1] - indptr[start:stop])
            # Sources in local order: the targets first (as a model's layers expect), then
            # the other neighbours.
            targets = torch.arange(start, stop)
            others = torch.unique(src[(src < start) | (src >= stop)])
            sources = torch.cat([targets, others])
            position = torch.empty(n + len(halo.halo), dtype=torch.long)
            position[sources] = torch.arange(len(sources))
            edge_index = torch.stack([position[src], dst])
            out = model.layer(i, stacked_rows(h_own, h_halo, sources).to(device),
                              edge_index.to(device), stop - start,
                              global_ids[sources].to(device))
            outs.put(start, out.cpu())
        h_own = outs.rows
    return h_own
