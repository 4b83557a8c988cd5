"""gnnsys's numba neighbour sampler behind PyG's own loader interface (no pyg-lib, no
torch-sparse): change `from torch_geometric.loader import NeighborLoader` (or
`LinkNeighborLoader`) to `from gnnsys.pyg import ...` and the training script runs
unchanged.

    loader = NeighborLoader(data, num_neighbors=[15, 10], batch_size=1024,
                            input_nodes=data.train_mask, shuffle=True, num_workers=2)
    for batch in loader:                       # a torch_geometric.data.Data
        out = model(batch.x, batch.edge_index)[:batch.batch_size]

Batches mean what PyG's mean: `n_id` lists the seeds first (in order), then each hop's
new nodes; `edge_index` holds local ids, row 0 = sampled neighbour (source), row 1 =
target; hop h expands only the nodes first reached at hop h - 1, taking
min(degree, fanout) distinct in-neighbours each, uniformly without replacement;
`num_sampled_nodes` = [seeds, new nodes per hop], `num_sampled_edges` = edges per hop,
in that order, so `trim_to_layer` works. `FusedNeighborSampler` is the same sampler as
a PyG `BaseSampler`, for `torch_geometric.loader.NodeLoader(data, node_sampler=...)`.

Differences from PyG's loader: `num_workers` prepares batches in ONE background thread
(the numba kernels release the GIL and run parallel themselves), up to
`num_workers * prefetch_factor` batches ahead, instead of worker processes;
`filter_per_worker` is accepted and has no effect (filtering happens in that thread);
`e_id` is present when the data has edge attributes or `return_e_id=True` (it costs an
extra array of E positions). Temporal, weighted, disjoint, heterogeneous, induced /
bidirectional subgraphs and sampling with replacement raise, naming PyG's loader.
"""
from __future__ import annotations

import numba
import numpy as np
import torch
from torch_geometric.data import Data, FeatureStore, HeteroData, TensorAttr
from torch_geometric.loader import LinkNeighborLoader as PygLinkNeighborLoader
from torch_geometric.loader import NeighborLoader as PygNeighborLoader
from torch_geometric.sampler import BaseSampler, NodeSamplerInput, SamplerOutput
from torch_geometric.sampler.base import NumNeighbors
from torch_geometric.sampler.utils import to_csc

from samplers import NodeMap, count_hop, fill_hop
from common.rng import seed_to_u64

from .prefetch import prefetched

_PYG_LOADER = "torch_geometric.loader.NeighborLoader (needs pyg-lib or torch-sparse)"


def unsupported(option: str) -> ValueError:
    return ValueError(f"gnnsys.pyg does not support {option}; use {_PYG_LOADER} for it")


def refuse_options(replace, disjoint, timed: bool, time_args: str, weight_attr,
                   subgraph_type, directed, neighbor_sampler, base_loader: str) -> None:
    """Raise for the first of PyG's loader options gnnsys's sampler does not do."""
    kind = str(getattr(subgraph_type, "value", subgraph_type))
    refused = {"replace=True (sampling with replacement)": replace,
               "disjoint=True (one subgraph per seed)": disjoint,
               f"temporal sampling ({time_args})": timed,
               "weighted sampling (weight_attr)": weight_attr is not None,
               f"subgraph_type={kind!r}": kind != "directional",
               "directed=False (induced subgraphs)": not directed,
               f"a custom neighbor_sampler (pass it to torch_geometric.loader.{base_loader})":
                   neighbor_sampler is not None}
    for option, asked in refused.items():
        if asked:
            raise unsupported(option)


def _homogeneous_csc(data):
    """(colptr, row, perm) as numpy arrays for a Data or a (FeatureStore, GraphStore)
    pair: PyG's own conversion, so edge positions mean what PyG's `perm` says."""
    if isinstance(data, HeteroData):
        raise unsupported("heterogeneous graphs (HeteroData)")
    if isinstance(data, Data):
        colptr, row, perm = to_csc(data, device="cpu")
    elif isinstance(data, (tuple, list)) and len(data) == 2:
        row, colptr, perm = data[1].csc()       # tensors; dicts by edge type if hetero
        if isinstance(colptr, dict):
            if list(colptr) != [None]:
                raise unsupported(f"heterogeneous graph stores (edge types {list(colptr)})")
            colptr, row, perm = colptr[None], row[None], perm[None]
    else:
        raise TypeError(f"gnnsys.pyg: data must be a torch_geometric Data or a "
                        f"(FeatureStore, GraphStore) pair, got {type(data).__name__}")
    as_numpy = lambda t: None if t is None else t.detach().cpu().numpy()
    return (np.ascontiguousarray(as_numpy(colptr), dtype=np.int64),
            np.ascontiguousarray(as_numpy(row)), as_numpy(perm))


def _fanouts(num_neighbors) -> list[int]:
    values = num_neighbors.values if isinstance(num_neighbors, NumNeighbors) else num_neighbors
    if isinstance(values, dict):
        raise unsupported("per-edge-type num_neighbors (heterogeneous sampling)")
    fanouts = [int(f) for f in values]
    if not fanouts or any(f < -1 for f in fanouts):
        raise ValueError(f"gnnsys.pyg: num_neighbors must be a non-empty list of counts "
                         f">= 0 or -1 (all neighbours), got {values}")
    return fanouts


def _has_edge_attrs(data) -> bool:
    return isinstance(data, Data) and any(
        data.is_edge_attr(key) for key in data.keys() if key != "edge_index")


class FusedNeighborSampler(BaseSampler):
    """PyG `BaseSampler` over gnnsys's numba hop kernels (samplers/_hop_sampling.py:
    Floyd sampling, splitmix64 stream per (batch seed, hop, target), open-addressing
    relabel). `sample(inputs, seed)` is a pure function of (graph, seeds, seed);
    `sample_from_nodes` draws the seed from torch's generator. One instance serves one
    thread at a time (its workspaces are reused across calls)."""

    def __init__(self, data, num_neighbors, return_e_id: bool | None = None,
                 num_threads: int | None = None):
        self.indptr, self.indices, perm = _homogeneous_csc(data)
        self.num_nodes = self.indptr.size - 1
        self.fanouts = _fanouts(num_neighbors)
        self.num_neighbors = NumNeighbors(self.fanouts)   # read by PyG's inference()
        self.num_threads = int(num_threads or numba.get_num_threads())
        self.return_e_id = _has_edge_attrs(data) if return_e_id is None else return_e_id
        self.perm = None if perm is None else torch.from_numpy(perm.astype(np.int64))
        # With e_id the kernel draws CSC positions (an identity "neighbour list"); the
        # neighbours are then looked up, and PyG maps positions through `perm`.
        self._positions = (np.arange(self.indices.size, dtype=self.indices.dtype)
                           if self.return_e_id else None)
        self._node_map = NodeMap(self.num_nodes)

    @property
    def edge_permutation(self):
        return self.perm if self.return_e_id else None

    def sample_from_nodes(self, inputs: NodeSamplerInput, **kwargs) -> SamplerOutput:
        return self.sample(inputs, int(torch.randint(0, 2 ** 62, ()).item()))

    def sample_from_edges(self, inputs, neg_sampling=None) -> SamplerOutput:
        """PyG's link sampling (`LinkNeighborLoader`): negatives drawn by PyG's own
        `edge_sample` (binary: random pairs; triplet: random destinations), then every
        endpoint sampled around in one call, the batch's seed drawn from torch's
        generator; `metadata` as PyG's (edge_label_index / edge_label, or the triplet
        indices) in the seeds' local ids."""
        if inputs.time is not None:
            raise unsupported("temporal sampling (edge_label_time / time_attr)")
        from torch_geometric.sampler.neighbor_sampler import edge_sample
        seed = int(torch.randint(0, 2 ** 62, ()).item())
        return edge_sample(inputs, lambda nodes, _time: self.sample(
            NodeSamplerInput(input_id=None, node=nodes), seed), self.num_nodes,
            disjoint=False, neg_sampling=neg_sampling)

    def sample(self, inputs: NodeSamplerInput, seed: int) -> SamplerOutput:
        if inputs.time is not None:
            raise unsupported("temporal sampling (input_time / time_attr)")
        seeds = inputs.node.detach().cpu().numpy().astype(np.int64, copy=False)
        if seeds.size and (seeds.min() < 0 or seeds.max() >= self.num_nodes):
            raise ValueError(f"gnnsys.pyg: input node ids must lie in [0, "
                             f"{self.num_nodes}), got [{seeds.min()}, {seeds.max()}]")
        previous_threads = numba.get_num_threads()
        numba.set_num_threads(self.num_threads)
        try:
            out = self._sample(np.ascontiguousarray(seeds), seed_to_u64(seed))
        finally:
            numba.set_num_threads(previous_threads)
        out.metadata = (inputs.input_id, inputs.time)
        return out

    def _sample(self, seeds: np.ndarray, batch_seed: np.uint64) -> SamplerOutput:
        n_id = np.empty(max(seeds.size, 16), dtype=np.int64)
        self._node_map.start_batch()
        self._node_map.insert_seeds(seeds, n_id)
        rows, cols, edges = [], [], []
        num_nodes, num_edges = [seeds.size], []
        begin, known = 0, seeds.size
        for hop, fanout in enumerate(self.fanouts):
            frontier = n_id[begin:known]      # only the nodes new at the previous hop
            num_targets = frontier.size
            row_start = np.empty(num_targets, dtype=np.int64)
            row_degree = np.empty(num_targets, dtype=np.int64)
            counts = np.empty(num_targets + 1, dtype=np.int64)
            count_hop(self.indptr, frontier, num_targets, fanout, row_start, row_degree,
                      counts, self.num_threads)
            num_picks = int(counts[num_targets])
            picks = np.empty(num_picks, dtype=np.int64)
            drawn_from = self.indices if self._positions is None else self._positions
            fill_hop(drawn_from, row_start, row_degree, counts, num_targets, batch_seed,
                     np.uint64(hop), picks, self.num_threads)
            if self._positions is not None:
                edges.append(picks)
                picks = self.indices[picks].astype(np.int64)
            if known + num_picks > n_id.size:
                n_id = np.concatenate([n_id[:known], np.empty(known + num_picks, np.int64)])
            local = np.empty(num_picks, dtype=np.int32)
            num_new = self._node_map.relabel_hop(picks, num_picks, known, n_id, local, None)
            rows.append(local)
            cols.append(np.repeat(np.arange(begin, known, dtype=np.int64), np.diff(counts)))
            num_nodes.append(num_new)
            num_edges.append(num_picks)
            begin, known = known, known + num_new
        cat = lambda parts: torch.from_numpy(np.concatenate(parts).astype(np.int64, copy=False))
        return SamplerOutput(node=torch.from_numpy(n_id[:known].copy()), row=cat(rows),
                             col=cat(cols), edge=cat(edges) if edges else None,
                             num_sampled_nodes=num_nodes, num_sampled_edges=num_edges)


class NeighborLoader(PygNeighborLoader):
    """`torch_geometric.loader.NeighborLoader` for homogeneous graphs, sampled by
    `FusedNeighborSampler` (see the module docstring for what differs); a subclass of
    PyG's, so code that checks `isinstance(loader, NeighborLoader)` (e.g.
    `BasicGNN.inference`) accepts it.

    Extra arguments: `return_e_id` (None: only when the data has edge attributes),
    `num_threads` (numba threads of the sampling kernels, default all)."""

    def __init__(self, data, num_neighbors, input_nodes=None, input_time=None,
                 replace: bool = False, subgraph_type="directional", disjoint: bool = False,
                 temporal_strategy: str = "uniform", time_attr=None, weight_attr=None,
                 transform=None, transform_sampler_output=None, is_sorted: bool = False,
                 filter_per_worker=None, neighbor_sampler=None, directed: bool = True,
                 return_e_id: bool | None = None, num_threads: int | None = None, **kwargs):
        refuse_options(replace, disjoint, input_time is not None or time_attr is not None,
                       "input_time / time_attr", weight_attr, subgraph_type, directed,
                       neighbor_sampler, "NodeLoader")
        del temporal_strategy, is_sorted     # no effect without time; PyG's own CSC sort
        self.prefetch = int(kwargs.pop("num_workers", 0) or 0) * int(
            kwargs.pop("prefetch_factor", None) or 2)
        kwargs.pop("persistent_workers", None)
        sampler = FusedNeighborSampler(data, num_neighbors, return_e_id=return_e_id,
                                       num_threads=num_threads)
        super().__init__(data, num_neighbors, input_nodes=input_nodes,
                         transform=transform,
                         transform_sampler_output=transform_sampler_output,
                         filter_per_worker=False, neighbor_sampler=sampler, **kwargs)

    def _get_iterator(self):
        # Batch order and sampling seeds are drawn here, in the caller's thread, so
        # torch.manual_seed reproduces an epoch whatever the background thread does.
        index_batches = list(self._index_sampler)
        base_seed = int(torch.randint(0, 2 ** 62, (), generator=self.generator).item())
        batches = (self.filter_fn(self.node_sampler.sample(
            self.input_data[torch.as_tensor(index, dtype=torch.long)], base_seed + i))
            for i, index in enumerate(index_batches))
        return prefetched(batches, self.prefetch, name="gnnsys-pyg-loader")

    def __repr__(self) -> str:
        return f"gnnsys.pyg.NeighborLoader(fanouts={self.node_sampler.fanouts})"


class LinkNeighborLoader(PygLinkNeighborLoader):
    """`torch_geometric.loader.LinkNeighborLoader` for homogeneous graphs, sampled by
    `FusedNeighborSampler`: `edge_label_index`, `edge_label`, `neg_sampling` (binary and
    triplet, or `neg_sampling_ratio`) mean what they mean in PyG, and a batch is PyG's
    (`n_id`, local `edge_index`, `edge_label_index` / `edge_label`, or `src_index`,
    `dst_pos_index`, `dst_neg_index`). Batches are made in the caller's thread
    (`num_workers` is accepted and ignored); what gnnsys.pyg refuses for NeighborLoader
    it refuses here, with temporal links."""

    def __init__(self, data, num_neighbors, edge_label_index=None, edge_label=None,
                 edge_label_time=None, replace: bool = False, subgraph_type="directional",
                 disjoint: bool = False, temporal_strategy: str = "uniform",
                 neg_sampling=None, neg_sampling_ratio=None, time_attr=None,
                 weight_attr=None, transform=None, transform_sampler_output=None,
                 is_sorted: bool = False, filter_per_worker=None, neighbor_sampler=None,
                 directed: bool = True, return_e_id: bool | None = None,
                 num_threads: int | None = None, **kwargs):
        refuse_options(replace, disjoint, edge_label_time is not None or time_attr is not None,
                       "edge_label_time / time_attr", weight_attr, subgraph_type, directed,
                       neighbor_sampler, "LinkLoader")
        del temporal_strategy, is_sorted
        for key in ("num_workers", "prefetch_factor", "persistent_workers"):
            kwargs.pop(key, None)
        sampler = FusedNeighborSampler(data, num_neighbors, return_e_id=return_e_id,
                                       num_threads=num_threads)
        super().__init__(data, num_neighbors, edge_label_index=edge_label_index,
                         edge_label=edge_label, neg_sampling=neg_sampling,
                         neg_sampling_ratio=neg_sampling_ratio, transform=transform,
                         transform_sampler_output=transform_sampler_output,
                         filter_per_worker=False, neighbor_sampler=sampler, **kwargs)

    def __repr__(self) -> str:
        return f"gnnsys.pyg.LinkNeighborLoader(fanouts={self.link_sampler.fanouts})"


class PartitionFeatureStore(FeatureStore):
    """gnnsys's on-disk partitions (`gnnsys partition`) as a read-only PyG FeatureStore:
    `x` and `y` of any node id (the parts' ids), gathered part by part from the memory-
    mapped files, so features larger than memory feed PyG's loaders. The SALIENT++ cache
    and remote fetch of a K-worker run are collectives every rank calls in step, which a
    per-process PyG loader cannot drive: training over K workers is `gnnsys train`'s."""

    def __init__(self, parts_path):
        from partition.format import PartitionSet
        super().__init__()
        self.parts = PartitionSet(parts_path)
        self.names = [n for n in ("x", "y") if self.parts.array(0, n) is not None]

    def _serves(self, attr) -> bool:
        group = attr.group_name if attr.is_set("group_name") else None
        return group is None and attr.attr_name in self.names

    def _get_tensor(self, attr):
        if not self._serves(attr):
            return None
        book, num = self.parts.book, self.parts.book.num_nodes
        ids = torch.arange(num) if not attr.is_set("index") or attr.index is None \
            else torch.as_tensor(attr.index).reshape(-1)
        ids = ids.numpy().astype(np.int64)
        owner = book.owner(ids)
        first = self.parts.array(0, attr.attr_name)
        out = np.empty((len(ids),) + first.shape[1:], dtype=first.dtype)
        for k in np.unique(owner):
            mine = owner == k
            out[mine] = self.parts.array(int(k), attr.attr_name)[book.local(ids[mine], int(k))]
        return torch.from_numpy(out)

    def _get_tensor_size(self, attr):
        if not self._serves(attr):
            return None
        shape = self.parts.array(0, attr.attr_name).shape[1:]
        return (self.parts.book.num_nodes,) + tuple(shape)

    def get_all_tensor_attrs(self):
        return [TensorAttr(group_name=None, attr_name=name) for name in self.names]

    def _put_tensor(self, tensor, attr) -> bool:
        raise ValueError("gnnsys.pyg.PartitionFeatureStore is read-only: partitions are "
                         "written by `gnnsys partition`")

    def _remove_tensor(self, attr) -> bool:
        raise ValueError("gnnsys.pyg.PartitionFeatureStore is read-only")


def partition_stores(parts_path):
    """(FeatureStore, GraphStore) of gnnsys partitions for PyG loaders, e.g.
    `NeighborLoader(partition_stores(path), [10, 5], input_nodes=train_ids)`."""
    from torch_geometric.distributed import LocalGraphStore
    features = PartitionFeatureStore(parts_path)
    indptr, indices = features.parts.full_csr()
    src = torch.from_numpy(np.asarray(indices, dtype=np.int64))
    dst = torch.repeat_interleave(torch.arange(len(indptr) - 1), torch.from_numpy(np.diff(indptr)))
    graph = LocalGraphStore.from_data(torch.arange(len(src)), torch.stack([src, dst]),
                                      num_nodes=len(indptr) - 1)
    return features, graph
