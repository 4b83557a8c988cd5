"""Evaluation metrics on torch tensors (no scikit-learn dependency)."""
from __future__ import annotations

import torch


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    if len(y) == 0:
        return float("nan")
    return (logits.argmax(-1) == y).float().mean().item()


def roc_auc(scores: torch.Tensor, y: torch.Tensor) -> float:
    """Area under the ROC curve of binary labels `y` (0/1) ranked by `scores`, with tied
    scores given their average rank (the Mann-Whitney U statistic)."""
    y = y.bool()
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = torch.argsort(scores)
    sorted_scores = scores[order]
    ranks = torch.empty(len(scores), dtype=torch.float64)
    # average ranks over ties
    _, inverse, counts = torch.unique_consecutive(sorted_scores, return_inverse=True,
                                                  return_counts=True)
    ends = torch.cumsum(counts, 0).double()
    avg = ends - (counts.double() - 1) / 2
    ranks[order] = avg[inverse]
    return ((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg)).item()


def evaluate(metric: str, logits: torch.Tensor, y: torch.Tensor) -> float:
    """`accuracy` on class logits, or `roc_auc` on the positive class's logit margin."""
    if metric == "accuracy":
        return accuracy(logits, y)
    if metric == "roc_auc":
        score = logits[:, 1] - logits[:, 0] if logits.dim() == 2 and logits.size(1) == 2 \
            else logits.reshape(-1)
        return roc_auc(score, y)
    raise ValueError(f"unknown metric '{metric}'; use accuracy or roc_auc")


METRIC_KEY = {"accuracy": "acc", "roc_auc": "auc"}
