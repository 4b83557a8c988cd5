"""EdgeBank (Poursafaei et al., NeurIPS 2022): the memorisation baseline of temporal link
prediction. An event (u, v) scores 1 if the pair occurred before (unlimited memory), or
within the last `window` seconds (time-window variant, window = the evaluated split's
duration), else 0; after a batch is scored its own events join the bank, as the model's
memory does. `per_event` scores each event against every event strictly before its own
time instead (what the neighbour sampler and `temporal.pair_history` see: earlier events
of the same batch too), the fair baseline for a model with pair history.

Scored on exactly the batches and negatives the model's evaluation draws (`BatchPlanner`
with the run's seed and `temporal.eval_negative_strategy`; the test also every other
strategy's column), and ranked against every possible destination as the model's
test_mrr_all is, so every number beside it is on the same footing.
"""
from __future__ import annotations

import numpy as np

from samplers.temporal import batch_number

from .batch import BatchPlanner, negative_layout
from .metrics import link_metrics, ranking_metrics, strategy_metrics


def edgebank_metrics(config, events, phase: str, window: bool = False,
                     per_event: bool = False) -> dict:
    """`{phase}_ap`, `{phase}_mrr`, ... of EdgeBank on the phase the model evaluates; the
    test also `test_ap_neg_*`, `test_auc_neg_*` of every strategy and `test_mrr_all`,
    `test_hits10_all`, under the model's keys."""
    positive, negatives, ranks = edgebank_scores(config, events, phase, window, per_event)
    lo, hi = getattr(events, phase)
    batch = batch_number(np.arange(lo, hi), lo, config.sampler.batch_size)
    strategy = config.temporal.eval_negative_strategy
    layout = negative_layout(strategy, max(1, config.temporal.eval_negatives), phase == "test")
    first, count = layout[strategy]
    out = link_metrics(positive, negatives[:, first:first + count], phase, batch=batch)
    if phase == "test":
        for name, (column, _) in layout.items():
            out.update(strategy_metrics(positive, negatives[:, column], name))
        out.update(ranking_metrics(ranks))
    return out


def edgebank_scores(config, events, phase: str, window: bool = False, per_event: bool = False):
    """(positive scores [n], negative scores [n, columns], rank of each positive among
    every possible destination [n]) of the phase's events, in order; the columns as
    `negative_layout` lays out the model's (every strategy for the test)."""
    lo, hi = getattr(events, phase)
    bank: dict[int, dict[int, float]] = {}          # source -> {destination: last time}
    for u, v, t in zip(events.src[:lo].tolist(), events.dst[:lo].tolist(), events.t[:lo]):
        bank.setdefault(u, {})[v] = t
    span = float(events.t[hi - 1] - events.t[lo]) if window else np.inf
    planner = BatchPlanner.for_run(config, events, neighbors=False, pair_history=False)
    # the negatives of the model's evaluation: validation draws the last epoch's
    epoch = config.train.epochs - 1
    num_negatives = max(1, config.temporal.eval_negatives)
    candidates = np.zeros(events.num_nodes, dtype=bool)
    candidates[events.rank_candidates] = True
    num_candidates = int(candidates.sum())

    def score(src, dst, now):
        seen = (bank.get(u, {}).get(v) for u, v in zip(src.tolist(), dst.tolist()))
        return np.array([t is not None and now - t <= span for t in seen], dtype=np.float64)

    def rank(u, v, now):
        """1 + candidates scoring higher + half the others scoring equal."""
        known = [w for w, t in bank.get(u, {}).items() if now - t <= span and candidates[w]]
        if v in known:
            return 1 + 0.5 * (len(known) - 1)
        return 1 + len(known) + 0.5 * (num_candidates - 1 - len(known))

    positives, negatives, ranks = [], [], []
    for batch in planner.epoch(phase, epoch, num_negatives, all_strategies=phase == "test"):
        # what was known when the batch began, or (per event) at each distinct event time
        n = len(batch.src)
        starts = np.flatnonzero(np.diff(batch.time)) + 1 if per_event else np.zeros(0, int)
        for a, b in zip([0, *starts], [*starts, n]):
            now, src, dst = batch.time[a], batch.src[a:b], batch.dst[a:b]
            positives.append(score(src, dst, now))
            sources = batch.negative_sources[a:b]
            negatives.append(np.stack([score(sources[:, j], batch.negatives[a:b, j], now)
                                       for j in range(batch.negatives.shape[1])], axis=1))
            if phase == "test":
                ranks.append([rank(u, v, now) for u, v in zip(src.tolist(), dst.tolist())])
            for u, v, t in zip(src.tolist(), dst.tolist(), batch.time[a:b]):
                bank.setdefault(u, {})[v] = t
    return (np.concatenate(positives), np.concatenate(negatives),
            np.concatenate(ranks) if ranks else None)
