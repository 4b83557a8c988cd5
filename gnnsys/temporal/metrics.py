"""Link-prediction metrics: average precision (positives vs one negative each) and mean
reciprocal rank of each positive among its negatives. Numpy only.

AP comes two ways: `ap`, one AP over the whole phase (stricter: a score scale that
drifts over the phase costs precision), and `ap_batch_mean`, the mean of each batch's
AP, which is what TGN's and DyGLib's code report and what published tables quote."""
from __future__ import annotations

import numpy as np


def average_precision(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the precision-recall step curve, with tied scores forming one threshold
    (the same definition as sklearn.metrics.average_precision_score)."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels).astype(bool)
    positives = int(labels.sum())
    if positives == 0:
        return float("nan")
    order = np.argsort(-scores, kind="stable")
    scores, labels = scores[order], labels[order]
    # the last position of every distinct score is a threshold
    ends = np.flatnonzero(np.r_[scores[1:] != scores[:-1], True])
    tp = np.cumsum(labels)[ends]
    precision = tp / (ends + 1)
    recall_gain = np.diff(np.r_[0, tp]) / positives
    return float((precision * recall_gain).sum())


def mean_reciprocal_rank(positive: np.ndarray, negatives: np.ndarray) -> float:
    """positive [n], negatives [n, k]: mean of 1 / rank of each positive; a tie with a
    negative counts half (between the optimistic and pessimistic rank)."""
    positive = np.asarray(positive, dtype=np.float64).reshape(-1, 1)
    negatives = np.asarray(negatives, dtype=np.float64)
    if len(positive) == 0:
        return float("nan")
    rank = 1 + (negatives > positive).sum(1) + 0.5 * (negatives == positive).sum(1)
    return float((1.0 / rank).mean())


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


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve: the chance a random positive outscores a random negative,
    a tie counting half (the same as sklearn.metrics.roc_auc_score)."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels).astype(bool)
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if positives == 0 or negatives == 0:
        return float("nan")
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    # average rank of each distinct score (1-based), ties sharing theirs
    average = np.cumsum(counts) - (counts - 1) / 2.0
    rank_sum = average[inverse.reshape(-1)][labels].sum()
    return float((rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives))


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
