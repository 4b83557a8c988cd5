"""A finished run in hand: what `Trainer.fit()` returns and `load_run(run_dir)` rebuilds.

    result = gnnsys.Trainer(cfg).fit()        # or gnnsys.load_run("runs/quickstart")
    result["test_acc"]                        # the final metrics, as a dict
    model = result.model                      # the best-validation model, a torch Module
    table = result.predict("all", out="predictions.parquet")   # every node's class scores

The model is rebuilt from the run's config and its weights-only checkpoint (its
best-validation snapshot), on the device asked for, the first time `.model` is read.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np
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

    def predict(self, split: str = "all", out=None, workers: int | None = None,
                nodes=None) -> dict:
        """Class scores and the predicted class of every node ("all"), of a split's
        (train / val / test) or of the node ids in `nodes` (in that order), by the run's
        selected model with the exact layer-wise
        inference evaluation uses, on the run's workers (or `workers`: each infers its own
        part), sorted by dataset node id: {"node_id", "pred", "scores", "label"} arrays.
        `out`: also written there atomically, as .npz or .parquet (docs/DATA.md, "Predictions")."""
        from .distributed import launch
        from .mode import mode_class
        if split not in ("all", "train", "val", "test"):
            raise ConfigError(f"split {split!r}: use all, train, val or test")
        if out is not None:
            table_format(out)                # a bad --out fails before any inference
        cls = mode_class(self.config.mode)
        if cls.task != "node_classification":
            raise ConfigError(f"predictions of mode '{self.config.mode}' are not written yet; "
                              "a temporal run's model is result.model")
        config = self.config
        if workers is not None:
            config = dataclasses.replace(
                config, cluster=dataclasses.replace(config.cluster, workers=workers),
                partition=dataclasses.replace(config.partition, num_parts=None))
        state = best_state(config, self.run_dir)
        split = "all" if nodes is not None else split
        got = launch(_predict_worker, config, state, split, *cls.prepare(config, self._graph))[0]
        order = np.argsort(got["node_id"].numpy(), kind="stable")
        scores = got["logits"][order]
        table = {"node_id": got["node_id"].numpy()[order], "pred": scores.argmax(1).numpy(),
                 "scores": scores.numpy(), "label": got["labels"].numpy()[order]}
        if nodes is not None:
            table = _select(table, np.asarray(nodes, dtype=np.int64).reshape(-1))
        if out is not None:
            write_table(out, table)
        return table

    def export_pyg(self, path=None) -> dict:
        """The model as torch_geometric.nn's GraphSAGE / GCN / GAT (gnnsys/export.py)."""
        from .export import export_pyg
        return export_pyg(self, path)


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
    from .distributed import WorkerContext
    from .mode import mode_class
    state = best_state(config, run_dir)
    one = dataclasses.replace(  # one worker here, whatever the run trained on
        config, cluster=dataclasses.replace(config.cluster, workers=1),
        partition=dataclasses.replace(config.partition, num_parts=None),
        train=dataclasses.replace(config.train, device=device.type, progress=False))
    prepared = mode_class(one.mode).prepare(one, graph)
    return restored_mode(WorkerContext.single(device), one, state, *prepared).model.eval()


def best_state(config, run_dir: Path) -> dict:
    """The checkpoint's selected snapshot ({"model", "mode"}), checked to be this run's."""
    from .config import resumable
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
    return state["best"]


def _select(table: dict, nodes: np.ndarray) -> dict:
    """The rows of `nodes` (dataset node ids) in a table sorted by node id."""
    ids = table["node_id"]
    rows = np.minimum(np.searchsorted(ids, nodes), len(ids) - 1)
    unknown = nodes[ids[rows] != nodes]
    if len(unknown):
        raise ConfigError(f"node id {unknown[0]} is not in the run's dataset (ids {ids[0]}.."
                          f"{ids[-1]}, {len(ids)} nodes); {len(unknown)} of the "
                          f"{len(nodes)} ids asked for are unknown")
    return {k: v[rows] for k, v in table.items()}


def restored_mode(ctx, config, state: dict, *prepared):
    """This rank's mode with the selected snapshot `state` loaded into its model (`.model`)
    and its own state; a model the run's data no longer fits is one line."""
    from .mode import mode_class
    mode = mode_class(config.mode)(ctx, config, *prepared)
    try:
        mode.build_model().load_state_dict(state["model"])
    except RuntimeError as err:
        raise ConfigError(f"the dataset of the run in {config.run.dir} no longer matches its "
                          f"model ({' '.join(str(err).split())[:200]}); restore the data it "
                          "was trained on") from None
    mode.load_state_dict(state["mode"])
    return mode


def _predict_worker(ctx, config, state, split, *prepared) -> dict:
    """One rank of `RunResult.predict`: every rank's outputs of `split` gathered."""
    from .training import gather_outputs
    mode = restored_mode(ctx, config, state, *prepared)
    return gather_outputs(ctx.comm, mode.predict((split,)))[split]


def write_table(path, table: dict) -> None:
    """`table` as .npz (arrays as they are) or .parquet (one column per array; `scores`
    as score_0, score_1, ...), written atomically."""
    import io
    from .runlog import atomic_write_bytes
    buf = io.BytesIO()
    if table_format(path) == ".npz":
        np.savez(buf, **table)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq
        columns = {k: v for k, v in table.items() if k != "scores"}
        columns.update({f"score_{c}": table["scores"][:, c]
                        for c in range(table["scores"].shape[1])})
        pq.write_table(pa.table(columns), buf)
    atomic_write_bytes(path, buf.getvalue())


def table_format(path) -> str:
    """The suffix of a predictions file, checked: .npz, or .parquet where pyarrow imports."""
    suffix = Path(path).suffix
    if suffix not in (".npz", ".parquet"):
        raise ConfigError(f"{path}: predictions are written as .npz or .parquet")
    if suffix == ".parquet":
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise ConfigError(f"{path}: writing .parquet needs pyarrow (pip install "
                              '"gnnsys[predict]"); or write .npz') from None
    return suffix
