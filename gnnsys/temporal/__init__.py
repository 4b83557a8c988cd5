"""Temporal mode (Sven): memory-based temporal GNNs (TGN / JODIE / APAN) for link
prediction, trained single-process or data-parallel over K workers that each own a
partition of the vertices' memory and mailbox and exchange each needed row once per batch.

Modules: `data` (event stream), `batch` (sharded batches + prefetch), `models`, `memory`
(owner-partitioned state), `exchange` (dedup vs naive all-to-all), `placement` (vertex
owners), `metrics` (AP, MRR), `mode` (the plug-in `gnnsys.training` runs), `queries` (a
finished run's query events, read and checked).
"""
