"""A finished run in hand: what `Trainer.fit()` returns and `load_run(run_dir)` rebuilds.

    result = gnnsys.Trainer(cfg).fit()        # or gnnsys.load_run("runs/quickstart")
    result["test_acc"]                        # the final metrics, as a dict
    model = result.model                      # the best-validation model, a torch Module

The model is rebuilt from the run's config and its weights-only checkpoint (its
best-validation snapshot), on the device asked for, the first time `.model` is read.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import torch

from .errors import ConfigError


class RunResult(dict):
    """The final metrics of a run (this dict, as `metrics.jsonl`'s final record holds
    them), with its `config`, `run_dir` and best-validation `model`."""

    def __init__(self, metrics: dict, config, run_dir, device="cpu", graph=None):
        super().__init__({k: v for k, v in metrics.items() if k not in ("kind", "time")})
        self.config, self.run_dir, self.device = config, Path(run_dir), torch.device(device)
        self._graph = graph                  # the graph it trained on, if not the config's

    @functools.cached_property
    def model(self) -> torch.nn.Module:
        return load_model(self.config, self.run_dir, self.device, self._graph)


def load_run(run_dir, device="cpu") -> RunResult:
    """The result of the finished run in `run_dir` (its config, final metrics, model)."""
    from . import runlog
    from .config import load_config
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{run_dir} holds no gnnsys run (no config.yaml); pass the run.dir "
                          "of a `gnnsys train`")
    final = runlog.final(run_dir)
    if final is None:
        raise ConfigError(f"the run in {run_dir} has not finished (metrics.jsonl has no final "
                          f"record); finish it: gnnsys train --config {run_dir / 'config.yaml'} "
                          "--resume")
    return RunResult(final, load_config(run_dir / "config.yaml"), run_dir, device)


def load_model(config, run_dir: Path, device, graph=None) -> torch.nn.Module:
    """The run's best-validation model, built by its mode for one in-process worker on
    `device` from the run's dataset (or `graph`): a model's shape follows its data."""
    from .config import resumable
    from .distributed import WorkerContext
    from .mode import mode_class
    from .runlog import RunDir
    from .training import changed_settings
    state = RunDir(run_dir, writer=False).load_checkpoint()
    if state is None or state.get("best") is None:
        raise ConfigError(f"{run_dir} holds no checkpoint of a selected model (run.checkpoint_"
                          "every: 0, or no epoch evaluated); train again with checkpoints")
    foreign = [k for k in changed_settings(state["config"], config.to_dict())
               if not resumable(k)]
    if foreign:
        raise ConfigError(f"{run_dir / 'checkpoint.pt'} was written by another run than its "
                          f"config.yaml says (they differ at {', '.join(foreign)}); restore the "
                          "run directory as training left it")
    one = dataclasses.replace(  # one worker here, whatever the run trained on
        config, cluster=dataclasses.replace(config.cluster, workers=1),
        partition=dataclasses.replace(config.partition, num_parts=None),
        train=dataclasses.replace(config.train, device=device.type, progress=False))
    cls = mode_class(one.mode)
    mode = cls(WorkerContext.single(device), one, *cls.prepare(one, graph))
    model = mode.build_model()
    try:
        model.load_state_dict(state["best"]["model"])
    except RuntimeError as err:
        raise ConfigError(f"the dataset of the run in {run_dir} no longer matches its model "
                          f"({' '.join(str(err).split())[:200]}); restore the data it was "
                          "trained on") from None
    return model.eval()
