"""Where negatives come from: training draws only destinations seen in training (TGN's and
DyGLib's protocol), evaluation draws by strategy (random: every destination; historical,
inductive: whole pairs, as DyGLib defines them), the same for any worker count."""
from __future__ import annotations

import numpy as np
import pytest

from gnnsys.config import ConfigError
from gnnsys.temporal.batch import BatchPlanner, negative_layout
from gnnsys.temporal.data import prepare_events
from gnnsys.metrics import roc_auc
from gnnsys.testing import tiny_temporal_graph
from gnnsys.training import fit


def test_training_negatives_are_training_destinations_and_evaluation_draws_all():
    events = prepare_events(tiny_temporal_graph(num_nodes=200, seed=3))
    train_dst = np.unique(events.dst[events.train[0]:events.train[1]])
    later_only = np.setdiff1d(events.negatives, train_dst)
    assert len(later_only) > 0        # the drifting hot set brings new destinations later
    planner = BatchPlanner(events, 100, 0, 1, seed=0, num_neighbors=5, strategy="recent",
                           uses_neighbors=False)
    drawn = {phase: np.concatenate([b.negatives.ravel() for e in range(3)
                                    for b in planner.epoch(phase, e, 4)])
             for phase in ("train", "val", "test")}
    assert np.isin(drawn["train"], train_dst).all()
    evaluation = np.concatenate([drawn["val"], drawn["test"]])
    assert np.isin(evaluation, events.negatives).all()
    assert np.isin(evaluation, later_only).any()


# ----------------------------------------------------------------------------- strategies
def _pairs_before(events, time):
    """Directed pairs of every event at or before `time` (DyGLib's historical edges)."""
    at = events.t <= time
    return set(zip(events.src[at].tolist(), events.dst[at].tolist()))


def _pairs_within(events, start, end):
    at = (events.t >= start) & (events.t <= end)
    return set(zip(events.src[at].tolist(), events.dst[at].tolist()))


@pytest.mark.parametrize("strategy", ["historical", "inductive"])
def test_pair_negatives_follow_dyglib(strategy):
    """historical: pairs seen at or before the batch began and not within its span;
    inductive: of those, the ones never seen in training. While enough exist each column
    draws distinct ones only; when too few, all of them plus random pairs outside the
    batch (DyGLib's fill)."""
    events = prepare_events(tiny_temporal_graph(num_nodes=200, seed=3))
    planner = BatchPlanner(events, 50, 0, 1, seed=0, num_neighbors=5, strategy="recent",
                           uses_neighbors=False, eval_strategy=strategy)
    train_pairs = _pairs_before(events, events.t[events.train[1] - 1])
    filled = drawn_only = 0
    for phase in ("val", "test"):
        for index, (lo, hi) in enumerate(planner.batches(phase)):
            batch = planner.batch(phase, 0, index, lo, hi, num_negatives=3)
            assert batch.negative_src.shape == (hi - lo, 3)      # whole pairs: own sources
            pool = _pairs_before(events, events.t[lo]) - \
                _pairs_within(events, events.t[lo], events.t[hi - 1])
            if strategy == "inductive":
                pool -= train_pairs
            in_batch = _pairs_within(events, events.t[lo], events.t[hi - 1])
            for j in range(3):
                drawn = list(zip(batch.negative_src[:, j].tolist(), batch.negatives[:, j].tolist()))
                assert not set(drawn) & in_batch
                if len(pool) >= hi - lo:
                    assert set(drawn) <= pool and len(set(drawn)) == hi - lo
                    drawn_only += 1
                else:
                    assert pool <= set(drawn)
                    filled += 1
    assert drawn_only > 0
    # inductive pairs are few early in validation: the fill is met there
    assert filled > 0 if strategy == "inductive" else filled == 0


def test_mixed_training_adds_a_busy_destination_and_a_historical_pair_of_training():
    """temporal.train_negative_strategy=mixed: the random column as before, plus the
    destination of another event of the batch (never the event's own, unless every event
    of the batch shares it), one whole pair seen earlier in training and not within the
    batch (random training pairs while too few exist) and that pair's source with a random
    training destination of its own; nothing of a later split."""
    events = prepare_events(tiny_temporal_graph(num_nodes=200, seed=3))
    lo_train, hi_train = events.train
    train_src = set(events.src[lo_train:hi_train].tolist())
    train_dst = set(events.dst[lo_train:hi_train].tolist())
    plan = lambda strategy: BatchPlanner(events, 50, 0, 1, seed=0, num_neighbors=5,  # noqa: E731
                                         strategy="recent", uses_neighbors=False,
                                         train_strategy=strategy)
    mixed, plain = plan("mixed"), plan("random")
    from_pool = from_batch = 0
    idle_draws = []
    for index, (lo, hi) in enumerate(mixed.batches("train")):
        batch = mixed.batch("train", 1, index, lo, hi, num_negatives=1)
        np.testing.assert_array_equal(batch.negatives[:, :1],
                                      plain.batch("train", 1, index, lo, hi, 1).negatives)
        assert batch.negatives.shape == (hi - lo, 4) and batch.negative_src.shape == (hi - lo, 2)
        np.testing.assert_array_equal(batch.negative_src[:, 0], batch.negative_src[:, 1])
        assert set(batch.negatives[:, 3].tolist()) <= train_dst
        idle_draws.append(batch.negatives[:, 3] != batch.negatives[:, 0])
        busy = batch.negatives[:, 1]
        # another event's destination; where three draws found none, the random column's
        other = np.isin(busy, events.dst[lo:hi]) & (busy != batch.dst)
        assert (other | (busy == batch.negatives[:, 0])).all()
        from_batch += int(other.sum())
        drawn = set(zip(batch.negative_src[:, 0].tolist(), batch.negatives[:, 2].tolist()))
        in_batch = _pairs_within(events, events.t[lo], events.t[hi - 1])
        pool = _pairs_before(events, events.t[lo]) - in_batch
        assert not drawn & in_batch
        assert {s for s, _ in drawn} <= train_src and {d for _, d in drawn} <= train_dst
        if len(pool) >= hi - lo:
            assert drawn <= pool
            from_pool += 1
    assert from_pool > 0 and from_batch > 0.9 * hi_train
    # the idle source's destination is a draw of its own, not the random column's
    assert np.concatenate(idle_draws).mean() > 0.8


def test_random_negatives_keep_the_source_and_columns_do_not_depend_on_their_number():
    events = prepare_events(tiny_temporal_graph(num_nodes=200, seed=3))
    plan = lambda strategy: BatchPlanner(events, 50, 0, 1, seed=0, num_neighbors=5,  # noqa: E731
                                         strategy="recent", uses_neighbors=False,
                                         eval_strategy=strategy)
    lo, hi = plan("random").batches("test")[2]
    few = plan("random").batch("test", 0, 2, lo, hi, num_negatives=2)
    many = plan("random").batch("test", 7, 2, lo, hi, num_negatives=5, all_strategies=True)
    assert few.negative_src is None
    np.testing.assert_array_equal(few.negatives, many.negatives[:, :2])   # test: any epoch
    layout = negative_layout("random", 5, all_strategies=True)
    assert layout == {"random": (0, 5), "historical": (5, 1), "inductive": (6, 1)}
    np.testing.assert_array_equal(many.negative_sources[:, :5], np.repeat(many.src[:, None], 5, 1))
    hist = plan("historical").batch("test", 0, 2, lo, hi, num_negatives=3, all_strategies=True)
    assert negative_layout("historical", 3, True) == \
        {"random": (0, 1), "historical": (1, 3), "inductive": (4, 1)}
    # the same draws whichever strategy the config selects
    np.testing.assert_array_equal(hist.negatives[:, 0], many.negatives[:, 0])
    np.testing.assert_array_equal(hist.negatives[:, 1], many.negatives[:, 5])
    np.testing.assert_array_equal(hist.negatives[:, 4], many.negatives[:, 6])
    np.testing.assert_array_equal(hist.negative_src[:, 0], many.negative_src[:, 0])


@pytest.mark.parametrize("strategy", ["random", "historical", "inductive"])
def test_any_worker_count_draws_the_single_process_negatives(strategy):
    events = prepare_events(tiny_temporal_graph(num_nodes=200, seed=3))
    planners = [BatchPlanner(events, 50, rank, world, seed=0, num_neighbors=5,
                             strategy="recent", uses_neighbors=True, pair_history=True,
                             eval_strategy=strategy, train_strategy="mixed")
                for rank, world in ((0, 1), (0, 2), (1, 2))]
    for phase in ("train", "val", "test"):
        one, *two = [list(p.epoch(phase, 1, 3, all_strategies=phase == "test"))
                     for p in planners]
        for whole, a, b in zip(one, *two):
            for name in ("negatives", "negative_sources", "pair_count", "pair_gap"):
                np.testing.assert_array_equal(
                    per_event(whole, name), np.concatenate([per_event(a, name),
                                                            per_event(b, name)]))


def per_event(batch, name):
    """A batch's array with one row per event (pair history: dst's, then negatives')."""
    values, b = getattr(batch, name), len(batch.src)
    return values if values.ndim == 2 else np.c_[values[:b], values[b:].reshape(b, -1)]


def test_the_strategy_is_a_validated_config_key(tiny_config):
    assert tiny_config(temporal={"eval_negative_strategy": "historical"}) \
        .temporal.eval_negative_strategy == "historical"
    with pytest.raises(ConfigError, match="eval_negative_strategy.*random, historical, inductive"):
        tiny_config(temporal={"eval_negative_strategy": "hard"})
    assert tiny_config(temporal={"train_negative_strategy": "mixed"}) \
        .temporal.train_negative_strategy == "mixed"
    with pytest.raises(ConfigError, match="train_negative_strategy.*random, mixed"):
        tiny_config(temporal={"train_negative_strategy": "historical"})


def test_final_metrics_report_every_strategy_the_same_whichever_selects(tiny_config,
                                                                          tmp_path):
    """Every run reports test AP / AUC under all three strategies; the configured one also
    gives test_ap; the extra negatives change no other score (the same numbers whichever
    strategy the config selects), and 2 workers give the single process's."""
    graph = tiny_temporal_graph()
    runs = {}
    for strategy, workers in (("random", 1), ("historical", 1), ("historical", 2)):
        runs[strategy, workers] = fit(tiny_config(
            run={"dir": str(tmp_path / f"{strategy}{workers}")},
            cluster={"workers": workers, "launcher": "threads"},
            temporal={"eval_negative_strategy": strategy}), graph)
    keys = [f"test_{m}_neg_{s}" for m in ("ap", "auc")
            for s in ("random", "historical", "inductive")]
    for (strategy, _), final in runs.items():
        assert all(0 < final[k] <= 1 for k in keys)
        assert final["test_ap"] == final[f"test_ap_neg_{strategy}"]
    for k in keys:
        assert runs["random", 1][k] == pytest.approx(runs["historical", 1][k], abs=1e-6)
        assert runs["historical", 2][k] == pytest.approx(runs["historical", 1][k], abs=1e-4)
    # historical negatives are harder than random ones for a model of recent activity
    assert runs["random", 1]["test_ap_neg_historical"] < runs["random", 1]["test_ap_neg_random"]


def test_auc_is_the_chance_a_positive_outscores_a_negative():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 60).astype(float)          # many ties
    labels = rng.random(60) < 0.4
    pos, neg = scores[labels], scores[~labels]
    expected = ((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum()) \
        / (len(pos) * len(neg))
    assert roc_auc(scores, labels) == pytest.approx(expected)


def test_mixed_training_trains_alike_on_any_worker_count(tiny_config, tmp_path):
    """The historical training column's pairs bring their own sources: 2 workers still
    take the single process's steps (the same draws, sliced), and the run differs from
    training on random negatives alone."""
    graph = tiny_temporal_graph()
    runs = {(strategy, workers): fit(tiny_config(
        run={"dir": str(tmp_path / f"{strategy}{workers}")},
        cluster={"workers": workers, "launcher": "threads"},
        temporal={"train_negative_strategy": strategy, "pair_history": True}), graph)
        for strategy, workers in (("random", 1), ("mixed", 1), ("mixed", 2))}
    keys = ["final_loss"] + [f"test_ap_neg_{s}" for s in ("random", "historical", "inductive")]
    for k in keys:
        assert runs["mixed", 2][k] == pytest.approx(runs["mixed", 1][k], abs=1e-4)
    assert runs["mixed", 1]["final_loss"] != pytest.approx(runs["random", 1]["final_loss"],
                                                           abs=1e-3)
