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
                nodes=None, queries=None) -> dict:
        """Node modes: class scores and the predicted class of every node ("all"), of a
        split's (train / val / test) or of the node ids in `nodes` (in that order), by the
        run's selected model with the exact layer-wise inference evaluation uses, on the
        run's workers (or `workers`: each infers its own part), in the dataset's node
        order: {"node_id", "pred", "scores", "label"} arrays.
        Temporal: the logit and probability of each query event in `queries` (a file, or
        a mapping, with columns src, dst, t; replayed as the final evaluation ran):
        {"src", "dst", "t", "score", "prob"} in the queries' order.
        Node ids are the dataset's own (a bundle's `node_ids`, else its rows). `out`:
        also written there atomically, as .npz or .parquet (docs/DATA.md, "Predictions")."""
        from .mode import mode_class
        if split not in ("all", "train", "val", "test"):
            raise ConfigError(f"split {split!r}: use all, train, val or test")
        if out is not None:
            table_format(out, self.needed_files())   # a bad --out fails before any inference
        temporal = mode_class(self.config.mode).task == "link_prediction"
        if temporal != (queries is not None):
            raise ConfigError("a temporal run predicts query events: give queries (gnnsys "
                              "predict --queries FILE, columns src, dst, t; docs/DATA.md)"
                              if temporal else "queries are for temporal runs; this run's "
                              f"mode is {self.config.mode}: predict a split or node ids")
        if temporal:
            table = self._score_queries(read_queries(queries), workers)
        else:
            table = self._classify(split, nodes, workers)
        if out is not None:
            write_table(out, table, self.needed_files())
        return table

    def embeddings(self, at: float | None = None, layer: int | None = None, nodes=None,
                   split: str = "all", out=None, workers: int | None = None) -> dict:
        """Node vectors {"node_id", "embedding"}: for a node run, the output of its first
        `layer` layers (`model.layers`: the class scores) of every node, a split's or
        `nodes`', by the same exact inference as `predict`; for a temporal run, the
        vector the link scorer reads of every node (or `nodes`) as of dataset time `at`."""
        from .mode import mode_class
        temporal = mode_class(self.config.mode).task == "link_prediction"
        if temporal != (at is not None) or temporal == (layer is not None):
            raise ConfigError("a temporal run embeds nodes as of a time: give at (gnnsys "
                              "predict --embeddings-at T)" if temporal else "a node run embeds "
                              "nodes by a layer's output: give layer (gnnsys predict --layer "
                              f"L, 1..{self.config.model.layers})")
        if out is not None:
            table_format(out, self.needed_files())
        if temporal:
            table = self._embed_at(float(at), nodes, workers)
        else:
            if not 1 <= layer <= self.config.model.layers:
                raise ConfigError(f"layer {layer}: the run's model has layers 1.."
                                  f"{self.config.model.layers} (model.layers)")
            got = self._classify(split, nodes, workers, layers=layer)
            table = {"node_id": got["node_id"], "embedding": got["scores"]}
        if out is not None:
            write_table(out, table, self.needed_files())
        return table

    def _embed_at(self, at: float, nodes, workers) -> dict:
        config, prepared, ids = self._prepared(workers)
        events = prepared[0]
        rows = np.arange(events.num_nodes) if nodes is None else \
            node_rows(np.asarray(nodes).reshape(-1), ids, events.num_nodes)
        _check_times(np.array([at]), events)
        got = self._run_queries(config, prepared, "embed_nodes", (rows, at))
        return {"node_id": rows if ids is None else ids[rows], "embedding": got["embedding"]}

    def _prepared(self, workers):
        """(the run's config on `workers`, what its mode's workers take, node ids)."""
        from .datasets.registry import dataset_node_ids
        from .mode import mode_class
        config = self.config
        if workers is not None:
            config = dataclasses.replace(
                config, cluster=dataclasses.replace(config.cluster, workers=workers),
                partition=dataclasses.replace(config.partition, num_parts=None))
        cls = mode_class(config.mode)
        d = config.dataset
        ids = getattr(self._graph, "node_ids", None) if self._graph is not None else \
            dataset_node_ids(d.name, root=d.root, path=d.path, task=cls.task)
        return config, cls.prepare(config, self._graph), ids

    def _classify(self, split, nodes, workers, layers=None) -> dict:
        from .distributed import launch
        config, prepared, ids = self._prepared(workers)
        state = best_state(config, self.run_dir)
        split = "all" if nodes is not None else split
        got = launch(_predict_worker, config, state, split, layers, *prepared)[0]
        order = np.argsort(got["node_id"].numpy(), kind="stable")
        scores = got["logits"][order]
        rows = got["node_id"].numpy()[order]
        table = {"node_id": rows, "pred": scores.argmax(1).numpy(),
                 "scores": scores.numpy(), "label": got["labels"].numpy()[order]}
        if nodes is not None:
            wanted = node_rows(np.asarray(nodes).reshape(-1), ids, len(rows))
            table = {k: v[wanted] for k, v in table.items()}   # "all": row r is node r
            rows = table["node_id"]
        if ids is not None:
            table["node_id"] = ids[rows]
        return table

    def _score_queries(self, queries: dict, workers) -> dict:
        config, prepared, ids = self._prepared(workers)
        events = prepared[0]
        src, dst = (node_rows(queries[c], ids, events.num_nodes, f"queries' {c}")
                    for c in ("src", "dst"))
        _check_times(queries["t"], events)
        got = self._run_queries(config, prepared, "score_queries", (src, dst, queries["t"]))
        score = got["score"].astype(np.float32)
        return {**queries, "score": score, "prob": 1 / (1 + np.exp(-score.astype(np.float64)))}

    def _run_queries(self, config, prepared, method: str, args: tuple) -> dict:
        """`TemporalMode.<method>(*args)` on the run's workers, in the queries' order."""
        from .distributed import launch
        state = best_state(config, self.run_dir)
        got = launch(_query_worker, config, state, method, args, *prepared)[0]
        order = np.argsort(got.pop("query"), kind="stable")
        return {k: v[order] for k, v in got.items()}

    def needed_files(self) -> list:
        """What an output path must not replace beyond any run's own files (runlog.
        check_output): the run's dataset file or folder."""
        from .datasets.registry import dataset_location
        d = self.config.dataset
        return [] if self._graph is not None else \
            [p for p in [dataset_location(d.name, d.root, d.path)] if p is not None]

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


def node_rows(nodes: np.ndarray, ids: np.ndarray | None, num_nodes: int,
              what: str = "node id") -> np.ndarray:
    """The dataset rows of node ids `nodes` (`ids`: each row's id; None: rows are ids);
    an unknown id is one line."""
    nodes = np.asarray(nodes)
    if nodes.dtype.kind not in "iu":
        raise ConfigError(f"{what}s must be integers, got {nodes.dtype}")
    if ids is None:
        rows, known = nodes.astype(np.int64), (nodes >= 0) & (nodes < num_nodes)
        span = f"0..{num_nodes - 1}"
    else:
        order = np.argsort(ids, kind="stable")
        at = np.minimum(np.searchsorted(ids, nodes, sorter=order), len(ids) - 1)
        rows = order[at]
        known = ids[rows] == nodes
        span = f"{ids.min()}..{ids.max()}, not contiguous" if len(ids) else "none"
    unknown = nodes[~known]
    if len(unknown):
        raise ConfigError(f"{what} {unknown[0]} is not in the run's dataset ({num_nodes} "
                          f"nodes, ids {span}); {len(unknown)} of the {len(nodes)} ids given "
                          "are unknown")
    return rows


QUERY_COLUMNS = ("src", "dst", "t")


def read_queries(queries) -> dict:
    """Query events {"src", "dst" (int64 node ids), "t" (float64)} from a mapping or a
    .csv (a header naming the columns), .npz or .parquet file; a bad one is one line."""
    if isinstance(queries, dict):
        name, columns = "queries", dict(queries)
    else:
        name, columns = str(queries), _read_columns(Path(queries))
    missing = [c for c in QUERY_COLUMNS if c not in columns]
    if missing:
        raise ConfigError(f"{name} has no column {missing[0]!r}; query events need columns "
                          "src, dst, t (docs/DATA.md)")
    out = {c: np.asarray(columns[c]).reshape(-1) for c in QUERY_COLUMNS}
    if not len(out["src"]) or len({len(v) for v in out.values()}) != 1:
        raise ConfigError(f"{name}: src, dst and t must be equally long and not empty "
                          f"(got {', '.join(str(len(v)) for v in out.values())})")
    for c in ("src", "dst"):
        v = out[c]
        if v.dtype.kind == "f" and np.all(np.isfinite(v)) and np.all(v == np.round(v)):
            v = v.astype(np.int64)          # a CSV reads every column as float
        if v.dtype.kind not in "iu":
            raise ConfigError(f"{name}: column {c!r} must hold integer node ids, "
                              f"got {v.dtype}")
        out[c] = v.astype(np.int64)
    if out["t"].dtype.kind not in "iuf" or not np.all(np.isfinite(out["t"])):
        raise ConfigError(f"{name}: column 't' must hold finite times")
    out["t"] = out["t"].astype(np.float64)
    return out


def _read_columns(path: Path) -> dict:
    if not path.is_file():
        raise ConfigError(f"{path}: no such query file")
    try:
        if path.suffix == ".csv":
            header, *rows = path.read_text().splitlines() or [""]
            names = [h.strip() for h in header.split(",")]
            data = np.loadtxt(rows, delimiter=",", ndmin=2, dtype=np.float64) if rows else \
                np.zeros((0, len(names)))
            if data.shape[1] != len(names):
                raise ValueError(f"{data.shape[1]} values a row under {len(names)} names")
            return {name: data[:, i] for i, name in enumerate(names)}
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq
            return {k: v.to_numpy() for k, v in pq.read_table(path).to_pydict().items()}
    except ImportError:
        raise ConfigError(f"{path}: reading .parquet needs pyarrow (pip install "
                          '"gnnsys[predict]"); or write the queries as .csv or .npz') from None
    except (ValueError, OSError) as err:
        raise ConfigError(f"{path} is not a readable query file ({' '.join(str(err).split())}"
                          "); write columns src, dst, t as .csv, .npz or .parquet") from None
    raise ConfigError(f"{path}: query files are .csv (a header src,dst,t), .npz or .parquet")


def _check_times(t: np.ndarray, events) -> None:
    """Query times start at validation's end: the memory the checkpoint holds is as of then."""
    lo, hi = events.val
    start = events.t0 + (events.t[hi - 1] if hi > lo else 0.0)
    early = np.flatnonzero(t < start)
    if len(early):
        raise ConfigError(f"query time t={t[early[0]]:g} (row {early[0]}) is before the end of "
                          f"the run's validation events (t={start:g}): the run's memory is "
                          "as of then, so queries start there")


def restored_mode(ctx, config, state: dict, *prepared):
    """This rank's mode with the selected snapshot `state` loaded into its model (`.model`)
    and its own state; a model the run's data no longer fits is one line."""
    from .allocator import keep_freed_memory
    from .mode import mode_class
    keep_freed_memory()     # inference frees and allocates each batch's rows as training does
    mode = mode_class(config.mode)(ctx, config, *prepared)
    try:
        mode.build_model().load_state_dict(state["model"])
    except RuntimeError as err:
        detail = ' '.join(str(err).split())[:200]
        if older := mode.version_mismatch(state):
            raise ConfigError(f"the run in {config.run.dir} was trained by {older}, whose "
                              f"model this one cannot load ({detail}); train it again, or "
                              "use the gnnsys that trained it") from None
        raise ConfigError(f"the dataset of the run in {config.run.dir} no longer matches its "
                          f"model ({detail}); restore the data it was trained on") from None
    mode.load_state_dict(state["mode"])
    return mode


def _predict_worker(ctx, config, state, split, layers, *prepared) -> dict:
    """One rank of `RunResult.predict` (or of a layer's `embeddings`): every rank's
    outputs of `split` gathered."""
    from .training import gather_outputs
    mode = restored_mode(ctx, config, state, *prepared)
    return gather_outputs(ctx.comm, mode.predict((split,), layers))[split]


def _query_worker(ctx, config, state, method, args, *prepared) -> dict:
    """One rank of a temporal query: every rank's share gathered."""
    from .training import gather_outputs
    mode = restored_mode(ctx, config, state, *prepared)
    return gather_outputs(ctx.comm, {"q": getattr(mode, method)(*args)})["q"]


# the columns a 2-d array becomes in a .parquet file: <prefix>_0, <prefix>_1, ...
COLUMN_PREFIX = {"scores": "score", "embedding": "embedding"}


def write_table(path, table: dict, needed=()) -> None:
    """`table` as .npz (arrays as they are) or .parquet (one column per array; a 2-d one
    as <prefix>_0, <prefix>_1, ..., COLUMN_PREFIX), written atomically where it replaces
    nothing a run or `needed` needs (runlog.check_output)."""
    import io
    from .runlog import write_output
    buf = io.BytesIO()
    if table_format(path, needed) == ".npz":
        np.savez(buf, **table)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq
        columns = {}
        for name, v in table.items():
            if v.ndim == 2:
                columns.update({f"{COLUMN_PREFIX[name]}_{c}": v[:, c] for c in range(v.shape[1])})
            else:
                columns[name] = v
        pq.write_table(pa.table(columns), buf)
    write_output(path, buf.getvalue(), needed=needed)


def table_format(path, needed=()) -> str:
    """The suffix of a predictions file, checked: .npz, or .parquet where pyarrow imports;
    and the path (runlog.check_output)."""
    from .runlog import check_output
    suffix = check_output(path, needed=needed).suffix
    if suffix not in (".npz", ".parquet"):
        raise ConfigError(f"{path}: predictions are written as .npz or .parquet")
    if suffix == ".parquet":
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise ConfigError(f"{path}: writing .parquet needs pyarrow (pip install "
                              '"gnnsys[predict]"); or write .npz') from None
    return suffix
