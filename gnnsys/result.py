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

from .errors import DatasetMismatch, PredictError, RunError
from .temporal_graph import exact_time


class RunResult(dict):
    """The final metrics of a run (this dict, as `metrics.jsonl`'s final record holds
    them), with its `config`, `run_dir` and best-validation `model`."""

    def __init__(self, metrics: dict, config, run_dir, device="cpu", graph=None,
                 other_data: bool = False):
        super().__init__({k: v for k, v in metrics.items() if k not in ("kind", "time")})
        self.config, self.run_dir, self.device = config, Path(run_dir), torch.device(device)
        self._graph = graph                  # the graph it trained on, if not the config's
        self.other_data = other_data         # config.dataset is not the one it trained on

    @functools.cached_property
    def model(self) -> torch.nn.Module:
        return load_model(self.config, self.run_dir, self.device, self._graph,
                          own_data=self._own_data)

    @property
    def _own_data(self) -> bool:
        """Whether the data is the run's own dataset files (checked to be unchanged)."""
        return self._graph is None and not self.other_data

    def predict(self, split: str = "all", out=None, workers: int | None = None,
                nodes=None, queries=None) -> dict:
        """Node modes: class scores and the predicted class of every node ("all"), of a
        split's (train / val / test) or of the node ids in `nodes` (in that order), by the
        run's selected model with the exact layer-wise inference evaluation uses, on the
        run's workers (or `workers`: each infers its own part; default one process for a
        run trained on this machine), in the dataset's node order: {"node_id", "pred",
        "scores", "label"} arrays; `nodes` are inferred over their neighbourhood only.
        Temporal: the logit and probability of each query event in `queries` (a file, or
        a mapping, with columns src, dst, t; replayed as the final evaluation ran):
        {"src", "dst", "t", "score", "prob"} in the queries' order.
        Node ids are the dataset's own (a bundle's `node_ids`, else its rows). `out`:
        also written there atomically, as .npz, .parquet or .csv (docs/DATA.md,
        "Predictions")."""
        from .mode import mode_class
        if split not in ("all", "train", "val", "test"):
            raise PredictError(f"split {split!r}: use all, train, val or test")
        if out is not None:
            table_format(out, self.needed_files())   # a bad --out fails before any inference
        temporal = mode_class(self.config.mode).data_kind == "temporal"
        if temporal != (queries is not None):
            raise PredictError("a temporal run predicts query events: give queries (gnnsys "
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
        temporal = mode_class(self.config.mode).data_kind == "temporal"
        if temporal != (at is not None) or temporal == (layer is not None):
            raise PredictError("a temporal run embeds nodes as of a time: give at (gnnsys "
                               "predict --embeddings-at T)" if temporal else "a node run embeds "
                               "nodes by a layer's output: give layer (gnnsys predict --layer "
                               f"L, 1..{self.config.model.layers})")
        if out is not None:
            table_format(out, self.needed_files())
        if temporal:
            table = self._embed_at(float(at), nodes, workers)
        else:
            if not 1 <= layer <= self.config.model.layers:
                raise PredictError(f"layer {layer}: the run's model has layers 1.."
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
        _check_times(np.array([at]), events, "embeddings time")
        got = self._run_queries(config, prepared, _embed_worker, (rows, at))
        return {"node_id": rows if ids is None else ids[rows], "embedding": got["embedding"]}

    def _prepared(self, workers, graph=None):
        """(the run's config on `workers`, what its mode's workers take, node ids);
        `graph`: the run's graph, already loaded here."""
        from .datasets.registry import dataset_node_ids
        from .mode import mode_class
        config = self.config
        workers = prediction_workers(config, workers)
        if workers != config.cluster.workers:
            config = dataclasses.replace(
                config, cluster=dataclasses.replace(config.cluster, workers=workers),
                partition=dataclasses.replace(config.partition, num_parts=None))
        cls = mode_class(config.mode)
        d = config.dataset
        ids = getattr(self._graph, "node_ids", None) if self._graph is not None else \
            dataset_node_ids(d.name, root=d.root, path=d.path, task=cls.task,
                             kind=cls.data_kind)
        return config, cls.prepare(config, graph if graph is not None else self._graph), ids

    def _classify(self, split, nodes, workers, layers=None) -> dict:
        from .datasets import load_run_graph
        from .distributed import launch
        graph = wanted = None
        if nodes is not None:       # loaded here, so an unknown id is refused before inference
            graph = self._graph if self._graph is not None else load_run_graph(self.config)
        config, prepared, ids = self._prepared(workers, graph)
        if nodes is not None:
            wanted = node_rows(np.asarray(nodes).reshape(-1), ids, graph.num_nodes)
        state = best_state(config, self.run_dir, own_data=self._own_data)
        split = "all" if nodes is not None else split
        got = launch(_predict_worker, config, state, split, layers, wanted, *prepared)[0]
        if "rows" in got:           # inferred for the wanted rows alone, in their order
            table = {"node_id": got["rows"], "pred": got["logits"].argmax(1).numpy(),
                     "scores": got["logits"].numpy(), "label": got["labels"].numpy()}
            if ids is not None:
                table["node_id"] = ids[table["node_id"]]
            return table
        order = np.argsort(got["node_id"].numpy(), kind="stable")
        scores = got["logits"][order]
        rows = got["node_id"].numpy()[order]
        table = {"node_id": rows, "pred": scores.argmax(1).numpy(),
                 "scores": scores.numpy(), "label": got["labels"].numpy()[order]}
        if nodes is not None:
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
        got = self._run_queries(config, prepared, _score_worker, (src, dst, queries["t"]))
        score = got["score"].astype(np.float32)
        return {**queries, "score": score, "prob": 1 / (1 + np.exp(-score.astype(np.float64)))}

    def _run_queries(self, config, prepared, worker, args: tuple) -> dict:
        """`worker` (`_score_worker`, `_embed_worker`) on the run's workers, in the
        queries' order."""
        from .distributed import launch
        state = best_state(config, self.run_dir, own_data=self._own_data)
        got = launch(worker, config, state, args, *prepared)[0]
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


def load_run(run_dir, device="cpu", overrides=()) -> RunResult:
    """The result of the finished run in `run_dir` (its config, final metrics, model).
    `overrides`: `dataset.*` settings as `--set` takes them (["dataset.path=new.npz"]):
    the run's model on another graph of the same feature width and classes (node modes,
    whose models are inductive)."""
    from . import runlog
    from .config import load_config
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise RunError(f"{run_dir} holds no gnnsys run (no config.yaml); pass the run.dir "
                       "of a `gnnsys train`")
    training = runlog.lock_holder(run_dir)
    if training is not None:
        raise RunError(f"the run in {run_dir} is still training (pid {training}); predict or "
                       "export it once it has finished")
    final = runlog.final(run_dir)
    if final is None:
        raise RunError(f"the run in {run_dir} has not finished (metrics.jsonl has no final "
                       f"record); finish it: gnnsys train --config {run_dir / 'config.yaml'} "
                       "--resume")
    config = load_config(run_dir / "config.yaml")
    if not overrides:
        return RunResult(final, config, run_dir, device)
    return RunResult(final, other_dataset(config, overrides), run_dir, device, other_data=True)


def other_dataset(config, overrides):
    """The run's config reading the dataset that `overrides` (dataset.* only) name."""
    from .config import from_dict
    from .mode import mode_class
    keys = [item.partition("=")[0].strip() for item in overrides]
    if other := next((k for k in keys if not k.startswith("dataset.")), None):
        raise PredictError(f"--set {other}: predict takes dataset.* settings only (e.g. --set "
                           "dataset.path=new.npz); the model and its settings are the run's")
    if mode_class(config.mode).data_kind == "temporal":
        raise PredictError("a temporal run predicts on the event stream it trained on (its "
                           "memory is of those nodes, as of its last event); drop --set "
                           "dataset.*, and score other events with --queries")
    changed = from_dict(config.to_dict(), overrides)
    if changed.dataset.normalize_features == "standard":
        raise PredictError("dataset.normalize_features=standard scales features by the mean "
                           "and std of the training nodes, which another graph does not "
                           "have: predict on the run's own dataset")
    # K workers partition the new graph in a folder of its own, not the run's partition.dir
    return dataclasses.replace(changed, partition=dataclasses.replace(changed.partition,
                                                                      dir=None))


def prediction_workers(config, workers: int | None) -> int:
    """How many workers infer: `workers`, else one process for a run trained on this
    machine (its ranks held the whole graph here at once, so one process fits it, with
    no cluster to start), else the run's cluster.workers."""
    if workers is None:
        return 1 if config.cluster.address is None else config.cluster.workers
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise PredictError(f"workers {workers!r}: infer on 1 or more workers (--workers N; "
                           "default one process for a run trained on this machine)")
    return int(workers)


def load_model(config, run_dir: Path, device, graph=None, own_data=True) -> torch.nn.Module:
    """The run's best-validation model, built by its mode for one in-process worker on
    `device` from the run's dataset (or `graph`): a model's shape follows its data.
    `own_data`: the config's dataset is the run's own (its files are checked)."""
    from .distributed import WorkerContext
    from .mode import mode_class
    state = best_state(config, run_dir, own_data=own_data and graph is None)
    one = dataclasses.replace(  # one worker here, whatever the run trained on
        config, cluster=dataclasses.replace(config.cluster, workers=1),
        partition=dataclasses.replace(config.partition, num_parts=None),
        train=dataclasses.replace(config.train, device=device.type, progress=False))
    prepared = mode_class(one.mode).prepare(one, graph)
    return restored_mode(WorkerContext.single(device), one, state, *prepared).model.eval()


def best_state(config, run_dir: Path, own_data: bool = True) -> dict:
    """The checkpoint's selected snapshot ({"model", "mode"}), checked to be this run's;
    `own_data`: the config reads the run's own dataset, whose files must hold what they
    held in training (checked as --resume checks them), else another graph."""
    from .config import resumable
    from .datasets.registry import dataset_files
    from .runlog import RunDir
    from .training import changed_settings, check_dataset_files
    state = RunDir(run_dir, writer=False).load_checkpoint()
    if state is None or state.get("best") is None:
        raise RunError(f"{run_dir} holds no checkpoint of a selected model (run.checkpoint_"
                       "every: 0, or no epoch evaluated); train again with checkpoints")
    foreign = [k for k in changed_settings(state["config"], config.to_dict())
               if not resumable(k) and (own_data or not k.startswith("dataset."))]
    if foreign:
        raise RunError(f"{run_dir / 'checkpoint.pt'} was written by another run than its "
                       f"config.yaml says (they differ at {', '.join(foreign)}); restore the "
                       "run directory as training left it")
    if own_data:
        d = config.dataset
        check_dataset_files(state.get("dataset_files", ""), dataset_files(d.name, d.root, d.path),
                            f"the run in {run_dir} trained",
                            "restore them, or predict on that graph knowingly with --set "
                            "dataset.path=FILE")
    return state["best"]


def node_rows(nodes: np.ndarray, ids: np.ndarray | None, num_nodes: int,
              what: str = "node id") -> np.ndarray:
    """The dataset rows of node ids `nodes` (`ids`: each row's id; None: rows are ids);
    an unknown id is one line."""
    nodes = np.asarray(nodes)
    if nodes.size == 0:
        raise PredictError(f"no {what}s given; name at least one (or none at all, for every "
                           "node)")
    if nodes.dtype.kind not in "iu":
        raise PredictError(f"{what}s must be integers, got {nodes.dtype}")
    if ids is None:
        rows, known = nodes.astype(np.int64), (nodes >= 0) & (nodes < num_nodes)
        span = f"0..{num_nodes - 1}"
    else:
        # compared in the ids' own type (int64 or uint64: numpy would compare the two
        # as float64, inexact past 2^53); an id that type cannot hold is unknown
        fits = nodes >= 0 if ids.dtype.kind == "u" else nodes <= np.iinfo(np.int64).max
        same = np.where(fits, nodes, 0).astype(ids.dtype)
        order = np.argsort(ids, kind="stable")
        at = np.minimum(np.searchsorted(ids, same, sorter=order), len(ids) - 1)
        rows = order[at]
        known = fits & (ids[rows] == same)
        span = f"{ids.min()}..{ids.max()}, not contiguous" if len(ids) else "none"
    unknown = nodes[~known]
    if len(unknown):
        raise PredictError(f"{what} {unknown[0]} is not in the run's dataset ({num_nodes} "
                           f"nodes, ids {span}); {len(unknown)} of the {len(nodes)} ids given "
                           "are unknown")
    return rows


QUERY_COLUMNS = ("src", "dst", "t")


def read_queries(queries) -> dict:
    """Query events {"src", "dst" (node ids: int64, or uint64 where ids pass 2^63 - 1),
    "t" (float64)} from a mapping or a .csv (a header naming the columns), .npz or
    .parquet file; a bad one is one line."""
    if isinstance(queries, dict):
        name, columns = "queries", dict(queries)
    else:
        name, named = str(queries), _read_columns(Path(queries))
        names = [n for n, _ in named]
        twice = [c for c in QUERY_COLUMNS if names.count(c) > 1]
        if twice:
            raise PredictError(f"{name} has {names.count(twice[0])} columns named "
                              f"{twice[0]!r}; which one is meant is a guess: give each of "
                              "src, dst, t once")
        columns = dict(named)
    missing = [c for c in QUERY_COLUMNS if c not in columns]
    if missing:
        raise PredictError(f"{name} has no column {missing[0]!r}; query events need columns "
                          "src, dst, t (docs/DATA.md)")
    from .datasets.bundles import exact_ids
    out = {c: np.asarray(columns[c]).reshape(-1) for c in QUERY_COLUMNS}
    if not len(out["src"]) or len({len(v) for v in out.values()}) != 1:
        raise PredictError(f"{name}: src, dst and t must be equally long and not empty "
                          f"(got {', '.join(str(len(v)) for v in out.values())})")
    for c in ("src", "dst"):
        v = out[c]
        if v.dtype.kind == "f" and np.all(np.abs(v) < 2 ** 53) and np.all(v == np.round(v)):
            v = v.astype(np.int64)          # a float holds whole numbers exactly below 2^53
        if v.dtype.kind not in "iu":
            raise PredictError(f"{name}: column {c!r} must hold integer node ids, "
                              f"got {v.dtype}")
        out[c] = exact_ids(v)
    if out["t"].dtype.kind not in "iuf" or not np.all(np.isfinite(out["t"])):
        raise PredictError(f"{name}: column 't' must hold finite times")
    out["t"] = out["t"].astype(np.float64)
    return out


def _read_columns(path: Path) -> list:
    """[(column name, values)] of a query file, in the file's order (names may repeat)."""
    if not path.exists():
        raise PredictError(f"{path}: no such query file")
    if not path.is_file():              # a FIFO would block the read, a directory fail it
        what = "a directory" if path.is_dir() else "not a regular file (a pipe or a device)"
        raise PredictError(f"{path} is {what}, not a query file; give a .csv, .npz or "
                          ".parquet file with columns src, dst, t")
    try:
        if path.suffix == ".csv":
            return _read_csv(path)
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return [(k, data[k]) for k in data.files]
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq
            table = pq.ParquetFile(path).read()    # read_table refuses repeated names
            return [(k, table.column(i).to_numpy()) for i, k in enumerate(table.column_names)]
    except ImportError:
        raise PredictError(f"{path}: reading .parquet needs pyarrow (pip install "
                          '"gnnsys[predict]"); or write the queries as .csv or .npz') from None
    except (ValueError, OSError) as err:
        raise PredictError(f"{path} is not a readable query file ({' '.join(str(err).split())}"
                          "); write columns src, dst, t as .csv, .npz or .parquet") from None
    raise PredictError(f"{path}: query files are .csv (a header src,dst,t), .npz or .parquet")


def _read_csv(path: Path) -> list:
    """A CSV query file's columns: a header of names (quoted or not, after a UTF-8 byte
    order mark or not), then numbers, parsed as the file streams by (no copy of its
    text); ids too large for a float64's 53 bits read again exactly."""
    import csv
    import warnings
    with open(path, encoding="utf-8-sig", newline="") as f:
        names = [n.strip() for n in next(csv.reader([f.readline()], skipinitialspace=True), [])]
        body = f.tell()

        def read(**how):
            f.seek(body)
            with warnings.catch_warnings():     # "no data": said below, in one line
                warnings.simplefilter("ignore", UserWarning)
                return np.loadtxt(f, delimiter=",", quotechar='"', ndmin=2, **how)

        data = read(dtype=np.float64)
        if not len(data):
            return [(n, np.zeros(0)) for n in names]
        if data.shape[1] != len(names):
            raise ValueError(f"{data.shape[1]} values a row under {len(names)} names")
        columns = [(n, data[:, i]) for i, n in enumerate(names)]
        for i, (n, v) in enumerate(columns):
            if n in ("src", "dst") and np.any(np.abs(v) >= 2 ** 53):
                for dtype in (np.int64, np.uint64):      # the one that holds every id
                    try:
                        columns[i] = (n, read(usecols=i, dtype=dtype)[:, 0])
                        break
                    except ValueError:
                        pass
    return columns


def _check_times(t: np.ndarray, events, what: str = "query time") -> None:
    """Query times are finite, start at validation's end (the memory the checkpoint holds
    is as of then) and stay within what the models' float32 clocks hold (seconds since
    the first event). `what`: a query file's times (named by row), or one time."""
    lo, hi = events.val
    start = events.t0 + (events.t[hi - 1] if hi > lo else 0.0)
    latest = events.t0 + float(np.finfo(np.float32).max)

    def named(i):
        return f"{what} t={exact_time(t[i])}" + (f" (row {i})" if what == "query time" else "")

    if len(bad := np.flatnonzero(~np.isfinite(t))):
        raise PredictError(f"{named(bad[0])} is not a finite number; give a time in the "
                          f"dataset's own units, from t={exact_time(start)}")
    if len(early := np.flatnonzero(t < start)):
        raise PredictError(f"{named(early[0])} is before the end of the run's validation "
                          f"events (t={exact_time(start)}): the run's memory is as of then, "
                          "so queries start there")
    if len(late := np.flatnonzero(t > latest)):
        raise PredictError(f"{named(late[0])} is past the latest time the models' float32 "
                          f"clocks hold (t={exact_time(latest)}: the first event's + 3.4e38 "
                          "seconds); give a time in the dataset's own units")


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
            raise RunError(f"the run in {config.run.dir} was trained by {older}, whose "
                              f"model this one cannot load ({detail}); train it again, or "
                              "use the gnnsys that trained it") from None
        raise DatasetMismatch(f"the dataset {config.dataset.name!r} no longer matches the model "
                              f"of the run in {config.run.dir} ({detail}): its feature width "
                              "and class count must be the training data's; restore the data "
                              "it was trained on, or give a graph of those widths (a bundle "
                              "may set num_classes)") from None
    mode.load_state_dict(state["mode"])
    return mode


def _predict_worker(ctx, config, state, split, layers, rows, *prepared) -> dict:
    """One rank of `RunResult.predict` (or of a layer's `embeddings`): every rank's
    outputs of `split` gathered; or, where the mode can, those of dataset rows `rows`
    alone ({"rows", "logits", "labels"})."""
    from .distributed.ranks import gather_outputs
    mode = restored_mode(ctx, config, state, *prepared)
    if rows is not None and ctx.world_size == 1 and \
            (got := mode.predict_rows(rows, layers)) is not None:
        return got
    return gather_outputs(ctx.comm, mode.split_outputs((split,), layers))[split]


def _score_worker(ctx, config, state, args, *prepared) -> dict:
    """One rank of `Mode.score_queries(*args)`: every rank's share gathered."""
    mode = restored_mode(ctx, config, state, *prepared)
    return _gathered(ctx, mode.score_queries(*args))


def _embed_worker(ctx, config, state, args, *prepared) -> dict:
    """One rank of `Mode.embed_nodes(*args)`: every rank's share gathered."""
    mode = restored_mode(ctx, config, state, *prepared)
    return _gathered(ctx, mode.embed_nodes(*args))


def _gathered(ctx, share: dict) -> dict:
    from .distributed.ranks import gather_outputs
    return gather_outputs(ctx.comm, {"q": share})["q"]


# the columns a 2-d array becomes in a .parquet file: <prefix>_0, <prefix>_1, ...
COLUMN_PREFIX = {"scores": "score", "embedding": "embedding"}


# rows a .csv or .parquet output is written in at a time: the text of a few MB, not of
# the whole table (ten million query scores would be gigabytes of strings)
OUTPUT_ROWS = 65536


def write_table(path, table: dict, needed=()) -> None:
    """`table` as .npz (arrays as they are), .parquet or .csv (one column per array; a
    2-d one as <prefix>_0, <prefix>_1, ..., COLUMN_PREFIX; a .csv with a header, floats
    to the digits that read back the same), streamed OUTPUT_ROWS rows at a time into a
    temp file, renamed once whole, where it replaces nothing a run or `needed` needs
    (runlog.check_output)."""
    from .runlog import write_output
    suffix = table_format(path, needed)
    if suffix == ".npz":
        write_output(path, lambda f: np.savez(f, **table), needed=needed)
        return
    columns = {}
    for name, v in table.items():
        if v.ndim == 2:
            columns.update({f"{COLUMN_PREFIX[name]}_{c}": v[:, c] for c in range(v.shape[1])})
        else:
            columns[name] = v
    rows = len(next(iter(columns.values()))) if columns else 0
    pieces = [slice(lo, lo + OUTPUT_ROWS) for lo in range(0, rows, OUTPUT_ROWS)]
    if suffix == ".csv":
        formats = ["%d" if v.dtype.kind in "iub" else "%.9g" if v.dtype.itemsize <= 4
                   else "%.17g" for v in columns.values()]

        def fill(f):
            f.write((",".join(columns) + "\n").encode())
            for piece in pieces:
                cells = [np.char.mod(fmt, v[piece]) for fmt, v in zip(formats, columns.values())]
                f.write(("\n".join(map(",".join, zip(*cells))) + "\n").encode())
        write_output(path, fill, needed=needed)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    def fill(f):
        schema = pa.table({k: v[:0] for k, v in columns.items()}).schema
        with pq.ParquetWriter(f, schema) as writer:
            for piece in pieces:
                writer.write_table(pa.table({k: v[piece] for k, v in columns.items()},
                                            schema=schema))
    write_output(path, fill, needed=needed)


def table_format(path, needed=()) -> str:
    """The suffix of a predictions file, checked: .npz, .csv, or .parquet where pyarrow
    imports; and the path (runlog.check_output)."""
    from .runlog import check_output
    suffix = check_output(path, needed=needed).suffix
    if suffix not in (".npz", ".parquet", ".csv"):
        raise PredictError(f"{path}: predictions are written as .npz, .parquet or .csv")
    if suffix == ".parquet":
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise PredictError(f"{path}: writing .parquet needs pyarrow (pip install "
                               '"gnnsys[predict]"); or write .npz or .csv') from None
    return suffix
