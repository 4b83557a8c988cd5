"""Sampling kernels: turn seed nodes into sampled multi-hop subgraphs with features.

Knows arrays, not trainers: depends on numpy/numba only, never on gnnsys or torch.
`FusedSampler` is the CPU sample+gather kernel; `SampledSubgraph` is its output. The
per-hop kernels (`count_hop`, `fill_hop`) and the global -> local id map (`NodeMap`) are
public for samplers that expand hops differently (gnnsys.pyg's PyG-style frontier).
"""
from samplers import _numpy_compat  # noqa: F401  (before numba.cuda compiles)
# First: the kernel cache stamp must be in place before any kernel is decorated.
from common.kernel_cache import SOURCES_DIGEST
from samplers.fused_cpu import FusedSampler
from samplers.types import SampledSubgraph
from samplers._hop_sampling import count_hop, fill_hop
from samplers._node_map import NodeMap

__all__ = ["FusedSampler", "NodeMap", "SampledSubgraph", "SOURCES_DIGEST", "count_hop",
           "fill_hop"]
