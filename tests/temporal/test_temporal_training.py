"""Single-process temporal training: every model trains and evaluates, the run directory
holds metrics and a checkpoint, and resuming reproduces the uninterrupted run exactly."""
from __future__ import annotations

import math

import pytest
import torch

from gnnsys.runlog import read_metrics
from tests.temporal.conftest import checkpoint_state
from gnnsys.training import fit


@pytest.mark.parametrize("arch", ["tgn", "jodie", "apan"])
def test_each_model_trains_and_reports(arch, tiny_graph, tiny_config, tmp_path):
    cfg = tiny_config(model={"arch": arch}, train={"epochs": 2},
                      run={"dir": str(tmp_path / arch)})
    out = fit(cfg, tiny_graph)
    for key in ("final_loss", "val_ap", "val_mrr", "test_ap", "test_mrr", "epoch_s"):
        assert math.isfinite(out[key]), key
    assert 0.0 <= out["test_mrr"] <= 1.0
    assert "test_ap_inductive" in out
    records = read_metrics(tmp_path / arch)
    assert [r["epoch"] for r in records if r["kind"] == "epoch"] == [1, 2]
    assert (tmp_path / arch / "checkpoint.pt").exists()


def test_tgn_learns_the_hot_set_pattern(tiny_graph, tiny_config):
    out = fit(tiny_config(sampler={"batch_size": 50}, train={"epochs": 3}), tiny_graph)
    assert out["val_ap"] > 0.8, out


def test_resume_reproduces_the_straight_run(tiny_graph, tiny_config, tmp_path):
    straight = tiny_config(train={"epochs": 2}, run={"dir": str(tmp_path / "a")})
    first = tiny_config(train={"epochs": 1}, run={"dir": str(tmp_path / "b")})
    resumed = tiny_config(train={"epochs": 2}, run={"dir": str(tmp_path / "b"), "resume": True})
    a = fit(straight, tiny_graph)
    fit(first, tiny_graph)
    b = fit(resumed, tiny_graph)
    assert a["test_ap"] == pytest.approx(b["test_ap"], abs=1e-6)
    sa = checkpoint_state(tmp_path / "a")
    sb = checkpoint_state(tmp_path / "b")
    for name, value in sa["model"].items():
        torch.testing.assert_close(sb["model"][name], value)
    torch.testing.assert_close(sb["memory"]["memory"], sa["memory"]["memory"])
    assert [r["epoch"] for r in read_metrics(tmp_path / "b") if r["kind"] == "epoch"] == [1, 2]


def test_prefetching_changes_nothing(tiny_graph, tiny_config, tmp_path):
    # batches sampled ahead in a thread must train exactly like inline sampling: the
    # prefetcher never touches memory, which is read only after the previous write-back
    for depth in (0, 3):
        fit(tiny_config(sampler={"prefetch": depth}, run={"dir": str(tmp_path / str(depth))}),
            tiny_graph)
    a = checkpoint_state(tmp_path / "0")
    b = checkpoint_state(tmp_path / "3")
    for name, value in a["model"].items():
        assert torch.equal(b["model"][name], value), name
    assert torch.equal(a["memory"]["memory"], b["memory"]["memory"])


@pytest.mark.parametrize("batch_size, override, trains_on",
                         [(100, 0, 1), (800, 0, 2), (100, 2, 2), (800, 1, 1)])
def test_small_batches_train_on_one_torch_thread(batch_size, override, trains_on, tiny_graph,
                                                 tiny_config, threads_restored):
    # below ONE_TORCH_THREAD_BELOW_EVENTS a second OpenMP thread costs more than it saves:
    # the loop's forward, backward and step run on one; evaluation and after keep two;
    # temporal.train_torch_threads overrides the rule
    from gnnsys.distributed import launch
    from gnnsys.runlog import start
    from gnnsys.temporal.mode import TemporalMode
    from gnnsys.training import TrainingLoop
    cfg = tiny_config(sampler={"batch_size": batch_size, "threads": 2},
                      temporal={"train_torch_threads": override})
    seen = []

    def counted(ctx, config, *prepared):      # the threads of every optimizer step
        loop = TrainingLoop(ctx, config, prepared)
        step = loop.optimizer.step
        loop.optimizer.step = lambda: (seen.append(torch.get_num_threads()), step())
        return loop.run()

    launch(counted, cfg, *TemporalMode.prepare(cfg, tiny_graph))   # sets the pool to 2
    assert seen and set(seen) == {trains_on}
    assert torch.get_num_threads() == 2
    assert start(cfg.run.dir)["torch_threads"] == {"train": trains_on, "eval": 2}   # the run log says so


def test_intra_op_threads_sets_and_restores(threads_restored):
    from gnnsys.distributed.launcher import intra_op_threads
    torch.set_num_threads(2)
    with intra_op_threads(1):
        assert torch.get_num_threads() == 1
        with intra_op_threads(None):              # None: as it is
            assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with pytest.raises(KeyError):                 # restored on errors too
        with intra_op_threads(1):
            raise KeyError
    assert torch.get_num_threads() == 2
