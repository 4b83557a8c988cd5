"""Distributed full-graph GNN training with adaptively quantised messages (AdaQP).

halo.py      partition + 1-hop halo bookkeeping ([central | marginal | halo], index lists)
quantize.py  stochastic 2/4/8-bit per-row quantisation and the packed wire format
exchange.py  boundary exchange and the autograd Function of a partitioned aggregation
assign.py    variance tracing, alpha-beta link profiling, the bit-width MILP (HiGHS)
model.py     the full-graph models: GCN / GraphSAGE over a partition, MLP / LINKX over its rows
sync_norm.py batch norm by the statistics of every rank's rows
mode.py      one rank's set-up, step and evaluation: the plug-in `gnnsys.training` runs
"""

