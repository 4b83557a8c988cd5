"""Sampling kernels: turn seed nodes into sampled multi-hop subgraphs with features.

Knows arrays, not trainers: depends on numpy/numba only, never on gnnsys or torch.
`FusedSampler` is the CPU sample+gather kernel; `SampledSubgraph` is its output.
"""
# First: the kernel cache stamp must be in place before any kernel is decorated.
from samplers.kernel_cache import SOURCES_DIGEST
from samplers.fused_cpu import FusedSampler
from samplers.types import SampledSubgraph

__all__ = ["FusedSampler", "SampledSubgraph", "SOURCES_DIGEST"]
