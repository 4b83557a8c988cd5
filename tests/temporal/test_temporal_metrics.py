"""AP and MRR against scikit-learn / a direct count."""
from __future__ import annotations

import numpy as np
import pytest

from gnnsys.metrics import average_precision, mean_reciprocal_rank
from gnnsys.temporal.metrics import link_metrics


def test_average_precision_matches_sklearn():
    sklearn = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for _ in range(5):
        labels = rng.integers(0, 2, 300)
        scores = np.round(rng.normal(size=300) + labels, 1)      # rounding makes ties
        assert average_precision(scores, labels) == pytest.approx(
            sklearn.average_precision_score(labels, scores), abs=1e-12)


def test_mrr_counts_ranks_and_ties():
    pos = np.array([3.0, 1.0, 2.0])
    neg = np.array([[1.0, 2.0], [2.0, 3.0], [2.0, 0.0]])
    # ranks: 1, 3, 1.5 (a tie counts half)
    assert mean_reciprocal_rank(pos, neg) == pytest.approx((1 + 1 / 3 + 1 / 1.5) / 3)
    out = link_metrics(pos, neg, "val")
    assert set(out) == {"val_ap", "val_mrr", "val_events"} and out["val_events"] == 3


def test_batch_mean_ap_is_the_mean_of_each_batchs_ap():
    rng = np.random.default_rng(1)
    pos, neg = rng.normal(1, 1, 50), rng.normal(0, 1, (50, 3))
    batch = np.arange(50) // 20                                  # batches of 20, 20, 10
    out = link_metrics(pos, neg, "test", batch=batch)
    per_batch = [average_precision(np.r_[pos[batch == b], neg[batch == b, 0]],
                                   np.r_[np.ones((batch == b).sum()), np.zeros((batch == b).sum())])
                 for b in range(3)]
    assert out["test_ap_batch_mean"] == pytest.approx(np.mean(per_batch))
    assert out["test_ap"] == link_metrics(pos, neg, "test")["test_ap"]
    # a score scale that drifts between batches costs the phase-wide AP, not the batch mean
    drift = pos + 10 * batch, neg + 10 * batch[:, None]
    drifted = link_metrics(*drift, "test", batch=batch)
    assert drifted["test_ap_batch_mean"] == pytest.approx(out["test_ap_batch_mean"])
    assert drifted["test_ap"] < out["test_ap"]
