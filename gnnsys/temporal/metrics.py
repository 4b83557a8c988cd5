"""The temporal results' link-prediction metrics, keyed as the run log names them: average
precision (positives vs one negative each) and mean reciprocal rank of each positive
among its negatives, scored by `gnnsys.metrics`. Numpy only.

AP comes two ways: `ap`, one AP over the whole phase (stricter: a score scale that
drifts over the phase costs precision), and `ap_batch_mean`, the mean of each batch's
AP, which is what TGN's and DyGLib's code report and what published tables quote."""
from __future__ import annotations

import numpy as np

from ..metrics import average_precision, mean_reciprocal_rank, roc_auc


def link_metrics(positive: np.ndarray, negatives: np.ndarray, prefix: str,
                 suffix: str = "", batch: np.ndarray | None = None) -> dict:
    """AP of positives against the first negative of each, and MRR against all of them,
    as {prefix}_ap{suffix}, {prefix}_mrr{suffix}, {prefix}_events{suffix}; with `batch`
    (the batch number of each positive) also {prefix}_ap_batch_mean{suffix}."""
    keys = [f"{prefix}_{name}{suffix}" for name in ("ap", "mrr", "events")]
    if batch is not None:
        keys.append(f"{prefix}_ap_batch_mean{suffix}")
    if len(positive) == 0:
        return dict(zip(keys, (float("nan"), float("nan"), 0, float("nan"))))
    values = [_ap(positive, negatives[:, 0]), mean_reciprocal_rank(positive, negatives),
              int(len(positive))]
    if batch is not None:
        batch = np.asarray(batch)
        values.append(float(np.mean([_ap(positive[batch == b], negatives[batch == b, 0])
                                     for b in np.unique(batch)])))
    return dict(zip(keys, values))


def strategy_metrics(positive: np.ndarray, negative: np.ndarray, strategy: str) -> dict:
    """test_ap_neg_{strategy} and test_auc_neg_{strategy}: positives against one negative
    each, drawn by that strategy (`samplers.temporal.StrategyNegativeSampler`)."""
    scores = np.concatenate([positive, negative])
    labels = np.r_[np.ones(len(positive)), np.zeros(len(negative))]
    empty = len(positive) == 0
    return {f"test_ap_neg_{strategy}": float("nan") if empty else average_precision(scores, labels),
            f"test_auc_neg_{strategy}": float("nan") if empty else roc_auc(scores, labels)}


def ranking_metrics(rank: np.ndarray) -> dict:
    """test_mrr_all and test_hits10_all of each positive's rank against every possible
    destination (`TemporalMode._ranks_against_all`; a tie counts half, so a rank may be
    fractional and Hits@10 counts ranks <= 10)."""
    rank = np.asarray(rank, dtype=np.float64)
    if len(rank) == 0:
        return {"test_mrr_all": float("nan"), "test_hits10_all": float("nan")}
    return {"test_mrr_all": float((1.0 / rank).mean()),
            "test_hits10_all": float((rank <= 10).mean())}


def _ap(positive: np.ndarray, negative: np.ndarray) -> float:
    scores = np.concatenate([positive, negative])
    labels = np.r_[np.ones(len(positive)), np.zeros(len(negative))]
    return average_precision(scores, labels)
