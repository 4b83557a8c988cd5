"""Distributed full-graph GNN training with adaptively quantised messages (AdaQP).

halo.py      partition + 1-hop halo bookkeeping ([central | marginal | halo], index lists)
quantize.py  stochastic 2/4/8-bit per-row quantisation and the packed wire format
exchange.py  boundary exchange and the autograd Function of a partitioned aggregation
assign.py    variance tracing, alpha-beta link profiling, the bit-width MILP (HiGHS)
model.py     GCN / GraphSAGE over a partition
worker.py    one rank's training loop (what `gnnsys.modes.fullgraph.fit` launches)
"""


def fit(config, graph=None) -> dict:
    """Train as `config` says; `graph` (optional) bypasses `load_dataset`, e.g. in tests."""
    from ..distributed import launch
    from .worker import train_worker
    args = () if graph is None else (graph,)
    return launch(train_worker, config, *args)[0]
