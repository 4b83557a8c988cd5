"""EdgeBank (Poursafaei et al., NeurIPS 2022): the memorisation baseline of temporal link
prediction. An event (u, v) scores 1 if the pair occurred before (unlimited memory), or
within the last `window` seconds (time-window variant, window = the evaluated split's
duration), else 0; after a batch is scored its own events join the bank, as the model's
memory does. `per_event` scores each event against every event strictly before its own
time instead (what the neighbour sampler and `temporal.pair_history` see: earlier events
of the same batch too), the fair baseline for a model with pair history. Scored on exactly the batches and negatives the model's evaluation draws
(`BatchPlanner` with the run's seed), so every AP beside it is on the same footing.
"""
from __future__ import annotations

import numpy as np

from samplers.temporal import batch_number

from .batch import BatchPlanner
from .metrics import link_metrics


def edgebank_metrics(config, events, phase: str, window: bool = False,
                     per_event: bool = False) -> dict:
    """`{phase}_ap`, `{phase}_mrr`, ... of EdgeBank on the phase the model evaluates."""
    positive, negatives = edgebank_scores(config, events, phase, window, per_event)
    lo, hi = getattr(events, phase)
    batch = batch_number(np.arange(lo, hi), lo, config.sampler.batch_size)
    return link_metrics(positive, negatives, phase, batch=batch)


def edgebank_scores(config, events, phase: str, window: bool = False, per_event: bool = False):
    """(positive scores [n], negative scores [n, k]) of the phase's events, in order."""
    lo, hi = getattr(events, phase)
    last_seen: dict[tuple[int, int], float] = {}
    for u, v, t in zip(events.src[:lo].tolist(), events.dst[:lo].tolist(), events.t[:lo]):
        last_seen[(u, v)] = t
    span = float(events.t[hi - 1] - events.t[lo]) if window else np.inf
    planner = BatchPlanner(events, config.sampler.batch_size, 0, 1, config.train.seed,
                           config.temporal.num_neighbors, config.temporal.neighbor_strategy,
                           uses_neighbors=False)
    # the negatives of the model's evaluation: validation draws the last epoch's, test the next
    epoch = config.train.epochs - (phase == "val")
    num_negatives = max(1, config.temporal.eval_negatives)

    def score(src, dst, now):
        seen = (last_seen.get((u, v)) for u, v in zip(src.tolist(), dst.tolist()))
        return np.array([t is not None and now - t <= span for t in seen], dtype=np.float64)

    positives, negatives = [], []
    for batch in planner.epoch(phase, epoch, num_negatives):
        # what was known when the batch began, or (per event) at each distinct event time
        n = len(batch.src)
        starts = np.flatnonzero(np.diff(batch.time)) + 1 if per_event else np.zeros(0, int)
        for a, b in zip([0, *starts], [*starts, n]):
            now, src = batch.time[a], batch.src[a:b]
            positives.append(score(src, batch.dst[a:b], now))
            sources = batch.negative_sources[a:b]
            negatives.append(np.stack([score(sources[:, j], batch.negatives[a:b, j], now)
                                       for j in range(batch.negatives.shape[1])], axis=1))
            for u, v, t in zip(src.tolist(), batch.dst[a:b].tolist(), batch.time[a:b]):
                last_seen[(u, v)] = t
    return np.concatenate(positives), np.concatenate(negatives)
