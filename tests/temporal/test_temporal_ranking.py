"""One-vs-all ranking (test_mrr_all, test_hits10_all): every test positive ranked against
every possible destination, checked against brute force: the pair history of every
candidate from `pair_history`, every score from `score`, every rank counted one by one."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnsys.temporal import mode as temporal_mode
from gnnsys.temporal.data import prepare_events
from gnnsys.temporal.models import build_model
from gnnsys.testing import tiny_temporal_graph
from gnnsys.training import fit
from samplers.temporal import build_pair_index, events_between, pair_history, pair_partners


def test_pair_partners_are_every_pair_history_that_met():
    graph = tiny_temporal_graph(num_nodes=30, num_events=400, seed=1)
    graph.dst[5] = graph.src[5]                    # a self-loop
    events = prepare_events(graph)
    index = build_pair_index(events.src, events.dst, events.t, events.num_nodes)
    u = np.r_[events.src[200:260], graph.src[5]]
    t = np.r_[events.t[200:260], events.t[300]]
    rows, partner, count, last = pair_partners(events.csr, u, t)
    got = {(r, p): (c, s) for r, p, c, s in zip(rows, partner, count, last)}
    for i in range(len(u)):
        every = np.arange(events.num_nodes)
        c, s = pair_history(index, np.full(len(every), u[i]), every, np.full(len(every), t[i]))
        for v in every:
            assert got.get((i, v), (0, -1.0)) == (c[v], s[v])


@pytest.mark.parametrize("pair_history_on", [False, True])
def test_score_all_is_score_of_every_pair(tiny_config, pair_history_on):
    config = tiny_config(temporal={"pair_history": pair_history_on})
    events = prepare_events(tiny_temporal_graph())
    torch.manual_seed(0)
    model = build_model(config, events).eval()
    h_src, h_cand = torch.randn(7, 16), torch.randn(11, 16)
    rows, cols = torch.tensor([0, 3, 3, 6]), torch.tensor([2, 2, 10, 0])
    met = (torch.tensor([1.0, 4.0, 2.0, 9.0]), torch.tensor([3.0, 0.5, 100.0, 7.0]),
           torch.tensor([0.0, 3.0, 1.0, 20.0]), torch.tensor([5.0, 0.0, 2.0, 1.0]))
    scores = model.score_all(h_src, h_cand, (rows, cols, *met), max_elements=100)
    every = [torch.zeros(7, 11) for _ in met]
    if pair_history_on:
        for whole, part in zip(every, met):
            whole[rows, cols] = part
    pair = model.encode_pairs(tuple(whole.reshape(-1) for whole in every))
    expected = model.score(h_src.repeat_interleave(11, 0), h_cand.repeat(7, 1), pair)
    torch.testing.assert_close(scores, expected.reshape(7, 11), rtol=1e-5, atol=1e-6)


def brute_force_ranks(self, batch, h_src, candidates):
    """Each positive's rank, candidate by candidate, with `score`, `pair_history` and
    `events_between`."""
    nodes = self.events.rank_candidates
    index = build_pair_index(self.events.src, self.events.dst, self.events.t,
                             self.events.num_nodes)
    ranks = []
    for i in range(len(batch.src)):
        src = np.full(len(nodes), batch.src[i])
        count, last = pair_history(index, src, nodes, np.full(len(nodes), batch.time[i]))
        now = np.full(len(nodes), batch.time[i])
        gap = np.where(count > 0, batch.time[i] - last, 0.0)
        since = [events_between(self.events.csr, end, last, now) * (count > 0)
                 for end in (src, nodes)]
        pair = self.model.encode_pairs(tuple(torch.from_numpy(a).float()
                                             for a in (count, gap, *since)))
        scores = self.model.score(h_src[i].expand(len(nodes), -1), candidates, pair).tolist()
        positive = scores[int(np.flatnonzero(nodes == batch.dst[i])[0])]
        ranks.append(1 + sum(s > positive for s in scores)
                     + 0.5 * (sum(s == positive for s in scores) - 1))
    return torch.tensor(ranks, dtype=torch.float64)


@pytest.mark.parametrize("pair_history_on", [False, True])
def test_mrr_all_equals_brute_force(tiny_config, tmp_path, monkeypatch, pair_history_on):
    graph = tiny_temporal_graph()
    runs = {}
    for name in ("batched", "brute force"):
        if name == "brute force":
            monkeypatch.setattr(temporal_mode.TemporalMode, "_ranks_against_all",
                                brute_force_ranks)
        runs[name] = fit(tiny_config(run={"dir": str(tmp_path / name)},
                                     temporal={"pair_history": pair_history_on}), graph)
    for key in ("test_mrr_all", "test_hits10_all"):
        assert runs["batched"][key] == pytest.approx(runs["brute force"][key], abs=1e-9)
    # ranked against all 60 nodes, not 4 negatives: a lower MRR than test_mrr
    assert 0 < runs["batched"]["test_mrr_all"] < runs["batched"]["test_mrr"]


def test_ranking_is_optional_and_the_same_on_two_workers(tiny_config, tmp_path):
    graph = tiny_temporal_graph()
    one = fit(tiny_config(run={"dir": str(tmp_path / "one")}), graph)
    two = fit(tiny_config(run={"dir": str(tmp_path / "two")},
                          cluster={"workers": 2, "launcher": "threads"}), graph)
    assert two["test_mrr_all"] == pytest.approx(one["test_mrr_all"], abs=1e-6)
    assert two["test_hits10_all"] == pytest.approx(one["test_hits10_all"], abs=1e-6)
    off = fit(tiny_config(run={"dir": str(tmp_path / "off")}, temporal={"rank_all": False}),
              graph)
    assert "test_mrr_all" not in off and off["test_ap"] == one["test_ap"]


def test_a_tie_with_the_true_destination_counts_half():
    """Featureless graphs tie often (candidates without history score alike): a tie is
    neither a win (optimistic) nor a loss (pessimistic), as `mean_reciprocal_rank` counts."""
    from types import SimpleNamespace
    scores = torch.tensor([[0.5, 2.0, 2.0, 2.0, 1.0],      # dst 1 tied with 2 others
                           [3.0, 1.0, 1.0, 0.0, 1.0],      # dst 2: one higher, 2 tied
                           [0.0, 0.0, 0.0, 0.0, 0.0],      # dst 4: everything ties
                           [0.0, 0.0, 9.0, 0.0, 0.0]])     # dst 2: no tie
    fake = SimpleNamespace(model=SimpleNamespace(pair_encoder=None,
                                                 score_all=lambda h, c, met: scores),
                           _candidate_column=np.arange(5), device=torch.device("cpu"))
    batch = SimpleNamespace(dst=np.array([1, 2, 4, 2]))
    rank = temporal_mode.TemporalMode._ranks_against_all(fake, batch, None, None)
    assert rank.tolist() == [2.0, 3.0, 3.0, 1.0]
