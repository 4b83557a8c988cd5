"""The allowed values of the config keys a mode's own package dispatches on, declared here
(plain tuples: no torch, no mode package) so that `config.py` checks every key without
importing the modes; the module that dispatches on a key reads its tuple from here."""

MODE_CHOICES = {
    # minibatch: which remote rows a worker caches (gnnsys/minibatch/store/policy.py)
    "cache.policy": ("none", "degree", "vip"),
    # temporal: one row per distinct vertex, or per occurrence (gnnsys/temporal/exchange.py)
    "temporal.exchange": ("dedup", "naive"),
    # temporal: random, one random destination per training event (TGN's protocol); mixed,
    # also a destination busy in the batch, a historical pair and that pair's source with a
    # random destination (gnnsys/temporal/batch.py, `BatchPlanner.negatives`)
    "temporal.train_negative_strategy": ("random", "mixed"),
    # fullgraph: fp32, uniform_bits, or solved per message group (gnnsys/fullgraph/assign.py)
    "fullgraph.quantization.mode": ("none", "uniform", "adaptive"),
    # fullgraph: the bit-widths the wire format packs (gnnsys/fullgraph/quantize.py)
    "fullgraph.quantization.uniform_bits": (2, 4, 8),
    # link: how training negatives are drawn (gnnsys/link/loader.py, `negative_destinations`)
    "link.negatives": ("uniform", "degree"),
    # link: the validation metric that selects the best epoch (gnnsys/link/mode.py)
    "link.metric": ("auc", "ap", "mrr", "hits20", "hits50", "hits100"),
}
