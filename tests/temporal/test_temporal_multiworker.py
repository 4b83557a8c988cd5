"""K workers (threads of this process, real training loop and exchange) against one
process: after an epoch the model and every vertex's memory and mail are the same, for
both exchanges and every ownership, so deduplication loses nothing; naive moves more."""
from __future__ import annotations

import pytest
import torch

from gnnsys.training import fit
from gnnsys.temporal.data import prepare_events
from gnnsys.temporal.placement import vertex_ownership
from gnnsys.training import run_worker


def load(path):
    state = torch.load(path / "checkpoint.pt", weights_only=True)["current"]
    return {"model": state["model"], "memory": state["mode"]["memory"]}


def assert_same_state(a, b):
    for name, value in a["model"].items():
        torch.testing.assert_close(b["model"][name], value, rtol=1e-4, atol=1e-5)
    assert (a["memory"]["vertex"] == b["memory"]["vertex"]).all()
    for name in ("memory", "mailbox"):
        torch.testing.assert_close(b["memory"][name], a["memory"][name], rtol=1e-4, atol=1e-5)
    for name in ("mem_ts", "mail_ts", "next_slot"):
        assert torch.equal(b["memory"][name], a["memory"][name]), name


@pytest.mark.parametrize("arch", ["tgn", "apan"])
def test_workers_reproduce_single_process(arch, graph_factory, tiny_config, threaded_workers,
                                          tmp_path):
    graph = graph_factory(edge_dim=3, node_dim=4)   # features travel in the owners' rows
    # with dropout: every worker count must drop the same attention weights
    model = {"arch": arch, "dropout": 0.2}
    single = fit(tiny_config(model=model, run={"dir": str(tmp_path / "single")}), graph)
    reference = load(tmp_path / "single")
    traffic = {}
    for workers, exchange, ownership in [(2, "dedup", "range"), (2, "naive", "range"),
                                         (3, "dedup", "balanced")]:
        run = tmp_path / f"{workers}-{exchange}-{ownership}"
        cfg = tiny_config(model=model, run={"dir": str(run)},
                          cluster={"workers": workers},
                          temporal={"exchange": exchange, "ownership": ownership})
        events = prepare_events(graph)
        owner = vertex_ownership(cfg, events)
        out = threaded_workers(run_worker, workers, cfg, "", events, owner)[0]
        assert_same_state(reference, load(run))
        assert out["test_ap"] == pytest.approx(single["test_ap"], abs=1e-4)
        # a negative equal to the positive ties exactly in one run and may differ by an ulp
        # in the other (other batch shapes), which moves its rank by a half
        assert out["val_mrr"] == pytest.approx(single["val_mrr"], abs=5e-3)
        traffic[workers, exchange, ownership] = out
    dedup, naive = traffic[2, "dedup", "range"], traffic[2, "naive", "range"]
    assert single["bytes_sent"] == 0
    assert 0 < dedup["rows_sent"] < naive["rows_sent"]
    assert dedup["bytes_sent"] < naive["bytes_sent"]
    assert dedup["redundancy"] > 1


def test_balanced_ownership_is_no_worse_than_range(graph_factory, tiny_config):
    from gnnsys.temporal.placement import predicted_traffic
    events = prepare_events(graph_factory())
    cfg = tiny_config(cluster={"workers": 3}, temporal={"ownership": "balanced"})
    balanced = vertex_ownership(cfg, events)
    ranged = vertex_ownership(tiny_config(cluster={"workers": 3}), events)
    assert predicted_traffic(cfg, events, balanced, 3).max() <= \
        predicted_traffic(cfg, events, ranged, 3).max()


def test_simulated_exchange_predicts_the_measured_bytes(graph_factory, tiny_config,
                                                         threaded_workers):
    from gnnsys.temporal.placement import simulate_exchange
    events = prepare_events(graph_factory())
    for exchange in ("dedup", "naive"):
        cfg = tiny_config(cluster={"workers": 3}, temporal={"exchange": exchange,
                                                            "ownership": "hash"})
        owner = vertex_ownership(cfg, events)
        out = threaded_workers(run_worker, 3, cfg, "", events, owner)[0]
        predicted = simulate_exchange(cfg, events, 3, owner)[exchange]
        assert out["bytes_sent"] == predicted["sent"].sum()
        assert out["rows_sent"] == predicted["rows"]
        assert out["worker_bytes_max"] == (predicted["sent"] + predicted["recv"]).max()


def test_workers_with_empty_shards(graph_factory, tiny_config, threaded_workers, tmp_path):
    # 841 of 842 training events in the first batch: the last batch has one event, so two
    # of three workers hold empty shards yet must take part in every collective
    graph = graph_factory()
    sections = dict(sampler={"batch_size": 841})
    single = fit(tiny_config(run={"dir": str(tmp_path / "single")}, **sections), graph)
    cfg = tiny_config(run={"dir": str(tmp_path / "three")}, cluster={"workers": 3}, **sections)
    events = prepare_events(graph)
    out = threaded_workers(run_worker, 3, cfg, "", events, vertex_ownership(cfg, events))[0]
    assert_same_state(load(tmp_path / "single"), load(tmp_path / "three"))
    assert out["test_ap"] == pytest.approx(single["test_ap"], abs=1e-4)
