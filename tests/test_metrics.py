import numpy as np
import torch

from gnnsys.metrics import accuracy, evaluate, hits_at, roc_auc


def _reference_auc(scores, y):
    pos, neg = scores[y == 1], scores[y == 0]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return wins / (len(pos) * len(neg))


def test_roc_auc_matches_pairwise_definition_with_ties():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 300).astype(np.float64)   # many ties
    y = (rng.random(300) < 0.4).astype(np.int64)
    got = roc_auc(scores, y)
    assert abs(got - _reference_auc(scores, y)) < 1e-12


def test_accuracy_and_evaluate():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    y = torch.tensor([0, 1, 1])
    assert abs(accuracy(logits, y) - 2 / 3) < 1e-6
    assert evaluate("roc_auc", logits, y) == 1.0


def test_hits_at_counts_positives_strictly_above_the_kth_negative():
    positive = np.array([3.0, 2.0, 1.0])
    assert hits_at(positive, np.array([2.0, 0.0]), 1) == 1 / 3      # 2.0 is no hit
    assert hits_at(positive, np.array([2.0, 1.5]), 2) == 2 / 3
    assert hits_at(np.array([0.0]), np.array([2.0]), 20) == 1.0    # fewer negatives than K
