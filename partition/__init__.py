"""Partitioners and the on-disk partition format (no dependency on gnnsys trainers).

    from partition import build_partitions, PartitionSet
    build_partitions(graph, "parts/cora-metis-2", method="metis", num_parts=2,
                     fanouts=[15, 10], batch_size=1024)
    parts = PartitionSet("parts/cora-metis-2")      # memory-mapped, checksummed
    parts.book.owner(ids)                           # part of each (relabelled) id

Modules: `metis` (pymetis, multi-constraint; large graphs via `coarsen`, label
propagation), `random`, `stream` (Fennel, one pass),
`quality` (edge cut, balance), `vip` (SALIENT++ inclusion probabilities), `relabel`
(contiguous id ranges), `format` (parts on disk + manifest), `build` (the pipeline).
"""
from .build import METHODS, assign_parts, build_partitions
from .format import PartitionBook, PartitionError, PartitionSet

__all__ = ["METHODS", "PartitionBook", "PartitionError", "PartitionSet", "assign_parts",
           "build_partitions"]
