"""Every snapshot carries the training version that made it: a temporal run checkpointed
by an older gnnsys is not resumed (its later epochs would train otherwise than its first),
and an older model this gnnsys cannot load says so instead of blaming the data; one that
loads still predicts."""
import pytest
import torch

from gnnsys.config import ConfigError
from gnnsys.distributed import WorkerContext
from gnnsys.mode import mode_class
from gnnsys.prediction import best_state, restored_mode
from gnnsys.temporal.mode import TemporalMode
from gnnsys.training import fit
from tests.temporal.test_temporal_predict import temporal_run


def as_if_older(run_dir, narrower: str | None = None):
    """The run's checkpoint as a gnnsys before version stamps wrote it (the `narrower`
    weight one input narrower, as pair history's features once were)."""
    path = run_dir / "checkpoint.pt"
    state = torch.load(path, weights_only=True)
    assert state["current"]["training_version"] == TemporalMode.training_version
    # the selected epoch's snapshot is often the current one too: one object in the file
    for snapshot in {id(s): s for s in (state["best"], state["current"])}.values():
        del snapshot["training_version"]
        if narrower:
            snapshot["model"][narrower] = snapshot["model"][narrower][:, :-1]
    torch.save(state, path)


def test_an_older_checkpoint_is_not_resumed(tiny_graph, tiny_config, tmp_path):
    run = {"dir": str(tmp_path / "run")}
    fit(tiny_config(run=run), tiny_graph)
    as_if_older(tmp_path / "run")
    with pytest.raises(ConfigError, match=r"written by an older gnnsys \(its temporal training "
                                          r"version 1, this one's 2\): the epochs left would "
                                          r"train otherwise .*drop --resume"):
        fit(tiny_config(train={"epochs": 2}, run={**run, "resume": True}), tiny_graph)


def test_an_older_model_loads_if_it_can_and_else_says_it_is_older(tmp_path):
    result, graph = temporal_run(tmp_path, pair_history=True)
    prepared = mode_class("temporal").prepare(result.config, graph)
    restore = lambda: restored_mode(WorkerContext.single(torch.device("cpu")),  # noqa: E731
                                    result.config, best_state(result.config, result.run_dir),
                                    *prepared)
    original = (result.run_dir / "checkpoint.pt").read_bytes()
    as_if_older(result.run_dir)
    restore()                                       # the same layout: it loads
    (result.run_dir / "checkpoint.pt").write_bytes(original)
    as_if_older(result.run_dir, narrower="predictor.hidden.weight")
    with pytest.raises(ConfigError, match=r"trained by an older gnnsys \(its temporal training "
                                          r"version 1, this one's 2\), whose model this one "
                                          r"cannot load .*train it again"):
        restore()
