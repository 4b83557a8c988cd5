"""Full-graph training (GCN / GraphSAGE over the whole partitioned graph, AdaQP).

`fit(config)` starts `cluster.workers` ranks (in-process for one) and returns rank 0's
final metrics: `test_acc` / `test_auc` (at the best validation epoch), `val_*`,
`bytes_per_epoch` (boundary messages, all workers) and the mean time breakdown. The
work lives in `gnnsys.fullgraph`; see its package docstring for the parts.
"""
from __future__ import annotations

from ..distributed import launch
from ..fullgraph.worker import train_worker


def fit(config, graph=None) -> dict:
    """Train as `config` says; `graph` (optional) bypasses `load_dataset`, e.g. in tests."""
    args = () if graph is None else (graph,)
    return launch(train_worker, config, *args)[0]
