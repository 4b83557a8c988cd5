"""Evaluation metrics (no scikit-learn dependency): node classification on torch tensors
(`accuracy`, `evaluate`), and the scoring every link-prediction task shares, in numpy: ROC
AUC, average precision, mean reciprocal rank, OGB's Hits@K."""
from __future__ import annotations

import numpy as np
import torch


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    if len(y) == 0:
        return float("nan")
    return (logits.argmax(-1) == y).float().mean().item()


def evaluate(metric: str, logits: torch.Tensor, y: torch.Tensor) -> float:
    """`accuracy` on class logits, or `roc_auc` on the positive class's logit margin."""
    if metric == "accuracy":
        return accuracy(logits, y)
    if metric == "roc_auc":
        score = logits[:, 1] - logits[:, 0] if logits.dim() == 2 and logits.size(1) == 2 \
            else logits.reshape(-1)
        return roc_auc(score.detach().float().cpu().numpy(), y.cpu().numpy())
    raise ValueError(f"unknown metric '{metric}'; use accuracy or roc_auc")


METRIC_KEY = {"accuracy": "acc", "roc_auc": "auc"}


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


def hits_at(positive: np.ndarray, negative: np.ndarray, k: int) -> float:
    """OGB's Hits@K: the share of positives scored strictly above the K-th highest of the
    negatives they are all ranked against (1.0 when there are fewer than K negatives)."""
    positive, negative = np.asarray(positive), np.asarray(negative)
    if len(negative) < k:
        return 1.0
    return float((positive > np.partition(negative, -k)[-k]).mean())
